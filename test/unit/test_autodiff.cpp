// test/unit/test_autodiff.cpp — grad, value_and_grad, vjp, gradients,
// GradientTape and stop_gradient: values, composition, policies and errors.
#include "Check.h"

#include "transforms/Passes.h"

#include "autodiff/Rules.h"
#include "ir/OpInfo.h"

using namespace adjit;
using namespace adjit::test;

namespace {
/// "test_autodiff.cpp:LINE:COLUMN" for a call on LINE. The compilers put
/// std::source_location's column at different places of a call: at a named
/// function's name (clang) or its '(' (g++); both at the '(' of an object's
/// call operator.
std::string callSite(int line, int clangColumn, int gccColumn) {
#if defined(__clang__)
  const int column = clangColumn;
#else
  const int column = gccColumn;
#endif
  return "test_autodiff.cpp:" + std::to_string(line) + ":" + std::to_string(column);
}
} // namespace

static double scalar(const Array& a) { return a.item<double>(); }

TEST_CASE("grad of simple functions") {
  auto sq = [](Tensor x) { return x * x; };
  CHECK(scalar(grad(sq)(3.0)) == 6.0);
  CHECK(scalar(grad([](Tensor x) { return sin(x) * exp(x); })(0.5)) ==
        doctest::Approx(std::cos(0.5) * std::exp(0.5) + std::sin(0.5) * std::exp(0.5)));
  auto [v, g] = value_and_grad([](Tensor x) { return sum(x * x * x); })(f64({1, 2}));
  CHECK(scalar(v) == 9.0);
  CHECK(g.to_vector<double>() == std::vector<double>{3, 12});
}

TEST_CASE("a value used many times aggregates its cotangents") {
  auto f = [](Tensor x) {
    Tensor y = x * x;          // 2x
    return y + y * x + sin(x) + x; // 2x + 3x^2 + cos x + 1
  };
  const double x = 0.7;
  CHECK(scalar(grad(f)(x)) == doctest::Approx(2 * x + 3 * x * x + std::cos(x) + 1));
}

TEST_CASE("several argnums give a tuple") {
  auto f = [](Tensor a, Tensor b, Tensor c) { return sum(a * b + c); };
  auto [da, dc] = grad(f, argnums<0, 2>)(f64({1, 2}), f64({3, 4}), f64({5, 6}));
  CHECK(da.to_vector<double>() == std::vector<double>{3, 4});
  CHECK(dc.to_vector<double>() == std::vector<double>{1, 1});
  // The same tensor passed twice gets a gradient per argument.
  auto both = grad([](Tensor a, Tensor b) { return a * b; }, argnums<0, 1>);
  auto [ga, gb] = jit([both](Tensor x) { return both(x, x); })(2.0);
  CHECK(scalar(ga) == 2.0);
  CHECK(scalar(gb) == 2.0);
}

TEST_CASE("second derivatives") {
  auto cube = [](Tensor x) { return x * x * x; };
  CHECK(scalar(grad(grad(cube))(2.0)) == doctest::Approx(12.0));            // 6x
  CHECK(scalar(grad(grad(grad(cube)))(2.0)) == doctest::Approx(6.0));       // 6
  auto f = [](Tensor x) { return sin(x) * x; };                              // f'' = 2cos x - x sin x
  CHECK(scalar(grad(grad(f))(0.3)) == doctest::Approx(2 * std::cos(0.3) - 0.3 * std::sin(0.3)));
  auto g = [](Tensor x) { return exp(tanh(x)); };                            // g'' = e^t (s^4 - 2 t s^2), s = sech^2
  double t = std::tanh(0.4), s2 = 1 - t * t;
  CHECK(scalar(grad(grad(g))(0.4)) == doctest::Approx(std::exp(t) * (s2 * s2 - 2 * t * s2)));
  auto h = [](Tensor x) { return logsumexp(x * x); };
  auto hess_diag = [h](Tensor x) { return sum(grad(h)(x)); };
  CHECK(grad(hess_diag)(f64({0.1, 0.2})).to_vector<double>().size() == 2);
}

TEST_CASE("grad and jit compose in any order with the same numbers") {
  auto f = [](Tensor x) { return sum(tanh(x) * x); };
  Array x = f64({0.1, -0.4, 2.0});
  std::vector<double> want = grad(f)(x).to_vector<double>();
  CHECK(jit(grad(f))(x).to_vector<double>() == want);
  auto jf = jit(f, {.name = "inner"});
  CHECK(grad(jf)(x).to_vector<double>() == want);
  CHECK(jit(grad(jf))(x).to_vector<double>() == want);
  auto second = grad([jf](Tensor y) { return sum(grad(jf)(y)); });
  std::vector<double> h = second(x).to_vector<double>();
  for (std::size_t i = 0; i < h.size(); ++i) {
    double xi = x.at(static_cast<int64_t>(i)), ti = std::tanh(xi), s2 = 1 - ti * ti;
    CHECK(h[i] == doctest::Approx(2 * s2 - 2 * xi * ti * s2)); // d/dx (tanh + x sech^2)
  }
}

TEST_CASE("stop_gradient: no gradient flows through it") {
  auto f = [](Tensor x) { return x * stop_gradient(x); };
  CHECK(scalar(grad(f)(3.0)) == 3.0);
  auto g = [](Tensor x) { return stop_gradient(x * x); };
  CHECK(scalar(grad(g)(3.0)) == 0.0); // unconnected: zeros from grad
}

