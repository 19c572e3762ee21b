// test/unit/test_vmap_shape.cpp — the batching rules of the shape, indexing
// and sorting ops: vmap of a small function against a loop of jit calls of
// the unbatched one, with batched and shared operands, the batch axis first
// and elsewhere, in the interpreter (the vmap pass on a traced module) and
// the JIT; and vmap(grad(f)) against a loop of gradients.
#include "Check.h"

#include "transforms/Passes.h"

#include <adjit/vmap.h>

#include <fmt/format.h>

#include <cstring>
#include <utility>

using namespace adjit;
using namespace adjit::test;

namespace {

/// Integers in [lo, hi] (indices, some negative or out of range on purpose).
Array randomInts(Type t, int64_t lo, int64_t hi, uint32_t seed) {
  Array a(t);
  uint32_t x = seed * 2246822519u + 7;
  for (int64_t i = 0; i < a.size(); ++i) {
    x = x * 1664525u + 1013904223u;
    a.set(i, static_cast<double>(lo + static_cast<int64_t>((x >> 8) % static_cast<uint32_t>(hi - lo + 1))));
  }
  return a;
}

/// One argument of a checked function: its examples (one for a shared
/// argument) and the batch axis of the stacked array (nullopt: shared).
struct Arg {
  std::vector<Array> rows;
  std::optional<int64_t> axis = 0;
};

/// `n` examples of type `t` (random values from `seed`).
std::vector<Array> examples(Type t, int n, uint32_t seed) {
  std::vector<Array> r;
  for (int b = 0; b < n; ++b) r.push_back(randomArray(t, seed * 31 + static_cast<uint32_t>(b)));
  return r;
}
std::vector<Array> intExamples(Type t, int n, int64_t lo, int64_t hi, uint32_t seed) {
  std::vector<Array> r;
  for (int b = 0; b < n; ++b) r.push_back(randomInts(t, lo, hi, seed * 31 + static_cast<uint32_t>(b)));
  return r;
}

std::string axesText(const std::vector<Arg>& args) {
  std::string t;
  for (const Arg& a : args) t += (t.empty() ? "" : ",") + (a.axis ? std::to_string(*a.axis) : std::string("-"));
  return t;
}

/// Checks vmap(f, in_axes)(stacked args) against the stack of jit(f) over
/// the examples, compiled (vmap with Arrays, and jit of vmap inside a trace)
/// and interpreted (the vmap pass on f's traced module); bitwise where
/// `exact`, else to `rtol`. Returns nothing; CHECKs.
template <std::size_t N, class F> void checkVmap(F f, const std::vector<Arg>& args, bool exact, double rtol = 1e-12) {
  REQUIRE(args.size() == N);
  std::size_t size = 0;
  for (const Arg& a : args)
    if (a.axis) size = a.rows.size();
  REQUIRE(size > 0);
  auto apply = [&](auto&& g, const std::vector<Array>& v) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) { return g(v[I]...); }(std::make_index_sequence<N>{});
  };
  std::vector<Array> batched, first;
  std::vector<Type> types;
  std::vector<std::optional<int64_t>> axes;
  for (const Arg& a : args) {
    batched.push_back(a.axis ? stackAt(a.rows, *a.axis) : a.rows.at(0));
    first.push_back(a.rows.at(0));
    types.push_back(a.rows.at(0).type());
    axes.push_back(a.axis);
  }
  auto one = jit(f);
  std::vector<Array> wantRows;
  for (std::size_t b = 0; b < size; ++b) {
    std::vector<Array> ex;
    for (const Arg& a : args) ex.push_back(a.axis ? a.rows.at(b) : a.rows.at(0));
    wantRows.push_back(apply(one, ex));
  }
  const Array want = stackAt(wantRows, 0);
  auto same = [&](const Array& got, const char* how) {
    INFO(how << " with in_axes [" << axesText(args) << "]");
    REQUIRE(got.type() == want.type());
    if (exact) {
      CHECK(bytesOf(got) == bytesOf(want));
    } else {
      std::string why;
      CHECK_MESSAGE(close(got, want, rtol, &why), why);
    }
  };
  same(apply(vmap(f, {.in_axes = axes}), batched), "JIT");
  // the batched ops inside a jit-ed trace
  same(apply(jit([&](const auto&... xs) { return vmap(f, {.in_axes = axes})(xs...); }), batched), "jit(vmap)");
  // the interpreter: the vmap pass on the traced function
  Module m = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return trace(f, types[I]...);
  }(std::make_index_sequence<N>{});
  transforms::runPipeline(m.impl(), {fmt::format("vmap(f, in_axes=[{}], axis_size={})", axesText(args), size)});
  m.verify();
  const std::string text = m.str();
  CHECK(Module::parse(text).str() == text);
  same(m.interpret("f.vmap", batched).at(0), "interpreter");
  // the result with its batch axis last
  INFO("out_axes -1 with in_axes [" << axesText(args) << "]");
  const Array last = apply(vmap(f, {.in_axes = axes, .out_axes = {-1}}), batched);
  const Array wantLast = stackAt(wantRows, -1);
  REQUIRE(last.type() == wantLast.type());
  if (exact) {
    CHECK(bytesOf(last) == bytesOf(wantLast));
  } else {
    std::string why;
    CHECK_MESSAGE(close(last, wantLast, rtol, &why), why);
  }
}

