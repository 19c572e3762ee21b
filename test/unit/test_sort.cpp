// test/unit/test_sort.cpp — slicing at run-time offsets (dynamic_slice,
// dynamic_update_slice, run-time integer indexing) and sorting (sort, argsort,
// sort_key_val, top_k, searchsorted): values against independent C++ (the
// standard library's stable_sort and lower_bound), interpreter against JIT,
// gradients against finite differences in f64, inside scan and while_loop.
#include "Check.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

using namespace adjit;
using namespace adjit::test;

namespace {

/// Traces f, checks the text round-trips, and that the interpreter and the
/// JIT (at -O2 and -O0) agree bit for bit (these ops move elements, they do
/// not compute them); returns the JIT's result.
template <class F, class... A> Array bothWays(F f, const A&... args) {
  Module m = trace(f, args.type()...);
  for (const auto& fn : m.impl().functions)
    for (const auto& op : fn->ops) exercisedOps().insert(op.kind);
  m.verify();
  const std::string text = m.str(true);
  CHECK(Module::parse(text).str(true) == text);
  std::vector<Array> want = m.interpret("f", {Array(args)...});
  REQUIRE(want.size() == 1);
  Array got;
  for (int level : {2, 0}) {
    got = jit(f, {.opt_level = level})(args...);
    CHECK(bytesOf(got) == bytesOf(want[0]));
  }
  return got;
}

/// numpy's order: NaN last; descending is the reverse with ties kept in order.
template <class T> bool before(T a, T b, bool descending) {
  if (descending) std::swap(a, b);
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

/// Random values with many ties (and NaNs, -0.0 and infinities for floats).
template <class T> std::vector<T> tiesAndNaNs(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<T> v(n);
  for (T& x : v) {
    const int r = static_cast<int>(rng() % 23) - 11;
    x = static_cast<T>(r);
    if constexpr (std::is_floating_point_v<T>) {
      const uint32_t s = rng() % 40;
      if (s == 0) x = std::numeric_limits<T>::quiet_NaN();
      else if (s == 1) x = -std::numeric_limits<T>::quiet_NaN();
      else if (s == 2) x = T(-0.0);
      else if (s == 3) x = std::numeric_limits<T>::infinity();
      else if (s == 4) x = -std::numeric_limits<T>::infinity();
      else if (s < 20) x = static_cast<T>(r) + static_cast<T>(rng() % 1000) / T(1000);
    }
  }
  return v;
}

/// The stable sort of x along `axis` by std::stable_sort: {values, positions}.
template <class T> std::pair<std::vector<T>, std::vector<int64_t>> stableSortAlong(const std::vector<T>& x, const Shape& s, int64_t axis,
                                                                                  bool descending) {
  const int64_t n = s[axis];
  int64_t inner = 1, outer = 1;
  for (std::size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  for (int64_t d = 0; d < axis; ++d) outer *= s[d];
  std::vector<T> v(x.size());
  std::vector<int64_t> p(x.size());
  std::vector<int64_t> perm(n);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) { return (o * n + j) * inner + i; };
      std::iota(perm.begin(), perm.end(), 0);
      std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return before(x[at(a)], x[at(b)], descending); });
      for (int64_t j = 0; j < n; ++j) {
        v[at(j)] = x[at(perm[j])];
        p[at(j)] = perm[j];
      }
    }
  return {v, p};
}

} // namespace

// ---- slicing at run-time offsets ---------------------------------------------------------------

