// test/unit/test_sparse_eval.cpp — sparse_jacobian and sparse_hessian against
// dense jacfwd and hessian on banded, arrowhead, block-diagonal and ODE
// residual functions, in f32 and f64, with the colors and mode checked.
#include <adjit/adjit.h>
#include <adjit/sparse_derivatives.h>

#include <doctest/doctest.h>

#include <cmath>
#include <random>

using namespace adjit;

namespace {

Array randomArray(DType dt, int64_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(0.5, 1.5);
  Array a(dt, Shape{n});
  for (int64_t i = 0; i < n; ++i) a.set(i, u(g));
  return a;
}

/// Every entry of s equals the dense matrix d ([rows, cols]), and entries
/// outside the pattern are zero in d.
void checkAgainst(const SparseMatrix& s, const Array& d, double tol) {
  REQUIRE(d.shape() == Shape{s.rows, s.cols});
  const Array sd = s.to_dense();
  for (int64_t i = 0; i < s.rows * s.cols; ++i) CHECK(sd.at(i) == doctest::Approx(d.at(i)).epsilon(tol));
  CHECK(s.values.size() == s.nnz());
}

// A banded Jacobian, 3 columns per row: r_i = x_i * x_{i+1} + sin(x_{i+2}).
Tensor band3(const Tensor& x) {
  const int64_t n = x.shape()[0];
  return slice(x, {0}, {n - 2}) * slice(x, {1}, {n - 1}) + sin(slice(x, {2}, {n}));
}
// Diagonal plus a dense last row.
Tensor arrow(const Tensor& x) {
  return concatenate({exp(x), reshape(sum(x * x), Shape{1})});
}
// Blocks of 4: each block's outputs read the whole block.
Tensor blocks4(const Tensor& x) {
  const int64_t n = x.shape()[0];
  const Tensor b = reshape(x, Shape{n / 4, 4});
  return reshape(tanh(matmul(b, full(Shape{4, 4}, 0.5, x.dtype())) + b * b), Shape{n});
}
// [snippet:sparse-jacobian]
// Implicit Euler residual of the 1-D heat equation with a cubic reaction:
// (u_i - u0_i)/dt - (u_{i-1} - 2u_i + u_{i+1})/h^2 + u_i^3.
Tensor heat(const Tensor& u, const Tensor& u0) {
  const int64_t n = u.shape()[0];
  const Tensor mid = slice(u, {1}, {n - 1});
  const Tensor lap = slice(u, {0}, {n - 2}) - 2.0 * mid + slice(u, {2}, {n});
  return (mid - slice(u0, {1}, {n - 1})) * 10.0 - lap * 4.0 + mid * mid * mid;
}
// [/snippet:sparse-jacobian]

} // namespace

TEST_CASE("sparse_jacobian: banded, arrowhead, blocks and an ODE residual against jacfwd") {
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    const Array x = randomArray(dt, 24, 1);
    const SparseMatrix b = sparse_jacobian(band3)(x);
    CHECK(b.colors == 3);
    CHECK(b.mode == SparseMode::forward);
    checkAgainst(b, jacfwd(band3)(x), tol);
    const SparseMatrix a = sparse_jacobian(arrow)(x);
    CHECK(a.colors == 2); // rows: a dense last row forbids column colorings
    CHECK(a.mode == SparseMode::reverse);
    checkAgainst(a, jacfwd(arrow)(x), tol);
    const SparseMatrix k = sparse_jacobian(blocks4)(x);
    CHECK(k.colors == 4);
    checkAgainst(k, jacfwd(blocks4)(x), tol);
    const Array u0 = randomArray(dt, 24, 2);
    const SparseMatrix h = sparse_jacobian(heat)(x, u0); // columns: u then u0
    CHECK(h.rows == 22);
    CHECK(h.cols == 48);
    CHECK(h.colors == 3);
    const Array ju = jacfwd(heat)(x, u0);
    const Array ju0 = jacfwd(heat, argnums<1>)(x, u0);
    const Array hd = h.to_dense();
    for (int64_t r = 0; r < 22; ++r)
      for (int64_t c = 0; c < 24; ++c) {
        CHECK(hd.at(r * 48 + c) == doctest::Approx(ju.at(r * 24 + c)).epsilon(tol));
        CHECK(hd.at(r * 48 + 24 + c) == doctest::Approx(ju0.at(r * 24 + c)).epsilon(tol));
      }
    // Forced forward mode on the arrowhead: one color per column.
    const SparseMatrix af = sparse_jacobian(arrow, SparseOptions{.mode = SparseMode::forward})(x);
    CHECK(af.colors == 24);
    checkAgainst(af, jacfwd(arrow)(x), tol);
  }
}