constexpr int kB = 3; // examples per batch

} // namespace

TEST_CASE("vmap of reshape, broadcast_to, transpose equals a loop") {
  const Type t{DType::f32, {2, 3}};
  for (int64_t axis : {0, 1, -1}) {
    checkVmap<1>([](const Tensor& x) { return reshape(x, {3, 1, 2}); }, {{examples(t, kB, 1), axis}}, true);
    checkVmap<1>([](const Tensor& x) { return broadcast_to(x, {4, 2, 3}); }, {{examples(t, kB, 2), axis}}, true);
    checkVmap<1>([](const Tensor& x) { return transpose(x, {1, 0}); }, {{examples(t, kB, 3), axis}}, true);
  }
  // broadcasting along an axis of extent 1, and a scalar to a shape
  checkVmap<1>([](const Tensor& x) { return broadcast_to(x, {2, 4, 3}); }, {{examples({DType::f64, {4, 1}}, kB, 4), 1}},
               true);
  checkVmap<1>([](const Tensor& x) { return broadcast_to(x, {2, 2}); }, {{examples({DType::i32, {}}, kB, 5), 0}}, true);
  checkVmap<1>([](const Tensor& x) { return transpose(x, {2, 0, 1}); }, {{examples({DType::f64, {2, 3, 4}}, kB, 6), 2}},
               true);
}

TEST_CASE("vmap of slice, pad, concatenate, pad_sum equals a loop") {
  const Type t{DType::f64, {4, 5}};
  for (int64_t axis : {0, 2}) {
    checkVmap<1>([](const Tensor& x) { return slice(x, {1, 0}, {4, 5}, {2, 2}); }, {{examples(t, kB, 7), axis}}, true);
    checkVmap<1>([](const Tensor& x) { return pad(x, {1, 0}, {0, 2}, {1, 1}); }, {{examples(t, kB, 8), axis}}, true);
  }
  // concatenate: both batched, one shared (either side), along each axis
  const Type u{DType::f64, {2, 5}};
  for (int64_t cat : {0, 1}) {
    const Type v = cat == 0 ? Type{DType::f64, {3, 5}} : Type{DType::f64, {2, 3}};
    auto f = [cat](const Tensor& a, const Tensor& b) { return concatenate({a, b, a}, cat); };
    checkVmap<2>(f, {{examples(u, kB, 9), 0}, {examples(v, kB, 10), 1}}, true);
    checkVmap<2>(f, {{examples(u, kB, 11), std::nullopt}, {examples(v, kB, 12), -1}}, true);
    checkVmap<2>(f, {{examples(u, kB, 13), 1}, {examples(v, 1, 14), std::nullopt}}, true);
  }
  // pad_sum with a batched and a shared addend (an exact sum: integers)
  auto ps = [](const Tensor& a, const Tensor& b) {
    return pad_sum({a, b, a}, {4, 5}, {{0, 0}, {1, 1}, {2, 0}}, {{1, 0}, {0, 1}, {0, 0}});
  };
  const Type pa{DType::i32, {2, 5}}, pb{DType::i32, {3, 2}};
  checkVmap<2>(ps, {{intExamples(pa, kB, -9, 9, 15), 0}, {intExamples(pb, 1, -9, 9, 16), std::nullopt}}, true);
  checkVmap<2>(ps, {{intExamples(pa, 1, -9, 9, 17), std::nullopt}, {intExamples(pb, kB, -9, 9, 18), 2}}, true);
  checkVmap<2>(ps, {{intExamples(pa, kB, -9, 9, 19), 1}, {intExamples(pb, kB, -9, 9, 20), 0}}, true);
}

