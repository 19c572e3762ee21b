// test/unit/test_control_flow.cpp — cond, switch_case, scan, fori_loop and
// while_loop: values (compiled and interpreted), gradients against finite
// differences, TensorFlow's gradient semantics for conditionals, and errors.
#include "Check.h"

#include "autodiff/Revolve.h"
#include "codegen/Stats.h"

using namespace adjit;
using namespace adjit::test;

namespace {

double scalar(const Array& a) { return a.item<double>(); }

void flattenInto(const Array& a, std::vector<Array>& out) { out.push_back(a); }
template <class A, class B> void flattenInto(const std::pair<A, B>& p, std::vector<Array>& out) {
  flattenInto(p.first, out);
  flattenInto(p.second, out);
}
template <class... T> void flattenInto(const std::tuple<T...>& t, std::vector<Array>& out) {
  std::apply([&](const auto&... x) { (flattenInto(x, out), ...); }, t);
}
template <class R> std::vector<Array> flattenArrays(const R& r) {
  std::vector<Array> out;
  flattenInto(r, out);
  return out;
}

/// Traces f for the arguments' types, checks the text round-trips and that
/// the interpreter agrees with the compiled function; records the ops for the
/// table test.
template <class F, class... A> void agrees(const F& f, const std::tuple<A...>& args, double rtol = 1e-12) {
  Module m = std::apply([&](const auto&... a) { return trace(f, a.type()...); }, args);
  for (const auto& fn : m.impl().functions)
    for (const auto& op : fn->ops) exercisedOps().insert(op.kind);
  m.verify();
  const std::string text = m.str(true);
  CHECK(Module::parse(text).str(true) == text);
  std::vector<Array> want = m.interpret("f", std::apply([](const auto&... a) { return std::vector<Array>{a...}; }, args));
  auto jf = jit(f);
  std::vector<Array> got = flattenArrays(std::apply(jf, args));
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) ADJIT_CHECK_CLOSE(got[i], want[i], rtol);
}

} // namespace

TEST_CASE("cond runs the branch its predicate selects, compiled and interpreted") {
  auto f = [](Tensor x, Tensor p) {
    return cond(gt(p, 0.0), [](Tensor a) { return sin(a) * 2.0; }, [](Tensor a) { return a * a; }, x);
  };
  auto jf = jit(f);
  const std::vector<double> taken = jf(f64({0.5, 1.0}), 1.0).to_vector<double>();
  CHECK(taken[0] == doctest::Approx(2 * std::sin(0.5)).epsilon(1e-15));
  CHECK(taken[1] == doctest::Approx(2 * std::sin(1.0)).epsilon(1e-15));
  CHECK(jf(f64({0.5, 1.0}), -1.0).to_vector<double>() == std::vector<double>{0.25, 1.0});
  agrees(f, std::tuple{f64({0.5, 1.0}), Array(1.0)});
  agrees(f, std::tuple{f64({0.5, 1.0}), Array(-1.0)});
}

TEST_CASE("cond takes and returns structures, and branches may capture outer tensors") {
  auto f = [](Tensor x, Tensor y) {
    Tensor outer = x * 3.0; // captured by one branch only
    auto [a, b] = cond(
        lt(sum(x), sum(y)),
        [&](const std::tuple<Tensor, Tensor>& t) { return std::pair{std::get<0>(t) + outer, std::get<1>(t)}; },
        [&](const std::tuple<Tensor, Tensor>& t) { return std::pair{std::get<1>(t), std::get<0>(t) * 2.0}; },
        std::tuple{x, y});
    return sum(a) + sum(b);
  };
  agrees(f, std::tuple{f64({1, 2}), f64({3, 4})});
  agrees(f, std::tuple{f64({5, 2}), f64({3, 1})});
  CHECK(scalar(jit(f)(f64({1, 2}), f64({3, 4}))) == doctest::Approx(1 + 2 + 3 + 6 + 3 + 4));
  check_grads(f, std::tuple{f64({1, 2}), f64({3, 4})});
  check_grads(f, std::tuple{f64({5, 2}), f64({3, 1})});
}

TEST_CASE("cond gradients follow TensorFlow: zeros from a branch that ignores an operand, none for integers") {
  // x is read only by the branch not taken: its gradient is zeros, not "none".
  auto f = [](Tensor x, Tensor y, Tensor p) {
    auto [v, n] = cond(
        gt(p, 0.0), [](Tensor a, Tensor b) { return std::pair{b * b, full({}, 3, DType::i32)}; },
        [](Tensor a, Tensor) { return std::pair{a * 1.0, full({}, 4, DType::i32)}; }, x, y);
    std::vector<std::optional<Tensor>> gs = gradients({v}, {x, y});
    return std::tuple{*gs[0], *gs[1], n};
  };
  auto [dx, dy, n] = jit(f)(2.0, 5.0, 1.0);
  CHECK(scalar(dx) == 0.0);
  CHECK(scalar(dy) == 10.0);
  CHECK(n.item<int32_t>() == 3);
  auto [dx2, dy2, n2] = jit(f)(2.0, 5.0, -1.0);
  CHECK(scalar(dx2) == 1.0);
  CHECK(scalar(dy2) == 0.0);
  CHECK(n2.item<int32_t>() == 4);
}

TEST_CASE("stop_gradient inside one branch, and second derivatives through cond") {
  auto f = [](Tensor x, Tensor p) {
    return cond(gt(p, 0.0), [](Tensor a) { return a * stop_gradient(a) * a; }, [](Tensor a) { return sin(a) * a; }, x);
  };
  // d/dx x * sg(x) * x = 2 x * x (sg(x) constant)
  CHECK(scalar(grad(f)(3.0, 1.0)) == doctest::Approx(18.0));
  CHECK(scalar(grad(f)(0.5, -1.0)) == doctest::Approx(std::cos(0.5) * 0.5 + std::sin(0.5)));
  auto h = [](Tensor x) { return cond(gt(x, 0.0), [](Tensor a) { return a * a * a; }, [](Tensor a) { return exp(a); }, x); };
  CHECK(scalar(grad(grad(h))(2.0)) == doctest::Approx(12.0));
  CHECK(scalar(grad(grad(h))(-1.0)) == doctest::Approx(std::exp(-1.0)));
  check_grads(h, Array(0.7), {.order = 2});
}

TEST_CASE("switch_case clamps its index and differentiates the taken branch") {
  auto f = [](Tensor x, Tensor i) {
    return switch_case(i, {std::function<Tensor(const Tensor&)>([](const Tensor& a) { return a * 2.0; }),
                           std::function<Tensor(const Tensor&)>([](const Tensor& a) { return sin(a); }),
                           std::function<Tensor(const Tensor&)>([](const Tensor& a) { return a * a; })},
                       x);
  };
  auto jf = jit(f);
  CHECK(scalar(jf(3.0, int32_t{-5})) == 6.0);
  CHECK(scalar(jf(3.0, int32_t{1})) == doctest::Approx(std::sin(3.0)));
  CHECK(scalar(jf(3.0, int32_t{2})) == 9.0);
  CHECK(scalar(jf(3.0, int32_t{7})) == 9.0);
  agrees(f, std::tuple{Array(3.0), Array(int32_t{1})});
  CHECK(scalar(grad(f)(3.0, int32_t{2})) == 6.0);
  CHECK(scalar(grad(f)(3.0, int32_t{1})) == doctest::Approx(std::cos(3.0)));
  // Branches of different types, as a tuple.
  auto g = [](Tensor x, Tensor i) {
    return switch_case(i, std::tuple{[](Tensor a) { return a + 1.0; }, [](Tensor a) { return exp(a); }}, x);
  };
  CHECK(scalar(jit(g)(1.0, int64_t{1})) == doctest::Approx(std::exp(1.0)));
}

