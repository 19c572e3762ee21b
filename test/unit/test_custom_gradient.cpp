// test/unit/test_custom_gradient.cpp — custom_gradient: the seed's examples,
// structural checks, laziness, residuals, composition and the call site's IR.
#include "Check.h"

#include "transforms/Passes.h"

using namespace adjit;
using namespace adjit::test;

namespace {

double scalar(const Array& a) { return a.item<double>(); }

/// log(1 + e^x) with the numerically stable gradient dy * (1 - 1/(1 + e^x)).
auto log1pexp = custom_gradient([](Tensor x) {
  Tensor e = exp(x);
  auto grad_fn = [e](Tensor dy) { return dy * (1 - 1 / (1 + e)); };
  return std::make_pair(log(1 + e), grad_fn);
});

} // namespace

TEST_CASE("log1pexp: the custom gradient is finite where the plain one is NaN") {
  CHECK(scalar(grad(log1pexp)(100.0f)) == 1.0);
  CHECK(std::isnan(scalar(grad([](Tensor x) { return log(1 + exp(x)); })(100.0f))));
  CHECK(scalar(log1pexp(0.0f)) == doctest::Approx(std::log(2.0)));
  CHECK(scalar(grad(log1pexp)(0.0)) == doctest::Approx(0.5));
}

TEST_CASE("x * y with a custom gradient, through one persistent GradientTape") {
  auto mul = custom_gradient([](Tensor x, Tensor y) {
    auto grad_fn = [x, y](Tensor upstream) { return std::make_tuple(upstream * y, upstream * x); };
    return std::make_pair(x * y, grad_fn);
  });
  auto f = jit([mul](Tensor x, Tensor y) {
    GradientTape tape(/*persistent=*/true);
    tape.watch(x);
    tape.watch(y);
    Tensor z = mul(x, y);
    return std::make_tuple(z, *tape.gradient(z, x), *tape.gradient(z, y));
  });
  auto [z, dx, dy] = f(2.0, 3.0);
  CHECK(scalar(z) == 6.0);
  CHECK(scalar(dx) == 3.0);
  CHECK(scalar(dy) == 2.0);
}

TEST_CASE("the user's VJP is trusted: a deliberately wrong one is what the gradient returns") {
  auto wrong = custom_gradient([](Tensor x) {
    return std::make_pair(x * x, [](Tensor dy) { return dy * 7.0; });
  });
  CHECK(scalar(grad(wrong)(3.0)) == 7.0);
}

TEST_CASE("grad_fn's structure is checked at the custom_gradient call's line") {
  int line = __LINE__ + 1;
  auto two = custom_gradient([](Tensor x, Tensor y) { return std::make_pair(x * y, [](Tensor dy) { return dy; }); });
  try {
    grad(two)(1.0, 2.0);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.message() == "custom_gradient function expected to return 2 gradients, but returned 1 instead");
    CHECK(e.location().line == static_cast<uint32_t>(line));
  }
  auto shaped = custom_gradient([](Tensor x) { return std::make_pair(sum(x), [](Tensor dy) { return dy; }); });
  CHECK_THROWS_WITH_AS(grad(shaped)(f64({1, 2})), doctest::Contains("custom_gradient: gradient 0 has type f64[], but input 0 has type f64[2]"), Error);
}

TEST_CASE("grad_fn is traced only when a gradient reaches the call site") {
  int traced = 0;
  auto f = custom_gradient([&](Tensor x) {
    auto grad_fn = [&traced, x](Tensor dy0, Tensor dy1) {
      ++traced;
      return dy0 * 2.0 * x + dy1;
    };
    return std::make_pair(std::make_tuple(x * x, x + 1.0), grad_fn);
  });
  CHECK(scalar(std::get<0>(f(3.0))) == 9.0);
  CHECK(traced == 0);
  // A cotangent reaches the call site (through its first output): grad_fn runs once.
  CHECK(scalar(grad([f](Tensor x) { return std::get<0>(f(x)); })(3.0)) == 6.0);
  CHECK(traced == 1);
  // A call whose outputs do not reach the target is never differentiated.
  CHECK(scalar(grad([f](Tensor x) { (void)f(x); return x * 5.0; })(3.0)) == 5.0);
  CHECK(traced == 1);
}

TEST_CASE("second derivatives through a plain custom_gradient differentiate grad_fn") {
  auto cube = custom_gradient([](Tensor x) {
    return std::make_pair(x * x * x, [x](Tensor dy) { return dy * 3.0 * x * x; });
  });
  CHECK(scalar(grad(cube)(2.0)) == 12.0);
  CHECK(scalar(grad(grad(cube))(2.0)) == 12.0); // d/dx 3x^2 = 6x
}

TEST_CASE("composes with jit, value_and_grad, vjp and gradients") {
  auto f = [](Tensor x) { return sum(log1pexp(x)); };
  Array x = f64({-1, 0, 50});
  std::vector<double> want;
  for (double v : {-1.0, 0.0, 50.0}) want.push_back(1 - 1 / (1 + std::exp(v)));
  std::vector<double> g = jit(grad(f))(x).to_vector<double>();
  for (std::size_t i = 0; i < 3; ++i) CHECK(g[i] == doctest::Approx(want[i]));
  auto [v, g2] = value_and_grad(f)(x);
  CHECK(g2.to_vector<double>() == g);
  auto [y, back] = vjp([](Tensor t) { return log1pexp(t); }, x);
  CHECK(back(f64({1, 1, 1}))[0].to_vector<double>() == g);
  auto viaGradients = jit([](Tensor t) { return *gradients({sum(log1pexp(t))}, {t})[0]; });
  CHECK(viaGradients(x).to_vector<double>() == g);
}