TEST_CASE("vmap(grad(f)) through shape ops equals a loop of gradients") {
  // Gradients of reshape, broadcast, transpose, slice, pad and concatenate
  // are made of the others: batching them batches those.
  auto f = [](const Tensor& x, const Tensor& w) {
    Tensor a = reshape(transpose(x, {1, 0}), {3, 2});
    Tensor b = concatenate({slice(a, {0, 0}, {3, 2}, {1, 2}), pad(a, {0, 1}, {0, 0}, {0, 0})}, 1); // [3, 4]
    return sum(tanh(b) * broadcast_to(w, {3, 4}) + b * b, {0, 1});
  };
  const Type tx{DType::f64, {2, 3}}, tw{DType::f64, {4}};
  checkVmap<2>([&](const Tensor& x, const Tensor& w) { return grad(f)(x, w); },
               {{examples(tx, kB, 21), 0}, {examples(tw, 1, 22), std::nullopt}}, false, 1e-12);
  checkVmap<2>([&](const Tensor& x, const Tensor& w) { return grad(f, argnums<1>)(x, w); },
               {{examples(tx, kB, 23), 1}, {examples(tw, kB, 24), 0}}, false, 1e-12);
}

TEST_CASE("vmap of gather (take) equals a loop, with the operand, the indices or both batched") {
  const Type tx{DType::f32, {5, 3}};
  for (int64_t axis : {0, 1}) {
    const int64_t n = axis == 0 ? 5 : 3;
    for (const Shape& is : {Shape{4}, Shape{}, Shape{2, 2}}) {
      const Type ti{DType::i32, is};
      INFO("axis " << axis << ", indices " << ti.str());
      auto f = [axis](const Tensor& x, const Tensor& i) { return take(x, i, axis); };
      // indices below -n and past n - 1 too: wrapped, then clamped, per example
      checkVmap<2>(f, {{examples(tx, kB, 30), 0}, {intExamples(ti, 1, -n - 2, n + 1, 31), std::nullopt}}, true);
      checkVmap<2>(f, {{examples(tx, kB, 32), 2}, {intExamples(ti, 1, -n - 2, n + 1, 33), std::nullopt}}, true);
      checkVmap<2>(f, {{examples(tx, 1, 34), std::nullopt}, {intExamples(ti, kB, -n - 2, n + 1, 35), 0}}, true);
      checkVmap<2>(f, {{examples(tx, kB, 36), 0}, {intExamples(ti, kB, -n - 2, n + 1, 37), 0}}, true);
      checkVmap<2>(f, {{examples(tx, kB, 38), 1}, {intExamples(ti, kB, -n - 2, n + 1, 39), -1}}, true);
    }
  }
}

