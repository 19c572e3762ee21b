// test/unit/test_tf_semantics.cpp — gradient semantics restated from
// TensorFlow's documentation and tests (issue 10), with TF's expected values.
#include "Check.h"

#include <functional>

using namespace adjit;
using namespace adjit::test;

namespace {
double scalarOf(const Array& a) { return a.item<double>(); }
} // namespace

TEST_CASE("gradients: a tensor that is both a source and a stop still gets its cotangent") {
  // tf.gradients' documented example: b = 2a; gradients(a + b, [a, b],
  // stop_gradients=[a, b]) gives the partial derivatives [1, 1].
  auto f = jit([](Tensor a) {
    Tensor b = a * 2.0;
    auto g = gradients({a + b}, {a, b}, {}, {a, b});
    REQUIRE(g[0].has_value());
    REQUIRE(g[1].has_value());
    return std::make_tuple(*g[0], *g[1]);
  });
  auto [da, db] = f(0.0);
  CHECK(scalarOf(da) == 1.0);
  CHECK(scalarOf(db) == 1.0);
  // Without stops, the total derivatives [3, 1].
  auto total = jit([](Tensor a) {
    Tensor b = a * 2.0;
    auto g = gradients({a + b}, {a, b});
    return std::make_tuple(*g[0], *g[1]);
  });
  auto [ta, tb] = total(0.0);
  CHECK(scalarOf(ta) == 3.0);
  CHECK(scalarOf(tb) == 1.0);
}

TEST_CASE("gradients: every subset of sources and stops equals stop_gradient inserted by hand") {
  // y over a (the input), b = sin(a) * 2, c = b * a + exp(b), y = c * b + a * c.
  // `sg(k, t)` marks value k; stops pass it through and name it in
  // stop_gradients, by hand it wraps it in stop_gradient.
  using Sg = std::function<Tensor(int, Tensor)>;
  auto program = [](Tensor a, const Sg& sg) {
    std::array<Tensor, 4> v;
    v[0] = sg(0, a);
    v[1] = sg(1, sin(v[0]) * 2.0);
    v[2] = sg(2, v[1] * v[0] + exp(v[1]));
    v[3] = v[2] * v[1] + v[0] * v[2];
    return v;
  };
  for (int stops = 0; stops < 8; ++stops) {
    for (int sources = 1; sources < 8; ++sources) {
      CAPTURE(stops);
      CAPTURE(sources);
      auto withStops = jit([&](Tensor a) {
        auto v = program(a, [](int, Tensor t) { return t; });
        std::vector<Tensor> xs, st;
        for (int k = 0; k < 3; ++k) {
          if (sources >> k & 1) xs.push_back(v[static_cast<std::size_t>(k)]);
          if (stops >> k & 1) st.push_back(v[static_cast<std::size_t>(k)]);
        }
        std::vector<Tensor> out;
        for (auto& g : gradients({v[3]}, xs, {}, st, Unconnected::zero)) out.push_back(*g);
        return out;
      });
      auto byHand = jit([&](Tensor a) {
        auto v = program(a, [&](int k, Tensor t) { return (stops >> k & 1) ? stop_gradient(t) : t; });
        std::vector<Tensor> xs;
        for (int k = 0; k < 3; ++k)
          if (sources >> k & 1) xs.push_back(v[static_cast<std::size_t>(k)]);
        std::vector<Tensor> out;
        for (auto& g : gradients({v[3]}, xs, {}, {}, Unconnected::zero)) out.push_back(*g);
        return out;
      });
      const std::vector<Array> got = withStops(0.7), want = byHand(0.7);
      REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < got.size(); ++i) CHECK(scalarOf(got[i]) == doctest::Approx(scalarOf(want[i])));
    }
  }
}