TEST_CASE("scan carries, stacks, runs in reverse and is differentiated through") {
  // A running sum and products: carry c, y = c * x.
  auto f = [](Tensor c0, Tensor xs) {
    auto [c, ys] = scan([](Tensor c, Tensor x) { return std::pair{c + x, c * x}; }, c0, xs);
    return std::pair{c, ys};
  };
  auto [c, ys] = jit(f)(1.0, f64({1, 2, 3}));
  CHECK(scalar(c) == 7.0);
  CHECK(ys.to_vector<double>() == std::vector<double>{1, 4, 12});
  auto r = [](Tensor c0, Tensor xs) {
    auto [c, ys] = scan([](Tensor c, Tensor x) { return std::pair{c + x, c * x}; }, c0, xs, {.reverse = true});
    return std::pair{c, ys};
  };
  auto [rc, rys] = jit(r)(1.0, f64({1, 2, 3}));
  CHECK(scalar(rc) == 7.0);
  CHECK(rys.to_vector<double>() == std::vector<double>{6, 8, 3}); // t=2: 1*3, t=1: 4*2, t=0: 6*1
  agrees(r, std::tuple{Array(1.0), f64({1, 2, 3})});
  auto loss = [](Tensor w, Tensor xs) {
    auto [c, ys] = scan([&](Tensor c, Tensor x) { return std::pair{tanh(c * w + x), c * x}; }, full({2}, 0.5, DType::f64), xs);
    return sum(c) + sum(ys * ys);
  };
  Array xs = Array(std::vector<double>{0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, 0.8}, Shape{4, 2});
  agrees(loss, std::tuple{f64({0.3, -0.7}), xs});
  check_grads(loss, std::tuple{f64({0.3, -0.7}), xs});
  check_grads(loss, std::tuple{f64({0.3, -0.7}), xs}, {.order = 2});
}

TEST_CASE("scan over no xs needs a length; a length that disagrees is an error") {
  auto f = [](Tensor c0) {
    return scan([](Tensor c, std::tuple<>) { return std::pair{c * 2.0, c}; }, c0, std::tuple<>{}, {.length = 5}).first;
  };
  CHECK(scalar(jit(f)(1.0)) == 32.0);
  auto bad = [](Tensor c0, Tensor xs) {
    return scan([](Tensor c, Tensor x) { return std::pair{c + x, c}; }, c0, xs, {.length = 4}).first;
  };
  CHECK_THROWS_WITH_AS(jit(bad)(1.0, f64({1, 2, 3})), doctest::Contains("length = 4 disagrees with leaf 0 of xs, f64[3]"), Error);
  auto none = [](Tensor c0) { return scan([](Tensor c, std::tuple<>) { return std::pair{c, c}; }, c0, std::tuple<>{}).first; };
  CHECK_THROWS_WITH_AS(jit(none)(1.0), doctest::Contains("give the number of steps as .length"), Error);
}

TEST_CASE("a carry that changes shape or dtype is an error naming the leaf") {
  auto f = [](Tensor c0) {
    return fori_loop(0, 3, [](Tensor, std::tuple<Tensor, Tensor> c) { return std::tuple{std::get<0>(c), cast(std::get<1>(c), DType::f32)}; },
                     std::tuple{c0, c0});
  };
  // The leaf is counted in the user's carry (not after the loop's own counter).
  CHECK_THROWS_WITH_AS(jit([&](Tensor x) { return std::get<1>(f(x)); })(1.0),
                       doctest::Contains("fori_loop: leaf 1 of the carry the body returns is f32[], but leaf 1 of the initial carry is "
                                         "f64[] (the body returned tuple of (f64[], f32[]); the initial carry is tuple of (f64[], f64[]))"),
                       Error);
}

namespace {
/// The message of the Error `f` raises, checking it is reported at `line` of this file.
template <class F> std::string errorAt(int line, const F& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.location().line == static_cast<uint32_t>(line));
    CHECK(e.location().file.find("test_control_flow.cpp") != std::string::npos);
    return e.message();
  }
  FAIL("no adjit::Error was raised");
  return {};
}
} // namespace

TEST_CASE("a loop body that changes its carry's structure is an error naming both structures, at the loop's line") {
  using V = std::vector<Tensor>;
  const Type f64x4{DType::f64, {4}};
  auto grow = [](V c) {
    c.push_back(c[0]);
    return c;
  };
  // One more element used to be dropped silently (scan) or reported as a bare count.
  int line = __LINE__ + 1;
  auto scanned = [&](Tensor a) { return scan([&](V c, Tensor x) { return std::pair{grow(c), x}; }, V{a, a}, a).first[0]; };
  CHECK(errorAt(line, [&] { trace(scanned, f64x4); }) ==
        "scan: the body returned a carry of 3 leaves (vector of 3 f64[4]), but the initial carry has 2 (vector of 2 f64[4])");
  line = __LINE__ + 1;
  auto counted = [&](Tensor a) { return fori_loop(0, 3, [&](Tensor, V c) { return grow(c); }, V{a, a})[0]; };
  CHECK(errorAt(line, [&] { trace(counted, f64x4); }) ==
        "fori_loop: the body returned a carry of 3 leaves (vector of 3 f64[4]), but the initial carry has 2 (vector of 2 f64[4])");
  line = __LINE__ + 1;
  auto dynamic = [&](Tensor a, Tensor n) { return fori_loop(0, n, [&](Tensor, V c) { return grow(c); }, V{a, a})[0]; };
  CHECK(errorAt(line, [&] { trace(dynamic, f64x4, Type{DType::i32, {}}); }).starts_with("fori_loop: the body returned a carry of 3 leaves"));
  line = __LINE__ + 1;
  auto checkpointed = [&](Tensor a) { return fori_loop(0, 4, [&](Tensor, V c) { return grow(c); }, V{a, a}, {.checkpoint = every(2)})[0]; };
  CHECK(errorAt(line, [&] { trace(checkpointed, f64x4); }).starts_with("fori_loop: the body returned a carry of 3 leaves"));
  line = __LINE__ + 1;
  auto looped = [&](Tensor a) { return while_loop([](const V& c) { return sum(c[0]) < 10.0; }, grow, V{a, a})[0]; };
  CHECK(errorAt(line, [&] { trace(looped, f64x4); }) ==
        "while_loop: the body returned a carry of 3 leaves (vector of 3 f64[4]), but the initial carry has 2 (vector of 2 f64[4])");
  // The same leaves, nested otherwise: a pair of vectors whose lengths trade places.
  using P = std::pair<V, V>;
  auto swap = [](const P& c) { return P{c.second, c.first}; };
  const std::string swapped = "the body returned the carry pair of (vector of 1 f64[4], vector of 2 f64[4]), "
                              "but the initial carry is pair of (vector of 2 f64[4], vector of 1 f64[4])";
  line = __LINE__ + 1;
  auto scanPair = [&](Tensor a) { return scan([&](P c, Tensor x) { return std::pair{swap(c), x}; }, P{V{a, a}, V{a}}, a).first.first[0]; };
  CHECK(errorAt(line, [&] { trace(scanPair, f64x4); }) == "scan: " + swapped);
  line = __LINE__ + 1;
  auto foriPair = [&](Tensor a) { return fori_loop(0, 3, [&](Tensor, P c) { return swap(c); }, P{V{a, a}, V{a}}).first[0]; };
  CHECK(errorAt(line, [&] { trace(foriPair, f64x4); }) == "fori_loop: " + swapped);
  line = __LINE__ + 1;
  auto whilePair = [&](Tensor a) { return while_loop([](const P& c) { return sum(c.second[0]) < 10.0; }, swap, P{V{a, a}, V{a}}).first[0]; };
  CHECK(errorAt(line, [&] { trace(whilePair, f64x4); }) == "while_loop: " + swapped);
  // A vector of carries that keeps its length but changes one leaf's shape.
  line = __LINE__ + 1;
  auto reshaped = [&](Tensor a) { return scan([](V c, Tensor x) { return std::pair{V{c[0], c[1](range(0, 2))}, x}; }, V{a, a}, a).first[0]; };
  CHECK(errorAt(line, [&] { trace(reshaped, f64x4); }) ==
        "scan: leaf 1 of the carry the body returns is f64[2], but leaf 1 of the initial carry is f64[4] "
        "(the body returned vector of (f64[4], f64[2]); the initial carry is vector of 2 f64[4])");
  // A body that keeps its carry traces as before.
  CHECK_NOTHROW(trace([](Tensor a) { return scan([](V c, Tensor x) { return std::pair{V{c[1], c[0] + x}, x}; }, V{a, a}, a).first[1]; }, f64x4));
}

