// test/unit/test_vmap_control.cpp — vmap of control flow, calls and custom
// gradients: scan, fori_loop, while_loop (batched predicates, per-example
// trip counts, max_iterations), cond and switch_case, custom_gradient,
// custom_jvp, recompute_grad, jitted callees, debug_callback and variables;
// each against a loop of per-example calls, values and gradients.
#include "Check.h"

#include "transforms/Passes.h"

#include <adjit/vmap.h>

#include <cstring>

using namespace adjit;
using namespace adjit::test;

namespace {

/// `got` equals the stack of want(b) for b in [0, n), within rtol.
template <class Want> void checkRows(const Array& got, int64_t n, Want want, double rtol = 1e-12) {
  std::vector<Array> rows;
  for (int64_t b = 0; b < n; ++b) rows.push_back(want(b));
  std::string why;
  CHECK_MESSAGE(close(got, stackRows(rows), rtol, &why), why);
}

int64_t count(const std::string& text, const std::string& what) {
  int64_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

} // namespace

TEST_CASE("vmap of scan: batched xs, batched init, batched consts") {
  auto f = [](const Tensor& c0, const Tensor& xs, const Tensor& w) {
    auto [c, ys] = scan([&](Tensor c, Tensor x) { return std::pair{tanh(c * w + x), c * x}; }, c0, xs);
    return std::make_tuple(c, ys);
  };
  auto one = jit(f);
  const Array c0 = randomArray({DType::f64, {3}}, 1), xs = randomArray({DType::f64, {4, 3}}, 2), w = randomArray({DType::f64, {3}}, 3);
  const Array C0 = randomArray({DType::f64, {5, 3}}, 4), XS = randomArray({DType::f64, {5, 4, 3}}, 5),
              W = randomArray({DType::f64, {5, 3}}, 6);
  // Only xs batched: the carry becomes batched through the body (fixed point).
  {
    auto [c, ys] = vmap(f, {.in_axes = {std::nullopt, 0, std::nullopt}})(c0, XS, w);
    checkRows(c, 5, [&](int64_t b) { return std::get<0>(one(c0, row(XS, b), w)); });
    checkRows(ys, 5, [&](int64_t b) { return std::get<1>(one(c0, row(XS, b), w)); });
  }
  // Only the initial carry batched.
  {
    auto [c, ys] = vmap(f, {.in_axes = {0, std::nullopt, std::nullopt}})(C0, xs, w);
    checkRows(c, 5, [&](int64_t b) { return std::get<0>(one(row(C0, b), xs, w)); });
    checkRows(ys, 5, [&](int64_t b) { return std::get<1>(one(row(C0, b), xs, w)); });
  }
  // Only a constant the body reads batched; and everything batched, reverse.
  {
    auto [c, ys] = vmap(f, {.in_axes = {std::nullopt, std::nullopt, 0}})(c0, xs, W);
    checkRows(c, 5, [&](int64_t b) { return std::get<0>(one(c0, xs, row(W, b))); });
    checkRows(ys, 5, [&](int64_t b) { return std::get<1>(one(c0, xs, row(W, b))); });
  }
  auto g = [](const Tensor& c0, const Tensor& xs) {
    return scan([](Tensor c, Tensor x) { return std::pair{c * x + 1.0, sin(c)}; }, c0, xs, {.reverse = true}).second;
  };
  const Array ys = vmap(g)(C0, XS);
  checkRows(ys, 5, [&](int64_t b) { return jit(g)(row(C0, b), row(XS, b)); });
}

TEST_CASE("vmap of fori_loop: a batched constant, and a batched trip count (a while loop)") {
  auto f = [](const Tensor& x, const Tensor& n) {
    return fori_loop(0, n, [&](Tensor i, Tensor c) { return c * x + cast(i, DType::f64); }, x);
  };
  const Array xs = randomArray({DType::f64, {4, 2}}, 7);
  const Array ns = Array(std::vector<int32_t>{0, 3, 1, 5}, {4});
  const Array got = vmap(f)(xs, ns);
  checkRows(got, 4, [&](int64_t b) { return jit(f)(row(xs, b), row(ns, b)); });
  auto fixed = [](const Tensor& x) { return fori_loop(0, 3, [&](Tensor, Tensor c) { return sin(c) * x; }, x); };
  checkRows(vmap(fixed)(xs), 4, [&](int64_t b) { return jit(fixed)(row(xs, b)); });
}

TEST_CASE("vmap of while_loop with a batched predicate: every example its own trip count, values and gradients") {
  for (bool bounded : {false, true}) {
    CAPTURE(bounded);
    const LoopOptions opts = bounded ? LoopOptions{.max_iterations = 50} : LoopOptions{};
    // x grows until it passes 4: 0 to many steps, per example.
    auto f = [opts](const Tensor& x, const Tensor& w) {
      auto c = while_loop([](const std::pair<Tensor, Tensor>& c) { return lt(c.first, 4.0); },
                          [&](const std::pair<Tensor, Tensor>& c) {
                            return std::pair{c.first * w + 0.5, c.second + sin(c.first)};
                          },
                          std::pair{x, x * 0.5}, opts);
      return c.first * c.second;
    };
    const Array xs(std::vector<double>{5.0, 0.1, 1.0, 3.9, -0.5}, {5});
    const Array w(1.5);
    auto one = jit(f);
    checkRows(vmap(f, {.in_axes = {0, std::nullopt}})(xs, w), 5, [&](int64_t b) { return one(row(xs, b), w); });
    // vmap(grad(f)): per-example gradients, with respect to x and to the shared w.
    auto g = grad(f, argnums<0, 1>);
    auto [dx, dw] = vmap(g, {.in_axes = {0, std::nullopt}})(xs, w);
    checkRows(dx, 5, [&](int64_t b) { return std::get<0>(g(row(xs, b), w)); }, 1e-10);
    checkRows(dw, 5, [&](int64_t b) { return std::get<1>(g(row(xs, b), w)); }, 1e-10);
    if (!bounded) {
      // The reverse of the unbounded loop (while_vjp) is batched too: no scan over the examples.
      const Module m = trace([&](const Tensor& x, const Tensor& w) { return std::get<0>(vmap(g, {.in_axes = {0, std::nullopt}})(x, w)); },
                             Type{DType::f64, {5}}, Type{DType::f64, {}});
      CHECK(m.str().find("while_vjp @") != std::string::npos);
      CHECK(m.str().find("scan @") == std::string::npos);
    }
    // grad of a sum over vmap: the same rows for x, their sum for w.
    auto total = [f](const Tensor& xs, const Tensor& w) { return sum(vmap(f, {.in_axes = {0, std::nullopt}})(xs, w)); };
    auto [gx, gw] = grad(total, argnums<0, 1>)(xs, w);
    checkRows(gx, 5, [&](int64_t b) { return std::get<0>(g(row(xs, b), w)); }, 1e-10);
    double sw = 0;
    for (int64_t b = 0; b < 5; ++b) sw += std::get<1>(g(row(xs, b), w)).item<double>();
    CHECK(gw.item<double>() == doctest::Approx(sw).epsilon(1e-10));
  }
}

TEST_CASE("vmap of while_loop: an unbatched predicate runs as before; max_iterations exceeded by one example raises") {
  // The trip count depends only on the shared n: the loop stays one loop.
  auto f = [](const Tensor& x, const Tensor& n) {
    auto c = while_loop([&](const std::pair<Tensor, Tensor>& c) { return lt(c.second, n); },
                        [](const std::pair<Tensor, Tensor>& c) { return std::pair{cos(c.first), c.second + 1}; },
                        std::pair{x, full({}, 0, DType::i32)});
    return c.first;
  };
  const Array xs = randomArray({DType::f64, {3, 2}}, 8);
  const Array n(int32_t{4});
  checkRows(vmap(f, {.in_axes = {0, std::nullopt}})(xs, n), 3, [&](int64_t b) { return jit(f)(row(xs, b), n); });
  auto h = [](const Tensor& x) {
    return while_loop([](const Tensor& x) { return lt(x, 10.0); }, [](const Tensor& x) { return x + 1.0; }, x,
                      {.max_iterations = 5});
  };
  CHECK(vmap(h)(Array(std::vector<double>{6.0, 9.5, 12.0}, {3})).get(0) == 10.0);
  CHECK_THROWS_WITH_AS((void)vmap(h)(Array(std::vector<double>{6.0, 3.5, 12.0}, {3})), doctest::Contains("max_iterations"), Error);
}

TEST_CASE("vmap of cond and switch_case: batched predicate selects per example, unbatched runs one branch") {
  auto f = [](const Tensor& p, const Tensor& x) {
    return cond(gt(p, 0.0), [](Tensor a) { return sin(a) * 2.0; }, [](Tensor a) { return a * a; }, x);
  };
  const Array ps(std::vector<double>{1.0, -1.0, 0.5, -2.0}, {4});
  const Array xs = randomArray({DType::f64, {4, 3}}, 9);
  checkRows(vmap(f)(ps, xs), 4, [&](int64_t b) { return jit(f)(row(ps, b), row(xs, b)); });
  checkRows(vmap(f, {.in_axes = {std::nullopt, 0}})(Array(-1.0), xs), 4, [&](int64_t b) { return jit(f)(Array(-1.0), row(xs, b)); });
  // Gradients through a batched predicate: each example its own branch's.
  auto loss = [f](const Tensor& p, const Tensor& x) { return sum(f(p, x)); };
  auto g = grad(loss, argnums<1>);
  checkRows(vmap(g)(ps, xs), 4, [&](int64_t b) { return g(row(ps, b), row(xs, b)); });
  // switch_case clamps its index; per example.
  auto s = [](const Tensor& i, const Tensor& x) {
    // The last branch reads nothing batched: its result is broadcast to the common layout.
    return switch_case(i, std::tuple{[](Tensor a) { return a + 1.0; }, [](Tensor a) { return exp(a); }, [](Tensor a) { return a * 3.0; },
                                     [](Tensor) { return full({2}, 7.0, DType::f64); }}, x);
  };
  const Array is(std::vector<int32_t>{-1, 0, 1, 2, 7}, {5});
  checkRows(vmap(s, {.in_axes = {std::nullopt, 0}})(Array(int32_t{3}), randomArray({DType::f64, {5, 2}}, 10)), 5,
            [&](int64_t) { return Array(std::vector<double>{7.0, 7.0}, {2}); });
  const Array x5 = randomArray({DType::f64, {5, 2}}, 10);
  checkRows(vmap(s)(is, x5), 5, [&](int64_t b) { return jit(s)(row(is, b), row(x5, b)); });
  checkRows(vmap(s, {.in_axes = {std::nullopt, 0}})(Array(int32_t{1}), x5), 5, [&](int64_t b) { return jit(s)(Array(int32_t{1}), row(x5, b)); });
}

TEST_CASE("vmap of cond with a batched predicate and a branch with effects is an error naming the branch") {
  auto f = [](const Tensor& p, const Tensor& x) {
    return cond(gt(p, 0.0), [](Tensor a) {
      debug_callback([](const std::vector<Array>&) {}, {a});
      return a * 2.0;
    }, [](Tensor a) { return a; }, x);
  };
  const int line = __LINE__ - 5;
  try {
    (void)vmap(f)(Array(std::vector<double>{1.0, -1.0}, {2}), Array(std::vector<double>{1.0, 2.0}, {2}));
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("branch 1") != std::string::npos);
    CHECK(std::string(e.what()).find("side effects") != std::string::npos);
    CHECK(e.location().line == line);
  }
  // With an unbatched predicate only the taken branch runs: no error.
  CHECK(vmap(f, {.in_axes = {std::nullopt, 0}})(Array(1.0), Array(std::vector<double>{1.0, 2.0}, {2})).get(1) == 4.0);
}