TEST_CASE("stop_gradient inside the forward, and a custom gradient inside another's forward") {
  auto inner = custom_gradient([](Tensor x) { return std::make_pair(x * 2.0, [](Tensor dy) { return dy * 10.0; }); });
  auto outer = custom_gradient([inner](Tensor x) {
    Tensor y = inner(x) + stop_gradient(x);
    return std::make_pair(y, [](Tensor dy) { return dy * 100.0; });
  });
  CHECK(scalar(outer(1.0)) == 3.0);
  CHECK(scalar(grad(outer)(1.0)) == 100.0);                                       // outer's VJP wins
  CHECK(scalar(grad([inner](Tensor x) { return inner(x) + stop_gradient(x); })(1.0)) == 10.0);
}

TEST_CASE("tensors captured from outside the custom-gradient function are constants for it") {
  auto f = jit([](Tensor x, Tensor w) {
    auto scaled = custom_gradient([w](Tensor t) { return std::make_pair(t * w, [w](Tensor dy) { return dy * w; }); });
    auto g = gradients({scaled(x)}, {x, w});
    return std::make_tuple(*g[0], g[1].has_value() ? *g[1] : x * 0.0 - 1.0);
  });
  auto [dx, dw] = f(2.0, 5.0);
  CHECK(scalar(dx) == 5.0);
  CHECK(scalar(dw) == -1.0); // no gradient for w through the custom function
}

TEST_CASE("the call site in .adj: one op naming forward and VJP, before and after autodiff") {
  Module before = trace([](Tensor x) { return log1pexp(x); }, Type{DType::f32, {3}});
  std::string b = before.str();
  CHECK(b.find("= custom_vjp @custom_gradient(%0) {inputs = 1, outputs = 1} : f32[3]") != std::string::npos);
  CHECK(Module::parse(b).str() == b);
  Module after = trace([](Tensor x) { return grad([](Tensor t) { return sum(log1pexp(t)); })(x); }, Type{DType::f32, {3}});
  std::string a = after.str();
  CHECK(a.find("custom_vjp @custom_gradient.res, @custom_gradient.vjp(") != std::string::npos);
  CHECK(a.find("func @custom_gradient.vjp(") != std::string::npos);
  CHECK(a.find("func @custom_gradient.res(") != std::string::npos);
  CHECK(Module::parse(a).str() == a);
  // The forward body is not differentiated: the only division (1 / (1 + e)) is
  // the user's, inside the VJP function.
  const std::size_t vjpAt = a.find("func @custom_gradient.vjp(");
  const std::size_t vjpEnd = a.find("\n}\n", vjpAt);
  CHECK(a.find("div(") > vjpAt);
  CHECK(a.find("div(") < vjpEnd);
  CHECK(a.find("div(", vjpEnd) == std::string::npos);
  after.verify();
}

TEST_CASE("nested custom gradients: op_with_fused_backprop gives correct second derivatives") {
  // x^3 computed with a fused first derivative; the first-order gradient is
  // itself a custom-gradient function of x whose VJP is the second derivative.
  auto cube = custom_gradient([](Tensor x) {
    Tensor y = x * x * x;
    Tensor xGrad = 3.0 * x * x; // produced alongside y by the "fused" op
    auto firstOrder = [x, xGrad](Tensor dy) {
      auto firstOrderCustom = custom_gradient([xGrad, x](Tensor unusedX) {
        auto secondOrder = [x](Tensor ddy) { return ddy * 6.0 * x; };
        return std::make_pair(xGrad + 0.0 * unusedX, secondOrder);
      });
      return dy * firstOrderCustom(x);
    };
    return std::make_pair(y, firstOrder);
  });
  CHECK(scalar(cube(2.0)) == 8.0);
  CHECK(scalar(grad(cube)(2.0)) == 12.0);       // 3x^2
  CHECK(scalar(grad(grad(cube))(2.0)) == 12.0); // 6x
}

TEST_CASE("a grad_fn using custom_gradient: its grad_grad_fn gives the gradient of grad_fn") {
  // TensorFlow's documented semantics: the inner gradient is d(grad_fn)/d(dy)
  // and its inputs, not the outer op's second derivative.
  auto f = custom_gradient([](Tensor x) {
    auto gradFn = [x](Tensor dy) {
      auto inner = custom_gradient([](Tensor u, Tensor v) {
        return std::make_pair(u * v, [u, v](Tensor g) { return std::make_tuple(g * 100.0, g * 0.0); });
      });
      return inner(dy, x); // grad_fn(dy) = dy * x, with its own gradient 100 w.r.t. dy
    };
    return std::make_pair(x * x, gradFn);
  });
  CHECK(scalar(grad(f)(3.0)) == 3.0); // what grad_fn says: dy * x
  // d/dx of grad_fn(1) = d/dx inner(1, x) = the inner VJP's second output: 0.
  CHECK(scalar(grad(grad(f))(3.0)) == 0.0);
}