TEST_CASE("sparse_jacobian: the guide's example") {
  // [snippet:sparse-jacobian]
  auto J = sparse_jacobian(heat); // compiled per signature, like jit
  Array u(std::vector<double>(1000, 1.0), Shape{1000}), u0(std::vector<double>(1000, 0.5), Shape{1000});
  SparseMatrix Ju = J(u, u0);
  // Ju.rows == 998, Ju.cols == 2000 (u's columns, then u0's), Ju.nnz() == 3992;
  // Ju.colors == 3, Ju.mode == SparseMode::reverse: one VJP batched over 3 seeds
  // (rows have 4 nonzeros, so columns would need 4 colors).
  // Row i: Ju.col_idx[Ju.row_ptr[i] .. Ju.row_ptr[i + 1]), values in Ju.values.
  // [/snippet:sparse-jacobian]
  CHECK(Ju.rows == 998);
  CHECK(Ju.cols == 2000);
  CHECK(Ju.nnz() == 3992);
  CHECK(Ju.colors == 3);
  CHECK(Ju.mode == SparseMode::reverse);
  // Row 0 (u_1's residual): u_0, u_1, u_2, then u0_1.
  CHECK(Ju.col_idx[0] == 0);
  CHECK(Ju.col_idx[3] == 1001);
  CHECK(Ju.values.at(0) == doctest::Approx(-4.0));
  CHECK(Ju.values.at(1) == doctest::Approx(10.0 + 8.0 + 3.0));
  CHECK(Ju.values.at(3) == doctest::Approx(-10.0));
}

TEST_CASE("sparse_hessian: star-colored Hessians against hessian") {
  auto chain = [](const Tensor& x) { // tridiagonal Hessian
    const int64_t n = x.shape()[0];
    const Tensor d = slice(x, {1}, {n}) - square(slice(x, {0}, {n - 1}));
    return sum(d * d) + sum(cos(x));
  };
  auto star = [](const Tensor& x) { // arrowhead Hessian: x_0 couples with all
    const int64_t n = x.shape()[0];
    return sum(exp(slice(x, {1}, {n}) * slice(x, {0}, {1}))) + sum(x * x * x);
  };
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f64 ? 1e-12 : 1e-4;
    const Array x = randomArray(dt, 20, 3);
    const SparseMatrix c = sparse_hessian(chain)(x);
    CHECK(c.colors == 3);
    checkAgainst(c, hessian(chain)(x), tol);
    const SparseMatrix s = sparse_hessian(star)(x);
    CHECK(s.colors == 2);
    checkAgainst(s, hessian(star)(x), tol);
  }
}

TEST_CASE("sparse_hessian: a non-scalar function is an Error at its line") {
  auto vec = [](const Tensor& x) { return sin(x); };
  const Array x = randomArray(DType::f64, 5, 4);
  try {
    (void)sparse_hessian(vec)(x);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("one floating scalar") != std::string::npos);
    CHECK(std::string(e.what()).find("test_sparse_eval.cpp") != std::string::npos);
  }
  auto onlyInt = [](const Tensor& i) { return sin(cast(i, DType::f64)); };
  CHECK_THROWS_AS((void)sparse_jacobian(onlyInt)(Array(std::vector<int32_t>{1, 2}, Shape{2})), Error);
}