TEST_CASE("vmap(grad) through custom_gradient runs the user's rule per example") {
  // The user's gradient (7 x w dy) is not the true one (2 x w dy): the
  // results show which ran.
  auto sq = custom_gradient([](Tensor x, Tensor w) {
    return std::make_pair(x * x * w, [x, w](Tensor dy) { return std::make_pair(dy * 7.0 * x * w, dy * x); });
  });
  auto loss = [sq](const Tensor& x, const Tensor& w) { return sum(sin(sq(x, w))); };
  auto g = grad(loss, argnums<0, 1>);
  const Array xs = randomArray({DType::f64, {4, 3}}, 11), w = randomArray({DType::f64, {3}}, 12);
  auto [dx, dw] = vmap(g, {.in_axes = {0, std::nullopt}})(xs, w);
  checkRows(dx, 4, [&](int64_t b) { return std::get<0>(g(row(xs, b), w)); });
  checkRows(dw, 4, [&](int64_t b) { return std::get<1>(g(row(xs, b), w)); });
  // The user's rule, not the true derivative, ran.
  const double x0 = xs.get(0), w0 = w.get(0);
  CHECK(dx.get(0) == doctest::Approx(std::cos(x0 * x0 * w0) * 7.0 * x0 * w0).epsilon(1e-12));
  // grad of a sum over vmap: the shared w's gradient is the sum of the examples'.
  auto total = [loss](const Tensor& xs, const Tensor& w) { return sum(vmap(loss, {.in_axes = {0, std::nullopt}})(xs, w)); };
  auto [gx, gw] = grad(total, argnums<0, 1>)(xs, w);
  checkRows(gx, 4, [&](int64_t b) { return std::get<0>(g(row(xs, b), w)); });
  std::vector<double> sw(3, 0.0);
  for (int64_t b = 0; b < 4; ++b)
    for (int64_t j = 0; j < 3; ++j) sw[static_cast<std::size_t>(j)] += std::get<1>(g(row(xs, b), w)).get(j);
  for (int64_t j = 0; j < 3; ++j) CHECK(gw.get(j) == doctest::Approx(sw[static_cast<std::size_t>(j)]).epsilon(1e-12));
}