TEST_CASE("grad_pass_through: forward is f, gradient is the identity") {
  auto roundish = grad_pass_through([](Tensor x) { return floor(x * 10.0) / 10.0; });
  CHECK(scalar(roundish(1.27)) == doctest::Approx(1.2));
  CHECK(scalar(grad([roundish](Tensor x) { return roundish(x) * 3.0; })(1.27)) == 3.0);
  // Several inputs and outputs, matched in order.
  auto swap = grad_pass_through([](Tensor a, Tensor b) { return std::make_tuple(a * 0.0, b * 0.0); });
  auto g = grad([swap](Tensor a, Tensor b) {
    auto [u, v] = swap(a, b);
    return u * 2.0 + v * 5.0;
  }, argnums<0, 1>)(1.0, 1.0);
  CHECK(scalar(std::get<0>(g)) == 2.0);
  CHECK(scalar(std::get<1>(g)) == 5.0);
}

TEST_CASE("recompute_grad: same gradients, the forward keeps only the inputs") {
  auto block = [](Tensor x, Tensor w) { return tanh(matmul(w, tanh(matmul(w, x)))); };
  auto plain = [block](Tensor x, Tensor w) { return sum(block(block(x, w), w)); };
  auto rblock = recompute_grad(block);
  auto recomputed = [rblock](Tensor x, Tensor w) { return sum(rblock(rblock(x, w), w)); };
  std::vector<double> xs, ws;
  for (int i = 0; i < 16; ++i) xs.push_back(0.1 * (i % 5) - 0.2), ws.push_back(0.05 * ((i * 7) % 9) - 0.2);
  Array x(xs, {4, 4}), w(ws, {4, 4});
  auto ga = grad(plain, argnums<0, 1>)(x, w);
  auto gb = grad(recomputed, argnums<0, 1>)(x, w);
  for (int i = 0; i < 16; ++i) {
    CHECK(std::get<0>(gb).at(i) == doctest::Approx(std::get<0>(ga).at(i)).epsilon(1e-12));
    CHECK(std::get<1>(gb).at(i) == doctest::Approx(std::get<1>(ga).at(i)).epsilon(1e-12));
  }
  // The split forward keeps less for the backward.
  auto [ya, backA] = vjp(plain, x, w);
  auto [yb, backB] = vjp(recomputed, x, w);
  CHECK(scalar(ya) == doctest::Approx(scalar(yb)));
  CHECK(backB.residual_bytes() < backA.residual_bytes());
}

TEST_CASE("recompute_grad on a 32-layer chain keeps at least 6x fewer residual bytes") {
  constexpr int kLayers = 32, kBlock = 8, kN = 256;
  std::vector<Array> ws;
  for (int l = 0; l < kLayers; ++l) {
    std::vector<float> w(kN * kN);
    for (int i = 0; i < kN * kN; ++i) w[i] = 0.06f * static_cast<float>(((i * 31 + l * 17) % 13) - 6) / 6.0f;
    ws.emplace_back(w, Shape{kN, kN});
  }
  std::vector<float> h0(kN * kN);
  for (int i = 0; i < kN * kN; ++i) h0[i] = 0.1f * static_cast<float>((i % 11) - 5);
  Array h(h0, {kN, kN});
  auto layers = [](Tensor x, const std::vector<Tensor>& w, int from, int to) {
    for (int l = from; l < to; ++l) x = tanh(matmul(w[l], x));
    return x;
  };
  auto plain = [&](Tensor x, std::vector<Tensor> w) { return sum(layers(x, w, 0, kLayers)); };
  auto blocked = [&](Tensor x, std::vector<Tensor> w) {
    for (int b = 0; b < kLayers / kBlock; ++b) {
      std::vector<Tensor> wb(w.begin() + b * kBlock, w.begin() + (b + 1) * kBlock);
      x = recompute_grad([&layers](Tensor t, std::vector<Tensor> ww) { return layers(t, ww, 0, static_cast<int>(ww.size())); })(x, wb);
    }
    return sum(x);
  };
  auto [ya, backA] = vjp(plain, h, ws);
  auto [yb, backB] = vjp(blocked, h, ws);
  CHECK(ya.item<double>() == doctest::Approx(yb.item<double>()).epsilon(1e-5));
  INFO("plain keeps " << backA.residual_bytes() << " bytes, recompute_grad " << backB.residual_bytes());
  CHECK(backA.residual_bytes() >= 6 * backB.residual_bytes());
  CHECK(backB.residual_bytes() > 0);
  // Same gradients for the weights.
  std::vector<Array> ga = backA(Array(1.0f)), gb = backB(Array(1.0f));
  REQUIRE(ga.size() == gb.size());
  for (std::size_t k = 1; k < ga.size(); k += 7)
    for (int64_t i = 0; i < ga[k].size(); i += 997)
      CHECK(gb[k].at(i) == doctest::Approx(ga[k].at(i)).epsilon(1e-4).scale(1e-3));
}

TEST_CASE("debug_callback runs in compiled code, in order; recompute_grad runs it again") {
  std::vector<double> seen;
  auto f = jit([&seen](Tensor x) {
    Tensor y = x * 2.0;
    debug_callback([&seen](const std::vector<Array>& v) { seen.push_back(v[0].item<double>()); }, {y});
    Tensor z = y + 1.0;
    debug_callback([&seen](const std::vector<Array>& v) { seen.push_back(v[0].item<double>() + 1000); }, {z});
    return z;
  });
  CHECK(scalar(f(3.0)) == 7.0);
  CHECK(seen == std::vector<double>{6, 1007});
  // Not dropped even though nothing uses it, not merged with its twin.
  int count = 0;
  auto g = jit([&count](Tensor x) {
    debug_callback([&count](const std::vector<Array>&) { ++count; }, {x});
    debug_callback([&count](const std::vector<Array>&) { ++count; }, {x});
    return x;
  });
  g(1.0);
  CHECK(count == 2);

  int runs = 0;
  auto layer = recompute_grad([&runs](Tensor x) {
    debug_callback([&runs](const std::vector<Array>&) { ++runs; }, {x});
    return sin(x) * 1.5;
  });
  auto four = [layer](Tensor x) { return layer(layer(layer(layer(x)))); };
  jit(four)(0.3);
  CHECK(runs == 4);
  runs = 0;
  value_and_grad(four)(0.3);
  CHECK(runs == 8);
}