TEST_CASE("dynamic_slice reads a window at run-time starts, clamped into range as XLA does") {
  auto f = [](Tensor x, Tensor i, Tensor j) { return dynamic_slice(x, {i, j}, {2, 3}); };
  std::vector<double> xv(4 * 5);
  std::iota(xv.begin(), xv.end(), 0.0);
  Array x(xv, Shape{4, 5});
  auto jf = jit(f);
  // in range: rows 1-2, columns 2-4
  CHECK(jf(x, int32_t{1}, int32_t{2}).to_vector<double>() == std::vector<double>{7, 8, 9, 12, 13, 14});
  // clamped: a start past the end moves back to n - size; a negative one to 0
  CHECK(jf(x, int32_t{9}, int32_t{-4}).to_vector<double>() == std::vector<double>{10, 11, 12, 15, 16, 17});
  CHECK(jf(x, int32_t{-1}, int32_t{7}).to_vector<double>() == std::vector<double>{2, 3, 4, 7, 8, 9});
  for (int32_t i : {-3, 0, 2, 5})
    for (int32_t j : {-1, 1, 4}) {
      Array got = jf(x, i, j);
      Array want = trace(f, x.type(), Type{DType::i32, {}}, Type{DType::i32, {}}).interpret("f", {x, Array(i), Array(j)}).at(0);
      CHECK(bytesOf(got) == bytesOf(want));
    }
  // C++ integers mix with Tensors; i64 starts too
  auto g = [](Tensor x, Tensor j) { return dynamic_slice(x, {2, j}, {1, 2}); };
  CHECK(jit(g)(x, int64_t{3}).to_vector<double>() == std::vector<double>{13, 14});
  bothWays([](Tensor x, Tensor i) { return dynamic_slice(x, {i, 1}, {3, 4}) * 2.0; }, x, Array(int32_t{1}));
}

TEST_CASE("dynamic_update_slice writes a window at run-time starts, clamped so the update fits") {
  auto f = [](Tensor x, Tensor u, Tensor i) { return dynamic_update_slice(x, u, {i, 1}); };
  Array x(std::vector<double>(12, 0.0), Shape{3, 4});
  Array u(std::vector<double>{1, 2, 3, 4}, Shape{2, 2});
  auto jf = jit(f);
  CHECK(jf(x, u, int32_t{0}).to_vector<double>() == std::vector<double>{0, 1, 2, 0, 0, 3, 4, 0, 0, 0, 0, 0});
  CHECK(jf(x, u, int32_t{5}).to_vector<double>() == std::vector<double>{0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0});
  CHECK(jf(x, u, int32_t{-2}).to_vector<double>() == jf(x, u, int32_t{0}).to_vector<double>());
  bothWays(f, x, u, Array(int32_t{1}));
  // an update as large as the operand replaces it (folded away)
  auto whole = [](Tensor x, Tensor u, Tensor i) { return dynamic_update_slice(x, u, {i}); };
  CHECK(jit(whole)(f64({1, 2}), f64({5, 6}), int32_t{3}).to_vector<double>() == std::vector<double>{5, 6});
}

TEST_CASE("dynamic slices: errors name the op and what was expected") {
  auto wrongCount = [](Tensor x, Tensor i) { return dynamic_slice(x, {i}, {1, 1}); };
  CHECK_THROWS_WITH_AS(trace(wrongCount, Type{DType::f32, {2, 2}}, Type{DType::i32, {}}),
                       doctest::Contains("dynamic_slice: expected 2 start indices"), Error);
  auto floatStart = [](Tensor x, Tensor i) { return dynamic_slice(x, {i}, {1}); };
  CHECK_THROWS_WITH_AS(trace(floatStart, Type{DType::f32, {2}}, Type{DType::f32, {}}),
                       doctest::Contains("start index 0 must be an i32 or i64 scalar, got f32[]"), Error);
  auto tooBig = [](Tensor x, Tensor i) { return dynamic_slice(x, {i}, {3}); };
  CHECK_THROWS_WITH_AS(trace(tooBig, Type{DType::f32, {2}}, Type{DType::i32, {}}),
                       doctest::Contains("size 3 along axis 0 does not fit in f32[2]"), Error);
  auto badUpdate = [](Tensor x, Tensor u, Tensor i) { return dynamic_update_slice(x, u, {i}); };
  CHECK_THROWS_WITH_AS(trace(badUpdate, Type{DType::f32, {2}}, Type{DType::f32, {3}}, Type{DType::i32, {}}),
                       doctest::Contains("dynamic_update_slice: the update f32[3] does not fit in f32[2]"), Error);
}