TEST_CASE("vmap through custom_jvp and recompute_grad") {
  auto wrong = custom_jvp([](Tensor x) { return x * x; }, [](const std::tuple<Tensor>& p, const std::tuple<Tensor>& t) {
    return std::make_pair(std::get<0>(p) * std::get<0>(p), std::get<0>(t) * 7.0 * std::get<0>(p));
  });
  auto loss = [wrong](const Tensor& x) { return sum(wrong(x)); };
  const Array xs = randomArray({DType::f64, {4, 3}}, 13);
  const Array dx = vmap(grad(loss))(xs);
  for (int64_t i = 0; i < xs.size(); ++i) CHECK(dx.get(i) == doctest::Approx(7.0 * xs.get(i)).epsilon(1e-12));
  auto total = [loss](const Tensor& xs) { return sum(vmap(loss)(xs)); };
  const Array gx = grad(total)(xs);
  for (int64_t i = 0; i < xs.size(); ++i) CHECK(gx.get(i) == doctest::Approx(7.0 * xs.get(i)).epsilon(1e-12));
  // Forward mode through the batched rule.
  auto tangent = [wrong](const Tensor& x) { return jvp([wrong](Tensor a) { return wrong(a); }, std::tuple{x}, std::tuple{x * 0.0 + 1.0}).second; };
  const Array t = vmap(tangent)(xs);
  for (int64_t i = 0; i < xs.size(); ++i) CHECK(t.get(i) == doctest::Approx(7.0 * xs.get(i)).epsilon(1e-12));

  // A shared operand: its tangent unbatched, its gradient per example (vmap of grad) or summed (grad of the sum).
  auto scaled = custom_jvp([](Tensor x, Tensor w) { return x * w; }, [](const std::tuple<Tensor, Tensor>& p, const std::tuple<Tensor, Tensor>& t) {
    const auto& [x, w] = p;
    const auto& [dx, dw] = t;
    return std::make_pair(x * w, dx * w * 7.0 + dw * x * 5.0);
  });
  auto sloss = [scaled](const Tensor& x, const Tensor& w) { return sum(sin(scaled(x, w))); };
  auto sg = grad(sloss, argnums<0, 1>);
  const Array w3 = randomArray({DType::f64, {3}}, 23);
  auto [sx, sw] = vmap(sg, {.in_axes = {0, std::nullopt}})(xs, w3);
  checkRows(sx, 4, [&](int64_t b) { return std::get<0>(sg(row(xs, b), w3)); });
  checkRows(sw, 4, [&](int64_t b) { return std::get<1>(sg(row(xs, b), w3)); });
  auto stotal = [sloss](const Tensor& xs, const Tensor& w) { return sum(vmap(sloss, {.in_axes = {0, std::nullopt}})(xs, w)); };
  const Array gws = std::get<1>(grad(stotal, argnums<0, 1>)(xs, w3));
  for (int64_t j = 0; j < 3; ++j) {
    double want = 0;
    for (int64_t b = 0; b < 4; ++b) want += std::get<1>(sg(row(xs, b), w3)).get(j);
    CHECK(gws.get(j) == doctest::Approx(want).epsilon(1e-12));
  }

  auto block = [](Tensor x, Tensor w) { return tanh(x * w + sin(x)); };
  auto rblock = recompute_grad(block);
  auto rloss = [rblock](const Tensor& x, const Tensor& w) { return sum(rblock(rblock(x, w), w)); };
  auto g = grad(rloss, argnums<0, 1>);
  const Array w = randomArray({DType::f64, {3}}, 14);
  auto [gx2, gw2] = vmap(g, {.in_axes = {0, std::nullopt}})(xs, w);
  checkRows(gx2, 4, [&](int64_t b) { return std::get<0>(g(row(xs, b), w)); });
  checkRows(gw2, 4, [&](int64_t b) { return std::get<1>(g(row(xs, b), w)); });
}