TEST_CASE("gradients: sums of ys, grad_ys, stop_gradients, unconnected") {
  auto f = jit([](Tensor x, Tensor z) {
    Tensor a = x * x;
    Tensor b = a * 3.0;
    auto g1 = gradients({a, b}, {x});                        // d(a + b)/dx = 8x
    auto g2 = gradients({b}, {x}, {ones_like(b) * 2.0});     // 2 * 6x
    auto g3 = gradients({b}, {x}, {}, {a});                  // a is a constant: none
    auto g4 = gradients({b}, {x, z});
    auto g5 = gradients({b}, {x, z}, {}, {}, Unconnected::zero);
    CHECK(g1[0].has_value());
    CHECK(!g3[0].has_value());
    CHECK(!g4[1].has_value());
    CHECK(g5[1].has_value());
    return std::make_tuple(*g1[0], *g2[0], *g5[1]);
  });
  auto [d1, d2, dz] = f(2.0, 5.0);
  CHECK(scalar(d1) == 16.0);
  CHECK(scalar(d2) == 24.0);
  CHECK(scalar(dz) == 0.0);
}

TEST_CASE("GradientTape: watched sources, persistence, non-scalar targets") {
  auto f = jit([](Tensor x, Tensor y) {
    GradientTape tape(/*persistent=*/true);
    tape.watch(x);
    Tensor z = x * x * y;
    Tensor dzdx = *tape.gradient(z, x);                    // non-scalar target: ones
    CHECK(!tape.gradient(z, y).has_value());               // y was not watched
    Tensor v = x * ones_like(y) * y;                       // non-scalar target: ones
    auto gs = tape.gradient(v, std::vector<Tensor>{x, y}, std::nullopt, Unconnected::zero);
    return std::make_tuple(dzdx, *gs[0], *gs[1]);
  });
  auto [a, b, c] = f(3.0, f64({1, 2}));
  CHECK(scalar(a) == 18.0);                                // d sum(x^2 y)/dx = 2x sum(y)
  CHECK(scalar(b) == 3.0);                                 // d sum(x*y)/dx = sum(y)
  CHECK(c.to_vector<double>() == std::vector<double>{0, 0}); // unwatched, zero policy
}

TEST_CASE("a non-persistent tape can be used once") {
  auto f = jit([](Tensor x) {
    GradientTape tape;
    tape.watch(x);
    Tensor y = x * x;
    Tensor g = *tape.gradient(y, x);
    CHECK_THROWS_WITH_AS(tape.gradient(y, x), doctest::Contains("a non-persistent GradientTape can only be used to compute one set of gradients"), Error);
    return g;
  });
  CHECK(scalar(f(4.0)) == 8.0);
}

TEST_CASE("tapes nest for second derivatives") {
  auto f = jit([](Tensor x) {
    GradientTape outer;
    outer.watch(x);
    GradientTape inner;
    inner.watch(x);
    Tensor y = x * x * x;
    Tensor dy = *inner.gradient(y, x);
    return *outer.gradient(dy, x);
  });
  CHECK(scalar(f(2.0)) == 12.0);
}

TEST_CASE("vjp inside a trace") {
  auto f = jit([](Tensor x, Tensor w) {
    auto [y, back] = vjp([](Tensor a, Tensor b) { return sum(a * b); }, x, w);
    std::vector<Tensor> g = back(y * 0 + 2.0);
    return std::make_tuple(y, g[0], g[1]);
  });
  auto [y, gx, gw] = f(f64({1, 2}), f64({3, 4}));
  CHECK(scalar(y) == 11.0);
  CHECK(gx.to_vector<double>() == std::vector<double>{6, 8});
  CHECK(gw.to_vector<double>() == std::vector<double>{2, 4});
}

TEST_CASE("grad errors") {
  auto e1 = [] { grad([](Tensor x) { return x * 2; })(f64({1, 2})); };
  CHECK_THROWS_WITH_AS(e1(), doctest::Contains((callSite(__LINE__ - 1, 18, 22) + ": error: grad: the function must return a floating-point scalar, got f64[2]").c_str()), Error);
  auto e2 = [] { grad([](Tensor x, Tensor i) { return x * cast(i, DType::f64); }, argnums<1>)(1.0, int32_t{2}); };
  CHECK_THROWS_WITH_AS(e2(), doctest::Contains((callSite(__LINE__ - 1, 18, 22) + ": error: grad: argument 1 has dtype i32; only floating-point arguments can be differentiated").c_str()), Error);
}

TEST_CASE("an op without a VJP rule on a differentiable path is an error at its source line") {
  const autodiff::Rules saved = autodiff::rules(ir::OpKind::Sin);
  autodiff::Rules without = saved;
  without.vjp = nullptr;
  autodiff::define(ir::OpKind::Sin, without);
  int line = 0;
  try {
    grad([&](Tensor x) { line = __LINE__; return sin(x) * 2.0; })(1.0);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.message()).find("No gradient defined for operation '%") == 0);
    CHECK(std::string(e.message()).find("(op type: sin)") != std::string::npos);
    CHECK(e.location().line == static_cast<uint32_t>(line));
  }
  autodiff::define(ir::OpKind::Sin, saved);
  // Off the differentiable path, a missing rule is fine.
  autodiff::define(ir::OpKind::Sin, without);
  CHECK(scalar(grad([](Tensor x) { return x * sum(sin(stop_gradient(x))); })(0.0)) == 0.0);
  autodiff::define(ir::OpKind::Sin, saved);
}

TEST_CASE("vjp on Arrays: a compiled forward keeps residuals, the backward reads them") {
  auto f = [](Tensor x, Tensor w) { return tanh(x * w); };
  Array x = f64({0.5, -1, 2}), w = f64({2, 3, 0.25});
  auto [y, back] = vjp(f, x, w);
  CHECK(y.to_vector<double>()[0] == doctest::Approx(std::tanh(1.0)));
  std::vector<Array> g = back(f64({1, 1, 1}));
  REQUIRE(g.size() == 2);
  for (int i = 0; i < 3; ++i) {
    double xi = x.at(i), wi = w.at(i), s = 1 - std::tanh(xi * wi) * std::tanh(xi * wi);
    CHECK(g[0].at(i) == doctest::Approx(s * wi));
    CHECK(g[1].at(i) == doctest::Approx(s * xi));
  }
  CHECK(back.residual_bytes() > 0);
  // The backward can be called again with another cotangent.
  CHECK(back(f64({2, 0, 0}))[0].at(0) == doctest::Approx(2 * (1 - std::tanh(1.0) * std::tanh(1.0)) * 2));
  auto wrong = [&] { back(f64({1, 1})); };
  CHECK_THROWS_WITH_AS(wrong(), doctest::Contains((callSite(__LINE__ - 1, 26, 26) + ": error: vjp: the cotangent must have the output's type f64[3], got f64[2]").c_str()), Error);
}

