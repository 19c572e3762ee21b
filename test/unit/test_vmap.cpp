// test/unit/test_vmap.cpp — vmap: batched functions against loops of the
// unbatched one, in_axes and out_axes, shared arguments, the batch size, and
// the errors, each with its message and line.
#include "Check.h"

#include "batching/Rules.h"
#include "transforms/Passes.h"

#include <adjit/vmap.h>

#include <cstring>
#include <limits>

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

TEST_CASE("a VJP function made in a trace works under vmap and in a loop body there: the Jacobian by vmap(vjp_fn)") {
  // JAX's jacrev pattern: the pullback of f at x, batched over the basis of
  // the output. The pullback was made in the enclosing trace; the vmap body
  // is a nested one (it hung, reading the enclosing function's op count).
  auto f = [](const Tensor& z) { return sin(z) * z + z * z * z; };
  const Array x(std::vector<double>{0.5, -1.25, 2.0});
  auto jac = jit([&](const Tensor& x) {
    auto [y, pullback] = vjp(f, x);
    const Tensor basis = one_hot(iota({3}, 0, DType::i32), 3, DType::f64);
    return vmap([&](const Tensor& c) { return pullback(c)[0]; })(basis);
  });
  auto want = jit([&](const Tensor& x) { return jacrev(f)(x); });
  std::string why;
  CHECK_MESSAGE(close(jac(x), want(x), 1e-14, &why), why);
  // Called in a scan body: the cotangents of the steps, summed.
  auto looped = jit([&](const Tensor& x) {
    auto [y, pullback] = vjp(f, x);
    const Tensor basis = one_hot(iota({3}, 0, DType::i32), 3, DType::f64);
    return scan([&](const Tensor& acc, const Tensor& c) { return std::pair{acc + pullback(c)[0], acc}; }, zeros_like(x), basis)
        .first;
  });
  CHECK_MESSAGE(close(looped(x), jit([&](const Tensor& x) { return sum(jacrev(f)(x), {0}); })(x), 1e-14, &why), why);
  // linearize's function keeps no copy of f: called under vmap it is an Error, not a wrong tangent.
  auto lin = jit([&](const Tensor& x) {
    auto [y, jvpFn] = linearize(f, x);
    const Tensor basis = one_hot(iota({3}, 0, DType::i32), 3, DType::f64);
    return vmap([&](const Tensor& t) { return jvpFn(t); })(basis);
  });
  CHECK_THROWS_WITH_AS(lin(x), doctest::Contains("linearize: this derivative function was made in an enclosing trace and is called inside a nested one"),
                       Error);
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

// ---- Jacobians: the product with the basis folds away ------------------------

namespace {

/// Ops of kind `k` in the functions of `m`.
std::size_t opsOfKind(const Module& m, ir::OpKind k) {
  std::size_t n = 0;
  for (const auto& f : m.impl().functions)
    for (const ir::Op& op : f->ops) n += op.kind == k;
  return n;
}

/// Identity matrices made as jacfwd makes its basis, one_hot of an iota,
/// broadcast to [lead..., n, n].
Tensor basisIdentity(int64_t n, DType t, const Shape& lead) {
  const Tensor e = one_hot(iota(Shape{n}, 0, DType::i32), n, t);
  Shape s = lead;
  s.push_back(n);
  s.push_back(n);
  return lead.empty() ? e : broadcast_to(e, s);
}

/// x with its last two axes swapped (a copy).
Array swapLast(const Array& x) {
  const Shape& s = x.shape();
  const std::size_t r = s.size();
  const int64_t rows = s[r - 2], cols = s[r - 1], mats = x.size() / std::max<int64_t>(rows * cols, 1);
  Shape ts = s;
  std::swap(ts[r - 2], ts[r - 1]);
  Array t(Type{x.dtype(), ts});
  for (int64_t b = 0; b < mats; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) t.set(b * rows * cols + j * rows + i, x.at(b * rows * cols + i * cols + j));
  return t;
}

/// The product op(a) op(b) of two matrices [m, k] and [k, n] in double, by definition.
Array denseProduct(const Array& a, const Array& b, bool ta, bool tb) {
  const Array A = ta ? swapLast(a) : a, B = tb ? swapLast(b) : b;
  const int64_t m = A.shape()[0], k = A.shape()[1], n = B.shape()[1];
  Array r(Type{a.dtype(), {m, n}});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t q = 0; q < k; ++q) s += A.at(i * k + q) * B.at(q * n + j);
      r.set(i * n + j, s);
    }
  return r;
}

} // namespace

