// test/unit/test_vmap.cpp — vmap: batched functions against loops of the
// unbatched one, in_axes and out_axes, shared arguments, the batch size, and
// the errors, each with its message and line.
#include "Check.h"

#include "batching/Rules.h"
#include "transforms/Passes.h"

#include <adjit/vmap.h>

#include <cstring>

using namespace adjit;
using namespace adjit::test;

namespace {

} // namespace

TEST_CASE("vmap of elementwise ops and reductions equals a loop") {
  auto f = [](const Tensor& x, const Tensor& y) { return sum(tanh(x) * y + exp(x), {0}); };
  const Array xs = randomArray({DType::f64, {5, 3}}, 1), ys = randomArray({DType::f64, {5, 3}}, 2);
  const Array got = vmap(f)(xs, ys);
  auto one = jit(f);
  std::vector<Array> want;
  for (int64_t b = 0; b < 5; ++b) want.push_back(one(row(xs, b), row(ys, b)));
  std::string why;
  CHECK_MESSAGE(close(got, stackRows(want), 1e-12, &why), why);
}

TEST_CASE("vmap shares arguments with in_axes nullopt and moves axes with in_axes and out_axes") {
  auto f = [](const Tensor& x, const Tensor& w) { return matmul(reshape(x, {1, 3}), w); };
  const Array x = randomArray({DType::f64, {3, 4}}, 3), w = randomArray({DType::f64, {3, 2}}, 4);
  // x batched along its last axis (4 examples of f64[3]); w shared; result batch axis last.
  const Array got = vmap(f, {.in_axes = {1, std::nullopt}, .out_axes = {-1}})(x, w);
  CHECK(got.type() == Type{DType::f64, {1, 2, 4}});
  auto one = jit(f);
  for (int64_t b = 0; b < 4; ++b) {
    Array xb(Type{DType::f64, {3}});
    for (int64_t i = 0; i < 3; ++i) xb.set(i, x.get(i * 4 + b));
    const Array y = one(xb, w);
    for (int64_t j = 0; j < 2; ++j) CHECK(got.get(j * 4 + b) == doctest::Approx(y.get(j)).epsilon(1e-12));
  }
}

TEST_CASE("vmap: an output that reads no batched argument is broadcast, or kept with out_axes nullopt") {
  auto f = [](const Tensor& x, const Tensor& c) { return std::make_tuple(x * 2.0, c + 1.0); };
  const Array x = randomArray({DType::f32, {3, 2}}, 5), c = randomArray({DType::f32, {2}}, 6);
  auto [a, b] = vmap(f, {.in_axes = {0, std::nullopt}})(x, c);
  CHECK(b.type() == Type{DType::f32, {3, 2}});
  auto [a2, b2] = vmap(f, {.in_axes = {0, std::nullopt}, .out_axes = {0, std::nullopt}})(x, c);
  CHECK(b2.type() == Type{DType::f32, {2}});
  for (int64_t i = 0; i < 2; ++i) CHECK(b2.get(i) == b.get(4 + i));
  (void)a;
  (void)a2;
}

TEST_CASE("vmap with axis_size and no batched argument") {
  auto f = [](const Tensor& c) { return c * 3.0; };
  const Array got = vmap(f, {.in_axes = {std::nullopt}, .axis_size = 4})(f32({1, 2}, {2}));
  CHECK(got.type() == Type{DType::f32, {4, 2}});
  CHECK(got.get(7) == 6.0);
}

TEST_CASE("vmap inside a trace joins it, and nests") {
  auto inner = [](const Tensor& x) { return sum(x * x, {0}); };
  auto f = jit([&](const Tensor& x) { return vmap(vmap(inner))(x); });
  const Array x = randomArray({DType::f64, {2, 3, 4}}, 7);
  const Array got = f(x);
  REQUIRE(got.type() == Type{DType::f64, {2, 3}});
  for (int64_t i = 0; i < 6; ++i) {
    double s = 0;
    for (int64_t j = 0; j < 4; ++j) s += x.get(i * 4 + j) * x.get(i * 4 + j);
    CHECK(got.get(i) == doctest::Approx(s).epsilon(1e-12));
  }
}