TEST_CASE("branches that disagree are reported at the cond call, naming the line in each branch that made the leaf") {
  const int trueLine = __LINE__ + 2, falseLine = __LINE__ + 3, condLine = __LINE__ + 1;
  auto f = [](Tensor x) { return cond(sum(x) > 0.0,
                                      [](Tensor a) { return concatenate({a, a}); },
                                      [](Tensor a) { return a * 2.0; }, x); };
  const std::string msg = errorAt(condLine, [&] { trace(f, Type{DType::f64, {3}}); });
  CHECK(msg.starts_with("cond: leaf 0 of the result of true_fn is f64[6], but leaf 0 of the result of false_fn is f64[3] (true_fn's result made at "));
  CHECK(msg.find("test_control_flow.cpp:" + std::to_string(trueLine) + ":") != std::string::npos);
  CHECK(msg.find(", false_fn's at ") != std::string::npos);
  CHECK(msg.find("test_control_flow.cpp:" + std::to_string(falseLine) + ":") != std::string::npos);
  // A branch that returns an operand as it is made nothing: only the other is named.
  const int switchLine = __LINE__ + 1;
  auto g = [](Tensor i, Tensor x) { return switch_case(i, std::tuple{[](Tensor a) { return a; }, [](Tensor a) { return cast(a, DType::f32); }}, x); };
  const std::string other = errorAt(switchLine, [&] { trace(g, Type{DType::i32, {}}, Type{DType::f64, {3}}); });
  CHECK(other.starts_with("switch_case: leaf 0 of the result of branch 1 is f32[3], but leaf 0 of the result of branch 0 is f64[3] "
                          "(branch 1's result made at "));
  CHECK(other.find("test_control_flow.cpp:" + std::to_string(switchLine) + ":") != std::string::npos);
  CHECK(other.find("branch 0's") == std::string::npos);
  // The same leaves nested otherwise were taken in the first branch's nesting.
  using V = std::vector<Tensor>;
  using P = std::pair<V, V>;
  const int nestLine = __LINE__ + 1;
  auto h = [](Tensor x) { return cond(sum(x) > 0.0, [](Tensor a) { return P{V{a, a}, V{a}}; }, [](Tensor a) { return P{V{a}, V{a, a}}; }, x).first[0]; };
  CHECK(errorAt(nestLine, [&] { trace(h, Type{DType::f64, {3}}); }) ==
        "cond: true_fn returned pair of (vector of 2 f64[3], vector of 1 f64[3]), but false_fn returned pair of (vector of 1 f64[3], "
        "vector of 2 f64[3])");
}

TEST_CASE("cond errors: mismatched branches and a predicate of several elements") {
  auto mismatch = [](Tensor x) { return cond(gt(x, 0.0), [](Tensor a) { return a; }, [](Tensor a) { return cast(a, DType::f32); }, x); };
  CHECK_THROWS_WITH_AS(jit(mismatch)(1.0), doctest::Contains("leaf 0 of the result of true_fn is f64[], but leaf 0 of the result of false_fn is f32[]"), Error);
  auto many = [](Tensor x) { return cond(gt(x, 0.0), [](Tensor a) { return a; }, [](Tensor a) { return a; }, x); };
  CHECK_THROWS_WITH_AS(jit(many)(f64({1, 2})), doctest::Contains("the predicate must be an i1 tensor with exactly one element, got i1[2]"), Error);
  try {
    jit(mismatch)(1.0);
  } catch (const Error& e) {
    CHECK(e.location().file.find("test_control_flow.cpp") != std::string::npos);
  }
}

TEST_CASE("fori_loop with static and dynamic bounds") {
  auto g = [](Tensor x, Tensor n) {
    return fori_loop(1, n, [](Tensor i, Tensor c) { return c * 2.0 + cast(i, DType::f64); }, x, {.max_iterations = 100});
  };
  // c: x -> 2x + 1 -> 4x + 4 -> 8x + 11
  CHECK(scalar(jit(g)(1.0, int32_t{4})) == 19.0);
  CHECK(scalar(jit(g)(1.0, int32_t{0})) == 1.0); // no trip
  agrees(g, std::tuple{Array(1.0), Array(int32_t{4})});
  CHECK(scalar(grad(g)(1.0, int32_t{4})) == 8.0);
  auto s = [](Tensor x) { return fori_loop(0, 3, [](Tensor i, Tensor c) { return sin(c) + cast(i, DType::f64); }, x); };
  check_grads(s, Array(0.4), {.order = 2});
  CHECK_THROWS_WITH_AS(jit(g)(1.0, int32_t{500}), doctest::Contains("max_iterations = 100"), Error);
}

TEST_CASE("while_loop: Newton's square root, its gradient, and max_iterations") {
  auto newton = [](Tensor a) {
    auto [x, k] = while_loop([&](const std::pair<Tensor, Tensor>& s) { return gt(abs(s.first * s.first - a), 1e-12); },
                             [&](const std::pair<Tensor, Tensor>& s) {
                               return std::pair{(s.first + a / s.first) * 0.5, s.second + full({}, 1, DType::i32)};
                             },
                             std::pair{a, full({}, 0, DType::i32)}, {.max_iterations = 50});
    return x;
  };
  CHECK(scalar(jit(newton)(2.0)) == doctest::Approx(std::sqrt(2.0)).epsilon(1e-12));
  agrees(newton, std::tuple{Array(2.0)});
  // Through the iterations, d sqrt(a)/da = 1 / (2 sqrt a).
  CHECK(scalar(grad(newton)(2.0)) == doctest::Approx(0.5 / std::sqrt(2.0)).epsilon(1e-9));
  auto tight = [](Tensor a) {
    return while_loop([](Tensor x) { return gt(x, 0.0); }, [](Tensor x) { return x - 1.0; }, a, {.max_iterations = 3});
  };
  CHECK(scalar(jit(tight)(2.5)) == -0.5);
  CHECK_THROWS_WITH_AS(jit(tight)(10.0), doctest::Contains("did not end within max_iterations = 3"), Error);
  CHECK_THROWS_WITH_AS(trace(tight, Type{DType::f64, {}}).interpret("f", {Array(10.0)}), doctest::Contains("max_iterations = 3"), Error);
  // The same loop at another line compiles to the same code but for the line it
  // reports: the kernel cache keeps them apart.
  const auto here = static_cast<uint32_t>(__LINE__);
  auto tight2 = [](Tensor a) {
    return while_loop([](Tensor x) { return gt(x, 0.0); }, [](Tensor x) { return x - 1.0; }, a, {.max_iterations = 3});
  };
  auto lineOf = [](auto fn) -> uint32_t {
    try {
      fn(10.0);
    } catch (const Error& e) {
      return e.location().line;
    }
    return 0;
  };
  auto j1 = jit(tight);
  auto j2 = jit(tight2); // both alive: a shared kernel would be found
  const uint32_t first = lineOf(j1);
  CHECK((first != 0 && first < here));
  CHECK(lineOf(j2) == here + 2);
  auto unbounded = [](Tensor a) { return while_loop([](Tensor x) { return gt(x, 0.0); }, [](Tensor x) { return x * 0.5 - 1.0; }, a); };
  CHECK(scalar(jit(unbounded)(10.0)) == -0.5); // 10, 4, 1, -0.5
  CHECK(scalar(grad(unbounded)(10.0)) == 0.125); // three halvings
}