TEST_CASE("numpy indexing with run-time integers and dslice is one dynamic_slice") {
  std::vector<double> xv(4 * 5);
  std::iota(xv.begin(), xv.end(), 0.0);
  Array x(xv, Shape{4, 5});
  auto row = [](Tensor x, Tensor i) { return x(i, range(1, 4)); };
  CHECK(jit(row)(x, int32_t{2}).to_vector<double>() == std::vector<double>{11, 12, 13});
  CHECK(jit(row)(x, int32_t{-1}).to_vector<double>() == std::vector<double>{16, 17, 18}); // from the end
  auto both = [](Tensor x, Tensor i, Tensor j) { return x(i, j); };
  CHECK(jit(both)(x, int32_t{1}, int32_t{-2}).item<double>() == 8.0);
  auto window = [](Tensor x, Tensor i) { return x(all, dslice(i, 2)); };
  CHECK(jit(window)(x, int32_t{3}).to_vector<double>() == std::vector<double>{3, 4, 8, 9, 13, 14, 18, 19});
  CHECK(jit(window)(x, int32_t{4}).to_vector<double>() == jit(window)(x, int32_t{3}).to_vector<double>()); // clamped
  Module m = trace(row, x.type(), Type{DType::i32, {}});
  CHECK(m.str().find("dynamic_slice") != std::string::npos);
  CHECK(m.str().find("gather") == std::string::npos);
  bothWays(window, x, Array(int32_t{1}));
  auto tooWide = [](Tensor x, Tensor i) { return x(all, dslice(i, 3)); };
  CHECK_THROWS_WITH_AS(trace(tooWide, Type{DType::f32, {2, 2}}, Type{DType::i32, {}}),
                       doctest::Contains("index: dslice of size 3 along axis 1 of size 2"), Error);
}

TEST_CASE("dynamic slices differentiate: finite differences in both modes, second order") {
  auto f = [](Tensor x, Tensor u) {
    Tensor i = full({}, 1, DType::i32);
    Tensor y = dynamic_update_slice(x * x, sin(u), {i, 2});
    return sum(dynamic_slice(y, {i, 1}, {2, 3}) * y(i, dslice(i, 2)).at(0));
  };
  Array x(std::vector<double>{0.1, 0.2, -0.3, 0.4, 0.5, -0.6, 0.7, 0.8, 0.9, -1.0, 1.1, 1.2}, Shape{3, 4});
  Array u(std::vector<double>{0.3, -0.2, 0.5, 0.7}, Shape{2, 2});
  check_grads(f, std::tuple{x, u}, {.order = 2, .modes = {"rev", "fwd"}});
}

TEST_CASE("a ring buffer in scan: dynamic_update_slice at the loop index, gradients through the loop") {
  // buf[t % 3] = x_t; y_t = sum(w * buf): the last three inputs weighted
  // [snippet:ring-buffer]
  auto f = [](Tensor w, Tensor xs) {
    auto body = [&](const std::pair<Tensor, Tensor>& c, Tensor x) {
      auto [buf, t] = c;
      Tensor slot = t - (t / 3) * 3;
      Tensor next = dynamic_update_slice(buf, reshape(x, {1}), {slot});
      return std::pair{std::pair{next, t + full({}, 1, DType::i32)}, sum(w * next)};
    };
    auto [carry, ys] = scan(body, std::pair{full({3}, 0.0, DType::f64), full({}, 0, DType::i32)}, xs);
    return sum(ys * ys) + sum(carry.first);
  };
  // [/snippet:ring-buffer]
  Array w = f64({0.5, -1.0, 2.0});
  Array xs = f64({0.3, -0.1, 0.4, 0.2, 0.9, -0.5, 0.6});
  // values: by hand
  double want = 0;
  std::vector<double> buf(3, 0.0);
  for (std::size_t t = 0; t < 7; ++t) {
    buf[t % 3] = xs.to_vector<double>()[t];
    const double y = 0.5 * buf[0] - 1.0 * buf[1] + 2.0 * buf[2];
    want += y * y;
  }
  want += buf[0] + buf[1] + buf[2];
  CHECK(jit(f)(w, xs).item<double>() == doctest::Approx(want).epsilon(1e-12));
  CHECK(trace(f, w.type(), xs.type()).interpret("f", {w, xs}).at(0).item<double>() == doctest::Approx(want).epsilon(1e-12));
  check_grads(f, std::tuple{w, xs}, {.order = 2, .modes = {"rev", "fwd"}});
}