TEST_CASE("Variable::assign has no gradient; grad_pass_through(assign) passes it") {
  // Seed 004: y = x.assign(z * z) has no gradient with respect to z, which is
  // why grad_pass_through(x.assign) exists; with it, dy/dz = 2z = 6.
  Variable x("x", Array(1.0)), z("z", Array(3.0));
  auto plain = jit([x, z](Tensor unused) {
    GradientTape tape(/*persistent=*/true);
    Tensor zv = z.read();
    Tensor y = x.assign(zv * zv);
    CHECK(!tape.gradient(y, z).has_value());
    Tensor again = x.read() * 1.0; // a later read carries none either
    CHECK(!tape.gradient(again, z).has_value());
    return y + unused;
  });
  CHECK(scalarOf(plain(0.0)) == 9.0);
  CHECK(scalarOf(x.value()) == 9.0);
  // grad with respect to the assigned value, through a function argument: zero.
  CHECK(scalarOf(grad([x](Tensor v) { return x.assign(v * v); })(3.0)) == 0.0);
  auto passThrough = grad_pass_through([x](Tensor v) { return x.assign(v); });
  CHECK(scalarOf(grad([passThrough](Tensor v) { return passThrough(v * v); })(3.0)) == 6.0);
  // Gradients with respect to the variable itself still flow through its reads.
  Variable w("w", Array(2.0));
  auto dw = jit([w](Tensor in) {
    GradientTape tape;
    Tensor y = w.read() * in;
    return *tape.gradient(y, w);
  });
  CHECK(scalarOf(dw(5.0)) == 5.0);
}

TEST_CASE("an out-of-range Unconnected value is an error") {
  const auto bogus = static_cast<Unconnected>(7);
  CHECK_THROWS_WITH_AS(trace([&](Tensor x) { return *gradients({x * x}, {x}, {}, {}, bogus)[0]; }, Type{DType::f64, {}}),
                       doctest::Contains("gradients: unconnected_gradients must be Unconnected::none or Unconnected::zero, got 7"),
                       Error);
  CHECK_THROWS_WITH_AS(trace([&](Tensor x) {
                         GradientTape tape;
                         tape.watch(x);
                         return *tape.gradient(x * x, x, std::nullopt, bogus);
                       }, Type{DType::f64, {}}),
                       doctest::Contains("GradientTape::gradient: unconnected_gradients must be"), Error);
}

TEST_CASE("recompute_grad of a function that reads a variable: the seed's docstring example") {
  // y = Variable(1.0) (here 2.0); my_function(x) = x * y applied four times
  // under a tape; the gradient with respect to y; "running" printed 4 + 4 times.
  Variable y("y", Array(2.0));
  int running = 0, traced = 0;
  auto myFunction = [&running, &traced, y](Tensor x) {
    ++traced;
    debug_callback([&running](const std::vector<Array>&) { ++running; }, {x});
    return x * y.read();
  };
  auto recomputed = recompute_grad(myFunction);
  auto f = jit([recomputed, y](Tensor r) {
    GradientTape tape;
    for (int i = 0; i < 4; ++i) r = recomputed(r);
    return std::make_tuple(r, *tape.gradient(r, y));
  });
  auto [r, dy] = f(1.0);
  CHECK(scalarOf(r) == 16.0);        // y^4
  CHECK(scalarOf(dy) == 32.0);       // 4 y^3
  CHECK(running == 8);               // 4 forward + 4 recomputed
  CHECK(traced == 8);
  // grad(f, variables) agrees, and so does the function without recompute_grad.
  auto plainLoss = [myFunction](Tensor x) { for (int i = 0; i < 4; ++i) x = myFunction(x); return x; };
  auto recomputedLoss = [recomputed](Tensor x) { for (int i = 0; i < 4; ++i) x = recomputed(x); return x; };
  CHECK(scalarOf(grad(recomputedLoss, std::vector<Variable>{y})(1.0)[0]) == 32.0);
  CHECK(scalarOf(grad(plainLoss, std::vector<Variable>{y})(1.0)[0]) == 32.0);
  // And the gradient with respect to the input: y^4.
  CHECK(scalarOf(grad(recomputedLoss)(1.0)) == 16.0);
}

TEST_CASE("recompute_grad of a function with several outputs") {
  // Like TF's sequence outputs and JAX's checkpoint: a tuple, and a vector.
  auto pairFn = [](Tensor x, Tensor w) { return std::make_tuple(sin(x) * w, x * x); };
  auto vecFn = [](Tensor x) { return std::vector<Tensor>{exp(x), x * 3.0, cos(x)}; };
  auto rp = recompute_grad(pairFn);
  auto rv = recompute_grad(vecFn);
  auto lossWith = [](auto p, auto v) {
    return [p, v](Tensor x, Tensor w) {
      auto [a, b] = p(x, w);
      auto cs = v(x);
      return sum(a * b) + sum(cs[0] * cs[1] - cs[2]);
    };
  };
  const Array x = f64({0.3, -1.2}), w = f64({2.0, 0.5});
  auto want = grad(lossWith(pairFn, vecFn), argnums<0, 1>)(x, w);
  auto got = grad(lossWith(rp, rv), argnums<0, 1>)(x, w);
  ADJIT_CHECK_CLOSE(std::get<0>(got), std::get<0>(want), 1e-12);
  ADJIT_CHECK_CLOSE(std::get<1>(got), std::get<1>(want), 1e-12);
}