TEST_CASE("a jitted function called in a differentiated trace runs its forward once") {
  int runs = 0;
  auto g = jit([&runs](Tensor x) {
    debug_callback([&runs](const std::vector<Array>&) { ++runs; }, {x});
    return sin(x) * x;
  });
  auto f = [g](Tensor x) { return sum(g(x) * 3.0); };
  const Array x = f64({0.5, -1.25, 2.0});
  auto [v, dx] = value_and_grad(f)(x);
  CHECK(runs == 1); // the callee's residuals are kept, not recomputed
  // d/dx 3 x sin x = 3 (sin x + x cos x)
  for (int64_t i = 0; i < x.size(); ++i) {
    const double xi = x.at(i);
    CHECK(dx.at(i) == doctest::Approx(3 * (std::sin(xi) + xi * std::cos(xi))));
  }
  // recompute_grad stays the way to trade memory for recomputation.
  runs = 0;
  auto h = recompute_grad([g](Tensor x) { return g(x); });
  value_and_grad([h](Tensor x) { return sum(h(x)); })(x);
  CHECK(runs == 2);
  // Second derivatives through the call: d2/dx2 x sin x = 2 cos x - x sin x.
  auto d1 = grad([g](Tensor x) { return sum(g(x)); });
  auto d2 = grad([d1](Tensor x) { return sum(d1(x)); });
  const Array h2 = d2(x);
  for (int64_t i = 0; i < x.size(); ++i) {
    const double xi = x.at(i);
    CHECK(h2.at(i) == doctest::Approx(2 * std::cos(xi) - xi * std::sin(xi)));
  }
}

TEST_CASE("calls and custom-gradient forwards are as effectful as what they call") {
  int runs = 0;
  auto noisy = jit([&runs](Tensor x) {
    debug_callback([&runs](const std::vector<Array>&) { ++runs; }, {x});
    return x * 2.0;
  }, {.name = "noisy"});
  // Two calls with the same operand are not merged; an unused one is not dropped.
  auto twice = jit([noisy](Tensor x) {
    Tensor a = noisy(x), b = noisy(x);
    (void)noisy(x + 1.0);
    return a + b;
  });
  CHECK(scalar(twice(1.0)) == 4.0);
  CHECK(runs == 3);
  // Nested one level deeper: effects are transitive.
  runs = 0;
  auto outer = jit([noisy](Tensor x) { return noisy(x) * 1.0; }, {.name = "outer"});
  auto twiceOuter = jit([outer](Tensor x) {
    (void)outer(x);
    return outer(x) + outer(x);
  });
  twiceOuter(1.0);
  CHECK(runs == 3);
  // A custom-gradient forward whose result is unused still runs.
  runs = 0;
  auto cg = custom_gradient([noisy](Tensor x) { return std::make_pair(noisy(x), [](Tensor dy) { return dy * 2.0; }); });
  jit([cg](Tensor x) {
    (void)cg(x);
    return x;
  })(1.0);
  CHECK(runs == 1);
  // recompute_grad's recomputation runs in the backward even though only its
  // gradient is used: 1 forward + 1 recomputation.
  runs = 0;
  auto rg = recompute_grad([noisy](Tensor x) { return noisy(x); });
  auto [v, dx] = value_and_grad([rg](Tensor x) { return sum(rg(x)); })(1.0);
  CHECK(scalar(dx) == 2.0);
  CHECK(runs == 2);
  // The optimised IR keeps every call (printed text, not just a count of runs).
  const std::string adj = twice.lower(Type{DType::f64, {}}).optimized_adj;
  std::size_t calls = 0;
  for (std::size_t at = adj.find("call @noisy"); at != std::string::npos; at = adj.find("call @noisy", at + 1)) ++calls;
  CHECK(calls == 3);
}

TEST_CASE("a host callback that throws raises adjit::Error from the call; the kernel stays usable") {
  bool fail = true;
  int after = 0;
  auto f = jit([&](Tensor x) {
    debug_callback([&](const std::vector<Array>& v) {
      if (fail) throw std::runtime_error("sensor offline at " + std::to_string(v[0].item<double>()));
    }, {x});
    debug_callback([&](const std::vector<Array>&) { ++after; }, {x}); // skipped once an earlier one failed
    return x * 2.0;
  });
  try {
    f(1.5);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.message() == "host callback failed: sensor offline at 1.500000");
  }
  CHECK(after == 0);
  fail = false;
  CHECK(f(2.0).item<double>() == 4.0);
  CHECK(after == 1);
  // An adjit::Error from a callback keeps its message.
  auto g = jit([](Tensor x) {
    debug_callback([](const std::vector<Array>&) { throw Error("bad reading"); }, {x});
    return x;
  });
  CHECK_THROWS_WITH_AS(g(1.0), "error: host callback failed: bad reading", Error);
}