TEST_CASE("a function named like a generated one is not taken for it") {
  // g(x) = x, and the module's own @g.grad returns x: grad(g) used to reuse
  // it (g_grad(5) gave 5). The generated gradient gets a fresh name.
  Module m = Module::parse(R"(func @g(%x: f64[]) -> (f64[]) {
  return %x
}

func @g.grad(%x: f64[]) -> (f64[]) {
  return %x
}
)");
  transforms::runPipeline(m.impl(), {"grad(g)"});
  CHECK(m.impl().derived.at("grad @g") == "g.grad.1");
  CHECK(m.interpret("g.grad.1", {Array(5.0)})[0].item<double>() == 1.0);
  CHECK(m.interpret("g.grad", {Array(5.0)})[0].item<double>() == 5.0); // the user's, untouched
}

// ---- forward mode ---------------------------------------------------------------

TEST_CASE("jvp: values and tangents, in a trace and compiled, any output structure") {
  auto f = [](Tensor x, Tensor y) { return std::make_pair(sin(x) * y, sum(x * x)); };
  const Array x = f64({0.3, 1.2}), y = f64({2, -1}), dx = f64({1, 0.5}), dy = f64({0, 3});
  auto [out, tan] = jvp(f, std::tuple{x, y}, std::tuple{dx, dy});
  // d(sin x * y) = cos x dx y + sin x dy; d sum(x^2) = 2 x . dx
  CHECK(out.first.to_vector<double>()[0] == doctest::Approx(std::sin(0.3) * 2));
  CHECK(tan.first.to_vector<double>()[0] == doctest::Approx(std::cos(0.3) * 1 * 2));
  CHECK(tan.first.to_vector<double>()[1] == doctest::Approx(std::cos(1.2) * 0.5 * -1 + std::sin(1.2) * 3));
  CHECK(scalar(tan.second) == doctest::Approx(2 * 0.3 * 1 + 2 * 1.2 * 0.5));
  // Inside a trace, and composed with grad: the JVP of a gradient (forward over reverse).
  auto g = jit([f](Tensor x, Tensor y, Tensor dx, Tensor dy) { return jvp(f, std::tuple{x, y}, std::tuple{dx, dy}).second.second; });
  CHECK(scalar(g(x, y, dx, dy)) == doctest::Approx(scalar(tan.second)));
  // An output no tangent reaches gets zeros; so does an integer output.
  auto [o2, t2] = jvp([](Tensor x, Tensor k) { return std::make_tuple(x * 2, k + 1, stop_gradient(x)); },
                      std::tuple{x, i32({1, 2})}, std::tuple{dx, i32({0, 0})});
  CHECK(std::get<0>(t2).to_vector<double>() == std::vector<double>{2, 1});
  CHECK(std::get<1>(t2).to_vector<int32_t>() == std::vector<int32_t>{0, 0});
  CHECK(std::get<2>(t2).to_vector<double>() == std::vector<double>{0, 0});
  // A tangent of another type than its primal: an error at the call.
  CHECK_THROWS_WITH_AS(jvp(f, std::tuple{x, y}, std::tuple{dx, f32({0, 3})}),
                       doctest::Contains("jvp: tangent 1 is f32[2], but its primal is f64[2]"), Error);
}

TEST_CASE("jacfwd and jacrev: JAX's shapes, equal to each other and to the analytic Jacobian") {
  const Array W = f64({0.1, 0.2, -0.3, 0.4, 0.5, 0.6, -0.7, 0.8, 0.9, 1.0, 1.1, -1.2}, {4, 3});
  auto f = [W](Tensor x) { return tanh(matmul(constant(W), reshape(x, {3, 1}))); }; // [4,1]
  const Array x = f64({0.3, -0.2, 0.5});
  const Array jf = jacfwd(f)(x), jr = jacrev(f)(x);
  CHECK(jf.shape() == Shape{4, 1, 3});
  CHECK(jr.shape() == Shape{4, 1, 3});
  const std::vector<double> w = W.to_vector<double>(), xv = x.to_vector<double>();
  for (int i = 0; i < 4; ++i) {
    double a = 0;
    for (int j = 0; j < 3; ++j) a += w[i * 3 + j] * xv[j];
    const double s = 1 - std::tanh(a) * std::tanh(a);
    for (int j = 0; j < 3; ++j) {
      CHECK(jf.to_vector<double>()[i * 3 + j] == doctest::Approx(s * w[i * 3 + j]));
      CHECK(jr.to_vector<double>()[i * 3 + j] == doctest::Approx(s * w[i * 3 + j]));
    }
  }
  // Several argnums: a tuple; a scalar output gives the argument's shape.
  auto g = [](Tensor a, Tensor b) { return sum(a * b * b); };
  auto [da, db] = jacfwd(g, argnums<0, 1>)(f64({1, 2}), f64({3, 4}));
  CHECK(da.to_vector<double>() == std::vector<double>{9, 16});
  CHECK(db.to_vector<double>() == std::vector<double>{6, 16});
  // Through control flow: a scan and a cond in the function.
  auto h = [](Tensor x) {
    auto [c, ys] = scan([](Tensor c, Tensor xi) {
      Tensor n = cond(gt(xi, 0.0), [](Tensor a) { return a * 2.0; }, [](Tensor a) { return sin(a); }, c * xi + xi);
      return std::pair{n, n * n};
    }, full({}, 0.5, DType::f64), x);
    return ys;
  };
  const Array hx = f64({0.4, -0.3, 0.7});
  ADJIT_CHECK_CLOSE(jacfwd(h)(hx), jacrev(h)(hx), 1e-12);
  // A column of the forward Jacobian against central differences.
  const double eps = 1e-6;
  const Array hp = jit(h)(f64({0.4 + eps, -0.3, 0.7})), hm = jit(h)(f64({0.4 - eps, -0.3, 0.7}));
  for (int i = 0; i < 3; ++i)
    CHECK(jacfwd(h)(hx).to_vector<double>()[i * 3] == doctest::Approx((hp.to_vector<double>()[i] - hm.to_vector<double>()[i]) / (2 * eps)).epsilon(1e-6));
}