TEST_CASE("vmap of a jitted function called inside: one batched twin shared by both call sites") {
  auto inner = jit([](const Tensor& x) { return tanh(x) * 2.0; });
  auto f = [inner](const Tensor& x) { return inner(x) + inner(x * 3.0); };
  const Module m = trace([&](const Tensor& xs) { return vmap(f)(xs); }, Type{DType::f64, {4, 3}});
  const std::string text = m.str();
  CAPTURE(text);
  // The twin is called from both sites and defined once; no other function is batched.
  const std::size_t site = text.find("call @");
  REQUIRE(site != std::string::npos);
  const std::string twin = text.substr(site + 5, text.find('(', site) - site - 5);
  CHECK(twin.ends_with(".vmap"));
  CHECK(count(text, "call " + twin + "(") == 2);
  CHECK(count(text, "func " + twin + "(") == 1);
  CHECK(count(text, ".vmap(") == 3);
  const Array xs = randomArray({DType::f64, {4, 3}}, 15);
  checkRows(vmap(f)(xs), 4, [&](int64_t b) { return jit(f)(row(xs, b)); });
}

TEST_CASE("vmap of debug_callback: once per example, in batch order, with that example's slices") {
  std::vector<std::vector<double>> seen;
  auto f = [&seen](const Tensor& x, const Tensor& c) {
    debug_callback([&seen](const std::vector<Array>& v) { seen.push_back({v[0].get(0), v[0].get(1), v[1].item<double>()}); },
                   {x * 2.0, c});
    return x + 1.0;
  };
  const Array xs = randomArray({DType::f64, {3, 2}}, 16);
  (void)vmap(f, {.in_axes = {0, std::nullopt}})(xs, Array(5.0));
  REQUIRE(seen.size() == 3);
  for (std::size_t b = 0; b < 3; ++b) {
    CHECK(seen[b][0] == 2.0 * xs.get(static_cast<int64_t>(2 * b)));
    CHECK(seen[b][1] == 2.0 * xs.get(static_cast<int64_t>(2 * b + 1)));
    CHECK(seen[b][2] == 5.0);
  }
  // Inside a jitted callee (batched into its twin): the same, per example, in order.
  std::vector<double> order;
  auto noisy = jit([&order](const Tensor& x) {
    debug_callback([&order](const std::vector<Array>& v) { order.push_back(v[0].item<double>()); }, {x});
    return x * 2.0;
  });
  const Array got = vmap([noisy](const Tensor& x) { return noisy(x); })(Array(std::vector<double>{3.0, 1.0, 2.0}, {3}));
  CHECK(order == std::vector<double>{3.0, 1.0, 2.0});
  CHECK(got.get(2) == 4.0);
}