TEST_CASE("sparse_jacobian: structured arguments and outputs, integer leaves skipped") {
  // Columns: a's 6 then b's 6 (k, an integer, takes none); rows: the
  // tuple's first output then its second.
  auto f = [](const std::vector<Tensor>& ab, const Tensor& k) {
    const Tensor& a = ab[0];
    const Tensor& b = ab[1];
    return std::make_tuple(a * b * cast(k, DType::f64), exp(a) + sum(square(slice(b, {0}, {3}))));
  };
  const Array a = randomArray(DType::f64, 6, 5), b = randomArray(DType::f64, 6, 6);
  const Array k(std::vector<int32_t>{2}, Shape{});
  const SparseMatrix s = sparse_jacobian(f)(std::vector<Array>{a, b}, k);
  CHECK(s.rows == 12);
  CHECK(s.cols == 12);
  const Array d = s.to_dense();
  for (int64_t i = 0; i < 6; ++i) {
    CHECK(d.at(i * 12 + i) == doctest::Approx(2 * b.at(i)).epsilon(1e-12));     // d(2 a b)/da
    CHECK(d.at(i * 12 + 6 + i) == doctest::Approx(2 * a.at(i)).epsilon(1e-12)); // d(2 a b)/db
    CHECK(d.at((6 + i) * 12 + i) == doctest::Approx(std::exp(a.at(i))).epsilon(1e-12));
    for (int64_t j = 0; j < 3; ++j)
      CHECK(d.at((6 + i) * 12 + 6 + j) == doctest::Approx(2 * b.at(j)).epsilon(1e-12));
  }
  CHECK(s.nnz() == 12 + 6 + 18);
}

TEST_CASE("sparse_jacobian and sparse_hessian inside a trace: jit, vmap, map and grad compose") {
  const Array x = randomArray(DType::f64, 12, 7);
  const SparseMatrix ref = sparse_jacobian(band3)(x);
  // [snippet:sparse-in-trace]
  // Inside a trace the pattern is known when tracing; the values are a Tensor.
  auto values = [](const Tensor& x) { return sparse_jacobian(band3)(x).values; };
  // [/snippet:sparse-in-trace]
  const Array v = jit(values)(x);
  REQUIRE(v.size() == ref.nnz());
  for (int64_t k = 0; k < ref.nnz(); ++k) CHECK(v.at(k) == doctest::Approx(ref.values.at(k)).epsilon(1e-12));
  // to_dense in a trace is the dense Jacobian.
  const Array dense = jit([](const Tensor& x) { return sparse_jacobian(band3)(x).to_dense(); })(x);
  const Array d = jacfwd(band3)(x);
  REQUIRE(dense.shape() == d.shape());
  for (int64_t i = 0; i < d.size(); ++i) CHECK(dense.at(i) == doctest::Approx(d.at(i)).epsilon(1e-12));
  // Batched: three points at once, by vmap and by map, each its own values.
  Array xs(DType::f64, Shape{3, 12});
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < 12; ++i) xs.set(b * 12 + i, x.at(i) * (1.0 + 0.25 * static_cast<double>(b)));
  const Array byVmap = vmap(values)(xs);
  const Array byMap = map(values)(xs);
  REQUIRE(byVmap.shape() == Shape{3, ref.nnz()});
  for (int64_t b = 0; b < 3; ++b) {
    Array xb(DType::f64, Shape{12});
    for (int64_t i = 0; i < 12; ++i) xb.set(i, xs.at(b * 12 + i));
    const SparseMatrix s = sparse_jacobian(band3)(xb);
    for (int64_t k = 0; k < s.nnz(); ++k) {
      CHECK(byVmap.at(b * s.nnz() + k) == doctest::Approx(s.values.at(k)).epsilon(1e-12));
      CHECK(byMap.at(b * s.nnz() + k) == doctest::Approx(s.values.at(k)).epsilon(1e-12));
    }
  }
  // Differentiable: the gradient of the nonzeros' squares is that of the
  // dense Jacobian's (its other entries are zero).
  const Array gs = grad([](const Tensor& x) { return sum(square(sparse_jacobian(band3)(x).values)); })(x);
  const Array gd = grad([](const Tensor& x) { return sum(square(jacfwd(band3)(x))); })(x);
  for (int64_t i = 0; i < 12; ++i) CHECK(gs.at(i) == doctest::Approx(gd.at(i)).epsilon(1e-10));
  // Hessians too.
  auto chain = [](const Tensor& x) { return sum(square(slice(x, {1}, {12}) - square(slice(x, {0}, {11})))); };
  const Array h = jit([chain](const Tensor& x) { return sparse_hessian(chain)(x).to_dense(); })(x);
  const Array hd = hessian(chain)(x);
  for (int64_t i = 0; i < hd.size(); ++i) CHECK(h.at(i) == doctest::Approx(hd.at(i)).epsilon(1e-12));
}