TEST_CASE("jacfwd and jacrev: an integer argument or output is an error at the call") {
  auto toInt = [](Tensor x) { return cast(x, DType::i32); };
  CHECK_THROWS_WITH_AS(jacfwd(toInt)(f64({1, 2})), doctest::Contains("jacfwd: the function must return a floating Tensor, got i32[2]"),
                       Error);
  CHECK_THROWS_WITH_AS(jacrev(toInt)(f64({1, 2})), doctest::Contains("jacrev: the function must return a floating Tensor, got i32[2]"),
                       Error);
  CHECK_THROWS_WITH_AS(jacfwd([](Tensor k) { return cast(k, DType::f64); })(i32({1, 2})),
                       doctest::Contains("jacfwd: the differentiated argument must be floating, got i32[2]"), Error);
  // An empty argument: a Jacobian with no columns.
  CHECK(jacfwd([](Tensor x) { return sum(x) + 1.0; })(Array(Type{DType::f64, {0}})).shape() == Shape{0});
}

TEST_CASE("jacfwd and jacrev: structures in and out, as JAX's out-tree of in-trees") {
  // f((a, b), c) = (a * b, [sum(a) * c, c * c]).
  auto f = [](std::tuple<Tensor, Tensor> ab, Tensor c) {
    auto [a, b] = ab;
    return std::make_pair(a * b, std::vector<Tensor>{sum(a) * c, c * c});
  };
  const Array a = f64({1, 2}), b = f64({3, -1}), c = f64({0.5, 4, -2});
  auto check = [&](const auto& J) {
    // d(a * b)/da = diag(b), d(a * b)/db = diag(a): shapes [2, 2].
    const auto& [dab_da, dab_db] = J.first;
    CHECK(dab_da.shape() == Shape{2, 2});
    CHECK(dab_da.template to_vector<double>() == std::vector<double>{3, 0, 0, -1});
    CHECK(dab_db.template to_vector<double>() == std::vector<double>{1, 0, 0, 2});
    REQUIRE(J.second.size() == 2);
    // d(sum(a) c)/da = c ⊗ 1: [3, 2]; d(c * c)/da = 0.
    const auto& [ds_da, ds_db] = J.second[0];
    CHECK(ds_da.shape() == Shape{3, 2});
    CHECK(ds_da.template to_vector<double>() == std::vector<double>{0.5, 0.5, 4, 4, -2, -2});
    CHECK(ds_db.template to_vector<double>() == std::vector<double>(6, 0.0));
    const auto& [dcc_da, dcc_db] = J.second[1];
    CHECK(dcc_da.template to_vector<double>() == std::vector<double>(6, 0.0));
  };
  check(jacfwd(f)(std::make_tuple(a, b), c));
  check(jacrev(f)(std::make_tuple(a, b), c));
  // Several argnums: per output leaf, a tuple over the argnums.
  auto both = jacrev(f, argnums<0, 1>)(std::make_tuple(a, b), c);
  const auto& [ds_dab, ds_dc] = both.second[0];
  CHECK(std::get<0>(ds_dab).to_vector<double>() == std::vector<double>{0.5, 0.5, 4, 4, -2, -2});
  CHECK(ds_dc.shape() == Shape{3, 3});
  CHECK(ds_dc.to_vector<double>() == std::vector<double>{3, 0, 0, 0, 3, 0, 0, 0, 3});
  ADJIT_CHECK_CLOSE(std::get<1>(jacfwd(f, argnums<0, 1>)(std::make_tuple(a, b), c).second[1]),
                    f64({1, 0, 0, 0, 8, 0, 0, 0, -4}, {3, 3}), 0);
}

TEST_CASE("hessian with several argnums: JAX's tuple of tuples, blocks of one symmetric matrix") {
  auto f = [](Tensor x, Tensor y) { return sum(sin(x)) * sum(y) + sum(x * x) * sum(y * y * y); };
  const Array x = f64({0.3, -0.8}), y = f64({1.5, 0.2, -0.4});
  auto [row0, row1] = hessian(f, argnums<0, 1>)(x, y);
  auto [hxx, hxy] = row0;
  auto [hyx, hyy] = row1;
  CHECK(hxx.shape() == Shape{2, 2});
  CHECK(hxy.shape() == Shape{2, 3});
  CHECK(hyx.shape() == Shape{3, 2});
  CHECK(hyy.shape() == Shape{3, 3});
  ADJIT_CHECK_CLOSE(hxx, hessian(f, argnums<0>)(x, y), 1e-14);
  ADJIT_CHECK_CLOSE(hyy, hessian(f, argnums<1>)(x, y), 1e-14);
  // d^2 f / dx_i dy_j = cos(x_i) + 2 x_i * 3 y_j^2; hyx is its transpose.
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      const double want = std::cos(xv[i]) + 2 * xv[i] * 3 * yv[j] * yv[j];
      CHECK(hxy.to_vector<double>()[i * 3 + j] == doctest::Approx(want).epsilon(1e-13));
      CHECK(hyx.to_vector<double>()[j * 2 + i] == doctest::Approx(want).epsilon(1e-13));
    }
}