TEST_CASE("prevent_gradient: identity forward, an error at the user's line when differentiated") {
  auto f = [](Tensor x) { return sum(prevent_gradient(x * 2.0, "the op is not differentiable") * x); };
  const uint32_t line = __LINE__ - 1;
  CHECK(jit(f)(f64({1, 2})).item<double>() == 10.0);
  try {
    grad(f)(f64({1, 2}));
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.message().starts_with("No gradient defined for operation '%"));
    CHECK(e.message().ends_with("(op type: prevent_gradient). Gradient explicitly disabled. Reason: the op is not differentiable"));
    CHECK(e.location().line == line);
  }
  // stop_gradient before it: no gradient is asked for, so no error.
  auto g = [](Tensor x) { return sum(prevent_gradient(stop_gradient(x * 2.0), "fine") * x); };
  CHECK(grad(g)(f64({1, 2})).to_vector<double>() == std::vector<double>{2, 4});
  // Nor when the prevented value does not reach what is differentiated.
  auto h = [](Tensor x) {
    (void)prevent_gradient(x);
    return sum(x * x);
  };
  CHECK(grad(h)(f64({3})).to_vector<double>() == std::vector<double>{6});
}

TEST_CASE("binary functions take a C++ scalar on either side") {
  auto f = jit([](Tensor x) {
    return std::vector<Tensor>{pow(x, 2), pow(2.0, x), maximum(x, 1.5), minimum(0, x), add(1, x), sub(x, 1),
                               mul(3, x), div(x, 2), cast(lt(x, 1.5), DType::f64), cast(eq(2.0, x), DType::f64)};
  });
  const std::vector<Array> r = f(f64({1, 2}));
  const std::vector<std::vector<double>> want = {{1, 4}, {2, 4}, {1.5, 2}, {0, 0}, {2, 3}, {0, 1}, {3, 6}, {0.5, 1}, {1, 0}, {0, 1}};
  REQUIRE(r.size() == want.size());
  for (std::size_t i = 0; i < r.size(); ++i) {
    CAPTURE(i);
    CHECK(r[i].to_vector<double>() == want[i]);
  }
  CHECK(grad([](Tensor x) { return sum(pow(x, 3)); })(f64({2})).to_vector<double>() == std::vector<double>{12});
  // The scalar takes the tensor's dtype; a float scalar next to an integer tensor is an error at the line.
  CHECK_THROWS_WITH_AS(trace([](Tensor i) { return pow(i, 0.5); }, Type{DType::i32, {2}}),
                       doctest::Contains("pow: cannot combine the floating-point scalar 0.5 with the integer tensor i32[2]"),
                       Error);
}

TEST_CASE("grad_fn may return std::nullopt (TF's None) for an input or a variable") {
  auto f = custom_gradient([](Tensor x, Tensor y) {
    auto gradFn = [](Tensor dz) { return std::make_tuple(std::optional<Tensor>(dz * 2.0), std::optional<Tensor>()); };
    return std::make_pair(x * y, gradFn);
  });
  auto g = jit([f](Tensor x, Tensor y) {
    Tensor z = f(x, y);
    auto none = gradients({z}, {x, y});
    CHECK(none[0].has_value());
    CHECK(!none[1].has_value()); // None, not zeros
    auto zero = gradients({z}, {x, y}, {}, {}, Unconnected::zero);
    return std::make_tuple(*none[0], *zero[1]);
  });
  auto [dx, dy] = g(3.0, 4.0);
  CHECK(scalarOf(dx) == 2.0);
  CHECK(scalarOf(dy) == 0.0);
  // grad needs a value: zeros.
  CHECK(scalarOf(grad([f](Tensor x, Tensor y) { return f(x, y); }, argnums<1>)(3.0, 4.0)) == 0.0);
  // std::nullopt written directly, and in grad_vars.
  Variable w("w", Array(5.0));
  auto h = custom_gradient([w](Tensor x) {
    auto gradFn = [](Tensor dz, const std::vector<Variable>&) {
      return std::make_pair(dz * 3.0, std::vector<std::optional<Tensor>>{std::nullopt});
    };
    return std::make_pair(x * w.read(), gradFn);
  });
  auto k = jit([h, w](Tensor x) {
    GradientTape tape(/*persistent=*/true);
    tape.watch(x);
    Tensor z = h(x);
    CHECK(!tape.gradient(z, w).has_value());
    return *tape.gradient(z, x);
  });
  CHECK(scalarOf(k(2.0)) == 3.0);
}