TEST_CASE("a sliding window in fori_loop and while_loop: dynamic_slice at the loop index, gradients through the loop") {
  // a valid 1-D correlation: y_i = sum(k * x[i : i + 3])
  // [snippet:sliding-window]
  auto conv = [](Tensor x, Tensor k) {
    return fori_loop(0, 6, [&](Tensor i, Tensor acc) {
      Tensor y = sum(dynamic_slice(x, {i}, {3}) * k);
      return dynamic_update_slice(acc, reshape(y * y, {1}), {i});
    }, full({6}, 0.0, DType::f64));
  };
  // [/snippet:sliding-window]
  Array x = f64({0.1, 0.5, -0.3, 0.8, 0.2, -0.7, 0.4, 0.9});
  Array k = f64({1.0, -2.0, 0.5});
  std::vector<double> want(6);
  for (int i = 0; i < 6; ++i) {
    double y = 0;
    for (int j = 0; j < 3; ++j) y += x.to_vector<double>()[i + j] * k.to_vector<double>()[j];
    want[i] = y * y;
  }
  std::vector<double> got = jit(conv)(x, k).to_vector<double>();
  for (int i = 0; i < 6; ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
  auto loss = [&](Tensor x, Tensor k) { return sum(conv(x, k)); };
  check_grads(loss, std::tuple{x, k}, {.order = 2, .modes = {"rev", "fwd"}});
  // while_loop: the window moves until its sum passes a bound
  auto wl = [](Tensor x) {
    auto [last, acc] = while_loop([&](const std::pair<Tensor, Tensor>& s) { return lt(s.first, full({}, 5, DType::i32)); },
                               [&](const std::pair<Tensor, Tensor>& s) {
                                 Tensor w = x(dslice(s.first, 2));
                                 return std::pair{s.first + full({}, 1, DType::i32), s.second + sum(w * w)};
                               },
                               std::pair{full({}, 0, DType::i32), full({}, 0.0, DType::f64)}, {.max_iterations = 10});
    (void)last;
    return acc;
  };
  double wsum = 0;
  for (int i = 0; i < 5; ++i) wsum += std::pow(x.to_vector<double>()[i], 2) + std::pow(x.to_vector<double>()[i + 1], 2);
  CHECK(jit(wl)(x).item<double>() == doctest::Approx(wsum).epsilon(1e-12));
  check_grads(wl, x, {.order = 2, .modes = {"rev", "fwd"}});
  // without max_iterations: reverse mode keeps each step's window offset on a run-time stack
  auto unbounded = [](Tensor x) {
    auto [last, acc] = while_loop([&](const std::pair<Tensor, Tensor>& s) { return lt(s.second, full({}, 2.0, DType::f64)); },
                                  [&](const std::pair<Tensor, Tensor>& s) {
                                    Tensor w = x(dslice(s.first, 3));
                                    return std::pair{s.first + full({}, 1, DType::i32), s.second + sum(w * w)};
                                  },
                                  std::pair{full({}, 0, DType::i32), full({}, 0.0, DType::f64)});
    (void)last;
    return acc;
  };
  CHECK(jit(unbounded)(x).item<double>() == doctest::Approx(trace(unbounded, x.type()).interpret("f", {x}).at(0).item<double>()).epsilon(1e-12));
  check_grads(unbounded, x);
}

// ---- sorting ------------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("sort and argsort agree with std::stable_sort on every axis, with NaNs and ties", T, float, double, int32_t, int64_t) {
  for (const Shape& s : {Shape{1}, Shape{17}, Shape{100}, Shape{1000}, Shape{3, 40}, Shape{33, 2, 5}}) {
    const std::vector<T> x = tiesAndNaNs<T>(static_cast<std::size_t>(num_elements(s)), static_cast<uint32_t>(s.size() * 31 + s[0]));
    Array a(x, s);
    for (int64_t axis = 0; axis < static_cast<int64_t>(s.size()); ++axis)
      for (bool descending : {false, true}) {
        INFO("shape " << shape_str(s) << " axis " << axis << " descending " << descending);
        auto [v, p] = stableSortAlong(x, s, axis, descending);
        auto f = [&](Tensor t) { return sort(t, axis, descending); };
        auto g = [&](Tensor t) { return argsort(t, axis, descending); };
        Array sv = bothWays(f, a);
        Array pv = bothWays(g, a);
        CHECK(bytesOf(sv) == bytesOf(Array(v, s))); // bitwise: NaNs and -0.0 keep their bits
        CHECK(pv.to_vector<int64_t>() == p);
      }
  }
}