TEST_CASE("vmap of gather and scatter_add along a middle or last axis of a 3-D operand") {
  const Type tx{DType::f64, {2, 3, 4}}, ti{DType::i32, {2, 2}};
  for (int64_t axis : {1, 2}) {
    const int64_t n = axis == 1 ? 3 : 4;
    INFO("axis " << axis);
    Shape us = tx.shape;
    us[static_cast<std::size_t>(axis)] = 2;
    us.insert(us.begin() + axis + 1, 2);
    const Type tu{DType::f64, us};
    auto g = [axis](const Tensor& x, const Tensor& i) { return take(x, i, axis); };
    auto s = [axis](const Tensor& x, const Tensor& i, const Tensor& u) { return scatter_add(x, i, u, axis); };
    checkVmap<2>(g, {{examples(tx, kB, 43), 2}, {intExamples(ti, kB, -n - 1, n, 44), 1}}, true);
    checkVmap<3>(s, {{examples(tx, kB, 45), 3}, {intExamples(ti, kB, -n - 1, n, 46), 0}, {examples(tu, kB, 47), 2}},
                 true);
    checkVmap<3>(s,
                 {{examples(tx, 1, 48), std::nullopt},
                  {intExamples(ti, kB, -n - 1, n, 49), 1},
                  {examples(tu, 1, 50), std::nullopt}},
                 true);
  }
}

TEST_CASE("vmap of scatter_add equals a loop, for every way of batching its operands") {
  // Repeated indices add in the loop's order (bitwise equal, floats too);
  // out-of-range ones are dropped per example.
  for (int64_t axis : {0, 1}) {
    const int64_t n = axis == 0 ? 5 : 3;
    const Type tx{DType::f64, {5, 3}}, ti{DType::i64, {4}};
    const Type tu{DType::f64, axis == 0 ? Shape{4, 3} : Shape{5, 4}};
    auto f = [axis](const Tensor& x, const Tensor& i, const Tensor& u) { return scatter_add(x, i, u, axis); };
    for (int mask = 1; mask < 8; ++mask) {
      INFO("axis " << axis << ", batched operands (bits) " << mask);
      const bool bx = mask & 1, bi = mask & 2, bu = mask & 4;
      checkVmap<3>(f,
                   {{examples(tx, bx ? kB : 1, 40), bx ? std::optional<int64_t>(axis == 0 ? 0 : -1) : std::nullopt},
                    {intExamples(ti, bi ? kB : 1, -n - 2, n + 1, 41), bi ? std::optional<int64_t>(0) : std::nullopt},
                    {examples(tu, bu ? kB : 1, 42), bu ? std::optional<int64_t>(1) : std::nullopt}},
                   true);
    }
  }
}

TEST_CASE("vmap of one_hot equals a loop") {
  const Type ti{DType::i32, {2, 3}};
  for (int64_t axis : {0, 1, -1})
    checkVmap<1>([](const Tensor& i) { return one_hot(i, 4, DType::f32); }, {{intExamples(ti, kB, -2, 5, 50), axis}},
                 true);
}

TEST_CASE("vmap of dynamic_slice and dynamic_update_slice equals a loop, starts per example or shared") {
  const Type tx{DType::f32, {5, 4}}, tu{DType::f32, {2, 3}}, ts{DType::i32, {}};
  // starts outside [0, n - size] too: clamped per example
  auto ds = [](const Tensor& x, const Tensor& s0, const Tensor& s1) { return dynamic_slice(x, {s0, s1}, {2, 3}); };
  auto dus = [](const Tensor& x, const Tensor& u, const Tensor& s0) { return dynamic_update_slice(x, u, {s0, 1}); };
  for (int mask = 1; mask < 8; ++mask) {
    INFO("batched operands (bits) " << mask);
    auto axis = [&](int bit, int64_t a) { return (mask >> bit) & 1 ? std::optional<int64_t>(a) : std::nullopt; };
    auto count = [&](int bit) { return (mask >> bit) & 1 ? kB : 1; };
    checkVmap<3>(ds,
                 {{examples(tx, count(0), 51), axis(0, 1)},
                  {intExamples(ts, count(1), -2, 6, 52), axis(1, 0)},
                  {intExamples(ts, count(2), -1, 3, 53), axis(2, 0)}},
                 true);
    checkVmap<3>(dus,
                 {{examples(tx, count(0), 54), axis(0, -1)},
                  {examples(tu, count(1), 55), axis(1, 1)},
                  {intExamples(ts, count(2), -2, 6, 56), axis(2, 0)}},
                 true);
  }
  // two starts per example in an update
  auto dus2 = [](const Tensor& x, const Tensor& s0, const Tensor& s1) {
    return dynamic_update_slice(x, full({2, 3}, 7.0, DType::f32), {s0, s1});
  };
  checkVmap<3>(dus2,
               {{examples(tx, 1, 57), std::nullopt},
                {intExamples(ts, kB, -2, 6, 58), 0},
                {intExamples(ts, kB, -1, 3, 59), 0}},
               true);
}