TEST_CASE("jacfwd and jacrev: a basis past what one loop counts is an error at the call, found when tracing") {
  // 3e9 input elements: never allocated, the error comes from the trace.
  const Type huge{DType::f64, {3'000'000'000}};
  CHECK_THROWS_WITH_AS(trace([](Tensor x) { return jacfwd([](Tensor v) { return sum(v); })(x); }, huge),
                       doctest::Contains("jacfwd: 3000000000 basis vectors are more than one loop can count"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor x) { return jacrev([](Tensor v) { return v * 2.0; })(x); }, huge),
                       doctest::Contains("jacrev: 3000000000 basis vectors are more than one loop can count"), Error);
}

namespace {

/// The 2-D Rosenbrock terms summed along a vector: slices, squares, a sum.
Tensor rosenbrock(const Tensor& x) {
  const int64_t n = x.shape()[0];
  const Tensor a = slice(x, {0}, {n - 1}), b = slice(x, {1}, {n});
  return sum(100.0 * (b - a * a) * (b - a * a) + (1.0 - a) * (1.0 - a));
}

/// Ops of every function of `m`, and whether any of them is a loop (scan or while).
std::pair<std::size_t, bool> opsAndLoops(const Module& m) {
  std::size_t ops = 0;
  bool loops = false;
  for (const auto& f : m.impl().functions) {
    ops += f->ops.size();
    for (const ir::Op& op : f->ops) loops |= op.kind == ir::OpKind::Scan || op.kind == ir::OpKind::While;
  }
  return {ops, loops};
}

Array ramp(int64_t n, double scale, double shift) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(scale * std::sin(0.7 * double(i) + shift));
  return Array(v);
}

} // namespace

TEST_CASE("jacfwd, jacrev and hessian are one JVP or VJP batched over the basis: no loop, and as many ops for n = 10 as for n = 100") {
  auto tanhAx = [](Tensor a, Tensor x) { return tanh(matmul(a, x)); };
  std::vector<std::size_t> fwd, rev, hes;
  for (int64_t n : {10, 100}) {
    const Type a{DType::f64, {7, n}}, x{DType::f64, {n}};
    const auto [f, fl] = opsAndLoops(trace([&](Tensor a, Tensor x) { return jacfwd(tanhAx, argnums<1>)(a, x); }, a, x));
    const auto [r, rl] = opsAndLoops(trace([&](Tensor a, Tensor x) { return jacrev(tanhAx, argnums<1>)(a, x); }, a, x));
    const auto [h, hl] = opsAndLoops(trace([](Tensor x) { return hessian(rosenbrock)(x); }, x));
    CHECK_FALSE(fl);
    CHECK_FALSE(rl);
    CHECK_FALSE(hl);
    fwd.push_back(f);
    rev.push_back(r);
    hes.push_back(h);
  }
  CHECK(fwd[0] == fwd[1]);
  CHECK(rev[0] == rev[1]);
  CHECK(hes[0] == hes[1]);
  // The scan path, forced, is a loop.
  WithJacobianPolicy scan({.path = detail::JacobianPath::scan});
  CHECK(opsAndLoops(trace([](Tensor x) { return hessian(rosenbrock)(x); }, Type{DType::f64, {10}})).second);
}

TEST_CASE("jacfwd, jacrev and hessian: the batched Jacobians equal the scan's") {
  const Array a(ramp(6 * 9, 0.4, 0.1).to_vector<double>(), {6, 9}), x = ramp(9, 1.3, 0.5);
  auto tanhAx = [](Tensor a, Tensor x) { return tanh(matmul(a, x)); };
  // A matrix input and output: the basis reshaped to the input's shape, the rows to the output's.
  auto mat = [](Tensor m) { return exp(0.3 * m) * sum(m * m, {1}, true); };
  const Array m(ramp(12, 0.8, 0.2).to_vector<double>(), {3, 4});
  auto all = [&] {
    return std::vector<Array>{jacfwd(tanhAx, argnums<1>)(a, x), jacrev(tanhAx, argnums<1>)(a, x),
                              jacfwd(tanhAx, argnums<0>)(a, x), jacrev(tanhAx, argnums<0>)(a, x),
                              hessian(rosenbrock)(x),           jacrev(grad(rosenbrock))(x),
                              jacfwd(mat)(m),                   jacrev(mat)(m)};
  };
  std::vector<Array> batched, scanned;
  {
    WithJacobianPolicy p({.path = detail::JacobianPath::batched});
    batched = all();
  }
  {
    WithJacobianPolicy p({.path = detail::JacobianPath::scan});
    scanned = all();
  }
  REQUIRE(batched.size() == scanned.size());
  for (std::size_t i = 0; i < batched.size(); ++i) {
    INFO("Jacobian " << i);
    CHECK(batched[i].shape() == scanned[i].shape());
    ADJIT_CHECK_CLOSE(batched[i], scanned[i], 1e-12);
  }
  CHECK(batched[6].shape() == Shape{3, 4, 3, 4});
  // Rosenbrock's Hessian is tridiagonal: the batched tangents of slices and pads keep the zeros exact.
  const std::vector<double> h = batched[4].to_vector<double>();
  for (int i = 0; i < 9; ++i)
    for (int j = 0; j < 9; ++j)
      if (std::abs(i - j) > 1) CHECK(h[static_cast<std::size_t>(i * 9 + j)] == 0.0);
}