TEST_CASE("grad_pass_through returns None for the variables read inside") {
  Variable v("v", Array(2.0));
  auto scaled = grad_pass_through([v](Tensor x) { return x * v.read(); });
  auto f = jit([scaled, v](Tensor x) {
    GradientTape tape(/*persistent=*/true);
    tape.watch(x);
    Tensor y = scaled(x);
    CHECK(!tape.gradient(y, v).has_value());
    return std::make_tuple(y, *tape.gradient(y, x));
  });
  auto [y, dx] = f(3.0);
  CHECK(scalarOf(y) == 6.0);
  CHECK(scalarOf(dx) == 1.0); // the identity, not v
}

TEST_CASE("a custom_gradient of no arguments joins the trace it is called in") {
  Variable w("w", Array(2.0));
  auto f = custom_gradient([w]() {
    auto gradFn = [](Tensor dy, const std::vector<Variable>&) {
      return std::make_pair(std::vector<Tensor>{}, std::vector<Tensor>{dy * 10.0});
    };
    return std::make_pair(w.read() * 3.0, gradFn);
  });
  auto g = jit([f, w](Tensor x) {
    GradientTape tape;
    Tensor y = f() * x;
    return std::make_tuple(y, *tape.gradient(y, w));
  });
  auto [y, dw] = g(1.5);
  CHECK(scalarOf(y) == 9.0);
  CHECK(scalarOf(dw) == 15.0); // what grad_fn says: 10 * dy, dy = x
  auto c = custom_gradient([]() { return std::make_pair(constant(Array(4.0)), [](Tensor) { return std::vector<Tensor>{}; }); });
  CHECK(scalarOf(jit([c](Tensor x) { return c() + x; })(1.0)) == 5.0);
  CHECK_THROWS_WITH_AS(c(), doctest::Contains("custom_gradient: a function of no arguments was called outside of a trace"),
                       Error);
}

TEST_CASE("GradientTape::gradient: a list of targets is summed; nested sources give a mirrored result") {
  Variable w("w", Array(std::vector<double>{1, 2}));
  auto f = jit([w](Tensor x, Tensor z) {
    GradientTape tape(/*persistent=*/true);
    tape.watch(x);
    tape.watch(z);
    Tensor y1 = sum(x * w.read());   // dx = w, dw = x
    Tensor y2 = sum(x * x) * z;      // dx = 2xz, dz = sum(x^2)
    // TF: tape.gradient([y1, y2], {"x": x, "rest": (z, w)})
    auto g = tape.gradient({y1, y2}, std::make_tuple(x, std::make_pair(z, w), std::vector<Tensor>{z}));
    static_assert(std::is_same_v<decltype(g), std::tuple<std::optional<Tensor>,
                                                          std::pair<std::optional<Tensor>, std::optional<Tensor>>,
                                                          std::vector<std::optional<Tensor>>>>);
    auto [dx, zw, dzs] = g;
    // Output gradients weight each target.
    auto weighted = tape.gradient({y1, y2}, std::vector<Tensor>{x}, {full({}, 2.0, DType::f64), full({}, 0.0, DType::f64)});
    // A source the targets do not reach, and an unwatched one.
    Tensor unwatched = x * 1.0;
    auto misc = tape.gradient(y1, std::make_tuple(z, unwatched), std::nullopt, Unconnected::zero);
    return std::make_tuple(*dx, *zw.first, *zw.second, *dzs.at(0), *weighted.at(0), *std::get<0>(misc),
                           *std::get<1>(misc));
  });
  auto [dx, dz, dw, dz2, weighted, zeroZ, zeroUnwatched] = f(f64({3, 4}), 0.5);
  CHECK(dx.to_vector<double>() == std::vector<double>{1 + 3, 2 + 4}); // w + 2xz
  CHECK(scalarOf(dz) == 25.0);
  CHECK(dw.to_vector<double>() == std::vector<double>{3, 4});
  CHECK(scalarOf(dz2) == 25.0);
  CHECK(weighted.to_vector<double>() == std::vector<double>{2, 4}); // 2 * w
  CHECK(scalarOf(zeroZ) == 0.0);
  CHECK(zeroUnwatched.to_vector<double>() == std::vector<double>{0, 0});
  CHECK_THROWS_WITH_AS(trace([](Tensor x) {
                         GradientTape tape;
                         tape.watch(x);
                         return *tape.gradient({x * 2.0, x * 3.0}, std::vector<Tensor>{x}, {x})[0];
                       }, Type{DType::f64, {}}),
                       doctest::Contains("GradientTape::gradient: got 1 output gradients for 2 targets"), Error);
}