TEST_CASE("vmap reads variables unbatched; assign inside vmap is an error at its line") {
  Variable w("w", Array(std::vector<double>{1.0, 2.0, 3.0}, {3}));
  auto f = [&w](const Tensor& x) { return x * w.read(); };
  const Array xs = randomArray({DType::f64, {4, 3}}, 17);
  const Array got = vmap(f)(xs);
  for (int64_t i = 0; i < 12; ++i) CHECK(got.get(i) == xs.get(i) * static_cast<double>(i % 3 + 1));
  auto g = [&w](const Tensor& x) {
    (void)w.assign(x);
    return x;
  };
  const int line = __LINE__ - 3;
  try {
    (void)vmap(g)(xs);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("variable 'w': assign inside vmap is not supported") != std::string::npos);
    CHECK(e.location().line == line);
  }
}

TEST_CASE("vmap(grad) through a jitted callee batches its split forward and backward, without a loop over the batch") {
  auto inner = jit([](const Tensor& x, const Tensor& w) { return tanh(x * w) + sin(x); });
  auto loss = [inner](const Tensor& x, const Tensor& w) { return sum(inner(x, w) * inner(x * 2.0, w)); };
  auto g = grad(loss, argnums<0, 1>);
  const Array xs = randomArray({DType::f64, {4, 3}}, 18), w = randomArray({DType::f64, {3}}, 19);
  auto [dx, dw] = vmap(g, {.in_axes = {0, std::nullopt}})(xs, w);
  checkRows(dx, 4, [&](int64_t b) { return std::get<0>(g(row(xs, b), w)); });
  checkRows(dw, 4, [&](int64_t b) { return std::get<1>(g(row(xs, b), w)); });
  const Module m = trace([&](const Tensor& xs, const Tensor& w) { return std::get<0>(vmap(g, {.in_axes = {0, std::nullopt}})(xs, w)); },
                         Type{DType::f64, {4, 3}}, Type{DType::f64, {3}});
  const std::string text = m.str();
  CAPTURE(text);
  CHECK(text.find("scan @") == std::string::npos);
  // grad of a sum over vmap of the per-example loss.
  auto total = [loss](const Tensor& xs, const Tensor& w) { return sum(vmap(loss, {.in_axes = {0, std::nullopt}})(xs, w)); };
  auto [gx, gw] = grad(total, argnums<0, 1>)(xs, w);
  checkRows(gx, 4, [&](int64_t b) { return std::get<0>(g(row(xs, b), w)); });
  for (int64_t j = 0; j < 3; ++j) {
    double s = 0;
    for (int64_t b = 0; b < 4; ++b) s += std::get<1>(g(row(xs, b), w)).get(j);
    CHECK(gw.get(j) == doctest::Approx(s).epsilon(1e-12));
  }
}