TEST_CASE("while_loop without max_iterations: reverse mode keeps its residuals on a stack sized at run time") {
  // Newton's square root to convergence: d sqrt(a)/da = 1 / (2 sqrt a), the
  // implicit-function value, through however many iterations it took.
  auto newton = [](Tensor a) {
    return while_loop([&](Tensor x) { return gt(abs(x * x - a), 1e-12); }, [&](Tensor x) { return (x + a / x) * 0.5; }, a);
  };
  for (double a : {2.0, 1e6, 1e-3})
    CHECK(scalar(grad(newton)(a)) == doctest::Approx(0.5 / std::sqrt(a)).epsilon(1e-9));
  agrees(grad(newton), std::tuple{Array(2.0)}); // the while_vjp op, compiled and interpreted
  check_grads(newton, Array(3.0));

  // Structures: an integer carry (no cotangent), a captured const, a carry and
  // a const the output does not read (zeros, not none), a vector carry.
  auto mixed = [](Tensor w, Tensor v, Tensor unused) {
    auto [x, k, idle] = while_loop(
        [&](const std::tuple<Tensor, Tensor, Tensor>& s) { return lt(std::get<1>(s), full({}, 7, DType::i32)); },
        [&](const std::tuple<Tensor, Tensor, Tensor>& s) {
          const auto& [x, k, idle] = s;
          return std::tuple{sin(x * w) + v * 0.1 + unused * 0.0, k + full({}, 1, DType::i32), idle * 2.0};
        },
        std::tuple{v, full({}, 0, DType::i32), v * 3.0});
    return sum(x * x) + 0.0 * sum(cast(k, DType::f64));
  };
  const Array w(0.8), v = f64({0.3, -0.6, 0.9}), unused = f64({1, 2, 3});
  check_grads(mixed, std::tuple{w, v, unused});
  auto [dw, dv, du] = grad(mixed, argnums<0, 1, 2>)(w, v, unused);
  CHECK(du.to_vector<double>() == std::vector<double>{0, 0, 0});
  // The same loop with a bound differentiates as a scan: the same numbers.
  auto bounded = [](Tensor w, Tensor v) {
    return while_loop([](Tensor x) { return gt(sum(x * x), 0.05); }, [&](Tensor x) { return x * w - 0.01; }, v, {.max_iterations = 500});
  };
  auto unboundedLoop = [](Tensor w, Tensor v) {
    return while_loop([](Tensor x) { return gt(sum(x * x), 0.05); }, [&](Tensor x) { return x * w - 0.01; }, v);
  };
  auto loss = [](auto f) { return [f](Tensor w, Tensor v) { return sum(sin(f(w, v))); }; };
  auto [a0, a1] = grad(loss(bounded), argnums<0, 1>)(Array(0.9), v);
  auto [b0, b1] = grad(loss(unboundedLoop), argnums<0, 1>)(Array(0.9), v);
  CHECK(scalar(b0) == doctest::Approx(scalar(a0)).epsilon(1e-11));
  ADJIT_CHECK_CLOSE(b1, a1, 1e-11);

  // No trip: the cotangent passes through, the consts get zeros.
  CHECK(scalar(grad(newton)(1.0)) == 1.0);
  auto [z0, z1] = grad(loss(unboundedLoop), argnums<0, 1>)(Array(0.9), f64({0.01, 0.0, 0.0}));
  CHECK(scalar(z0) == 0.0);
  CHECK(z1.to_vector<double>()[0] == doctest::Approx(std::cos(0.01)));

  // Many trips: the stack grows through many doublings (an f64[4] residual
  // and more per trip, 30,000 trips), and a dynamic fori_loop needs no bound.
  auto many = [](Tensor c, Tensor n) {
    return sum(fori_loop(0, n, [&](Tensor, Tensor x) { return x * c + sin(x) * 1e-3; }, constant(f64({1, 2, 3, 4})) * c));
  };
  const int32_t trips = 30000;
  const double viaStack = scalar(grad(many)(Array(0.99995), Array(trips)));
  auto manyStatic = [](Tensor c) {
    return sum(fori_loop(0, 30000, [&](Tensor, Tensor x) { return x * c + sin(x) * 1e-3; }, constant(f64({1, 2, 3, 4})) * c));
  };
  CHECK(viaStack == doctest::Approx(scalar(grad(manyStatic)(Array(0.99995)))).epsilon(1e-9));
  CHECK(scalar(grad(many)(Array(0.5), Array(int32_t{0}))) == 10.0);

  // vjp on Arrays: the while_vjp op runs in the backward half, which keeps its
  // stack within the call; the backward may run again.
  // residual_bytes() counts what the last backward call pushed: a 64-byte
  // slot per residual per trip (x and a / x for each Newton step at a = 4).
  auto [y, back] = vjp(newton, Array(4.0));
  CHECK(scalar(y) == doctest::Approx(2.0));
  const std::size_t kept = back.residual_bytes();
  CHECK(scalar(back(Array(1.0))[0]) == doctest::Approx(0.25));
  const std::size_t steps = 5; // 4 -> 2.5 -> 2.05 -> 2.0006 -> 2.00000009 -> 2 (to 1e-12)
  CHECK(back.residual_bytes() - kept == steps * 2 * 64);
  CHECK(scalar(back(Array(2.0))[0]) == doctest::Approx(0.5));

}

TEST_CASE("while_loop without max_iterations: second derivatives, reverse over reverse and forward over reverse") {
  // d2 sqrt(a)/da2 = -1 / (4 a^1.5): Newton converged to 1e-12 gets it to
  // about that accuracy. Reverse over reverse differentiates the while_vjp op
  // (the reverse of the loop's JVP, and the JVP loop run forward); forward
  // over reverse is the same while_vjp with other cotangents.
  auto newton = [](Tensor a) {
    return while_loop([&](Tensor x) { return gt(abs(x * x - a), 1e-12); }, [&](Tensor x) { return (x + a / x) * 0.5; }, a);
  };
  for (double a : {2.0, 50.0, 0.3}) {
    const double want = -0.25 / std::pow(a, 1.5);
    CHECK(scalar(grad(grad(newton))(a)) == doctest::Approx(want).epsilon(1e-8));
    CHECK(scalar(jacfwd(grad(newton))(Array(a))) == doctest::Approx(want).epsilon(1e-8));
  }
  agrees(grad(grad(newton)), std::tuple{Array(2.0)});
  CHECK(scalar(grad(grad(grad(newton)))(2.0)) == doctest::Approx(0.375 / std::pow(2.0, 2.5)).epsilon(1e-7));

  // The same loop bounded differentiates as a scan: the same Hessians, for
  // a vector carry, a scalar const and a loop that reads both nonlinearly.
  auto loop = [](std::optional<int64_t> bound) {
    return [bound](Tensor w, Tensor v) {
      auto body = [&](Tensor x) { return sin(x * w) * 0.9 + x * x * w * 0.05; };
      auto more = [](Tensor x) { return gt(sum(x * x), 0.02); };
      Tensor out = bound ? while_loop(more, body, v, {.max_iterations = *bound}) : while_loop(more, body, v);
      return sum(out * out * out) + sum(out) * w;
    };
  };
  const Array w(0.7), v = f64({0.5, -0.4, 0.3});
  const Array hb = hessian(loop(200), argnums<0>)(w, v), hu = hessian(loop(std::nullopt), argnums<0>)(w, v);
  CHECK(scalar(hu) == doctest::Approx(scalar(hb)).epsilon(1e-10));
  auto [hbw, hbv] = grad([&](Tensor w, Tensor v) { return sum(std::get<1>(grad(loop(200), argnums<0, 1>)(w, v))); }, argnums<0, 1>)(w, v);
  auto [huw, huv] = grad([&](Tensor w, Tensor v) { return sum(std::get<1>(grad(loop(std::nullopt), argnums<0, 1>)(w, v))); },
                         argnums<0, 1>)(w, v);
  CHECK(scalar(huw) == doctest::Approx(scalar(hbw)).epsilon(1e-10));
  ADJIT_CHECK_CLOSE(huv, hbv, 1e-10);
  check_grads([&](Tensor w, Tensor v) { return sum(std::get<1>(grad(loop(std::nullopt), argnums<0, 1>)(w, v))); }, std::tuple{w, v});
}