TEST_CASE("gradients of the forward's tensors inside grad_fn: an error that says so, not a silent none") {
  auto f = custom_gradient([](Tensor x) {
    Tensor y = sin(x);
    auto gradFn = [x, y](Tensor dy) {
      auto g = gradients({y}, {x}); // y and x are the forward's: constants here
      return dy * *g[0];
    };
    return std::make_pair(y, gradFn);
  });
  CHECK_THROWS_WITH_AS(grad([f](Tensor x) { return f(x); })(0.5),
                       doctest::Contains("gradients: ys[0] was traced outside the function being traced"), Error);
  // What works instead: differentiate a function of the forward's input in grad_fn.
  auto ok = custom_gradient([](Tensor x) {
    auto gradFn = [x](Tensor dy) { return dy * grad([](Tensor t) { return sin(t); })(x); };
    return std::make_pair(sin(x), gradFn);
  });
  CHECK(scalarOf(grad([ok](Tensor x) { return ok(x); })(0.5)) == doctest::Approx(std::cos(0.5)));
}

TEST_CASE("check_grads: passes correct derivatives, catches a wrong VJP at any order") {
  auto f = [](Tensor x, Tensor y) { return sum(sin(x) * y + x * x * y); };
  const Array x = f64({0.3, -1.1, 2.0}), y = f64({1.5, 0.25, -0.5});
  check_grads(f, std::tuple{x, y}, {.order = 2});
  check_grads([](Tensor t) { return exp(t) * 2.0; }, Array(std::vector<float>{0.5f, 1.0f}), {.order = 3});

  // A wrong first derivative for argument 1.
  auto wrong = custom_gradient([](Tensor a, Tensor b) {
    auto gradFn = [a, b](Tensor dz) { return std::make_tuple(dz * b, dz * a * 1.5); };
    return std::make_pair(a * b, gradFn);
  });
  const uint32_t line = __LINE__ + 2;
  try {
    check_grads([wrong](Tensor a, Tensor b) { return sum(wrong(a, b)); }, std::tuple{x, y});
    FAIL("not caught");
  } catch (const Error& e) {
    CHECK(e.message().starts_with("check_grads: the reverse-mode derivative of argument 1 disagrees with central finite "
                                  "differences"));
    CHECK(e.location().line == line);
  }
  // A right first derivative whose own derivative is wrong (the VJP hides its
  // dependence on x behind stop_gradient): only order 2 sees it.
  auto shallow = custom_gradient([](Tensor a) {
    auto gradFn = [a](Tensor dz) { return dz * 2.0 * stop_gradient(a); };
    return std::make_pair(a * a, gradFn);
  });
  auto g = [shallow](Tensor a) { return sum(shallow(a)); };
  check_grads(g, x);
  CHECK_THROWS_WITH_AS(check_grads(g, x, {.order = 2}),
                       doctest::Contains("the reverse-mode derivative of order 2 of argument 0 disagrees"), Error);
  CHECK_THROWS_WITH_AS(check_grads(g, x, {.order = 2, .modes = {"fwd"}}),
                       doctest::Contains("the forward-mode derivative of order 2 of argument 0 disagrees"), Error);
  CHECK_THROWS_WITH_AS(check_grads(g, x, {.modes = {"sideways"}}),
                       doctest::Contains("check_grads: unknown mode 'sideways' (known: rev, fwd)"), Error);
}