TEST_CASE("debug_print formats tensor values") {
  auto f = jit([](Tensor x) {
    debug_print("x = {}\n", {x});
    return x;
  });
  f(f32({1, 2}));
}

TEST_CASE("a module with a custom gradient, cloned or added to another, differentiates in each") {
  // Both modules held one lazy VJP: once the first traced it (adding its
  // functions there), the second found its names but not its functions.
  auto twice = custom_gradient([](Tensor x) {
    return std::make_pair(sin(x), [x](Tensor dy) { return dy * cos(x) * 2.0; }); // deliberately 2x
  });
  Module a = trace([twice](Tensor x) { return sum(twice(x)); }, Type{DType::f64, {3}});
  Module b = trace_named("g", [](Tensor x) { return sum(x * x); }, Type{DType::f64, {3}});
  b.add(a);
  std::unique_ptr<ir::Module> c = a.impl().clone();
  transforms::runPipeline(a.impl(), {"grad(f)"}); // traces the VJP into a
  transforms::runPipeline(b.impl(), {"grad(f)"});
  transforms::runPipeline(*c, {"grad(f)"});
  const Array x = f64({0.5, -1.0, 2.0});
  for (const ir::Module* m : {&a.impl(), &b.impl(), c.get()}) {
    const Array g = Module::parse(ir::print(*m)).interpret("f.grad", {x})[0];
    for (int64_t i = 0; i < x.size(); ++i) CHECK(g.at(i) == doctest::Approx(2 * std::cos(x.at(i))));
  }
}

// ---- forward mode: the transpose of grad_fn ------------------------------------

TEST_CASE("forward mode of a custom gradient transposes grad_fn: log1pexp's stable derivative") {
  // d log(1 + e^x) = dx * (1 - 1/(1 + e^x)): finite at 800, where e^x is inf
  // and the plain derivative is NaN.
  auto [y, t] = jvp([](Tensor x) { return log1pexp(x); }, std::tuple{Array(800.0)}, std::tuple{Array(2.0)});
  CHECK(scalar(t) == 2.0);
  auto [y2, t2] = jvp([](Tensor x) { return log(1 + exp(x)); }, std::tuple{Array(800.0)}, std::tuple{Array(2.0)});
  CHECK(std::isnan(scalar(t2)));
  // Values at ordinary points; jacfwd agrees with jacrev.
  CHECK(scalar(jvp([](Tensor x) { return log1pexp(x); }, std::tuple{Array(0.3)}, std::tuple{Array(1.0)}).second) ==
        doctest::Approx(1 / (1 + std::exp(-0.3))));
  auto vec = [](Tensor x) { return log1pexp(x) * x; };
  const Array xs = f64({-1, 0.5, 2});
  ADJIT_CHECK_CLOSE(jacfwd(vec)(xs), jacrev(vec)(xs), 1e-14);
  // A deliberately wrong grad_fn is what forward mode uses too (the user's word, transposed).
  auto wrong = custom_gradient([](Tensor x) { return std::make_pair(x * x, [](Tensor dy) { return dy * 7.0; }); });
  CHECK(scalar(jvp([&](Tensor x) { return wrong(x); }, std::tuple{Array(3.0)}, std::tuple{Array(2.0)}).second) == 14.0);
  // Several inputs: x * y with grad_fn (dy * y, dy * x) gives dx * y + x * dy.
  auto mulxy = custom_gradient([](Tensor x, Tensor y) {
    return std::make_pair(x * y, [x, y](Tensor dy) { return std::make_tuple(dy * y, dy * x); });
  });
  auto [p, dp] = jvp([&](Tensor a, Tensor b) { return mulxy(a, b); }, std::tuple{Array(3.0), Array(5.0)},
                     std::tuple{Array(1.0), Array(10.0)});
  CHECK(scalar(dp) == 5.0 + 3.0 * 10.0);
}

TEST_CASE("forward mode refuses a grad_fn that is not linear in dy, naming the op and the custom_gradient's line") {
  auto squares = custom_gradient([](Tensor x) { return std::make_pair(x * 2.0, [](Tensor dy) { return dy * dy; }); });
  const int line = __LINE__ - 1;
  try {
    jvp([&](Tensor x) { return squares(x); }, std::tuple{Array(1.0)}, std::tuple{Array(1.0)});
    FAIL("a grad_fn squaring dy was transposed");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find("test_custom_gradient.cpp:" + std::to_string(line) + ":") != std::string::npos);
    CHECK(m.find("custom_gradient: forward mode (jvp, linearize, jacfwd, hessian) transposes the gradient function, which "
                 "must be linear in its output gradients, but its op 'mul' at ") != std::string::npos);
    CHECK(m.find("multiplies or divides two values computed from them") != std::string::npos);
  }
  auto exps = custom_gradient([](Tensor x) { return std::make_pair(x * 2.0, [](Tensor dy) { return exp(dy); }); });
  CHECK_THROWS_WITH_AS(jacfwd([&](Tensor x) { return exps(x); })(f64({1, 2})),
                       doctest::Contains("its op 'exp' at"), Error);
  auto divides = custom_gradient([](Tensor x) { return std::make_pair(x * 2.0, [x](Tensor dy) { return x / dy; }); });
  CHECK_THROWS_WITH_AS(jvp([&](Tensor x) { return divides(x); }, std::tuple{Array(1.0)}, std::tuple{Array(1.0)}),
                       doctest::Contains("its op 'div' at"), Error);
  CHECK_THROWS_WITH_AS(jvp([&](Tensor x) { return divides(x); }, std::tuple{Array(1.0)}, std::tuple{Array(1.0)}),
                       doctest::Contains("divides by a value computed from them"), Error);
  // Through a call: a jitted helper inside grad_fn is checked inside.
  auto helper = jit([](Tensor a) { return a * a; }, {.name = "helper"});
  auto viaCall = custom_gradient([helper](Tensor x) { return std::make_pair(x * 2.0, [helper](Tensor dy) { return helper(dy); }); });
  CHECK_THROWS_WITH_AS(jvp([&](Tensor x) { return viaCall(x); }, std::tuple{Array(1.0)}, std::tuple{Array(1.0)}),
                       doctest::Contains("(in @helper) multiplies or divides two values computed from them"), Error);
  // Linear helpers pass: scaling by a value not computed from dy.
  auto scale = jit([](Tensor a, Tensor b) { return a * b - a / b; }, {.name = "scale"});
  auto viaLinearCall = custom_gradient([scale](Tensor x) {
    return std::make_pair(x * x, [scale, x](Tensor dy) { return scale(dy, x) + scale(dy, x) / x; });
  });
  // grad_fn(dy) = dy * (x - 1/x) * (1 + 1/x); at x = 2: 2 * (2 - 0.5) * 1.5 = 4.5 per unit dy.
  CHECK(scalar(jvp([&](Tensor x) { return viaLinearCall(x); }, std::tuple{Array(2.0)}, std::tuple{Array(1.0)}).second) ==
        doctest::Approx((2 - 0.5) * 1.5));
}