TEST_CASE("vmap of control flow in the interpreter equals the JIT; a batched predicate makes one masked while") {
  auto f = [](const Tensor& x, const Tensor& i) {
    auto c = while_loop([](const Tensor& c) { return lt(c, 4.0); }, [](const Tensor& c) { return c * 1.5 + 0.5; }, x);
    auto [s, ys] = scan([](Tensor s, Tensor y) { return std::pair{s + y, s * y}; }, c, full({3}, 0.5, DType::f64) + x);
    return switch_case(i, std::tuple{[](Tensor a) { return a + 1.0; }, [](Tensor a) { return exp(a); }}, ys * s);
  };
  const Array xs(std::vector<double>{5.0, 0.1, 1.0, 3.9}, {4});
  const Array is(std::vector<int32_t>{0, 1, 1, 0}, {4});
  const Module m = trace([&](const Tensor& x, const Tensor& i) { return vmap(f)(x, i); }, Type{DType::f64, {4}}, Type{DType::i32, {4}});
  const std::string text = m.str();
  CAPTURE(text);
  CHECK(count(text, "= while @") == 1);
  CHECK(text.find("select(") != std::string::npos); // finished examples keep their carry
  CHECK(text.find("= switch @") == std::string::npos); // a batched index: every branch, selected
  const Array interpreted = m.interpret("f", {xs, is}).at(0);
  const Array compiled = vmap(f)(xs, is);
  std::string why;
  CHECK_MESSAGE(close(interpreted, compiled, 1e-12, &why), why);
  checkRows(compiled, 4, [&](int64_t b) { return jit(f)(row(xs, b), row(is, b)); });
}