TEST_CASE("sort_key_val moves payloads of any dtype with the keys; sort of several operands") {
  Array keys = f32({3, 1, 2, 1, std::nanf(""), 0});
  Array vals = i32({0, 1, 2, 3, 4, 5});
  auto f = [](Tensor k, Tensor v) { return sort_key_val(k, v).second; };
  CHECK(jit(f)(keys, vals).to_vector<int32_t>() == std::vector<int32_t>{5, 1, 3, 2, 0, 4});
  bothWays(f, keys, vals);
  auto many = [](Tensor k, Tensor v) {
    std::vector<Tensor> r = sort({k, v, cast(v, DType::f64)}, 0, true);
    return r[2];
  };
  CHECK(jit(many)(keys, vals).to_vector<double>() == std::vector<double>{4, 0, 2, 1, 3, 5});
}

TEST_CASE("top_k: the k largest along the last axis, larger first, ties by position") {
  // [snippet:top-k]
  Array x(std::vector<float>{1, 5, 3, 5, 2, 0, -1, 7, 7, 4}, Shape{2, 5});
  auto vals = [](Tensor x) { return top_k(x, 3).values; };
  auto idx = [](Tensor x) { return top_k(x, 3).indices; };
  CHECK(jit(vals)(x).to_vector<float>() == std::vector<float>{5, 5, 3, 7, 7, 4});
  CHECK(jit(idx)(x).to_vector<int32_t>() == std::vector<int32_t>{1, 3, 2, 2, 3, 4});
  // [/snippet:top-k]
  bothWays(idx, x);
  CHECK_THROWS_WITH_AS(trace([](Tensor x) { return top_k(x, 6).values; }, x.type()),
                       doctest::Contains("top_k: k must be in [0, 5]"), Error);
}

TEST_CASE("top_k's selection equals the first k of a stable descending sort, for every dtype and k") {
  // The compiled top_k is a heap selection, not a sort: check its order
  // (NaN first, ties by position, -0.0 equal to 0.0, the bits of the chosen
  // element kept) against std::stable_sort, with inputs that keep replacing
  // the heap's root (ascending rows) and that never do (descending rows).
  auto check = [](auto tag, int64_t rows, int64_t n, uint32_t seed) {
    using T = decltype(tag);
    std::vector<T> v = tiesAndNaNs<T>(static_cast<std::size_t>(rows * n), seed);
    if (seed % 3 == 1) std::sort(v.begin(), v.end(), [](T a, T b) { return before(a, b, false); });
    if (seed % 3 == 2) std::sort(v.begin(), v.end(), [](T a, T b) { return before(a, b, true); });
    const Array x(v, Shape{rows, n});
    for (int64_t k : {int64_t(0), int64_t(1), int64_t(2), n / 3, n - 1, n}) {
      if (k < 0 || k > n) continue;
      CAPTURE(n);
      CAPTURE(k);
      auto f = [k](Tensor t) {
        TopK r = top_k(t, k, DType::i64);
        return std::make_tuple(r.values, r.indices);
      };
      Module m = trace(f, x.type());
      const std::vector<Array> want = m.interpret("f", {x});
      const auto [values, indices] = jit(f)(x);
      CHECK(bytesOf(values) == bytesOf(want[0]));
      CHECK(bytesOf(indices) == bytesOf(want[1]));
      std::vector<int64_t> expected;
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<int64_t> perm(static_cast<std::size_t>(n));
        std::iota(perm.begin(), perm.end(), 0);
        std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return before(v[r * n + a], v[r * n + b], true); });
        expected.insert(expected.end(), perm.begin(), perm.begin() + k);
      }
      CHECK(indices.template to_vector<int64_t>() == expected);
    }
  };
  uint32_t seed = 0;
  for (int64_t n : {1, 2, 5, 17, 300}) {
    check(float{}, 3, n, seed++);
    check(double{}, 2, n, seed++);
    check(int32_t{}, 2, n, seed++);
    check(int64_t{}, 1, n, seed++);
  }
}

