// test/unit/test_guide.cpp — the code snippets of docs/guide/ that no example
// holds, each run with its results checked against values worked out by hand.
// A region between `// [snippet:NAME]` and `// [/snippet:NAME]` is copied into
// the guide; test/docs/snippets.py fails when the two differ.
// [snippet:first-example]
#include <adjit/adjit.h>
using namespace adjit;
// [/snippet:first-example]
#include <adjit/check.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

namespace {

std::vector<double> values(const Array& a) { return a.to_vector<double>(); }

} // namespace

TEST_CASE("guide: the first example compiles, runs and prints the sum") {
  // [snippet:first-example]
  auto f = jit([](Tensor x, Tensor scale) { return sum(log1p(exp(x)) * scale); });
  Array y = f(Array(std::vector<float>{-1, 0, 1, 2}), 2.0f);   // compiled on first call
  std::printf("%g\n", y.item<float>());                          // 8.8932
  // [/snippet:first-example]
  // 2 * (log(1 + e^-1) + log 2 + log(1 + e) + log(1 + e^2))
  const double want = 2 * (std::log1p(std::exp(-1.0)) + std::log(2.0) + std::log1p(std::exp(1.0)) + std::log1p(std::exp(2.0)));
  CHECK(y.item<float>() == doctest::Approx(want).epsilon(1e-6));
}

TEST_CASE("guide: results written into the caller's buffers") {
  // [snippet:own-buffers]
  const int64_t n = 4;
  std::vector<float> x{1, 2, 3, 4}, y{0.5f, 0.5f, 0.5f, 0.5f}, out(n);
  float loss;
  auto f = jit([](Tensor x, Tensor y) { return std::pair{x * 2.0f + y, sum(x * y)}; });
  f.into(std::pair{Array::view(out.data(), {n}), Array::view(&loss, {})},
         Array::view(x.data(), {n}), Array::view(y.data(), {n}));
  // [/snippet:own-buffers]
  CHECK(out == std::vector<float>{2.5f, 4.5f, 6.5f, 8.5f});
  CHECK(loss == 5.0f);
}

TEST_CASE("guide: grad, higher order and value_and_grad") {
  auto loss = [](Tensor w, Tensor x, Tensor y) { return mean((matmul(x, w) - y) * (matmul(x, w) - y)); };
  const Array w(std::vector<double>{0.5, -0.25}), x(std::vector<double>{1, 2, 3, 4}, {2, 2}), y(std::vector<double>{1, 2});
  // [snippet:gradients]
  auto f = [](Tensor t) { return t * t * t; };
  Array d1 = grad(f)(2.0);        // 12: compiled on first call (grad(f) is jit-compiled for Arrays)
  Array d2 = grad(grad(f))(2.0);  // 12: second derivatives compose
  auto [v, dw] = value_and_grad(loss)(w, x, y);                // with respect to argument 0
  auto [v2, g] = value_and_grad(loss, argnums<0, 2>)(w, x, y); // g is a tuple (dw, dy)
  // [/snippet:gradients]
  CHECK(d1.item<double>() == 12.0);
  CHECK(d2.item<double>() == 12.0);
  // x w - y = (-1, -1.5): the loss is (1 + 2.25) / 2, dw = x^T (x w - y), dy = -(x w - y).
  CHECK(v.item<double>() == doctest::Approx(1.625));
  CHECK(v2.item<double>() == doctest::Approx(1.625));
  CHECK(values(dw) == std::vector<double>{-5.5, -8});
  CHECK(values(std::get<0>(g)) == std::vector<double>{-5.5, -8});
  CHECK(values(std::get<1>(g)) == std::vector<double>{1, 1.5});
}