TEST_CASE("vmap errors name what disagrees, at the user's line") {
  auto f = [](const Tensor& x, const Tensor& y) { return x + y; };
  const int line = __LINE__ + 1;
  auto v = vmap(f);
  try {
    (void)v(f32({1, 2, 3}, {3}), f32({1, 2}, {2}));
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("batch sizes disagree") != std::string::npos);
    CHECK(e.location().line == line);
  }
  CHECK_THROWS_WITH_AS((void)vmap(f, {.in_axes = {0}})(f32({1}, {1}), f32({1}, {1})),
                       doctest::Contains("in_axes has 1 entries"), Error);
  CHECK_THROWS_WITH_AS((void)vmap(f, {.in_axes = {2, 0}})(f32({1}, {1}), f32({1}, {1})),
                       doctest::Contains("expected an axis in [-1, 0]"), Error);
  CHECK_THROWS_WITH_AS((void)vmap(f)(f32({1}), f32({1}, {1})), doctest::Contains("is the scalar f32[]"), Error);
  CHECK_THROWS_WITH_AS((void)vmap(f, {.in_axes = {std::nullopt, std::nullopt}})(f32({1}, {1}), f32({1}, {1})),
                       doctest::Contains("give VmapOptions::axis_size"), Error);
  CHECK_THROWS_WITH_AS((void)vmap(f, {.out_axes = {std::nullopt}})(f32({1}, {1}), f32({1}, {1})),
                       doctest::Contains("out_axes gives it std::nullopt"), Error);
}

TEST_CASE("vmap as a pass: @f.vmap prints, parses back and runs") {
  Module m = Module::parse(R"(
func @f(%x: f64[3], %w: f64[3, 2]) -> (f64[2]) {
  %r = reshape(%x) {shape = [1, 3]} : f64[1, 3]
  %y = matmul(%r, %w) : f64[1, 2]
  %z = reshape(%y) {shape = [2]} : f64[2]
  return %z
}
)");
  transforms::runPipeline(m.impl(), {"vmap(f, in_axes=[0,-], axis_size=4)"});
  m.verify();
  const std::string text = m.str();
  CHECK(text.find("func @f.vmap(") != std::string::npos);
  CHECK(Module::parse(text).str() == text);
  const Array x = randomArray({DType::f64, {4, 3}}, 8), w = randomArray({DType::f64, {3, 2}}, 9);
  const Array got = m.interpret("f.vmap", {x, w}).at(0);
  for (int64_t b = 0; b < 4; ++b) {
    const Array want = m.interpret("f", {row(x, b), w}).at(0);
    for (int64_t j = 0; j < 2; ++j) CHECK(got.get(b * 2 + j) == doctest::Approx(want.get(j)).epsilon(1e-12));
  }
  CHECK_THROWS_WITH_AS(transforms::runPipeline(m.impl(), {"vmap(f)"}), doctest::Contains("give the batch size"), Error);
  CHECK_THROWS_WITH_AS(transforms::runPipeline(m.impl(), {"vmap(f, in_axes=[0], axis_size=2)"}), doctest::Contains("in_axes has 1 entries"), Error);
}

TEST_CASE("vmap of grad gives per-example gradients") {
  const Array w = randomArray({DType::f32, {2, 3}}, 10);
  const Array xs = randomArray({DType::f32, {32, 3}}, 11), ys = randomArray({DType::f32, {32, 2}}, 12);
  // [snippet:vmap-per-example]
  // One example's loss: x f32[3], y f32[2], weights w f32[2, 3].
  auto loss = [](const Tensor& w, const Tensor& x, const Tensor& y) {
    Tensor p = tanh(reshape(matmul(w, reshape(x, {3, 1})), {2}));
    return sum(square(p - y));
  };
  // The gradient with respect to w for each example: w shared, x and y batched along axis 0.
  auto per_example = vmap(grad(loss), {.in_axes = {std::nullopt, 0, 0}});
  Array g = per_example(w, xs, ys); // f32[32, 2, 3]: one gradient per example
  // [/snippet:vmap-per-example]
  REQUIRE(g.type() == Type{DType::f32, {32, 2, 3}});
  auto one = jit(grad(loss));
  for (int64_t b = 0; b < 32; ++b) {
    const Array want = one(w, row(xs, b), row(ys, b));
    for (int64_t i = 0; i < 6; ++i) CHECK(g.get(b * 6 + i) == doctest::Approx(want.get(i)).epsilon(1e-5));
  }
}