TEST_CASE("matmul with identity matrices folds to the other operand or its transpose, bitwise, either side, batched") {
  for (DType t : {DType::f32, DType::f64})
    for (int64_t n : {5, 12}) // 5: the iota is a small constant to the fold pass; 12: an op
      for (const Shape& lead : {Shape{}, Shape{3}})
        for (int side : {0, 1})
          for (bool ta : {false, true})
            for (bool tb : {false, true}) {
              INFO(name_of(t) << " n = " << n << " batched " << lead.size() << " identity on the " << (side ? "right" : "left")
                              << " transpose_a " << ta << " transpose_b " << tb);
              // The other operand: op(x) is [lead..., n, 7] on the right of I, [lead..., 7, n] on its left.
              const bool flag = side == 0 ? tb : ta;
              Shape xs = lead;
              const bool nFirst = (side == 0) != flag;
              xs.push_back(nFirst ? n : 7);
              xs.push_back(nFirst ? 7 : n);
              auto f = [&](Tensor x) {
                const Tensor e = basisIdentity(n, t, lead);
                return side == 0 ? matmul(e, x, {.transpose_a = ta, .transpose_b = tb})
                                 : matmul(x, e, {.transpose_a = ta, .transpose_b = tb});
              };
              Module m = trace(f, Type{t, xs});
              transforms::fold(m.impl());
              m.verify();
              CHECK(opsOfKind(m, ir::OpKind::Matmul) == 0);
              const Array x = randomArray({t, xs}, static_cast<uint32_t>(n + side));
              const Array want = flag ? swapLast(x) : x;
              CHECK(bytesOf(m.interpret("f", {x}).at(0)) == bytesOf(want));
              // The JIT's pipeline folds it too (a few of the forms: each compiles).
              if (n == 12 && ta == tb && side == static_cast<int>(lead.size())) CHECK(bytesOf(jit(f)(x)) == bytesOf(want));
            }
}

TEST_CASE("matmul folds only exact identities: near-identities and non-square ones stay products") {
  for (DType t : {DType::f32, DType::f64}) {
    INFO(name_of(t));
    const double eps = t == DType::f32 ? std::ldexp(1.0, -23) : std::ldexp(1.0, -52);
    const int64_t n = 6;
    auto eyeWith = [&](int64_t i, int64_t j, double v) {
      Array e(Type{t, {n, n}});
      for (int64_t d = 0; d < n; ++d) e.set(d * n + d, 1.0);
      e.set(i * n + j, v);
      return e;
    };
    const Array x = randomArray({t, {n, 4}}, 31);
    // 1 + eps on the diagonal, a tiny value off it, the 1 × 1 identity broadcast to all ones.
    for (const Array& e : {eyeWith(2, 2, 1 + eps), eyeWith(4, 1, eps), eyeWith(0, 0, 1.0)}) {
      const bool exact = e.at(2 * n + 2) == 1.0 && e.at(4 * n + 1) == 0.0;
      auto f = [&](Tensor x) { return matmul(constant(e), x); };
      Module m = trace(f, x.type());
      transforms::fold(m.impl());
      CHECK(opsOfKind(m, ir::OpKind::Matmul) == (exact ? 0u : 1u));
      ADJIT_CHECK_CLOSE(jit(f)(x), denseProduct(e, x, false, false), 4 * eps);
    }
    // Row 2 scaled by 1 + eps is not row 2: a product happened.
    const Array scaled = jit([&](Tensor x) { return matmul(constant(eyeWith(2, 2, 1 + eps)), x); })(x);
    CHECK(scaled.at(2 * 4) != x.at(2 * 4));
    // one_hot deeper than the iota is long: [n, n + 1], not square.
    auto deep = [&](Tensor y) { return matmul(one_hot(iota(Shape{n}, 0, DType::i32), n + 1, t), y); };
    const Array y = randomArray({t, {n + 1, 4}}, 32);
    Module md = trace(deep, y.type());
    transforms::fold(md.impl());
    CHECK(opsOfKind(md, ir::OpKind::Matmul) == 1);
    // A 1 × 1 identity broadcast to [n, n] is all ones: a product.
    auto ones = [&](Tensor x) { return matmul(broadcast_to(basisIdentity(1, t, {}), Shape{n, n}), x); };
    Module mo = trace(ones, x.type());
    transforms::fold(mo.impl());
    CHECK(opsOfKind(mo, ir::OpKind::Matmul) == 1);
    Array allOnes(Type{t, {n, n}});
    for (int64_t i = 0; i < n * n; ++i) allOnes.set(i, 1.0);
    ADJIT_CHECK_CLOSE(jit(ones)(x), denseProduct(allOnes, x, false, false), 8 * eps);
  }
}