TEST_CASE("guide: jvp, jacfwd, jacrev, hessian and hvp") {
  auto f = [](Tensor x, Tensor w) { return sin(x) * w; };
  auto loss = [](Tensor x) { return sum(sin(x) * x * x); };
  const Array x(std::vector<double>{0.3, -0.8, 1.1}), w(std::vector<double>{2, 3, -1});
  const Array dx(std::vector<double>{1, 0.5, -2}), dw(std::vector<double>{0, 1, 3}), v(std::vector<double>{1, -2, 0.5});
  // [snippet:forward-mode]
  auto [y, dy] = jvp(f, std::tuple{x, w}, std::tuple{dx, dw});  // f(x, w) and its derivative along (dx, dw)
  Array J  = jacfwd(f)(x, w);         // shaped f(x, w).shape + x.shape, as JAX's
  Array Jr = jacrev(f, argnums<1>)(x, w);
  Array H  = hessian(loss)(x);        // x.shape + x.shape: jacfwd of grad
  Array Hv = hvp(loss)(x, v);         // the Hessian times v, without forming it
  // [/snippet:forward-mode]
  REQUIRE(J.shape() == Shape{3, 3});
  REQUIRE(Jr.shape() == Shape{3, 3});
  REQUIRE(H.shape() == Shape{3, 3});
  for (int i = 0; i < 3; ++i) {
    const double xi = x.at(i), wi = w.at(i);
    CHECK(y.at(i) == doctest::Approx(std::sin(xi) * wi));
    CHECK(dy.at(i) == doctest::Approx(std::cos(xi) * wi * dx.at(i) + std::sin(xi) * dw.at(i)));
    // d2/dx2 (x^2 sin x) = 2 sin x + 4 x cos x - x^2 sin x; the Jacobians and the Hessian are diagonal.
    const double hii = 2 * std::sin(xi) + 4 * xi * std::cos(xi) - xi * xi * std::sin(xi);
    for (int j = 0; j < 3; ++j) {
      CHECK(J.at(i * 3 + j) == doctest::Approx(i == j ? std::cos(xi) * wi : 0.0));
      CHECK(Jr.at(i * 3 + j) == doctest::Approx(i == j ? std::sin(xi) : 0.0));
      CHECK(H.at(i * 3 + j) == doctest::Approx(i == j ? hii : 0.0));
    }
    CHECK(Hv.at(i) == doctest::Approx(hii * v.at(i)));
  }
}

TEST_CASE("guide: ForwardAccumulator inside a trace") {
  auto f = jit([](Tensor x, Tensor v) {
    // [snippet:forward-accumulator]
    ForwardAccumulator acc(x, v);               // or acc({x, w}, {dx, dw})
    Tensor y = sum(sin(x) * x);
    std::optional<Tensor> t = acc.jvp(y);       // std::nullopt if no tangent reaches y;
    Tensor t0 = *acc.jvp(y, Unconnected::zero); // ...or zeros
    // [/snippet:forward-accumulator]
    return std::pair{*t, t0};
  });
  const Array x(std::vector<double>{0.3, -0.8}), v(std::vector<double>{1, -2});
  auto [t, t0] = f(x, v);
  // d sum(x sin x) along v = sum((sin x + x cos x) v)
  double want = 0;
  for (int i = 0; i < 2; ++i) want += (std::sin(x.at(i)) + x.at(i) * std::cos(x.at(i))) * v.at(i);
  CHECK(t.item<double>() == doctest::Approx(want));
  CHECK(t0.item<double>() == doctest::Approx(want));
}

TEST_CASE("guide: linearize keeps what the tangent needs and never recomputes f") {
  auto f = [](Tensor x, Tensor w) { return sin(x) * w; };
  const Array x(std::vector<double>{0.3, -0.8, 1.1}), w(std::vector<double>{2, 3, -1});
  const Array dx(std::vector<double>{1, 0.5, -2}), dw(std::vector<double>{0, 1, 3});
  // [snippet:linearize]
  auto [y, f_jvp] = linearize(f, x, w);  // runs f's primal part once
  Array t = f_jvp(dx, dw);               // the JVP along (dx, dw); call it as often as you like
  std::size_t kept = f_jvp.residual_bytes();
  // [/snippet:linearize]
  for (int i = 0; i < 3; ++i) {
    CHECK(y.at(i) == doctest::Approx(std::sin(x.at(i)) * w.at(i)));
    CHECK(t.at(i) == doctest::Approx(std::cos(x.at(i)) * w.at(i) * dx.at(i) + std::sin(x.at(i)) * dw.at(i)));
  }
  CHECK(kept == 2 * 3 * sizeof(double)); // sin x and cos x
}