TEST_CASE("forward mode through grad_pass_through and recompute_grad") {
  auto roundish = grad_pass_through([](Tensor x) { return floor(x * 10.0) / 10.0; });
  CHECK(scalar(jvp([&](Tensor x) { return roundish(x) * 3.0; }, std::tuple{Array(1.27)}, std::tuple{Array(2.0)}).second) == 6.0);
  auto block = [](Tensor x) { return sum(tanh(x * x)); };
  auto rblock = recompute_grad(block);
  const Array x = f64({0.2, -0.4, 0.9}), dx = f64({1, 2, -1});
  ADJIT_CHECK_CLOSE(jvp([&](Tensor x) { return rblock(x); }, std::tuple{x}, std::tuple{dx}).second,
                    jvp(block, std::tuple{x}, std::tuple{dx}).second, 1e-14);
  ADJIT_CHECK_CLOSE(hessian([&](Tensor x) { return rblock(x); })(x), hessian(block)(x), 1e-12);
}

TEST_CASE("forward mode through recompute_grad differentiates the region directly, loops included") {
  // Nothing to recompute in forward mode: the region's callbacks run once
  // (three times before, through the transposed gradient function; its JVP
  // function computes the values again without them), and a loop inside
  // needs no linearity check.
  int runs = 0;
  auto region = recompute_grad([&](Tensor x) {
    debug_callback([&](const std::vector<Array>&) { ++runs; }, {x});
    return sin(x) * x;
  });
  auto f = [&](Tensor x) { return region(x) * 2.0; };
  const double x0 = 0.5, want = 2 * (std::sin(x0) + x0 * std::cos(x0));
  CHECK(scalar(jvp(f, std::tuple{Array(x0)}, std::tuple{Array(1.0)}).second) == doctest::Approx(want));
  CHECK(runs == 1);
  runs = 0;
  auto [y, lin] = linearize(f, Array(x0));
  CHECK(runs == 1);
  CHECK(scalar(lin(Array(1.0))) == doctest::Approx(want));
  CHECK(runs == 1);
  runs = 0;
  const Array t = jit([&](Tensor x, Tensor v) {
    ForwardAccumulator acc(x, v);
    return *acc.jvp(f(x));
  })(Array(x0), Array(1.0));
  CHECK(scalar(t) == doctest::Approx(want));
  CHECK(runs == 1);
  // A while_loop (and a scan) in the region: jvp, linearize and
  // ForwardAccumulator, against the region without recompute_grad.
  auto loops = [](Tensor x) {
    Tensor w = while_loop([](Tensor t) { return t < 10.0; }, [](Tensor t) { return t * 1.5 + sin(t) * 0.1; }, x);
    auto [c, ys] = scan([](Tensor c, Tensor s) { return std::pair{c * s, c}; }, w, full({3}, 0.9, DType::f64));
    return c + sum(ys);
  };
  auto rloops = recompute_grad(loops);
  for (const double x1 : {1.0, 2.5}) {
    INFO("x = " << x1);
    const double plain = scalar(jvp(loops, std::tuple{Array(x1)}, std::tuple{Array(1.0)}).second);
    CHECK(scalar(jvp([&](Tensor x) { return rloops(x); }, std::tuple{Array(x1)}, std::tuple{Array(1.0)}).second) ==
          doctest::Approx(plain));
    auto [y1, lin1] = linearize([&](Tensor x) { return rloops(x); }, Array(x1));
    CHECK(scalar(lin1(Array(1.0))) == doctest::Approx(plain));
    CHECK(scalar(grad([&](Tensor x) { return rloops(x); })(Array(x1))) == doctest::Approx(plain));
  }
}