namespace {

/// Examples of `t` whose last axis is sorted (numpy's order: NaN last),
/// with repeated values, and a NaN at the end of odd examples if `nan`.
std::vector<Array> sortedExamples(Type t, int count, uint32_t seed, bool nan) {
  std::vector<Array> r;
  for (int b = 0; b < count; ++b) {
    Array a = randomInts(t, -3, 3, seed * 17 + static_cast<uint32_t>(b));
    const int64_t n = t.shape.back(), rows = n == 0 ? 0 : a.size() / n;
    for (int64_t row = 0; row < rows; ++row) {
      std::vector<double> v;
      for (int64_t j = 0; j < n; ++j) v.push_back(a.get(row * n + j));
      std::sort(v.begin(), v.end());
      for (int64_t j = 0; j < n; ++j) a.set(row * n + j, v[static_cast<std::size_t>(j)]);
      if (nan && (b % 2) == 1) a.set(row * n + n - 1, std::nan(""));
    }
    r.push_back(a);
  }
  return r;
}

} // namespace

TEST_CASE("vmap of sort equals a loop, keys and payloads batched or shared") {
  const Type tk{DType::f32, {4, 5}}, tp{DType::i32, {4, 5}};
  for (int64_t axis : {0, 1}) {
    for (bool descending : {false, true}) {
      INFO("axis " << axis << (descending ? ", descending" : ""));
      auto keys = [=](const Tensor& k) { return sort(k, axis, descending); };
      // ties (few distinct values) keep their order
      checkVmap<1>(keys, {{intExamples({DType::f32, {4, 5}}, kB, -2, 2, 60), 0}}, true);
      checkVmap<1>(keys, {{examples(tk, kB, 61), 2}}, true);
      auto payload = [=](const Tensor& k, const Tensor& p) {
        return sort(std::vector<Tensor>{k, p}, axis, descending).at(1);
      };
      checkVmap<2>(payload, {{intExamples(tk, kB, -2, 2, 62), 1}, {intExamples(tp, 1, 0, 99, 63), std::nullopt}}, true);
      checkVmap<2>(payload, {{intExamples(tk, 1, -2, 2, 64), std::nullopt}, {intExamples(tp, kB, 0, 99, 65), 0}}, true);
      checkVmap<2>(payload, {{intExamples(tk, kB, -2, 2, 66), 0}, {intExamples(tp, kB, 0, 99, 67), -1}}, true);
    }
  }
}