TEST_CASE("guide: custom_jvp gives a function its own forward rule") {
  // [snippet:custom-jvp]
  auto softplus = custom_jvp([](Tensor x) { return log1p(exp(x)); },
                             [](const std::tuple<Tensor>& p, const std::tuple<Tensor>& t) {
                               auto [x] = p;
                               auto [dx] = t;
                               return std::make_pair(log1p(exp(x)), dx * sigmoid(x));
                             });
  Array g = grad(softplus)(800.0);  // 1 (the plain formula's gradient is NaN there)
  // [/snippet:custom-jvp]
  CHECK(g.item<double>() == 1.0);
  CHECK(std::isnan(grad([](Tensor x) { return log1p(exp(x)); })(800.0).item<double>()));
}

TEST_CASE("guide: scan and cond, compiled and differentiated") {
  const Array w0(std::vector<double>{0.1, 0.2, 0.3, 0.4});
  const Array xs0(std::vector<double>{1, 2, -1, 0.5, -3, -2, 1, -1, 0.5, 0.25, 0.5, 1}, {3, 4});
  // [snippet:scan-cond]
  auto model = [](Tensor w, Tensor xs) {                        // w: f64[4], xs: f64[T, 4]
    auto [c, ys] = scan([&](Tensor c, Tensor x) {               // carry f64[4], x = xs[t]
      Tensor n = cond(gt(sum(x), 0.0), [&](Tensor a) { return a * w; },
                                       [&](Tensor a) { return sin(a) + w; }, c);
      return std::pair{n, n * x};                               // (next carry, y of this step)
    }, full({4}, 0.5, DType::f64), xs);
    return sum(ys);
  };
  Array y  = jit(model)(w0, xs0);
  Array dw = grad(model)(w0, xs0);                              // through the loop and the branch
  // [/snippet:scan-cond]
  // The same recurrence in plain C++.
  std::vector<double> c(4, 0.5);
  double want = 0;
  for (int t = 0; t < 3; ++t) {
    double s = 0;
    for (int i = 0; i < 4; ++i) s += xs0.at(t * 4 + i);
    for (int i = 0; i < 4; ++i) {
      c[i] = s > 0 ? c[i] * w0.at(i) : std::sin(c[i]) + w0.at(i);
      want += c[i] * xs0.at(t * 4 + i);
    }
  }
  CHECK(y.item<double>() == doctest::Approx(want));
  REQUIRE(dw.shape() == Shape{4});
  // The steps' sums are 2.5, -5 and 2.25, far from the branch point: central differences hold.
  CHECK_NOTHROW(check_grads(model, std::tuple{w0, xs0}));
}

TEST_CASE("guide: what a compilation cost, from the listener and from lower()") {
  // [snippet:compile-listener]
  std::vector<CompileEvent> events;
  set_compile_listener([&](const CompileEvent& e) { events.push_back(e); });
  auto f = jit([](Tensor x) { return sum(exp(x) * 3.0f); }, {.name = "guide_listener"});
  f(Array(std::vector<float>{1, 2, 3}));
  set_compile_listener({});  // an empty function removes it
  // [/snippet:compile-listener]
  REQUIRE(events.size() == 1);
  CHECK(events[0].function == "guide_listener");
  CHECK(events[0].signature.find("f32[3]") != std::string::npos);
  // [snippet:lower]
  CompiledStages stages = jit([](Tensor x) { return sum(x * x); }).lower(Type{DType::f32, {3}});
  // stages.traced_adj, .optimized_adj, .plan, .llvm_ir, .optimized_llvm_ir, .assembly
  // [/snippet:lower]
  CHECK(stages.traced_adj.find("reduce_sum") != std::string::npos);
  CHECK(stages.plan.find("plan @") != std::string::npos);
  CHECK(!stages.assembly.empty());
}