TEST_CASE("sparse_hessian: a Lagrangian's multipliers behind stop_gradient take no rows or columns") {
  // sigma f(z) + lambda . g(z), as IPOPT's eval_h asks for it: the
  // multipliers are arguments (new values, same compiled program) whose
  // rows and columns stop_gradient leaves empty, so they cost no colors.
  auto g = [](const Tensor& z) {
    const int64_t n = z.shape()[0];
    return slice(z, {1}, {n}) * sin(slice(z, {0}, {n - 1}));
  };
  auto f = [](const Tensor& z) { return sum(z * z * z); };
  auto lagrangian = [&](const Tensor& z, const Tensor& sigma, const Tensor& lambda) {
    return stop_gradient(sigma) * f(z) + sum(stop_gradient(lambda) * g(z));
  };
  const int64_t n = 12;
  const Array z = randomArray(DType::f64, n, 7);
  auto H = sparse_hessian(lagrangian);
  for (unsigned seed : {8u, 9u}) {
    const Array sigma(0.5 * seed), lambda = randomArray(DType::f64, n - 1, seed);
    int compiled = 0;
    set_compile_listener([&](const CompileEvent&) { ++compiled; });
    const SparseMatrix h = H(z, sigma, lambda);
    set_compile_listener({});
    CHECK(compiled == (seed == 8u ? 1 : 0)); // new multipliers: the same program
    CHECK(h.rows == n + 1 + n - 1);
    for (int64_t r = 0; r < h.rows; ++r)
      for (int64_t k = h.row_ptr[r]; k < h.row_ptr[r + 1]; ++k) {
        CHECK(r < n);
        CHECK(h.col_idx[k] < n);
      }
    // Tridiagonal in z: the same 3 colors as with the multipliers fixed.
    CHECK(h.colors == 3);
    CHECK(h.nnz() == n + 2 * (n - 1));
    const Array dense = hessian(lagrangian)(z, sigma, lambda);
    const Array hd = h.to_dense();
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < n; ++c) CHECK(hd.at(r * h.cols + c) == doctest::Approx(dense.at(r * n + c)).epsilon(1e-12));
  }
}

TEST_CASE("sparse_jacobian and sparse_hessian with argnums: the other arguments are held constant") {
  // sigma f(z) + lambda . g(z): with argnums {0} the Hessian is z's alone,
  // and new multipliers run the same compiled program.
  auto lagrangian = [](const Tensor& z, const Tensor& sigma, const Tensor& lambda) {
    const int64_t n = z.shape()[0];
    const Tensor g = slice(z, {1}, {n}) - square(slice(z, {0}, {n - 1}));
    return sigma * sum(exp(z)) + sum(lambda * g);
  };
  const Array z = randomArray(DType::f64, 8, 11), lambda = randomArray(DType::f64, 7, 12);
  auto H = sparse_hessian(lagrangian, {.argnums = {0}});
  for (double sigma : {1.0, 0.5}) {
    const SparseMatrix h = H(z, Array(sigma), lambda);
    CHECK(h.rows == 8);
    CHECK(h.cols == 8);
    CHECK(h.nnz() == 8); // exp(z) and z_i^2 couple each z_i with itself only
    CHECK(h.colors == 1);
    checkAgainst(h, hessian(lagrangian, argnums<0>)(z, Array(sigma), lambda), 1e-12);
  }
  // Jacobian of the constraints with respect to z only; lambda's columns absent.
  auto g = [](const Tensor& z, const Tensor& shift) {
    const int64_t n = z.shape()[0];
    return slice(z, {1}, {n}) - square(slice(z, {0}, {n - 1})) + shift;
  };
  const SparseMatrix j = sparse_jacobian(g, {.argnums = {0}})(z, lambda);
  CHECK(j.rows == 7);
  CHECK(j.cols == 8);
  CHECK(j.nnz() == 14);
  checkAgainst(j, jacfwd(g, argnums<0>)(z, lambda), 1e-12);
  // Mistakes: an argnum past the arguments; only integer arguments selected.
  CHECK_THROWS_WITH_AS((void)sparse_jacobian(g, {.argnums = {2}})(z, lambda),
                       doctest::Contains("sparse_jacobian: argnums has 2, but the function is called with 2 arguments"), Error);
  auto mixed = [](const Tensor& x, const Tensor& k) { return x * cast(k, DType::f64); };
  CHECK_THROWS_WITH_AS((void)sparse_jacobian(mixed, {.argnums = {1}})(z, Array(std::vector<int32_t>{2}, Shape{})),
                       doctest::Contains("among those argnums selects"), Error);
}