TEST_CASE("a folded identity product keeps an inf in its place, where the dense product spreads NaN (the stated semantics)") {
  Array x = randomArray({DType::f32, {4, 3}}, 33);
  x.set(1 * 3 + 2, std::numeric_limits<double>::infinity());
  const Array got = jit([](Tensor x) { return matmul(basisIdentity(4, DType::f32, {}), x); })(x);
  CHECK(bytesOf(got) == bytesOf(x));
  // The dense product: 0 * inf = NaN in rows 0, 2 and 3 of column 2.
  Array eye(Type{DType::f32, {4, 4}});
  for (int64_t d = 0; d < 4; ++d) eye.set(d * 4 + d, 1.0);
  const Array dense = denseProduct(eye, x, false, false);
  CHECK(std::isnan(dense.at(2)));
  CHECK(std::isinf(dense.at(5)));
}

TEST_CASE("jacfwd of tanh(A x): the batched JVP reads A itself (the product with the basis folds), equal to the scan and to finite differences") {
  auto tanhAx = [](Tensor a, Tensor x) { return tanh(matmul(a, x)); };
  auto jac = [&](Tensor a, Tensor x) { return jacfwd(tanhAx, argnums<1>)(a, x); };
  for (DType t : {DType::f32, DType::f64})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{40, 16}, {9, 9}}) {
      INFO(name_of(t) << " R^" << cols << " -> R^" << rows);
      const Array a = randomArray({t, {rows, cols}}, 41), x = randomArray({t, {cols}}, 42);
      // Traced: the forward's A x and the tangents' product with the basis; folded: only A x.
      Module m = trace(jac, a.type(), x.type());
      CHECK(opsOfKind(m, ir::OpKind::Matmul) == 2);
      transforms::fold(m.impl());
      CHECK(opsOfKind(m, ir::OpKind::Matmul) == 1);
      Array batched, scanned;
      {
        WithJacobianPolicy p({.path = detail::JacobianPath::batched});
        batched = jit(jac)(a, x);
      }
      {
        WithJacobianPolicy p({.path = detail::JacobianPath::scan});
        scanned = jit(jac)(a, x);
      }
      REQUIRE(batched.shape() == Shape{rows, cols});
      ADJIT_CHECK_CLOSE(batched, scanned, t == DType::f32 ? 1e-6 : 1e-14);
      if (t != DType::f64) continue;
      // Central differences of tanh(A x) along each input coordinate.
      const double h = 1e-6;
      for (int64_t j = 0; j < cols; ++j) {
        auto f = [&](double dx) {
          std::vector<double> y(static_cast<std::size_t>(rows));
          for (int64_t i = 0; i < rows; ++i) {
            double s = 0;
            for (int64_t k = 0; k < cols; ++k) s += a.at(i * cols + k) * (x.at(k) + (k == j ? dx : 0.0));
            y[static_cast<std::size_t>(i)] = std::tanh(s);
          }
          return y;
        };
        const std::vector<double> up = f(h), down = f(-h);
        for (int64_t i = 0; i < rows; ++i)
          CHECK(batched.at(i * cols + j) ==
                doctest::Approx((up[static_cast<std::size_t>(i)] - down[static_cast<std::size_t>(i)]) / (2 * h)).epsilon(1e-7));
      }
    }
}