TEST_CASE("nested control flow: cond in scan, scan in cond, while in scan") {
  auto f = [](Tensor w, Tensor xs) {
    auto [c, ys] = scan(
        [&](Tensor c, Tensor x) {
          Tensor n = cond(gt(x, 0.0), [&](Tensor a) { return a * w; }, [&](Tensor a) { return sin(a) + w; }, c);
          Tensor m = while_loop([](Tensor v) { return gt(abs(v), 1.0); }, [](Tensor v) { return v * 0.5; }, n * 3.0, {.max_iterations = 60});
          return std::pair{m, n};
        },
        full({}, 0.3, DType::f64), xs);
    Tensor inner = cond(gt(c, 0.0), [&](Tensor a) { return scan([](Tensor s, Tensor y) { return std::pair{s + y * y, s}; }, a, ys).first; },
                        [](Tensor a) { return a; }, c);
    return inner + sum(ys);
  };
  Array xs = f64({0.5, -0.3, 0.8, -0.1, 0.2});
  agrees(f, std::tuple{Array(0.9), xs});
  check_grads(f, std::tuple{Array(0.9), xs}, {.modes = {"rev", "fwd"}});
  // Forward mode nests the JVP constructs: a scan over a body whose JVP has
  // a switch and a while of JVP functions (the inner while has no residuals).
  const auto [fw, fx] = jacfwd(f, argnums<0, 1>)(Array(0.9), xs);
  const auto [rw, rx] = jacrev(f, argnums<0, 1>)(Array(0.9), xs);
  ADJIT_CHECK_CLOSE(fw, rw, 1e-12);
  ADJIT_CHECK_CLOSE(fx, rx, 1e-12);
}

TEST_CASE("a 1,000-step scan stays one loop in LLVM IR") {
  auto f = [](Tensor c0, Tensor xs) {
    return scan([](Tensor c, Tensor x) { return std::pair{sin(c) * x + c, c}; }, c0, xs).first;
  };
  for (int64_t n : {10, 1000}) {
    Module m = trace(f, Type{DType::f64, {4}}, Type{DType::f64, {n, 4}});
    codegen::LoweringStats s = codegen::measureLowering(m.impl(), "f");
    INFO("steps " << n << ": " << s.instructions << " instructions");
    CHECK(s.instructions < 400);
  }
  Array xs(Type{DType::f64, {1000, 4}});
  for (int64_t i = 0; i < xs.size(); ++i) xs.set(i, 0.001 * static_cast<double>(i % 7));
  agrees(f, std::tuple{f64({0.1, 0.2, 0.3, 0.4}), xs}, 1e-9);
}

TEST_CASE("custom gradients, recompute_grad, jitted calls, tapes and variables inside branches and bodies") {
  // A custom gradient that scales its cotangent by 10: visible through the loop.
  auto scaled = custom_gradient([](Tensor x) { return std::pair{x * 1.0, [](Tensor dy) { return dy * 10.0; }}; });
  auto f = [&](Tensor x) {
    return fori_loop(0, 2, [&](Tensor, Tensor c) { return scaled(c) * 2.0; }, x);
  };
  CHECK(scalar(grad(f)(1.0)) == 400.0); // (10 * 2)^2
  auto block = [](Tensor x) { return sin(x) * x; };
  auto g = [&](Tensor x, Tensor p) {
    return cond(gt(p, 0.0), [&](Tensor a) { return recompute_grad(block)(a); }, [&](Tensor a) { return jit(block)(a) * 2.0; }, x);
  };
  CHECK(scalar(grad(g)(0.5, 1.0)) == doctest::Approx(std::cos(0.5) * 0.5 + std::sin(0.5)));
  CHECK(scalar(grad(g)(0.5, -1.0)) == doctest::Approx(2 * (std::cos(0.5) * 0.5 + std::sin(0.5))));
  auto taped = jit([](Tensor x) {
    GradientTape tape;
    tape.watch(x);
    Tensor y = scan([](Tensor c, Tensor xi) { return std::pair{c * xi, c}; }, full({}, 1.0, DType::f64), x).first;
    return *tape.gradient(y, x);
  });
  CHECK(taped(f64({2, 3, 4})).to_vector<double>() == std::vector<double>{12, 8, 6});
  Variable w("w", Array(3.0));
  auto h = grad([&](Tensor x) { return fori_loop(0, 3, [&](Tensor, Tensor c) { return c * w.read(); }, x); });
  CHECK(scalar(h(1.0)) == 27.0);
  // d/dw of x w^3 through the loop reading w: 3 x w^2.
  auto dw = grad([&](Tensor x) { return fori_loop(0, 3, [&](Tensor, Tensor c) { return c * w.read(); }, x); }, {w});
  CHECK(scalar(dw(2.0).at(0)) == 54.0);
}

TEST_CASE("a checkpointed scan keeps a carry per block and recomputes the steps in between") {
  auto run = [](Checkpoint cp, bool reverse) {
    return [cp, reverse](Tensor w, Tensor xs) {
      auto [c, ys] = scan([&](Tensor c, Tensor x) { return std::pair{tanh(c * w + x), sin(c) * x}; }, full({3}, 0.1, DType::f64), xs,
                          {.reverse = reverse, .checkpoint = cp});
      return sum(c) + sum(ys);
    };
  };
  Array xs(Type{DType::f64, {50, 3}});
  for (int64_t i = 0; i < xs.size(); ++i) xs.set(i, 0.01 * static_cast<double>(i % 11) - 0.05);
  const Array w = f64({0.9, -0.4, 0.7});
  for (bool reverse : {false, true}) {
    auto [y0, back0] = vjp(run({}, reverse), w, xs);
    for (int64_t k : {8, 10, 64}) { // 50 = 6 * 8 + 2, 5 * 10, one block
      INFO("every(" << k << "), reverse " << reverse);
      auto [y, back] = vjp(run(every(k), reverse), w, xs);
      CHECK(y.item<double>() == doctest::Approx(y0.item<double>()).epsilon(1e-13));
      std::vector<Array> g0 = back0(Array(1.0)), g = back(Array(1.0));
      for (std::size_t a = 0; a < g.size(); ++a) ADJIT_CHECK_CLOSE(g[a], g0[a], 1e-12);
      INFO("residual bytes " << back.residual_bytes() << " vs " << back0.residual_bytes() << " unchecked");
      if (k < 50) CHECK(back.residual_bytes() < back0.residual_bytes() / 2);
    }
  }
  check_grads(run(every(8), false), std::tuple{w, xs});
}

TEST_CASE("revolve: the closed-form cost is the optimum, and schedules reach it with at most s snapshots") {
  namespace rv = autodiff::revolve;
  // T(l, s) by dynamic programming over the first split.
  constexpr int64_t L = 120, S = 5;
  std::vector<std::vector<int64_t>> T(L + 1, std::vector<int64_t>(S + 1, 0));
  for (int64_t l = 2; l <= L; ++l)
    for (int64_t s = 1; s <= S; ++s) {
      if (s == 1) {
        T[l][s] = l * (l - 1) / 2;
        continue;
      }
      int64_t best = INT64_MAX;
      for (int64_t m = 1; m < l; ++m) best = std::min(best, m + T[l - m][s - 1] + T[m][s]);
      T[l][s] = best;
    }
  for (int64_t l = 0; l <= L; ++l)
    for (int64_t s = 1; s <= S; ++s)
      for (bool forwardKeeps : {false, true}) {
        INFO("steps " << l << ", snapshots " << s << ", forward keeps the first sweep's " << forwardKeeps);
        REQUIRE(rv::cost(l, s) == T[std::max<int64_t>(l, 1)][s]);
        // Run the schedule on positions: every action must see the state it expects.
        const rv::Schedule plan = rv::schedule(l, s, forwardKeeps);
        CHECK(plan.advances == rv::cost(l, s) - (plan.kept.empty() ? 0 : plan.kept.back()));
        CHECK((forwardKeeps || plan.kept.empty()));
        CHECK(static_cast<int64_t>(plan.kept.size()) < std::max<int64_t>(s, 1));
        std::vector<int64_t> slots(static_cast<std::size_t>(s), -1);
        slots[0] = 0;
        for (std::size_t j = 0; j < plan.kept.size(); ++j) slots[j + 1] = plan.kept[j];
        int64_t pos = 0, next = l - 1;
        bool ok = true;
        for (std::size_t a = 0; a < plan.kind.size(); ++a) {
          const int64_t arg = plan.arg[a];
          switch (static_cast<rv::Action>(plan.kind[a])) {
          case rv::Action::Advance: ok &= arg == pos; ++pos; break;
          case rv::Action::Store: ok &= arg > 0 && arg < s; slots[static_cast<std::size_t>(arg)] = pos; break;
          case rv::Action::Restore: ok &= arg >= 0 && arg < s && slots[static_cast<std::size_t>(arg)] >= 0; pos = slots[static_cast<std::size_t>(arg)]; break;
          case rv::Action::Reverse: ok &= arg == pos && arg == next && plan.reverseAt[static_cast<std::size_t>(arg)] == static_cast<int32_t>(a); --next; break;
          }
        }
        CHECK(ok);
        CHECK(next == -1);
      }
  // Large sizes: the closed form stays exact and the schedule reaches it.
  CHECK(rv::schedule(100000, 8).advances == rv::cost(100000, 8));
  CHECK(rv::cost(1000, 8) == 5 * 1000 - 715); // r = 5: C(12, 8) = 495 < 1000 <= C(13, 8) = 1287; C(13, 9) = 715
}