TEST_CASE("vmap composes: grad of a sum over vmap, vmap of jvp, vmap of hessian, jit of vmap") {
  auto f = [](const Tensor& x) { return sum(sin(x) * x, {0}) + sum(x, {0}) * sum(x * x, {0}); };
  const Array xs = randomArray({DType::f64, {6, 4}}, 13);
  std::vector<Array> rows;
  for (int64_t b = 0; b < 6; ++b) rows.push_back(row(xs, b));
  std::string why;
  // grad of the batch's total equals the stack of per-example gradients.
  auto total = [&](const Tensor& x) { return sum(vmap(f)(x), {0}); };
  std::vector<Array> grads;
  for (const Array& r : rows) grads.push_back(jit(grad(f))(r));
  CHECK_MESSAGE(close(jit(grad(total))(xs), stackRows(grads), 1e-12, &why), why);
  // vmap of jvp: a batch of directional derivatives.
  const Array vs = randomArray({DType::f64, {6, 4}}, 14);
  auto dir = [&](const Tensor& x, const Tensor& v) { return jvp(f, std::tuple{x}, std::tuple{v}).second; };
  std::vector<Array> dirs;
  for (int64_t b = 0; b < 6; ++b) dirs.push_back(jit(dir)(rows[b], row(vs, b)));
  CHECK_MESSAGE(close(vmap(dir)(xs, vs), stackRows(dirs), 1e-12, &why), why);
  // vmap of hessian: one Hessian per example.
  std::vector<Array> hs;
  for (const Array& r : rows) hs.push_back(jit(hessian(f))(r));
  CHECK_MESSAGE(close(vmap(hessian(f))(xs), stackRows(hs), 1e-12, &why), why);
  // jit of vmap: the same as vmap called with Arrays.
  CHECK_MESSAGE(close(jit([&](const Tensor& x) { return vmap(f)(x); })(xs), vmap(f)(xs), 0, &why), why);
}

TEST_CASE("vmap takes and returns structures") {
  auto f = [](const std::pair<Tensor, Tensor>& p, const std::vector<Tensor>& v) {
    return std::make_tuple(p.first * v[0], std::vector<Tensor>{p.second + v[1], v[0] * 2.0});
  };
  const Array a = randomArray({DType::f64, {3, 2}}, 15), b = randomArray({DType::f64, {3}}, 16);
  const Array c = randomArray({DType::f64, {2}}, 17), d = randomArray({DType::f64, {3}}, 18);
  // p batched along axis 0; v shared.
  auto [x, ys] = vmap(f, {.in_axes = {0, std::nullopt}})(std::pair{a, b}, std::vector<Array>{c, d});
  CHECK(x.type() == Type{DType::f64, {3, 2}});
  REQUIRE(ys.size() == 2);
  CHECK(ys[0].type() == Type{DType::f64, {3, 3}});
  CHECK(ys[1].type() == Type{DType::f64, {3, 2}}); // shared, broadcast along the batch
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j) CHECK(x.get(i * 2 + j) == a.get(i * 2 + j) * c.get(j));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 3; ++j) CHECK(ys[0].get(i * 3 + j) == b.get(i) + d.get(j));
}

TEST_CASE("vmap is linear in the program: a chain's batched twin grows with it, op for op") {
  // A chain of n elementwise ops reading a shared weight: the batched twin
  // has at most a fixed number of ops per source op (the weight is broadcast
  // once, not once per use), and a long chain needs no deep recursion.
  auto batchedOps = [](int n) {
    auto chain = [n](const Tensor& x, const Tensor& w) {
      Tensor y = x;
      for (int i = 0; i < n; ++i) y = i % 2 ? y * w : y + w;
      return y;
    };
    Module m = trace(chain, Type{DType::f32, {4}}, Type{DType::f32, {4}});
    auto shared = std::shared_ptr<ir::Module>(&m.impl(), [](ir::Module*) {});
    const std::string name = batching::vmapFunction(shared, "f", {{0, std::nullopt}, {0}, 8});
    return m.impl().lookup(name)->ops.size();
  };
  const std::size_t small = batchedOps(2000), large = batchedOps(20000);
  CHECK(small <= 2000 + 8);
  CHECK(large <= 20000 + 8);
  CHECK(large - small <= 18000 + 8);
}