TEST_CASE("batched Jacobians nest and batch: jacfwd of jacrev, and vmap of hessian, against loops") {
  const Array x = ramp(6, 0.9, 0.4);
  // jacfwd of jacrev: a vmap inside the batched body of another.
  ADJIT_CHECK_CLOSE(jacfwd(jacrev(rosenbrock))(x), hessian(rosenbrock)(x), 1e-12);
  CHECK_FALSE(opsAndLoops(trace([](Tensor x) { return jacfwd(jacrev(rosenbrock))(x); }, Type{DType::f64, {6}})).second);
  // vmap of hessian: three Hessians at once, each equal to its own.
  std::vector<double> rows;
  for (int b = 0; b < 3; ++b)
    for (double v : ramp(6, 0.9, 0.4 + b).to_vector<double>()) rows.push_back(v);
  const Array xs(rows, {3, 6});
  const Array hs = vmap([](Tensor x) { return hessian(rosenbrock)(x); })(xs);
  REQUIRE(hs.shape() == Shape{3, 6, 6});
  const std::vector<double> all = hs.to_vector<double>();
  for (int b = 0; b < 3; ++b) {
    INFO("example " << b);
    const std::vector<double> one = hessian(rosenbrock)(ramp(6, 0.9, 0.4 + b)).to_vector<double>();
    for (std::size_t i = 0; i < one.size(); ++i) CHECK(all[static_cast<std::size_t>(b) * 36 + i] == doctest::Approx(one[i]).epsilon(1e-12));
  }
}