TEST_CASE("binomial checkpointing gives the gradient of the plain scan and keeps at most s carries") {
  auto run = [](Checkpoint cp, bool reverse) {
    return [cp, reverse](Tensor w, Tensor xs) {
      // Two carries (one integer), a const, a floating and an integer x, two ys.
      auto body = [&](std::tuple<Tensor, Tensor> c, std::tuple<Tensor, Tensor> x) {
        auto [h, count] = c;
        auto [xf, xi] = x;
        Tensor h2 = tanh(h * w + xf) + cast(xi, DType::f64) * 0.01;
        return std::pair{std::tuple{h2, count + 1}, std::tuple{sin(h) * xf, count}};
      };
      Array idx(Type{DType::i32, {xs.shape()[0]}});
      for (int64_t i = 0; i < idx.size(); ++i) idx.set(i, static_cast<double>(i % 3));
      auto [c, ys] = scan(body, std::tuple{full({3}, 0.1, DType::f64), full({}, 0, DType::i32)}, std::tuple{xs, constant(idx)},
                          {.reverse = reverse, .checkpoint = cp});
      return sum(std::get<0>(c)) + sum(std::get<0>(ys)) + 0.001 * sum(cast(std::get<1>(ys), DType::f64));
    };
  };
  for (auto [n, policies] : std::vector<std::pair<int64_t, std::vector<int64_t>>>{{1, {2}}, {7, {1, 3}}, {50, {2, 8, 64}}}) {
    Array xs(Type{DType::f64, {n, 3}});
    for (int64_t i = 0; i < xs.size(); ++i) xs.set(i, 0.01 * static_cast<double>(i % 11) - 0.05);
    const Array w = f64({0.9, -0.4, 0.7});
    for (bool reverse : {false, true}) {
      auto [y0, back0] = vjp(run({}, reverse), w, xs);
      for (int64_t s : policies) {
        INFO("n " << n << ", binomial(" << s << "), reverse " << reverse);
        auto [y, back] = vjp(run(binomial(s), reverse), w, xs);
        CHECK(y.item<double>() == y0.item<double>());
        std::vector<Array> g0 = back0(Array(1.0)), g = back(Array(1.0));
        for (std::size_t a = 0; a < g.size(); ++a) ADJIT_CHECK_CLOSE(g[a], g0[a], 1e-13);
        // The forward keeps s carries of 3 doubles and an i32, but not the
        // initial one nor the integer xs: both are constants here, made
        // again by the backward rather than kept.
        if (n == 50 && s <= 8) CHECK(back.residual_bytes() == static_cast<std::size_t>(s - 1) * 28);
      }
    }
  }
  Array xs(Type{DType::f64, {9, 3}});
  for (int64_t i = 0; i < xs.size(); ++i) xs.set(i, 0.1 * static_cast<double>(i % 5) - 0.2);
  check_grads(run(binomial(2), false), std::tuple{f64({0.9, -0.4, 0.7}), xs});
  check_grads(run(binomial(3), true), std::tuple{f64({0.9, -0.4, 0.7}), xs});
}

TEST_CASE("fori_loop takes a checkpoint policy; second derivatives go through binomial checkpointing") {
  auto f = [](Checkpoint cp) {
    return [cp](Tensor x) { return fori_loop(0, 20, [](Tensor i, Tensor c) { return sin(c) * 1.1 + cast(i, DType::f64) * 0.01; }, x, {.checkpoint = cp}); };
  };
  const double g0 = scalar(grad(f({}))(0.4)), h0 = scalar(grad(grad(f({})))(0.4));
  for (Checkpoint cp : {every(6), binomial(3)}) {
    INFO(cp.str());
    CHECK(scalar(jit(f(cp))(0.4)) == scalar(jit(f({}))(0.4)));
    CHECK(scalar(grad(f(cp))(0.4)) == doctest::Approx(g0).epsilon(1e-14));
    CHECK(scalar(grad(grad(f(cp)))(0.4)) == doctest::Approx(h0).epsilon(1e-12));
  }
  check_grads(f(binomial(2)), std::tuple{Array(0.4)}, {.order = 2});
}

TEST_CASE("checkpoint policies: bad parameters and loops without a known length are errors at the user's line") {
  auto scanWith = [](Checkpoint cp) {
    return [cp](Tensor x) { return scan([](Tensor c, std::tuple<>) { return std::pair{c * 2.0, std::tuple<>{}}; }, x, std::tuple<>{}, {.length = 4, .checkpoint = cp}).first; };
  };
  CHECK_THROWS_WITH_AS(jit(scanWith(binomial(0)))(1.0), doctest::Contains("scan: checkpoint binomial(0) needs a parameter of at least 1"), Error);
  CHECK_THROWS_WITH_AS(jit(scanWith(every(-1)))(1.0), doctest::Contains("every(-1)"), Error);
  auto dynamic = [](Tensor x, Tensor n) { return fori_loop(0, n, [](Tensor, Tensor c) { return c * 2.0; }, x, {.checkpoint = binomial(2)}); };
  CHECK_THROWS_WITH_AS(jit(dynamic)(1.0, int32_t{3}), doctest::Contains("fori_loop: .checkpoint needs C++ integer bounds"), Error);
  auto loop = [](Tensor x) { return while_loop([](Tensor c) { return c < 10.0; }, [](Tensor c) { return c * 2.0; }, x, {.checkpoint = every(2)}); };
  CHECK_THROWS_WITH_AS(jit(loop)(1.0), doctest::Contains("while_loop: .checkpoint needs a trip count known when tracing"), Error);
  // Schedules past what the backward's i32 action table holds are refused
  // when the gradient is traced, at the loop's line; nothing runs.
  auto long_ = [](int64_t n, int s) {
    return [n, s](Tensor x) {
      return scan([](Tensor c, std::tuple<>) { return std::pair{c * 2.0, std::tuple<>{}}; }, x, std::tuple<>{},
                  {.length = n, .checkpoint = binomial(s)}).first;
    };
  };
  const int line = __LINE__ - 4;
  auto gradient = [](auto f) { return trace([&](Tensor x) { return grad(f)(x); }, Type{DType::f64, {}}); };
  CHECK_THROWS_WITH_AS(gradient(long_(int64_t{3} << 30, 4)), doctest::Contains("binomial checkpointing of 3221225472 steps: at most 2147483647 are supported"), Error);
  CHECK_THROWS_WITH_AS(gradient(long_(1'000'000, 1)),
                       doctest::Contains("binomial checkpointing of 1000000 steps with 1 snapshots recomputes 499999500000 steps"), Error);
  try {
    gradient(long_(1'000'000, 1));
  } catch (const Error& e) {
    CHECK(e.location().line == static_cast<uint32_t>(line));
  }
  CHECK_NOTHROW(gradient(long_(1'000'000, 12))); // enough snapshots: a schedule of a few million actions
}