TEST_CASE("a custom_gradient object as grad_fn: TensorFlow's grad_grad_fn pattern, in reverse and forward mode") {
  // x^3 whose grad_fn is itself a custom_gradient: dy -> dy * 3x^2, with its
  // own gradient (grad_grad_fn) g -> g * 100, deliberately not 3x^2, to show
  // which one forward mode uses. It used to be taken for a grad_fn that takes
  // `variables` (it accepts any arguments in form).
  auto cube = custom_gradient([](Tensor x) {
    Tensor slope = 3.0 * x * x;
    auto gradFn = custom_gradient([slope](Tensor dy) {
      return std::make_pair(dy * slope, [](Tensor g) { return g * 100.0; });
    });
    return std::make_pair(x * x * x, gradFn);
  });
  auto f = [cube](Tensor x) { return cube(x); };
  CHECK(scalar(grad(f)(2.0)) == 12.0);
  // Forward mode transposes grad_fn with respect to dy, which is what
  // grad_grad_fn says (TensorFlow's documented meaning): 100 dx.
  CHECK(scalar(jvp(f, std::tuple{Array(2.0)}, std::tuple{Array(0.5)}).second) == 50.0);
}

// ---- custom_jvp: a user's forward rule, transposed for reverse mode --------------

namespace {

/// log(1 + e^x) with the stable forward rule dx * sigmoid(x) (JAX's example).
auto custom_softplus = custom_jvp([](Tensor x) { return log1p(exp(x)); },
                           [](const std::tuple<Tensor>& primals, const std::tuple<Tensor>& tangents) {
                             const auto& [x] = primals;
                             const auto& [dx] = tangents;
                             return std::make_pair(log1p(exp(x)), dx * sigmoid(x));
                           });

} // namespace

TEST_CASE("custom_jvp: forward mode runs the rule, reverse mode transposes it") {
  // Finite at 800, where the plain derivative e^x / (1 + e^x) is inf / inf.
  auto [y, t] = jvp([](Tensor x) { return custom_softplus(x); }, std::tuple{Array(800.0)}, std::tuple{Array(2.0)});
  CHECK(scalar(t) == 2.0);
  CHECK(scalar(grad(custom_softplus)(800.0)) == 1.0);
  CHECK(std::isnan(scalar(grad([](Tensor x) { return log1p(exp(x)); })(800.0))));
  CHECK(scalar(grad(custom_softplus)(0.3)) == doctest::Approx(1 / (1 + std::exp(-0.3))).epsilon(1e-14));
  // Called with Arrays: compiled, the function itself.
  CHECK(scalar(custom_softplus(Array(0.0))) == doctest::Approx(std::log(2.0)));
  auto vec = [](Tensor x) { return custom_softplus(x) * x; };
  const Array xs = f64({-1, 0.5, 2});
  ADJIT_CHECK_CLOSE(jacfwd(vec)(xs), jacrev(vec)(xs), 1e-14);
  check_grads([](Tensor x) { return sum(custom_softplus(x) * x); }, xs, {.order = 2, .modes = {"fwd", "rev"}});
}

TEST_CASE("custom_jvp: the user's rule is trusted: a deliberately wrong one is what both modes return") {
  auto wrong = custom_jvp([](Tensor x) { return x * x; },
                          [](const std::tuple<Tensor>& p, const std::tuple<Tensor>& t) {
                            return std::make_pair(std::get<0>(p) * std::get<0>(p), std::get<0>(t) * 7.0);
                          });
  CHECK(scalar(jvp([&](Tensor x) { return wrong(x); }, std::tuple{Array(3.0)}, std::tuple{Array(2.0)}).second) == 14.0);
  CHECK(scalar(grad(wrong)(3.0)) == 7.0);
  // The second derivative differentiates the rule: d/dx (7 dx) = 0, not 2.
  CHECK(scalar(grad([&](Tensor x) { return grad(wrong)(x); })(3.0)) == 0.0);
}

TEST_CASE("custom_jvp: several inputs and outputs in structures, an integer argument, higher order") {
  // f(x, (y, n)) = (x * y, sin(x) * n): the rule is the true derivative; n is
  // an integer, whose tangent is zeros.
  auto f = custom_jvp(
      [](Tensor x, std::tuple<Tensor, Tensor> yn) {
        auto [y, n] = yn;
        return std::make_tuple(x * y, sin(x) * cast(n, DType::f64));
      },
      [](const std::tuple<Tensor, std::tuple<Tensor, Tensor>>& p, const std::tuple<Tensor, std::tuple<Tensor, Tensor>>& t) {
        const auto& [x, yn] = p;
        const auto& [y, n] = yn;
        const auto& [dx, dyn] = t;
        const auto& [dy, dn] = dyn;
        CHECK(dn.dtype() == DType::i32);
        const Tensor nf = cast(n, DType::f64);
        return std::make_pair(std::make_tuple(x * y, sin(x) * nf), std::make_tuple(dx * y + x * dy, cos(x) * dx * nf));
      });
  auto g = [f](Tensor x, Tensor y) {
    auto [a, b] = f(x, std::make_tuple(y, full({3}, 2, DType::i32)));
    return sum(a * b + tanh(a));
  };
  const Array x = f64({0.1, -0.7, 1.3}), y = f64({2, 0.5, -1});
  check_grads(g, std::tuple{x, y}, {.order = 2, .modes = {"fwd", "rev"}});
  auto plain = [](Tensor x, Tensor y) {
    Tensor a = x * y, b = sin(x) * 2.0;
    return sum(a * b + tanh(a));
  };
  ADJIT_CHECK_CLOSE(hessian(g)(x, y), hessian(plain)(x, y), 1e-12);
}