TEST_CASE("jacfwd and jacrev keep the scan where the batched tangents pass the byte budget") {
  auto f = [](Tensor x) { return sin(x) * sum(x); };
  const Type x{DType::f64, {50}};
  // n = 50 basis vectors of f64[50]: 20,000 bytes of tangents (and of Jacobian).
  {
    WithJacobianPolicy p({.path = detail::JacobianPath::automatic, .budget_bytes = 20'000});
    CHECK_FALSE(opsAndLoops(trace([&](Tensor x) { return jacfwd(f)(x); }, x)).second);
    CHECK_FALSE(opsAndLoops(trace([&](Tensor x) { return jacrev(f)(x); }, x)).second);
  }
  {
    WithJacobianPolicy p({.path = detail::JacobianPath::automatic, .budget_bytes = 19'999});
    CHECK(opsAndLoops(trace([&](Tensor x) { return jacfwd(f)(x); }, x)).second);
    CHECK(opsAndLoops(trace([&](Tensor x) { return jacrev(f)(x); }, x)).second);
    const Array xs = ramp(50, 1.0, 0.3);
    const Array looped = jacfwd(f)(xs);
    WithJacobianPolicy q({.path = detail::JacobianPath::batched});
    ADJIT_CHECK_CLOSE(looped, jacfwd(f)(xs), 1e-13);
  }
  // The default budget is 1 GiB.
  CHECK(detail::jacobianPolicy().budget_bytes == int64_t(1) << 30);
}

TEST_CASE("hessian and hvp: forward over reverse") {
  auto f = [](Tensor x) { return sum(sin(x) * x * x) + x[0] * x[1]; };
  const Array x = f64({0.3, -0.8, 1.1});
  const Array H = hessian(f)(x);
  REQUIRE(H.shape() == Shape{3, 3});
  const std::vector<double> xv = x.to_vector<double>(), h = H.to_vector<double>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      // d2/dx2 (x^2 sin x) = 2 sin x + 4 x cos x - x^2 sin x; the cross term adds 1 at (0,1) and (1,0).
      double want = i == j ? 2 * std::sin(xv[i]) + 4 * xv[i] * std::cos(xv[i]) - xv[i] * xv[i] * std::sin(xv[i]) : 0;
      if ((i == 0 && j == 1) || (i == 1 && j == 0)) want += 1;
      CHECK(h[i * 3 + j] == doctest::Approx(want));
    }
  ADJIT_CHECK_CLOSE(H, jacrev(grad(f))(x), 1e-12);
  const Array v = f64({1, -2, 0.5});
  const std::vector<double> hv = hvp(f)(x, v).to_vector<double>(), vv = v.to_vector<double>();
  for (int i = 0; i < 3; ++i) {
    double want = 0;
    for (int j = 0; j < 3; ++j) want += h[i * 3 + j] * vv[j];
    CHECK(hv[i] == doctest::Approx(want));
  }
}

TEST_CASE("ForwardAccumulator: tangents of what is traced while it lives, TensorFlow's None, nesting with tapes") {
  const Array x = f64({0.3, -0.8, 1.1}), v = f64({1, -2, 0.5});
  // d(sin x * x) = (cos x * x + sin x) v
  auto f = jit([](Tensor x, Tensor v) {
    ForwardAccumulator acc(x, v);
    Tensor y = sin(x) * x;
    return *acc.jvp(y);
  });
  const std::vector<double> t = f(x, v).to_vector<double>();
  for (int i = 0; i < 3; ++i) {
    const double xi = x.at(i);
    CHECK(t[static_cast<std::size_t>(i)] == doctest::Approx((std::cos(xi) * xi + std::sin(xi)) * v.at(i)));
  }
  // The primal's own tangent; None for what no tangent reaches (before the
  // accumulator, or not from its primals), zeros when asked for.
  jit([&](Tensor x, Tensor v, Tensor z) {
    Tensor before = x * 2.0;
    ForwardAccumulator acc(x, v);
    CHECK(acc.jvp(x)->id() == v.id());
    CHECK(!acc.jvp(before * 3.0));
    CHECK(!acc.jvp(z * z));
    CHECK(acc.jvp(z * z, Unconnected::zero)->type() == z.type());
    const std::vector<std::optional<Tensor>> both = acc.jvp(std::vector<Tensor>{x * z, z});
    CHECK(both[0].has_value());
    CHECK(!both[1].has_value());
    return x;
  })(x, v, x);
  // Forward over reverse: an accumulator around a tape's gradient gives H v;
  // reverse over forward: a tape around an accumulator's jvp gives it too.
  auto loss = [](Tensor x) { return sum(sin(x) * x * x) + x[0] * x[1]; };
  const Array hv = hvp(loss)(x, v);
  auto fwdOverRev = jit([&](Tensor x, Tensor v) {
    ForwardAccumulator acc(x, v);
    GradientTape tape;
    tape.watch(x);
    Tensor y = loss(x);
    return *acc.jvp(*tape.gradient(y, x));
  });
  auto revOverFwd = jit([&](Tensor x, Tensor v) {
    GradientTape tape;
    tape.watch(x);
    ForwardAccumulator acc(x, v);
    Tensor y = loss(x);
    return *tape.gradient(*acc.jvp(y), x);
  });
  ADJIT_CHECK_CLOSE(fwdOverRev(x, v), hv, 1e-12);
  ADJIT_CHECK_CLOSE(revOverFwd(x, v), hv, 1e-12);
  // Several primals; an integer primal takes no tangent.
  auto two = jit([](Tensor a, Tensor b, Tensor k) {
    ForwardAccumulator acc({a, b, k}, {ones_like(a), ones_like(b) * 2.0, k});
    return *acc.jvp(a * b + cast(k, DType::f64));
  });
  CHECK(two(f64({3}), f64({5}), i32({7})).to_vector<double>() == std::vector<double>{5 * 1 + 3 * 2});
}

TEST_CASE("ForwardAccumulator: asking again differentiates only the paths to the answer") {
  // Each jvp walks the ops traced since the accumulator, its earlier answers
  // included; only ops that reach the asked value get tangents, so twenty
  // questions add twenty answers, not a tangent of every earlier answer.
  auto ops = [](int asks) {
    auto f = jit([asks](Tensor x) {
      ForwardAccumulator acc(x, ones_like(x));
      Tensor y = sin(x), total = zeros_like(x);
      for (int i = 0; i < asks; ++i) {
        y = y * 1.5 + 0.25;
        total = total + *acc.jvp(y);
      }
      return total;
    });
    const std::string adj = f.lower(Type{DType::f64, {3}}).traced_adj;
    return std::count(adj.begin(), adj.end(), '\n');
  };
  const auto n10 = ops(10), n20 = ops(20), n40 = ops(40);
  CHECK((n40 - n20) < 3 * (n20 - n10)); // linear (doubling would be far above)
}

TEST_CASE("ForwardAccumulator: errors at the user's line") {
  const uint32_t line = __LINE__ + 2;
  try {
    jit([](Tensor x) { ForwardAccumulator acc(x, cast(x, DType::f32)); return x; })(f64({1}));
    FAIL("a tangent of another type was accepted");
  } catch (const Error& e) {
    CHECK(e.message() == "ForwardAccumulator: tangent 0 is f32[], but its primal is f64[]");
    CHECK(e.location().line == line);
  }
  CHECK_THROWS_WITH_AS(jit([](Tensor x) { ForwardAccumulator acc({x, x}, {x}); return x; })(f64({1})),
                       doctest::Contains("ForwardAccumulator: 1 tangents for 2 primals"), Error);
  CHECK_THROWS_WITH_AS(jit([](Tensor x) {
                         ForwardAccumulator acc(x, x);
                         return *acc.jvp(x, static_cast<Unconnected>(7));
                       })(f64({1})),
                       doctest::Contains("unconnected_gradients must be Unconnected::none or Unconnected::zero, got 7"), Error);
  CHECK_THROWS_WITH_AS(ForwardAccumulator(Tensor(), Tensor()), doctest::Contains("test_autodiff.cpp"), Error);
}

TEST_CASE("linearize: a compiled linear function that does not recompute the primal") {
  auto f = [](Tensor x, Tensor w) { return sin(x) * w; };
  const Array x = f64({0.3, -0.8, 1.1}), w = f64({2, 3, -1}), dx = f64({1, 0.5, -2}), dw = f64({0, 1, 3});
  auto [y, lin] = linearize(f, x, w);
  ADJIT_CHECK_CLOSE(y, jit(f)(x, w), 0);
  const Array t = lin(dx, dw);
  ADJIT_CHECK_CLOSE(t, jvp(f, std::tuple{x, w}, std::tuple{dx, dw}).second, 1e-15);
  // Linear: scaling the tangents scales the answer; called again, same numbers.
  const Array t3 = lin(std::vector<Array>{f64({3, 1.5, -6}), f64({0, 3, 9})});
  for (int i = 0; i < 3; ++i) CHECK(t3.at(i) == doctest::Approx(3 * t.at(i)));
  ADJIT_CHECK_CLOSE(lin(dx, dw), t, 0);
  // It keeps sin x and cos x (and w), not the work to make them.
  CHECK(lin.residual_bytes() == 2 * 3 * sizeof(double));
  CHECK_THROWS_WITH_AS(lin(dx), doctest::Contains("test_autodiff.cpp:"), Error);
  CHECK_THROWS_WITH_AS(lin(std::vector<Array>{dx}),
                       doctest::Contains("linearize: the linear function takes 2 tangents (one per primal leaf), got 1"), Error);
  CHECK_THROWS_WITH_AS(lin(std::vector<Array>{dx, f32({0, 1, 3})}),
                       doctest::Contains("linearize: tangent 1 must have its primal's type f64[3], got f32[3]"), Error);
  // Inside a trace: the linear function adds tangent ops reading f's values.
  auto traced = jit([f](Tensor x, Tensor w, Tensor dx, Tensor dw) {
    auto [y, l] = linearize(f, x, w);
    return l(dx, dw) + 0.0 * y;
  });
  ADJIT_CHECK_CLOSE(traced(x, w, dx, dw), t, 1e-15);
}

TEST_CASE("linearize: structured outputs, an integer output, on Arrays and in a trace") {
  // f(x, w) = (sin(x) * w, [sum(x * x), argmax(x)]): tangents in f's structure; the integer's is zeros.
  auto f = [](Tensor x, Tensor w) {
    return std::make_pair(sin(x) * w, std::vector<Tensor>{sum(x * x), argmax(x, 0, DType::i32)});
  };
  const Array x = f64({0.3, -0.8, 1.1}), w = f64({2, 3, -1}), dx = f64({1, 0.5, -2}), dw = f64({0, 1, 3});
  auto [y, lin] = linearize(f, x, w);
  CHECK(y.second.size() == 2);
  CHECK(y.second[1].item<int32_t>() == 2);
  const auto t = lin(dx, dw);
  const auto want = jvp(f, std::tuple{x, w}, std::tuple{dx, dw}).second;
  ADJIT_CHECK_CLOSE(t.first, want.first, 1e-15);
  ADJIT_CHECK_CLOSE(t.second[0], want.second[0], 1e-15);
  CHECK(t.second[0].item<double>() == doctest::Approx(2 * (0.3 * 1 - 0.8 * 0.5 - 1.1 * 2)));
  CHECK(t.second[1].dtype() == DType::i32);
  CHECK(t.second[1].item<int32_t>() == 0);
  // In a trace: the same structure of Tensors.
  auto traced = jit([f](Tensor x, Tensor w, Tensor dx, Tensor dw) {
    auto [y, l] = linearize(f, x, w);
    auto [a, rest] = l(dx, dw);
    return a + rest[0];
  });
  const Array tt = traced(x, w, dx, dw);
  for (int i = 0; i < 3; ++i) CHECK(tt.at(i) == doctest::Approx(t.first.at(i) + t.second[0].item<double>()));
}

TEST_CASE("linearize keeps recompute_grad's memory saving: the region is recomputed, not stored") {
  auto block = recompute_grad([](Tensor x) { return sum(exp(sin(x) * 2.0)); });
  auto plain = [](Tensor x) { return sum(exp(sin(x) * 2.0)); };
  const Array x = f64({0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}), dx = f64({1, 0, 0, 2, 0, 0, 0, -1});
  auto [y1, lin1] = linearize([&](Tensor x) { return block(x); }, x);
  auto [y2, lin2] = linearize(plain, x);
  ADJIT_CHECK_CLOSE(y1, y2, 1e-15);
  ADJIT_CHECK_CLOSE(lin1(dx), lin2(dx), 1e-14);
  CHECK(lin1.residual_bytes() == 0); // only x, which is an input
  CHECK(lin2.residual_bytes() > 0);
  // jvp through recompute_grad is its function's own JVP.
  ADJIT_CHECK_CLOSE(jvp([&](Tensor x) { return block(x); }, std::tuple{x}, std::tuple{dx}).second, lin2(dx), 1e-14);
}

TEST_CASE("reverse mode: the cotangents of a repeated op meet at its first instance, whose rule runs once") {
  // Re-slicing a parameter at every step (an unrolled LSTM's gates): the 40
  // slices are one value for reverse mode, so one pad takes the summed
  // cotangent back to p's shape, not one pad per step.
  auto f = [](Tensor p) {
    Tensor acc = zeros_like(p(0, range(1, 3)));
    for (int t = 0; t < 40; ++t) acc = acc * 0.9 + sin(p(1, range(1, 3)) * (0.05 * t) + p(0, range(0, 2)));
    return sum(acc * acc);
  };
  const std::string adj = jit(grad(f)).lower(Type{DType::f64, {2, 4}}).traced_adj;
  auto count = [&](const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = adj.find(what); at != std::string::npos; at = adj.find(what, at + 1)) ++n;
    return n;
  };
  CHECK(count(" slice(") == 81); // the forward still slices at every step (and once for zeros_like); cse merges them later
  CHECK(count(" pad(") == 2);    // one per distinct slice
  check_grads(f, f64({0.3, -0.2, 0.5, 0.1, 0.7, -0.4, 0.2, 0.9}, {2, 4}));
}

TEST_CASE("reverse mode: a source and a call keep the cotangents of their own uses") {
  // b is computed as a is; TensorFlow differentiates y = a + a·b + b with
  // respect to a alone (b a separate tensor): 1 + b, with x a source too.
  auto bySource = jit([](Tensor x) {
    Tensor a = sin(x), b = sin(x);
    auto g = gradients({a + a * b + b}, {x, a});
    return std::make_tuple(*g[0], *g[1]);
  });
  auto [dx, da] = bySource(0.5);
  CHECK(scalar(dx) == doctest::Approx(2 * (1 + std::sin(0.5)) * std::cos(0.5)));
  CHECK(scalar(da) == doctest::Approx(1 + std::sin(0.5)));
  auto byTape = jit([](Tensor x) {
    GradientTape tape;
    tape.watch(x);
    Tensor a = sin(x);
    tape.watch(a);
    Tensor b = sin(x);
    return *tape.gradient(a + a * b + b, std::vector<Tensor>{x, a})[1];
  });
  CHECK(scalar(byTape(0.5)) == doctest::Approx(1 + std::sin(0.5)));
  // A custom gradient need not be linear in its cotangent: two calls of one
  // jitted function that clips it each clip their own (3 each, to 1), not
  // their sum.
  auto clipped = custom_gradient([](Tensor x) {
    return std::make_pair(x * 1.0, [](Tensor dy) { return clip(dy, -1.0, 1.0); });
  });
  auto g = jit([clipped](Tensor x) { return clipped(x); });
  CHECK(scalar(grad([g](Tensor x) { return g(x) * 3.0 + g(x) * 3.0; })(0.5)) == 2.0);
}

TEST_CASE("reverse mode: the ops it adds carry the user's lines, not the library's") {
  // x is used twice (a sum of cotangents), and the target's seed is ones.
  const uint32_t line = __LINE__ + 1;
  auto f = [](Tensor x) { return sum(sin(x) * x); };
  const std::string adj = jit(grad(f)).lower(Type{DType::f64, {3}}).traced_adj;
  CHECK(adj.find("lib/autodiff") == std::string::npos);
  CHECK(adj.find("test_autodiff.cpp\":" + std::to_string(line)) != std::string::npos);
}