TEST_CASE("check_grads in forward mode: jvp against finite differences, up to order 3") {
  auto f = [](Tensor x, Tensor y) { return sum(sin(x) * y + x * x * y); };
  const Array x = f64({0.3, -1.1, 2.0}), y = f64({1.5, 0.25, -0.5});
  check_grads(f, std::tuple{x, y}, {.order = 3, .modes = {"fwd", "rev"}});
  // Through a scan, and with an integer argument (it takes no tangent).
  auto loop = [](Tensor x, Tensor k) {
    auto [c, ys] = scan([](Tensor c, Tensor xi) { return std::pair{tanh(c * xi + xi), c * c}; }, full({}, 0.5, DType::f64), x);
    return sum(ys) * cast(k, DType::f64) + c;
  };
  check_grads(loop, std::tuple{f64({0.4, -0.3, 0.7}), Array(int32_t{3})}, {.order = 2, .modes = {"fwd"}});
  // A wrong custom gradient is caught in forward mode too: its transpose is wrong.
  auto wrong = custom_gradient([](Tensor a, Tensor b) {
    auto gradFn = [a, b](Tensor dz) { return std::make_tuple(dz * b, dz * a * 1.5); };
    return std::make_pair(a * b, gradFn);
  });
  CHECK_THROWS_WITH_AS(check_grads([wrong](Tensor a, Tensor b) { return sum(wrong(a, b)); }, std::tuple{x, y}, {.modes = {"fwd"}}),
                       doctest::Contains("check_grads: the forward-mode derivative of argument 1 disagrees"), Error);
}

namespace {
/// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  ScopedEnv(std::string n, const char* value) : name(std::move(n)) { setenv(name.c_str(), value, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};
} // namespace

TEST_CASE("ADJIT_CHECK_CUSTOM_VJP: a wrong VJP is caught, log1pexp is not flagged where autodiff is NaN") {
  ScopedEnv check("ADJIT_CHECK_CUSTOM_VJP", "1");
  auto log1pexp = custom_gradient([](Tensor x) {
    Tensor e = exp(x);
    auto gradFn = [e](Tensor dy) { return dy * (1 - 1 / (1 + e)); };
    return std::make_pair(log(1 + e), gradFn);
  });
  auto dlog1pexp = grad([log1pexp](Tensor x) { return sum(log1pexp(x)); });
  // At 100 (f32) autodiff of log(1 + e^x) is NaN; the custom VJP gives 1: not an error.
  CHECK(dlog1pexp(Array(std::vector<float>{0.5f, 100.0f})).to_vector<float>()[1] == 1.0f);

  const uint32_t line = __LINE__ + 1;
  auto wrong = custom_gradient([](Tensor x) {
    auto gradFn = [x](Tensor dy) { return dy * cos(x) * 1.01; };
    return std::make_pair(sin(x), gradFn);
  });
  try {
    grad([wrong](Tensor x) { return sum(wrong(x)); })(f64({0.1, 0.7, 1.3}));
    FAIL("not caught");
  } catch (const Error& e) {
    CHECK(e.message().find("custom_gradient") != std::string::npos);
    CHECK(e.message().find("its VJP disagrees with the autodiff of its forward for input 0: element") != std::string::npos);
    CHECK(e.location().line == line);
  }
  // A forward without autodiff (prevent_gradient inside) is checked by differences.
  auto opaque = custom_gradient([](Tensor x) {
    auto gradFn = [x](Tensor dy) { return dy * 2.0 * x * 1.5; };
    return std::make_pair(prevent_gradient(x * x), gradFn);
  });
  CHECK_THROWS_WITH_AS(grad([opaque](Tensor x) { return sum(opaque(x)); })(f64({0.4, -0.9})),
                       doctest::Contains("its VJP disagrees with central finite differences of its forward"), Error);
  auto opaqueRight = custom_gradient([](Tensor x) {
    auto gradFn = [x](Tensor dy) { return dy * 2.0 * x; };
    return std::make_pair(prevent_gradient(x * x), gradFn);
  });
  CHECK(grad([opaqueRight](Tensor x) { return sum(opaqueRight(x)); })(f64({0.4, -0.9})).to_vector<double>() ==
        std::vector<double>{0.8, -1.8});
}

TEST_CASE("the gradient of reading one slice (a scalar index) matches finite differences") {
  // take with a scalar index has its own VJP (a select that fuses); check it
  // along every axis and with a negative and an out-of-range index.
  const Array x = f64({0.3, -1.2, 2.0, 0.7, 1.1, -0.4}, {2, 3});
  for (int axis = 0; axis < 2; ++axis)
    for (int k : {0, 1, -1, 7}) {
      CAPTURE(axis);
      CAPTURE(k);
      auto f = [axis, k](Tensor t) { return sum(sin(take(t, constant(Array(int32_t(k))), axis)) * 1.5); };
      check_grads(f, x, {.order = 2});
    }
  check_grads([](Tensor t) { return sum(t[1] * t[0]); }, x);
}