TEST_CASE("custom_jvp: reverse mode refuses a rule that is not linear in its tangents, naming the op and line") {
  const int line = __LINE__ + 3;
  auto squares = custom_jvp([](Tensor x) { return x * 2.0; },
                            [](const std::tuple<Tensor>& p, const std::tuple<Tensor>& t) {
                              return std::make_pair(std::get<0>(p) * 2.0, std::get<0>(t) * std::get<0>(t));
                            });
  // Forward mode uses the rule as it is: the user's word.
  CHECK(scalar(jvp([&](Tensor x) { return squares(x); }, std::tuple{Array(1.0)}, std::tuple{Array(3.0)}).second) == 9.0);
  try {
    grad(squares)(1.0);
    FAIL("a rule squaring its tangent was transposed");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find("custom_jvp: reverse mode (grad, vjp, jacrev) transposes the JVP rule, which must be linear in its "
                 "tangent inputs, but its op 'mul' at ") != std::string::npos);
    CHECK(m.find("test_custom_gradient.cpp:" + std::to_string(line) + ":") != std::string::npos);
  }
  auto leaks = custom_jvp([](Tensor x) { return x * 2.0; },
                          [](const std::tuple<Tensor>& p, const std::tuple<Tensor>& t) {
                            return std::make_pair(std::get<0>(p) * 2.0 + std::get<0>(t), std::get<0>(t) * 2.0);
                          });
  CHECK_THROWS_WITH_AS(grad(leaks)(1.0),
                       doctest::Contains("output 0 of the JVP rule (a primal output) depends on the tangent inputs"), Error);
}

TEST_CASE("custom_jvp: the rule's outputs are checked against the function's, naming the position") {
  auto count = custom_jvp([](Tensor x) { return std::make_tuple(x, x * 2.0); },
                          [](const std::tuple<Tensor>& p, const std::tuple<Tensor>& t) {
                            return std::make_pair(std::get<0>(p), std::get<0>(t));
                          });
  CHECK_THROWS_WITH_AS(jit([&](Tensor x) { return std::get<0>(count(x)); })(1.0),
                       doctest::Contains("custom_jvp: the JVP rule returned 1 output leaves, but the function returns 2"), Error);
  auto dtype = custom_jvp([](Tensor x) { return std::make_tuple(x, x * 2.0); },
                          [](const std::tuple<Tensor>& p, const std::tuple<Tensor>& t) {
                            const Tensor& x = std::get<0>(p);
                            return std::make_pair(std::make_tuple(x, x * 2.0),
                                                  std::make_tuple(std::get<0>(t), cast(std::get<0>(t), DType::f32)));
                          });
  const int line = __LINE__ - 6;
  try {
    jit([&](Tensor x) { return std::get<1>(dtype(x)); })(1.0);
    FAIL("no error");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find("custom_jvp: tangent leaf 1 of the JVP rule is f32[], but output leaf 1 of the function is f64[]") !=
          std::string::npos);
    CHECK(m.find("test_custom_gradient.cpp:" + std::to_string(line) + ":") != std::string::npos);
  }
}

TEST_CASE("custom_jvp: captured tensors are constants; differentiating through them is an error") {
  auto f = jit([](Tensor x, Tensor w) {
    auto scaled = custom_jvp([w](Tensor v) { return v * w; },
                             [w](const std::tuple<Tensor>& p, const std::tuple<Tensor>& t) {
                               return std::make_pair(std::get<0>(p) * w, std::get<0>(t) * w);
                             });
    return std::make_tuple(grad([&](Tensor v) { return sum(scaled(v)); })(x), scaled(x));
  });
  auto [g, y] = f(f64({1, 2}), f64({3, 4}));
  ADJIT_CHECK_CLOSE(g, f64({3, 4}), 0);
  ADJIT_CHECK_CLOSE(y, f64({3, 8}), 0);
  auto byW = [](Tensor x, Tensor w) {
    auto scaled = custom_jvp([w](Tensor v) { return v * w; },
                             [w](const std::tuple<Tensor>& p, const std::tuple<Tensor>& t) {
                               return std::make_pair(std::get<0>(p) * w, std::get<0>(t) * w);
                             });
    return sum(scaled(x));
  };
  CHECK_THROWS_WITH_AS(grad(byW, argnums<1>)(f64({1, 2}), f64({3, 4})),
                       doctest::Contains("custom_jvp: a tensor the function captures from the enclosing trace (captured "
                                         "operand 0, f64[2]) needs a gradient"), Error);
  CHECK_THROWS_WITH_AS(jvp(byW, std::tuple{f64({1, 2}), f64({3, 4})}, std::tuple{f64({0, 0}), f64({1, 1})}),
                       doctest::Contains("needs a tangent"), Error);
}

TEST_CASE("custom_jvp: linearize keeps the rule's residuals, and the call site prints and parses") {
  const Array x = f64({-2, 0, 3});
  auto [y, lin] = linearize([](Tensor x) { return sum(custom_softplus(x)); }, x);
  const Array dx = f64({1, 1, 1});
  double want = 0;
  for (double v : {-2.0, 0.0, 3.0}) want += 1 / (1 + std::exp(-v));
  CHECK(scalar(lin({dx})) == doctest::Approx(want).epsilon(1e-14));
  Module m = trace([](Tensor x) { return sum(custom_softplus(x)); }, Type{DType::f64, {3}});
  const std::string text = m.str();
  CHECK(text.find("custom_jvp @custom_jvp, @custom_jvp.jvp(%0) {inputs = 1} : f64[3]") != std::string::npos);
  CHECK(Module::parse(text).str() == text);
}