TEST_CASE("ops of a loop body that read only captured tensors move out of the loop") {
  auto f = [](Tensor w, Tensor xs) {
    auto [c, ys] = scan([&](Tensor c, Tensor x) {
      Tensor a = w(range(0, 3)), b = w(range(3, 6)) * 2.0; // invariant: computed once, before the loop
      return std::pair{tanh(c * a + x) + b, c};
    }, full({3}, 0.1, DType::f64), xs);
    return sum(c) + sum(ys);
  };
  Module m = trace(f, Type{DType::f64, {6}}, Type{DType::f64, {5, 3}});
  const std::string text = m.str();
  const std::string body = text.substr(text.find("func @scan.body"));
  CHECK(body.find("slice(") == std::string::npos);
  CHECK(text.substr(0, text.find("func @scan.body")).find("slice(") != std::string::npos);
  Array xs(Type{DType::f64, {5, 3}});
  for (int64_t i = 0; i < xs.size(); ++i) xs.set(i, 0.1 * static_cast<double>(i % 4));
  agrees(f, std::tuple{f64({0.5, -0.2, 0.9, 0.1, 0.3, -0.4}), xs});
  check_grads(f, std::tuple{f64({0.5, -0.2, 0.9, 0.1, 0.3, -0.4}), xs});
}

TEST_CASE("a scalar broadcast in a loop body stays there: the body reads no array of copies of it") {
  // Before: y * 0.5 and y * h had their broadcasts hoisted, and each step
  // read two [16] arrays of 0.5s and h's instead of two scalars.
  auto f = [](Tensor y0, Tensor h) {
    return sum(fori_loop(0, 4, [&](const Tensor&, const Tensor& y) { return y + y * 0.5 + sin(y) * h; }, y0));
  };
  Module m = trace(f, Type{DType::f64, {16}}, Type{DType::f64, {}});
  const std::string text = m.str();
  const std::size_t at = text.find("func @scan.body(");
  REQUIRE(at != std::string::npos);
  const std::string params = text.substr(at, text.find("->", at) - at);
  std::size_t arrays = 0;
  for (std::size_t p = params.find("f64[16]"); p != std::string::npos; p = params.find("f64[16]", p + 1)) ++arrays;
  CHECK(arrays == 1); // the carry only; h comes in as f64[]
  CHECK(params.find("f64[]") != std::string::npos);
  CHECK(text.substr(at).find("broadcast_to(") != std::string::npos);
  std::vector<double> y0(16);
  for (std::size_t i = 0; i < y0.size(); ++i) y0[i] = 0.1 * static_cast<double>(i) - 0.5;
  agrees(f, std::tuple{Array(y0), Array(0.3)});
  check_grads(f, std::tuple{Array(y0), Array(0.3)});
}

TEST_CASE("two gradients through one cond and one scan reuse the residuals the first one kept") {
  auto f = jit([](Tensor x, Tensor p) {
    GradientTape tape(/*persistent=*/true);
    tape.watch(x);
    Tensor y = cond(gt(p, 0.0), [](Tensor a) { return sin(a) * a; }, [](Tensor a) { return a * a; }, x);
    Tensor z = scan([](Tensor c, Tensor xi) { return std::pair{c * xi, c}; }, y, stack({x, x})).first;
    Tensor dy = *tape.gradient(y, x), dz = *tape.gradient(z, x);
    return std::pair{dy, dz};
  });
  auto [dy, dz] = f(0.5, 1.0);
  const double d = std::cos(0.5) * 0.5 + std::sin(0.5), y = std::sin(0.5) * 0.5; // z = y x^2
  CHECK(scalar(dy) == doctest::Approx(d));
  CHECK(scalar(dz) == doctest::Approx(d * 0.25 + y * 2 * 0.5));
  Module m = trace([](Tensor x, Tensor p) {
    GradientTape tape(true);
    tape.watch(x);
    Tensor y = cond(gt(p, 0.0), [](Tensor a) { return sin(a) * a; }, [](Tensor a) { return a * a; }, x);
    return *tape.gradient(y * 2.0, x) + *tape.gradient(y, x);
  }, Type{DType::f64, {}}, Type{DType::f64, {}});
  const std::string text = m.str();
  std::size_t switches = 0;
  for (std::size_t at = text.find("switch @"); at != std::string::npos; at = text.find("switch @", at + 1)) ++switches;
  CHECK(switches == 3); // the forward, rebound once, and one backward per gradient
  CHECK(text.find("switch_fwd.switch_fwd") == std::string::npos); // not rebound twice
  CHECK(text.find("switch_fwd.1") == std::string::npos);
}

TEST_CASE("forward mode through control flow: loops carry tangents, keep no residuals, need no bound") {
  // A while loop without max_iterations: forward mode needs no stack.
  auto newton = [](Tensor a) {
    return while_loop([&](Tensor x) { return gt(abs(x * x - a), 1e-12); }, [&](Tensor x) { return (x + a / x) * 0.5; }, a);
  };
  auto [y, t] = jvp(newton, std::tuple{Array(2.0)}, std::tuple{Array(3.0)});
  CHECK(scalar(y) == doctest::Approx(std::sqrt(2.0)).epsilon(1e-12));
  CHECK(scalar(t) == doctest::Approx(3.0 * 0.5 / std::sqrt(2.0)).epsilon(1e-9)); // 3 · d sqrt(a)/da
  CHECK(scalar(jacfwd(newton)(Array(2.0))) == doctest::Approx(0.5 / std::sqrt(2.0)).epsilon(1e-9));
  // A carry whose tangent starts at none but is reached through the body (a
  // fixed point), a captured tensor, an integer carry, and a stacked output.
  auto rnn = [](Tensor x, Tensor w) {
    auto [carry, ys] = scan(
        [&](const std::tuple<Tensor, Tensor, Tensor>& c, Tensor xt) {
          auto [h, acc, k] = c;
          Tensor hn = tanh(w * h + xt);
          return std::pair{std::tuple{hn, acc + hn * hn, k + full({}, 1, DType::i32)}, hn * 2.0};
        },
        std::tuple{zeros_like(w), zeros_like(w), full({}, 0, DType::i32)}, x);
    return sum(ys) + std::get<1>(carry);
  };
  const Array x(std::vector<double>{0.3, -0.2, 0.5, 0.1, 0.7, -0.4}, {3, 2}), w(std::vector<double>{0.8, -1.1});
  check_grads(rnn, std::tuple{x, w}, {.order = 2, .modes = {"fwd", "rev"}});
  // Every floating operand has a tangent here, so the loop computes them all.
  auto jf = jacfwd(rnn, argnums<1>)(x, w);
  ADJIT_CHECK_CLOSE(jf, jacrev(rnn, argnums<1>)(x, w), 1e-12);
  // The JVP is a scan of the body's JVP: no scan keeps per-step residuals,
  // and no reverse scan (a body VJP) is built.
  const Module m = trace([&](Tensor x, Tensor w) { return jvp(rnn, std::tuple{x, w}, std::tuple{x, w}).second; }, x.type(), w.type());
  int scans = 0;
  for (const auto& fn : m.impl().functions)
    for (const auto& op : fn->ops)
      if (op.kind == ir::OpKind::Scan) {
        ++scans;
        CHECK_FALSE(op.attrs.has("residuals"));
        CHECK_FALSE(op.attrs.boolean("reverse"));
      }
  CHECK(scans >= 1);
  // A shift register: the tangent reaches carry i only after i steps, so the
  // fixed point needs a round per carry; past a few rounds every carry
  // takes a tangent, and the values are the same.
  auto shift = [](Tensor x) {
    std::array<Tensor, 8> init;
    init[0] = x;
    for (std::size_t i = 1; i < init.size(); ++i) init[i] = zeros_like(x);
    auto [c, ys] = scan(
        [](const std::array<Tensor, 8>& c, std::tuple<>) {
          std::array<Tensor, 8> n;
          n[0] = sin(c[0]) + 0.5;
          for (std::size_t i = 1; i < c.size(); ++i) n[i] = c[i - 1] * c[i - 1];
          return std::pair{n, std::tuple<>{}};
        },
        init, std::tuple<>{}, {.length = 10});
    Tensor total = zeros_like(x);
    for (std::size_t i = 0; i < c.size(); ++i) total = total + c[i] * double(i + 1);
    return total;
  };
  ADJIT_CHECK_CLOSE(jacfwd(shift)(Array(0.3)), jacrev(shift)(Array(0.3)), 1e-12);
  check_grads(shift, Array(0.3), {.modes = {"fwd"}});
  // A switch: the taken branch's tangent; an integer result gets none.
  auto pick = [](Tensor i, Tensor x) {
    auto [v, n] = switch_case(i, std::tuple{[](Tensor x) { return std::pair{sin(x), full({}, 1, DType::i32)}; },
                                            [](Tensor x) { return std::pair{x * x * x, full({}, 2, DType::i32)}; }},
                              x);
    return v + cast(n, DType::f64);
  };
  CHECK(scalar(jvp(pick, std::tuple{Array(int32_t{0}), Array(0.5)}, std::tuple{Array(int32_t{0}), Array(2.0)}).second) ==
        doctest::Approx(2.0 * std::cos(0.5)));
  CHECK(scalar(jvp(pick, std::tuple{Array(int32_t{1}), Array(0.5)}, std::tuple{Array(int32_t{0}), Array(2.0)}).second) ==
        doctest::Approx(2.0 * 3 * 0.25));
  // Forward over reverse: the Hessian through a loop differentiated in reverse
  // (its forward rebound to keep residuals) and through a bounded while.
  auto loss = [](Tensor x) {
    return fori_loop(0, 4, [](Tensor, Tensor c) { return sin(c) * c; }, x) +
           while_loop([](Tensor c) { return lt(c, 10.0); }, [](Tensor c) { return c * 2.0 + 1.0; }, x * x + 1.0, {.max_iterations = 20});
  };
  check_grads(loss, Array(0.7), {.order = 2, .modes = {"fwd", "rev"}});
  ADJIT_CHECK_CLOSE(hessian(loss)(Array(0.7)), jacfwd([&](Tensor x) { return grad(loss)(x); })(Array(0.7)), 1e-12);
}