TEST_CASE("searchsorted agrees with std::lower_bound and std::upper_bound, NaN last") {
  const std::vector<double> s{-1, 0, 0, 2.5, 3, 3, 3, 8, std::nan("")};
  const std::vector<double> v{-2, -1, 0, 1, 3, 3.5, 8, 9, std::nan(""), std::numeric_limits<double>::infinity()};
  for (const char* side : {"left", "right"}) {
    auto f = [&](Tensor a, Tensor x) { return searchsorted(a, x, side); };
    Array got = bothWays(f, f64(s), f64(v));
    std::vector<int64_t> want;
    for (double x : v) {
      auto lt = [](double a, double b) { return before(a, b, false); };
      const auto* p = std::string(side) == "left" ? std::lower_bound(s.data(), s.data() + s.size(), x, lt)
                                                  : std::upper_bound(s.data(), s.data() + s.size(), x, lt);
      want.push_back(p - s.data());
    }
    CHECK(got.to_vector<int64_t>() == want);
  }
  for (int n : {0, 1, 2, 7, 64, 100}) {
    std::vector<int32_t> a(n);
    for (int i = 0; i < n; ++i) a[i] = i / 2 * 3;
    Array arr = n ? Array(a, Shape{n}) : Array(DType::i32, {0});
    auto f = [](Tensor a, Tensor x) { return searchsorted(a, x, "right", DType::i32); };
    std::vector<int32_t> xs{-5, 0, 1, 3, 4, 150};
    Array got = bothWays(f, arr, i32(xs));
    std::vector<int32_t> want;
    for (int32_t x : xs) want.push_back(static_cast<int32_t>(std::upper_bound(a.begin(), a.end(), x) - a.begin()));
    CHECK(got.to_vector<int32_t>() == want);
  }
}

TEST_CASE("sort, sort_key_val and top_k differentiate through the permutation") {
  Array x(std::vector<double>{0.3, -1.2, 0.8, 2.0, -0.4, 1.1, 0.05, -2.2, 0.6, 1.7, -0.9, 0.2}, Shape{3, 4});
  auto f0 = [](Tensor x) { return sum(sort(x, 0) * iota({3, 4}, 0, DType::f64)); };
  auto f1 = [](Tensor x) { return sum(sin(sort(x, -1, true)) * iota({3, 4}, 1, DType::f64)); };
  auto kv = [](Tensor x) {
    auto [k, v] = sort_key_val(cos(x), x * x, 1);
    return sum(k * v * iota({3, 4}, 1, DType::f64));
  };
  auto tk = [](Tensor x) { return sum(top_k(x * x, 2).values * iota({3, 2}, 1, DType::f64)); };
  for (auto* f : {+f0, +f1, +kv, +tk}) check_grads(f, x, {.order = 2, .modes = {"rev", "fwd"}});
}

TEST_CASE("sorting errors name the op") {
  CHECK_THROWS_WITH_AS(trace([](Tensor x) { return sort(x); }, Type{DType::f32, {}}),
                       doctest::Contains("sort: expected keys of rank >= 1, got f32[]"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor x) { return sort({x, x(range(0, 2))})[0]; }, Type{DType::f32, {3}}),
                       doctest::Contains("payload 1 must have the keys' shape [3], got f32[2]"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor a, Tensor v) { return searchsorted(a, v, "middle"); }, Type{DType::f32, {3}}, Type{DType::f32, {}}),
                       doctest::Contains("side must be \"left\" or \"right\""), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor a, Tensor v) { return searchsorted(a, v); }, Type{DType::f32, {3, 2}}, Type{DType::f32, {}}),
                       doctest::Contains("searchsorted: the sorted sequence must be 1-D, got f32[3,2]"), Error);
}

TEST_CASE("sorting edge cases: empty axes, k = 0, boolean payloads, length-one rows") {
  auto f = [](Tensor x) { return sort(x, 0); };
  CHECK(jit(f)(Array(DType::f32, {0})).size() == 0);
  CHECK(jit(f)(Array(DType::f64, {0, 3})).shape() == Shape{0, 3});
  bothWays([](Tensor x) { return sort(x, 1, true); }, Array(std::vector<double>{3, 1, 2}, Shape{3, 1}));
  CHECK(jit([](Tensor x) { return top_k(x, 0).indices; })(f32({1, 2})).shape() == Shape{0});
  auto mask = [](Tensor k, Tensor m) { return sort_key_val(k, m).second; };
  Array keys = f64({0.5, -1, 2, -3});
  Array m = i1({true, false, false, true});
  CHECK(bothWays(mask, keys, m).to_vector<bool>() == std::vector<bool>{true, false, true, false});
}