TEST_CASE("vmap of searchsorted equals a loop, the sequence per example or shared") {
  for (bool right : {false, true})
    for (int64_t n : {1, 5, 8}) {
      for (DType dt : {DType::f64, DType::i32}) {
        INFO((right ? "right" : "left") << ", n " << n << ", " << name_of(dt));
        const Type ta{dt, {n}}, tv{dt, {2, 3}};
        auto f = [right](const Tensor& a, const Tensor& v) { return searchsorted(a, v, right ? "right" : "left"); };
        const bool fp = dt == DType::f64;
        // values equal to elements, between them, outside them, and NaN
        auto values = [&](int count, uint32_t seed) {
          std::vector<Array> vs = intExamples(tv, count, -4, 4, seed);
          if (fp) vs.back().set(2, std::nan(""));
          return vs;
        };
        checkVmap<2>(f, {{sortedExamples(ta, kB, 70, fp), 0}, {values(1, 71), std::nullopt}}, true);
        checkVmap<2>(f, {{sortedExamples(ta, 1, 72, fp), std::nullopt}, {values(kB, 73), 1}}, true);
        checkVmap<2>(f, {{sortedExamples(ta, kB, 74, fp), -1}, {values(kB, 75), 0}}, true);
      }
    }
}

TEST_CASE("vmap(grad(f)) through indexing and sorting ops equals a loop of gradients") {
  // take with per-example indices (its gradient a scatter_add), a window at
  // per-example starts (its gradient a dynamic_update_slice), a sort (its
  // gradient a scatter of the cotangent through the permutation)
  auto f = [](const Tensor& x, const Tensor& i, const Tensor& s) {
    Tensor a = take(x, i, 1) * 2.0;              // [4, 5]
    Tensor w = dynamic_slice(x, {s, s}, {2, 3}); // [2, 3]
    Tensor k = sort(a * a + 0.5 * a, 1);
    return sum(tanh(k), {0, 1}) + sum(w * w * w, {0, 1}) + sum(take(x, i * 0 + 1, 0), {0, 1});
  };
  const Type tx{DType::f64, {4, 3}}, ti{DType::i32, {5}}, ts{DType::i32, {}};
  auto g = [&](const Tensor& x, const Tensor& i, const Tensor& s) { return grad(f)(x, i, s); };
  checkVmap<3>(g, {{examples(tx, kB, 80), 0}, {intExamples(ti, kB, -3, 3, 81), 0}, {intExamples(ts, kB, -1, 3, 82), 0}},
               false, 1e-12);
  checkVmap<3>(g,
               {{examples(tx, kB, 83), 1},
                {intExamples(ti, 1, -3, 3, 84), std::nullopt},
                {intExamples(ts, 1, 0, 2, 85), std::nullopt}},
               false, 1e-12);
  checkVmap<3>(g,
               {{examples(tx, 1, 86), std::nullopt},
                {intExamples(ti, kB, -3, 3, 87), 0},
                {intExamples(ts, kB, -1, 3, 88), 0}},
               false, 1e-12);
}

TEST_CASE("vmap of the indexing ops over an empty batch and a batch of one") {
  auto f = [](const Tensor& x, const Tensor& i, const Tensor& s) {
    Tensor u = scatter_add(x, i, take(x, i, 0) * 2.0, 0);
    Tensor c = cast(searchsorted(sort(reshape(x, {12}), 0), x, "left"), DType::f64);
    return dynamic_slice(u, {s, 0}, {2, 3}) + dynamic_slice(c, {s, s}, {2, 3});
  };
  const Type tx{DType::f64, {4, 3}}, ti{DType::i32, {5}}, ts{DType::i32, {}};
  checkVmap<3>(f, {{examples(tx, 1, 90), 0}, {intExamples(ti, 1, -5, 4, 91), 0}, {intExamples(ts, 1, -1, 3, 92), 0}},
               true);
  const Array x(Type{DType::f64, {0, 4, 3}}), i(Type{DType::i32, {0, 5}}), s(Type{DType::i32, {0}});
  const Array got = vmap(f)(x, i, s);
  CHECK(got.type() == Type{DType::f64, {0, 2, 3}});
  Module m = trace(f, tx, ti, ts);
  transforms::runPipeline(m.impl(), {"vmap(f, in_axes=[0,0,0], axis_size=0)"});
  m.verify();
  CHECK(m.interpret("f.vmap", {x, i, s}).at(0).type() == got.type());
}