TEST_CASE("a constant exponent read by a loop body has no cotangent: second derivatives at negative bases are finite") {
  // The exponent is a const operand of the scan; its cotangent dy log(x) y is
  // NaN for x < 0 unless guarded, and second order multiplies it by zero.
  auto f = [](Tensor x) {
    Tensor two = full({}, 2.0, DType::f64);
    auto [c, ys] = scan([&](Tensor c, Tensor s) { return std::pair{c, pow(x * s, two)}; }, full({}, 0.0, DType::f64),
                        full({2}, 1.0, DType::f64));
    return sum(ys); // 2 x^2
  };
  for (double x0 : {-0.5, 0.5, 0.0}) {
    INFO("x = " << x0);
    const Array x(x0);
    CHECK(grad(f)(x).item<double>() == doctest::Approx(4 * x0));
    CHECK(hessian(f)(x).item<double>() == doctest::Approx(4));
    CHECK(grad(grad(f))(x).item<double>() == doctest::Approx(4));
    CHECK(hvp(f)(x, Array(1.0)).item<double>() == doctest::Approx(4));
  }
  // The exponent's own gradient: ln(x) x^y for x > 0, 0 for x <= 0 (TensorFlow's convention).
  auto g = grad([](Tensor x, Tensor y) { return pow(x, y); }, argnums<1>);
  CHECK(g(Array(2.0), Array(3.0)).item<double>() == doctest::Approx(std::log(2.0) * 8));
  CHECK(g(Array(-2.0), Array(3.0)).item<double>() == 0);
  CHECK(g(Array(0.0), Array(3.0)).item<double>() == 0);
}

TEST_CASE("a gradient through a while_loop that hits max_iterations raises the loop's error, however it is run") {
  // grad never runs the original loop (it is unused): the bounded reverse
  // runs max_iterations steps as a scan and must ask whether the loop went on.
  const auto line = static_cast<uint32_t>(__LINE__) + 2;
  auto f = [](Tensor x, Tensor c) {
    return while_loop([](Tensor t) { return t < 1000.0; }, [&](Tensor t) { return t * c; }, x, {.max_iterations = 12});
  };
  const std::string message = "while_loop: the loop did not end within max_iterations = 12 iterations";
  auto g = grad(f, argnums<0, 1>);
  auto atLine = [&](auto run) {
    try {
      run();
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find(message) != std::string::npos);
      return e.location().line;
    }
    return uint32_t{0};
  };
  // 1.5^17 < 1000 <= 1.5^18: 18 trips needed.
  CHECK(atLine([&] { g(Array(1.0), Array(1.5)); }) == line);
  CHECK(atLine([&] { jit(g, {.opt_level = 0})(Array(1.0), Array(1.5)); }) == line);
  CHECK(atLine([&] { value_and_grad(f)(Array(1.0), Array(1.5)); }) == line);
  CHECK(atLine([&] { trace(g, Type{DType::f64, {}}, Type{DType::f64, {}}).interpret("f", {Array(1.0), Array(1.5)}); }) == line);
  CHECK(atLine([&] {
          auto [y, back] = vjp(f, Array(1.0), Array(1.5));
          back(Array(1.0));
        }) == line);
  // Within the bound, including exactly 12 trips (1.8^11 < 1000 <= 1.8^12), no error and the right gradient.
  for (const double c : {2.0, 1.8}) {
    const double trips = c == 2.0 ? 10 : 12;
    auto [dx, dc] = g(Array(1.0), Array(c));
    CHECK(dx.item<double>() == doctest::Approx(std::pow(c, trips)));
    CHECK(dc.item<double>() == doctest::Approx(trips * std::pow(c, trips - 1)));
  }
}

TEST_CASE("scan carries take turns in two buffers: odd and even step counts end in the result, at -O2 and -O3") {
  // The next carry reads the carry one point back, after the body has
  // written its stacked output: carry and next carry must be two buffers.
  // 512 doubles: large enough to alternate rather than be copied back.
  auto step = [](Tensor c, Tensor x) {
    Tensor back = pad(slice(c, {0}, {511}), {1}, {0});
    return std::pair{back * x + c, c * x};
  };
  auto f = [&](Tensor c0, Tensor xs) {
    auto [c, ys] = scan(step, c0, xs);
    return std::pair{c, ys};
  };
  // Its gradient runs a reverse scan over residuals (wrong at -O3 when one
  // call site swapped the buffers: the body's alias scopes did not hold).
  auto loss = [&](Tensor c0, Tensor xs) {
    auto [c, ys] = scan(step, c0, xs);
    return sum(c * c) + sum(ys);
  };
  std::vector<double> cv(512);
  for (std::size_t i = 0; i < cv.size(); ++i) cv[i] = 0.5 + 0.25 * std::sin(double(i));
  const Array c0(cv, Shape{512});
  for (int64_t steps : {0, 1, 2, 5}) {
    INFO(steps << " steps");
    std::vector<double> xv(static_cast<std::size_t>(steps * 512));
    for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = 0.25 + 0.125 * double(i % 5);
    const Array xs(xv, Shape{steps, 512});
    const Module m = trace(f, c0.type(), xs.type()), gm = trace(grad(loss), c0.type(), xs.type());
    const std::vector<Array> want = m.interpret("f", {c0, xs});
    const Array dwant = gm.interpret("f", {c0, xs})[0];
    for (int level : {2, 3}) {
      INFO("-O" << level);
      auto [c, ys] = jit(f, {.opt_level = level})(c0, xs);
      ADJIT_CHECK_CLOSE(c, want[0], 1e-12);
      ADJIT_CHECK_CLOSE(ys, want[1], 1e-12);
      ADJIT_CHECK_CLOSE(jit(grad(loss), {.opt_level = level})(c0, xs), dwant, 1e-12);
    }
  }
}