TEST_CASE("the vmap pass on a while loop: @f.vmap prints, parses back and runs each example its own trip count") {
  Module m = Module::parse(R"(
func @cond(%lim: f64[], %x: f64[]) -> (i1[]) {
  %r = lt(%x, %lim) : i1[]
  return %r
}

func @body(%lim: f64[], %x: f64[]) -> (f64[]) {
  %c = constant() {value = dense<f64[], [1.5]>} : f64[]
  %y = mul(%x, %c) : f64[]
  %h = constant() {value = dense<f64[], [0.5]>} : f64[]
  %z = add(%y, %h) : f64[]
  return %z
}

func @f(%x: f64[], %lim: f64[]) -> (f64[]) {
  %r = while @cond, @body(%lim, %x) {consts = 1, max_iterations = 100} : f64[]
  return %r
}
)");
  transforms::runPipeline(m.impl(), {"vmap(f, in_axes=[0,-], axis_size=4)"});
  m.verify();
  const std::string text = m.str();
  CHECK(Module::parse(text).str() == text);
  const Array xs(std::vector<double>{5.0, 0.1, 1.0, 3.9}, {4});
  const Array lim(4.0);
  const Array got = m.interpret("f.vmap", {xs, lim}).at(0);
  checkRows(got, 4, [&](int64_t b) { return m.interpret("f", {row(xs, b), lim}).at(0); });
  CHECK(got.get(0) == 5.0); // no step
}

TEST_CASE("vmap of vmap of control flow, and vmap(grad) through a cond whose branch holds a bounded loop") {
  auto f = [](const Tensor& x) {
    auto c = while_loop([](const Tensor& c) { return lt(c, 3.0); }, [](const Tensor& c) { return c * 1.5 + 0.7; }, x);
    return cond(gt(c, 3.5), [](Tensor a) { return a - 3.5; }, [](Tensor a) { return a * a; }, c);
  };
  const Array xs = randomArray({DType::f64, {3, 4}}, 20);
  const Array got = vmap(vmap(f))(xs);
  for (int64_t i = 0; i < 12; ++i) CHECK(got.get(i) == doctest::Approx(jit(f)(Array(xs.get(i))).item<double>()).epsilon(1e-12));
  auto h = [](const Tensor& x) {
    return cond(gt(x, 0.0), [](Tensor a) {
      return fori_loop(0, 3, [](Tensor, Tensor c) { return sin(c) + c; }, a, {.max_iterations = 10});
    }, [](Tensor a) { return a * a * a; }, x);
  };
  auto g = grad(h);
  const Array x5(std::vector<double>{0.5, -0.5, 1.5, -2.0, 0.1}, {5});
  checkRows(vmap(g)(x5), 5, [&](int64_t b) { return g(row(x5, b)); });
}

TEST_CASE("vmap with forward mode through a batched while, and vmap(grad) of a checkpointed scan") {
  auto f = [](const Tensor& x) {
    return while_loop([](const Tensor& c) { return lt(c, 4.0); }, [](const Tensor& c) { return c * 1.5 + sin(c) + 1.0; }, x);
  };
  auto tangent = [f](const Tensor& x) { return jvp(f, std::tuple{x}, std::tuple{x * 0.0 + 1.0}).second; };
  const Array xs(std::vector<double>{5.0, 0.1, 1.0, 3.9, -0.5}, {5});
  checkRows(vmap(tangent)(xs), 5, [&](int64_t b) { return jit(tangent)(row(xs, b)); }, 1e-12);
  // jvp of the batched function: each example's tangent.
  auto outer = [f](const Tensor& xs) { return jvp([f](Tensor a) { return vmap(f)(a); }, std::tuple{xs}, std::tuple{xs * 0.0 + 1.0}).second; };
  checkRows(jit(outer)(xs), 5, [&](int64_t b) { return jit(tangent)(row(xs, b)); }, 1e-12);

  auto loss = [](const Tensor& x, const Tensor& w) {
    auto [c, ys] = scan([&](Tensor c, Tensor y) { return std::pair{tanh(c * w + y), c * y}; }, x, full({6, 3}, 0.25, DType::f64) + x,
                        {.checkpoint = every(2)});
    return sum(ys) + sum(c);
  };
  auto g = grad(loss, argnums<0, 1>);
  const Array x4 = randomArray({DType::f64, {4, 3}}, 21), w = randomArray({DType::f64, {3}}, 22);
  auto [dx, dw] = vmap(g, {.in_axes = {0, std::nullopt}})(x4, w);
  checkRows(dx, 4, [&](int64_t b) { return std::get<0>(g(row(x4, b), w)); });
  checkRows(dw, 4, [&](int64_t b) { return std::get<1>(g(row(x4, b), w)); });
}
