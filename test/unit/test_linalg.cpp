// test/unit/test_linalg.cpp — adjit::linalg: cholesky, triangular_solve and lu
// against known factorisations and by reconstruction, f32 and f64, batched,
// interpreter against JIT (check3); their derivatives and the composites'
// against finite differences in f64 (check_grads, both modes, second order);
// NaN for a matrix that is not positive definite; the error messages; and
// values and gradients of every function (lu's pivots and permutation too)
// against PyTorch float64 (torch_linalg_expected.inc, written by
// torch_linalg.py).
#include "Check.h"

#include <adjit/linalg.h>

#include <cmath>
#include <limits>
#include <random>

using namespace adjit;
using namespace adjit::test;
namespace la = adjit::linalg;
using V = std::vector<Tensor>;

namespace {

/// Uniform values in [lo, hi) of `shape`, as f64 (or f32).
Array randomArray(const Shape& shape, std::mt19937& rng, double lo = -1, double hi = 1, DType t = DType::f64) {
  Array a(Type{t, shape});
  std::uniform_real_distribution<double> d(lo, hi);
  for (int64_t i = 0; i < a.size(); ++i) a.set(i, d(rng));
  return a;
}

/// A batch of well-conditioned symmetric positive definite matrices: x x^T + n I.
Array spd(const Shape& shape, std::mt19937& rng, DType t = DType::f64) {
  const Array x = randomArray(shape, rng, -1, 1, DType::f64);
  const int64_t n = shape.back();
  Array a(Type{t, shape});
  for (int64_t b = 0; b < x.size() / (n * n); ++b)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = i == j ? double(n) : 0.0;
        for (int64_t k = 0; k < n; ++k) s += x.at(b * n * n + i * n + k) * x.at(b * n * n + j * n + k);
        a.set(b * n * n + i * n + j, s);
      }
  return a;
}

/// A batch of well-conditioned general matrices: random plus n on the diagonal, some rows swapped by sign.
Array wellConditioned(const Shape& shape, std::mt19937& rng, DType t = DType::f64) {
  Array a = randomArray(shape, rng, -1, 1, t);
  const int64_t n = shape.back();
  for (int64_t b = 0; b < a.size() / (n * n); ++b)
    for (int64_t i = 0; i < n; ++i) a.set(b * n * n + i * n + (i * 3 + 1) % n, a.at(b * n * n + i * n + (i * 3 + 1) % n) + 2.0 * n);
  return a;
}

/// Matrices whose triangles are well-conditioned with their diagonal or a unit one:
/// small off-diagonal elements, a diagonal of 3 to 4.
Array triangularish(const Shape& shape, std::mt19937& rng, DType t = DType::f64) {
  Array a = randomArray(shape, rng, -0.5, 0.5, t);
  const int64_t n = shape.back();
  for (int64_t i = 0; i < a.size(); ++i)
    if ((i % (n * n)) / n == i % n) a.set(i, 3.0 + a.at(i));
  return a;
}

Tensor mT(const Tensor& x) {
  std::vector<int64_t> perm(static_cast<std::size_t>(x.rank()));
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transpose(x, perm);
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

} // namespace

TEST_CASE("cholesky: a known factor, batched, f32 and f64, interpreter and JIT") {
  // [[4, 12, -16], [12, 37, -43], [-16, -43, 98]] = L L^T, L = [[2, 0, 0], [6, 1, 0], [-8, 5, 3]]
  const std::vector<double> a{4, 12, -16, 12, 37, -43, -16, -43, 98};
  const std::vector<double> l{2, 0, 0, 6, 1, 0, -8, 5, 3};
  check3([](V x) { return la::cholesky(x[0]); }, {f64(a, {3, 3})}, f64(l, {3, 3}), 1e-12);
  check3([](V x) { return la::cholesky(x[0]); }, {f32({4, 12, -16, 12, 37, -43, -16, -43, 98}, {3, 3})},
         f32({2, 0, 0, 6, 1, 0, -8, 5, 3}, {3, 3}), 1e-5);
  // a batch [2, 2, 3, 3]: the same matrix scaled by 1, 4, 9, 16 (factors by 1, 2, 3, 4)
  std::vector<double> ab, lb;
  for (double s : {1, 2, 3, 4}) {
    for (double v : a) ab.push_back(v * s * s);
    for (double v : l) lb.push_back(v * s);
  }
  check3([](V x) { return la::cholesky(x[0]); }, {f64(ab, {2, 2, 3, 3})}, f64(lb, {2, 2, 3, 3}), 1e-12);
  // 1 x 1 and the lower triangle only without symmetrize_input
  check3([](V x) { return la::cholesky(x[0]); }, {f64({9}, {1, 1})}, f64({3}, {1, 1}));
  check3([](V x) { return la::cholesky(x[0], false); }, {f64({4, 1000, 12, 37}, {2, 2})}, f64({2, 0, 6, 1}, {2, 2}), 1e-12);
}

TEST_CASE("cholesky: L L^T reconstructs a, for sizes 1 to 17, f32 and f64") {
  std::mt19937 rng(1);
  for (int64_t n : {1, 2, 3, 5, 8, 17})
    for (DType t : {DType::f64, DType::f32}) {
      const Array a = spd({3, n, n}, rng, t);
      INFO("n = " << n << " " << name_of(t));
      check3([](V x) { const Tensor L = la::cholesky(x[0]); return matmul(L, L, {.transpose_b = true}); }, {a}, a,
             t == DType::f64 ? 1e-12 : 2e-5);
      // lower triangular, with a positive diagonal
      check3([](V x) { const Tensor L = la::cholesky(x[0]); return L - tril(L); }, {a}, Array(a.type()), 0);
      check3([](V x) { return cast(gt(min(la::diagonal(la::cholesky(x[0]))), 0.0), DType::i32); }, {a}, i32({1}, {}));
    }
}

TEST_CASE("cholesky: a matrix that is not positive definite gives NaNs, not an error; the others in its batch are fine") {
  // batch: [[1, 2], [2, 1]] (eigenvalues 3, -1), then [[4, 2], [2, 2]] = [[2, 0], [1, 1]] [[2, 1], [0, 1]]
  check3([](V x) { return la::cholesky(x[0]); }, {f64({1, 2, 2, 1, 4, 2, 2, 2}, {2, 2, 2})},
         f64({kNaN, kNaN, kNaN, kNaN, 2, 0, 1, 1}, {2, 2, 2}));
  // a zero pivot and a NaN input
  check3([](V x) { return la::cholesky(x[0]); }, {f32({0, 0, 0, 1}, {2, 2})}, f32({NAN, NAN, NAN, NAN}, {2, 2}));
  check3([](V x) { return la::cholesky(x[0]); }, {f64({1, kNaN, kNaN, 1}, {2, 2})}, f64({kNaN, kNaN, kNaN, kNaN}, {2, 2}));
}

TEST_CASE("triangular_solve: every combination of flags solves its system, f32 and f64, batched") {
  std::mt19937 rng(2);
  for (int flags = 0; flags < 16; ++flags) {
    const la::TriangularSolveOptions o{.lower = bool(flags & 1), .left_side = bool(flags & 2),
                                       .transpose_a = bool(flags & 4), .unit_diagonal = bool(flags & 8)};
    for (auto [t, m, k] : {std::tuple{DType::f64, 5, 3}, {DType::f32, 5, 3}, {DType::f64, 5, 1}, {DType::f64, 12, 1}, {DType::f32, 12, 20}}) {
      INFO("lower " << o.lower << " left_side " << o.left_side << " transpose_a " << o.transpose_a << " unit_diagonal "
                    << o.unit_diagonal << " " << name_of(t) << " m " << m << " k " << k);
      const Array a = triangularish({2, m, m}, rng, t);
      const Array b = randomArray(o.left_side ? Shape{2, m, k} : Shape{2, k, m}, rng, -1, 1, t);
      // op(part of a) applied to the solution gives b back
      check3(
          [o, m](V x) {
            const Tensor& a = x[0];
            Tensor part = o.lower ? tril(a, o.unit_diagonal ? -1 : 0) : triu(a, o.unit_diagonal ? 1 : 0);
            if (o.unit_diagonal) part = part + la::diag(full({m}, 1.0, a.dtype()));
            const Tensor s = la::triangular_solve(a, x[1], o);
            return o.left_side ? matmul(part, s, {.transpose_a = o.transpose_a}) : matmul(s, part, {.transpose_b = o.transpose_a});
          },
          {a, b}, b, t == DType::f64 ? 1e-12 : 2e-5);
    }
  }
}

TEST_CASE("triangular_solve: batch axes broadcast; a vector-shaped b is an error naming both") {
  const Array l = f64({2, 0, 1, 4}, {2, 2});
  const Array b = f64({2, 4, 4, 9, 6, 8, 8, 18}, {2, 2, 2}); // [2, 2, 2]
  check3([](V x) { return la::triangular_solve(x[0], x[1], {.lower = true, .left_side = true}); }, {l, b},
         f64({1, 2, 0.75, 1.75, 3, 4, 1.25, 3.5}, {2, 2, 2}), 1e-12);
  CHECK_THROWS_WITH_AS(trace([](Tensor a, Tensor b) { return la::triangular_solve(a, b, {.left_side = true}); },
                             Type{DType::f64, {3, 3}}, Type{DType::f64, {3}}),
                       doctest::Contains("triangular_solve: expected b to be a matrix (or a batch of them), got f64[3]"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor a, Tensor b) { return la::triangular_solve(a, b, {.left_side = true}); },
                             Type{DType::f64, {3, 3}}, Type{DType::f64, {4, 2}}),
                       doctest::Contains("triangular_solve: a f64[3,3] solves for rows of b's 3, but b is f64[4,2] (left_side)"), Error);
}

/// Checks that f's JIT agrees with the interpreter on `inputs`, compiled for
/// the host and for each of `cpus` (narrower vector units than the host's run
/// on it too: AVX2 "haswell", SSE2 "x86-64").
template <class F> void agreesWithInterpreter(F f, const std::vector<Array>& inputs, double rtol, std::vector<std::string> cpus = {}) {
  std::vector<Type> types;
  for (const Array& a : inputs) types.push_back(a.type());
  const Array want = trace(f, types).interpret("f", inputs).at(0);
  cpus.insert(cpus.begin(), "");
  for (const std::string& cpu : cpus) {
    INFO("cpu '" << cpu << "'");
    ADJIT_CHECK_CLOSE(jit(f, {.cpu = cpu})(inputs), want, rtol);
  }
}

// Batches of at least one vector of lanes are factored and solved with one
// matrix per SIMD lane (ops/LinalgSmallLowering.cpp). Batch sizes: 37 (a last
// group of 5 or 1 real lanes for vectors of 8 or 16 and 4, 2 lanes), 16
// (whole vectors only); fewer than a vector take the per-matrix loops (the
// tests above).
TEST_CASE("cholesky and triangular_solve across the batch agree with the interpreter: n 1 to 32, odd batches, f32 and f64") {
  std::mt19937 rng(11);
  for (int64_t n : {1, 2, 3, 5, 8, 13, 32})
    for (DType t : {DType::f64, DType::f32})
      for (int64_t batch : {37, 16}) {
        if (batch == 16 && n != 8 && n != 32) continue;
        INFO("n = " << n << " " << name_of(t) << " batch " << batch);
        const double rtol = t == DType::f64 ? 1e-11 : 1e-4;
        Array a = spd({batch, n, n}, rng, t);
        if (batch == 37) a.set(5 * n * n, -1.0); // matrix 5 is not positive definite: NaNs in its lane only
        const Array b = randomArray({batch, n, 1}, rng, -1, 1, t);
        const bool narrower = batch == 37 && (n == 3 || n == 8 || n == 13 || n == 32);
        agreesWithInterpreter([](V x) { return la::cholesky(x[0]); }, {a}, rtol);
        agreesWithInterpreter([](V x) { return la::cho_solve(la::cholesky(x[0]), x[1]); }, {a, b}, rtol,
                              narrower ? std::vector<std::string>{"haswell", "x86-64"} : std::vector<std::string>{});
      }
  // every form of the solve, with one and several right-hand sides (blocks of 4 and a rest)
  const std::tuple<DType, int64_t, int64_t> sizes[] = {{DType::f64, 5, 3}, {DType::f32, 13, 1}, {DType::f64, 13, 6}, {DType::f32, 32, 7}};
  for (int flags = 0; flags < 16; ++flags) {
    const la::TriangularSolveOptions o{.lower = bool(flags & 1), .left_side = bool(flags & 2),
                                       .transpose_a = bool(flags & 4), .unit_diagonal = bool(flags & 8)};
    for (int which : {flags % 4, (flags + 1) % 4}) {
      const auto [t, m, k] = sizes[which];
      INFO("flags " << flags << " " << name_of(t) << " m " << m << " k " << k);
      const Array a = triangularish({37, m, m}, rng, t);
      const Array b = randomArray(o.left_side ? Shape{37, m, k} : Shape{37, k, m}, rng, -1, 1, t);
      agreesWithInterpreter([o](V x) { return la::triangular_solve(x[0], x[1], o); }, {a, b}, t == DType::f64 ? 1e-11 : 1e-4);
    }
  }
}

TEST_CASE("cholesky and cho_solve across the batch: gradients match finite differences, odd batch") {
  std::mt19937 rng(12);
  const CheckGradsOptions o{.order = 1, .modes = {"rev", "fwd"}, .eps = 1e-5, .rtol = 1e-5, .atol = 1e-7};
  for (int64_t n : {3, 5}) {
    INFO("n = " << n);
    const Array s = spd({9, n, n}, rng), b = randomArray({9, n, 2}, rng);
    check_grads([](const Tensor& x) { return la::cholesky(x); }, s, o);
    check_grads([](const Tensor& x, const Tensor& y) { return la::cho_solve(la::cholesky(x), y); }, std::tuple{s, b}, o);
  }
}

TEST_CASE("lu: a known factorisation, and P a = L U for a batch, f32 and f64") {
  // [[1, 2], [3, 4]]: row 1 is the pivot; L = [[1, 0], [1/3, 1]], U = [[3, 4], [0, 2/3]]
  const Array a = f64({1, 2, 3, 4}, {2, 2});
  check3([](V x) { return la::lu(x[0]).lu; }, {a}, f64({3, 4, 1.0 / 3, 2.0 / 3}, {2, 2}), 1e-12);
  check3([](V x) { return la::lu(x[0]).pivots; }, {a}, i32({1, 1}));
  check3([](V x) { return la::lu(x[0]).permutation; }, {a}, i32({1, 0}));
  // a 3 x 3 needing two swaps: [[0, 1, 2], [1, 0, 3], [4, 1, 0]] -> pivots [2, 2, 2]? checked by P a = L U below
  std::mt19937 rng(3);
  for (DType t : {DType::f64, DType::f32})
    for (int64_t n : {1, 3, 6, 16}) {
      INFO("n = " << n << " " << name_of(t));
      const Array m = randomArray({2, 3, n, n}, rng, -1, 1, t);
      check3(
          [n](V x) {
            const la::LU<> f = la::lu(x[0]);
            const Tensor P = one_hot(f.permutation, n, x[0].dtype());
            const Tensor L = tril(f.lu, -1) + la::diag(full({n}, 1.0, x[0].dtype()));
            return matmul(L, triu(f.lu)) - matmul(P, x[0]);
          },
          {m}, Array(m.type()), t == DType::f64 ? 1e-12 : 1e-5);
      // the multipliers are at most 1 in magnitude (partial pivoting)
      check3([](V x) { return cast(gt(max(abs(tril(la::lu(x[0]).lu, -1))), 1.0), DType::i32); }, {m}, i32({0}, {}));
    }
  // a singular matrix factors: U has a zero on its diagonal
  check3([](V x) { return la::lu(x[0]).lu; }, {f64({1, 2, 2, 4}, {2, 2})}, f64({2, 4, 0.5, 0}, {2, 2}), 1e-12);
  check3([](V x) { return la::lu(x[0]).lu; }, {f64({0, 0, 0, 0}, {2, 2})}, f64({0, 0, 0, 0}, {2, 2}));
}

TEST_CASE("lu of batches of small matrices (one per SIMD lane) agrees with the interpreter for SSE, AVX2 and the host") {
  // 19 matrices: full groups of lanes and a partial last one for every vector width
  std::mt19937 rng(12);
  auto f = [](const Tensor& a) {
    const la::LU<> r = la::lu(a);
    return std::tuple{r.lu, r.pivots, r.permutation};
  };
  for (DType t : {DType::f64, DType::f32})
    for (int64_t n : {1, 2, 3, 5, 8, 12, 32}) {
      Array a = randomArray({19, n, n}, rng, -1, 1, t);
      // ties and zeros: matrix 4's first column all equal (the first row pivots), matrix 7 singular
      for (int64_t i = 0; i < n; ++i) a.set(4 * n * n + i * n, 0.5);
      for (int64_t i = 0; i < n * n; ++i) a.set(7 * n * n + i, double(i % n));
      const Module m = trace([&](const Tensor& x) { return f(x); }, a.type());
      const std::vector<Array> want = m.interpret("f", {a});
      for (const char* cpu : {"", "x86-64-v2", "x86-64-v3"}) {
        INFO(name_of(t) << " n = " << n << " cpu " << std::string(*cpu ? cpu : "host"));
        const auto [lu, pivots, perm] = jit(f, {.cpu = cpu})(a);
        ADJIT_CHECK_CLOSE(lu, want[0], t == DType::f64 ? 1e-12 : 1e-5);
        CHECK(bytesOf(pivots) == bytesOf(want[1]));
        CHECK(bytesOf(perm) == bytesOf(want[2]));
      }
      // the path across the batch: row swaps by scatter
      CHECK(jit(f).lower(a).llvm_ir.find("llvm.masked.scatter") != std::string::npos);
    }
}

TEST_CASE("lu of rectangular matrices: known factors, P a = L U on both paths, derivatives") {
  // 2 x 3: row 1 pivots; U = [[4, 5, 6], [0, 0.75, 1.5]], L = [[1, 0], [0.25, 1]]
  const Array wide = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  check3([](V x) { return la::lu(x[0]).lu; }, {wide}, f64({4, 5, 6, 0.25, 0.75, 1.5}, {2, 3}), 1e-12);
  check3([](V x) { return la::lu(x[0]).pivots; }, {wide}, i32({1, 1}));
  check3([](V x) { return la::lu(x[0]).permutation; }, {wide}, i32({1, 0}));
  // 3 x 2: rows 2 then (after the first step) 2 again pivot; P a = [a2, a0, a1]
  const Array tall = f64({1, 2, 3, 4, 5, 6}, {3, 2});
  check3([](V x) { return la::lu(x[0]).lu; }, {tall}, f64({5, 6, 0.2, 0.8, 0.6, 0.5}, {3, 2}), 1e-12);
  check3([](V x) { return la::lu(x[0]).pivots; }, {tall}, i32({2, 2}));
  check3([](V x) { return la::lu(x[0]).permutation; }, {tall}, i32({2, 0, 1}));
  // P a = L U with L = m x k, U = k x n; 70 x 90 and 90 x 70 go to LAPACK where it is loaded
  std::mt19937 rng(8);
  for (DType t : {DType::f64, DType::f32})
    for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 4}, {4, 1}, {3, 5}, {5, 3}, {20, 9}, {9, 20}, {70, 90}, {90, 70}}) {
      INFO(m << " x " << n << " " << name_of(t));
      const int64_t k = std::min(m, n);
      const Array a = randomArray({2, m, n}, rng, -1, 1, t);
      check3(
          [m, n, k](V x) {
            const la::LU<> f = la::lu(x[0]);
            const Tensor P = one_hot(f.permutation, m, x[0].dtype());
            const Tensor eye = la::diag(full({k}, 1.0, x[0].dtype()));
            const Tensor L = tril(slice(f.lu, {0, 0, 0}, {2, m, k}), -1) + pad(eye, {0, 0}, {m - k, 0});
            const Tensor U = triu(slice(f.lu, {0, 0, 0}, {2, k, n}));
            return matmul(L, U) - matmul(P, x[0]);
          },
          {a}, Array(a.type()), t == DType::f64 ? 1e-12 : 1e-5);
      check3([](V x) { return cast(gt(max(abs(tril(la::lu(x[0]).lu, -1))), 1.0), DType::i32); }, {a}, i32({0}, {}));
    }
  const CheckGradsOptions o{.order = 2, .modes = {"rev", "fwd"}, .eps = 1e-5, .rtol = 1e-5, .atol = 1e-7};
  for (auto [m, n] : {std::pair<int64_t, int64_t>{3, 5}, {5, 3}, {1, 3}, {3, 1}}) {
    INFO("gradient, " << m << " x " << n);
    const Array w = randomArray({2, m, n}, rng);
    check_grads([w](const Tensor& a) { return la::lu(a).lu * constant(w); }, randomArray({2, m, n}, rng, -1, 1), o);
  }
}

TEST_CASE("lu, slogdet: structures a jitted function returns") {
  const Array a = f64({1, 2, 3, 4}, {2, 2});
  // [snippet:lu-structure]
  auto f = jit([](const Tensor& a) { return linalg::lu(a); });
  linalg::LU<Array> r = f(a);  // r.lu, r.pivots, r.permutation
  // [/snippet:lu-structure]
  CHECK(r.lu.at(0) == 3);
  CHECK(r.pivots.dtype() == DType::i32);
  CHECK(r.permutation.at(0) == 1);
  auto g = jit([](const Tensor& a) { return la::slogdet(a); });
  const la::SlogDet<Array> s = g(f64({1, 2, 3, 4}, {2, 2})); // det -2
  CHECK(s.sign.at(0) == -1);
  CHECK(s.logabsdet.at(0) == doctest::Approx(std::log(2.0)));
}

TEST_CASE("solve, inv, det, slogdet, cho_solve, matrix_power: values") {
  const Array a = f64({4, 3, 6, 3}, {2, 2}); // det -6, inv [[-0.5, 0.5], [1, -2/3]]
  check3([](V x) { return la::solve(x[0], x[1]); }, {a, f64({10, 12})}, f64({1, 2}), 1e-12);
  check3([](V x) { return la::solve(x[0], x[1]); }, {a, f64({10, 1, 12, 0}, {2, 2})}, f64({1, -0.5, 2, 1}, {2, 2}), 1e-12);
  check3([](V x) { return la::inv(x[0]); }, {a}, f64({-0.5, 0.5, 1, -2.0 / 3}, {2, 2}), 1e-12);
  check3([](V x) { return la::det(x[0]); }, {a}, f64({-6}), 1e-12);
  check3([](V x) { return la::det(x[0]); }, {f32({2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 1, 0, 1, 0, 0, 0, 0, 1}, {2, 3, 3})}, f32({24, -1}, {2}), 1e-6);
  check3([](V x) { return la::slogdet(x[0]).sign; }, {a}, f64({-1}));
  check3([](V x) { return la::slogdet(x[0]).logabsdet; }, {a}, f64({std::log(6.0)}), 1e-12);
  check3([](V x) { return la::slogdet(x[0]).logabsdet; }, {f64({1, 2, 2, 4}, {2, 2})}, f64({-std::numeric_limits<double>::infinity()}));
  check3([](V x) { return la::det(x[0]); }, {f64({1, 2, 2, 4}, {2, 2})}, f64({0}));
  // cho_solve with c = cholesky(a): a x = b; upper: c^T c = a
  const Array s = f64({4, 12, -16, 12, 37, -43, -16, -43, 98}, {3, 3});
  const Array b = f64({1, 2, 3});
  std::mt19937 rng(4);
  check3([](V x) { return matmul(x[0], la::cho_solve(la::cholesky(x[0]), x[1])); }, {s, b}, b, 1e-9);
  check3([](V x) { return matmul(x[0], la::cho_solve(mT(la::cholesky(x[0])), x[1], false)); }, {s, b}, b, 1e-9);
  const Array sb = spd({4, 6, 6}, rng), bb = randomArray({4, 6, 2}, rng);
  check3([](V x) { return matmul(x[0], la::cho_solve(la::cholesky(x[0]), x[1])); }, {sb, bb}, bb, 1e-10);
  const Array g = wellConditioned({3, 7, 7}, rng), gb = randomArray({3, 7, 2}, rng);
  check3([](V x) { return matmul(x[0], la::solve(x[0], x[1])); }, {g, gb}, gb, 1e-10);
  // matrix_power: [[1, 1], [1, 0]]^n holds Fibonacci numbers; n = -1 the inverse
  const Array fib = f64({1, 1, 1, 0}, {2, 2});
  check3([](V x) { return la::matrix_power(x[0], 10); }, {fib}, f64({89, 55, 55, 34}, {2, 2}), 1e-12);
  check3([](V x) { return la::matrix_power(x[0], 0); }, {fib}, f64({1, 0, 0, 1}, {2, 2}));
  check3([](V x) { return la::matrix_power(x[0], 1); }, {fib}, fib);
  check3([](V x) { return la::matrix_power(x[0], -3); }, {fib}, f64({-1, 2, 2, -3}, {2, 2}), 1e-12);
}

TEST_CASE("trace, diagonal, diag, outer, kron, norm: values as numpy") {
  const Array m = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  check3([](V x) { return la::trace(x[0]); }, {m}, f64({6}));
  check3([](V x) { return la::trace(x[0], 1); }, {m}, f64({8}));
  check3([](V x) { return la::diagonal(x[0]); }, {m}, f64({1, 5}));
  check3([](V x) { return la::diagonal(x[0], 2); }, {m}, f64({3}, {1}));
  check3([](V x) { return la::diagonal(x[0], -1); }, {m}, f64({4}, {1}));
  check3([](V x) { return la::diagonal(x[0], 3); }, {m}, Array(Type{DType::f64, {0}}));
  // axes of a [2, 2, 3]: diagonal over axes 0 and 2 leaves axis 1 first
  const Array c = f64({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {2, 2, 3});
  check3([](V x) { return la::diagonal(x[0], 0, 0, 2); }, {c}, f64({0, 7, 3, 10}, {2, 2}));
  check3([](V x) { return la::diag(x[0]); }, {f64({1, 2})}, f64({1, 0, 0, 2}, {2, 2}));
  check3([](V x) { return la::diag(x[0], 1); }, {f64({1, 2})}, f64({0, 1, 0, 0, 0, 2, 0, 0, 0}, {3, 3}));
  check3([](V x) { return la::diag(x[0], -1); }, {f64({1, 2})}, f64({0, 0, 0, 1, 0, 0, 0, 2, 0}, {3, 3}));
  check3([](V x) { return la::diag(x[0]); }, {m}, f64({1, 5}));
  check3([](V x) { return la::outer(x[0], x[1]); }, {f64({1, 2}), f64({3, 4, 5})}, f64({3, 4, 5, 6, 8, 10}, {2, 3}));
  check3([](V x) { return la::kron(x[0], x[1]); }, {f64({1, 2, 3, 4}, {2, 2}), f64({0, 1, 1, 0}, {2, 2})},
         f64({0, 1, 0, 2, 1, 0, 2, 0, 0, 3, 0, 4, 3, 0, 4, 0}, {4, 4}));
  check3([](V x) { return la::kron(x[0], x[1]); }, {f64({1, 2}), f64({1, 10, 100}, {1, 3})}, f64({1, 10, 100, 2, 20, 200}, {1, 6}));
  const Array v = f64({3, -4, 0});
  check3([](V x) { return la::norm(x[0]); }, {v}, f64({5}));
  check3([](V x) { return la::norm(x[0], 1); }, {v}, f64({7}));
  check3([](V x) { return la::norm(x[0], INFINITY); }, {v}, f64({4}));
  check3([](V x) { return la::norm(x[0], -INFINITY); }, {v}, f64({0}));
  check3([](V x) { return la::norm(x[0], 2, {1}); }, {m}, f64({std::sqrt(14.0), std::sqrt(77.0)}), 1e-12);
  check3([](V x) { return la::norm(x[0]); }, {m}, f64({std::sqrt(91.0)}), 1e-12); // Frobenius
}

TEST_CASE("norm: the gradient of the 2-norm at 0 is 0, elsewhere x / |x|") {
  auto g = jit(grad([](const Tensor& x) { return la::norm(x); }));
  const Array at0 = g(f64({0, 0, 0}));
  for (int64_t i = 0; i < 3; ++i) CHECK(at0.at(i) == 0);
  const Array at = g(f64({3, 4}));
  CHECK(at.at(0) == doctest::Approx(0.6));
  CHECK(at.at(1) == doctest::Approx(0.8));
}

TEST_CASE("derivatives of cholesky, triangular_solve and lu match finite differences, first and second order") {
  std::mt19937 rng(5);
  const CheckGradsOptions o{.order = 2, .modes = {"rev", "fwd"}, .eps = 1e-5, .rtol = 1e-5, .atol = 1e-7};
  // cholesky of a symmetric input (as cholesky symmetrizes), and of the lower triangle alone
  check_grads([](const Tensor& a) { return la::cholesky(a); }, spd({2, 4, 4}, rng), o);
  Array lowerOnly = spd({4, 4}, rng);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = i + 1; j < 4; ++j) lowerOnly.set(i * 4 + j, 5.0 * double(i - j)); // never read
  check_grads([](const Tensor& a) { return la::cholesky(a, false); }, lowerOnly, o);
  for (int flags = 0; flags < 16; ++flags) {
    const la::TriangularSolveOptions so{.lower = bool(flags & 1), .left_side = bool(flags & 2),
                                        .transpose_a = bool(flags & 4), .unit_diagonal = bool(flags & 8)};
    INFO("triangular_solve flags " << flags);
    const Array a = triangularish({2, 4, 4}, rng);
    const Array b = randomArray(so.left_side ? Shape{2, 4, 3} : Shape{2, 3, 4}, rng);
    check_grads([so](const Tensor& x, const Tensor& y) { return la::triangular_solve(x, y, so); }, std::tuple{a, b}, o);
  }
  const Array w = randomArray({2, 4, 4}, rng);
  check_grads([w](const Tensor& a) { return la::lu(a).lu * constant(w); }, wellConditioned({2, 4, 4}, rng), o);
  check_grads([w](const Tensor& a) { return la::lu(a).lu * constant(w); }, randomArray({2, 4, 4}, rng, -1, 1), o);
}

TEST_CASE("derivatives of the composites match finite differences, first and second order") {
  std::mt19937 rng(6);
  const CheckGradsOptions o{.order = 2, .modes = {"rev", "fwd"}, .eps = 1e-5, .rtol = 1e-5, .atol = 1e-7};
  const Array a = wellConditioned({2, 4, 4}, rng), b = randomArray({2, 4, 2}, rng), s = spd({2, 4, 4}, rng);
  check_grads([](const Tensor& x, const Tensor& y) { return la::solve(x, y); }, std::tuple{a, b}, o);
  check_grads([](const Tensor& x, const Tensor& y) { return la::solve(x, y); }, std::tuple{a, randomArray({4}, rng)}, o);
  check_grads([](const Tensor& x) { return la::inv(x); }, a, o);
  check_grads([](const Tensor& x) { return la::det(x); }, a, o);
  check_grads([](const Tensor& x) { return la::slogdet(x).logabsdet; }, a, o);
  check_grads([](const Tensor& x, const Tensor& y) { return la::cho_solve(la::cholesky(x), y); }, std::tuple{s, b}, o);
  check_grads([](const Tensor& x) { return la::matrix_power(x * 0.2, 5); }, a, o);
  check_grads([](const Tensor& x) { return la::matrix_power(x, -2); }, a, o);
  check_grads([](const Tensor& x) { return la::trace(x, 1) + sum(la::diagonal(x, -1), {-1}) + sum(la::diag(la::diagonal(x)[0], 1)); }, a, o);
  check_grads([](const Tensor& x, const Tensor& y) { return la::kron(x, y); }, std::tuple{randomArray({2, 3}, rng), randomArray({3, 2}, rng)}, o);
  check_grads([](const Tensor& x) { return la::norm(x, 2, {-1}); }, randomArray({3, 4}, rng), o);
  check_grads([](const Tensor& x) { return la::norm(x, 1) + la::norm(x, INFINITY); }, randomArray({5}, rng, 0.5, 2), o);
}

TEST_CASE("solve, inv, det, slogdet: batched and broadcast gradients match finite differences; the rules' closed forms") {
  std::mt19937 rng(8);
  const CheckGradsOptions o{.order = 2, .modes = {"rev", "fwd"}, .eps = 1e-5, .rtol = 1e-5, .atol = 1e-7};
  // batch axes that broadcast: a [3, 1, 3, 3] against b [2, 3, 2]
  const Array a = wellConditioned({3, 1, 3, 3}, rng), b = randomArray({2, 3, 2}, rng);
  check_grads([](const Tensor& x, const Tensor& y) { return la::solve(x, y); }, std::tuple{a, b}, o);
  check_grads([](const Tensor& x) { return la::slogdet(x).logabsdet + la::det(x); }, wellConditioned({2, 2, 5, 5}, rng), o);
  check_grads([](const Tensor& x) { return la::inv(x); }, wellConditioned({1, 5, 5}, rng), o);
  // Giles's closed forms, by name: abar = dbar det(A) A^-T, lbar A^-T, -C^T Cbar C^T, and for solve
  // bbar = A^-T xbar, abar = -bbar x^T.
  const Array m = wellConditioned({4, 4}, rng), w = randomArray({4, 4}, rng), v = randomArray({4, 2}, rng), c = randomArray({4, 2}, rng);
  auto close = [](const Array& got, const Array& want) {
    REQUIRE(got.size() == want.size());
    for (int64_t i = 0; i < got.size(); ++i) CHECK(got.at(i) == doctest::Approx(want.at(i)).epsilon(1e-10));
  };
  auto invT = jit([](const Tensor& x) { return mT(la::inv(x)); });
  const Array mit = invT(m);
  close(jit(grad([](const Tensor& x) { return la::det(x) * 3.0; }))(m),
        jit([](const Tensor& x, const Tensor& y) { return 3.0 * la::det(x) * y; })(m, mit));
  close(jit(grad([](const Tensor& x) { return la::slogdet(x).logabsdet; }))(m), mit);
  close(jit(grad([](const Tensor& x, const Tensor& g) { return sum(la::inv(x) * g); }))(m, w),
        jit([](const Tensor& y, const Tensor& g) { return -matmul(matmul(y, g), y); })(mit, w));
  auto [ga, gb] = jit(grad([](const Tensor& x, const Tensor& y, const Tensor& g) { return sum(la::solve(x, y) * g); }, argnums<0, 1>))(m, v, c);
  const Array bbar = jit([](const Tensor& y, const Tensor& g) { return matmul(y, g); })(mit, c);
  close(gb, bbar);
  close(ga, jit([](const Tensor& x, const Tensor& y, const Tensor& bb) { return -matmul(bb, la::solve(x, y), {.transpose_b = true}); })(m, v, bbar));
}

TEST_CASE("det, slogdet of a singular matrix: the values are 0 and -inf; their gradients are NaN (documented)") {
  // The rules solve with lu's factors, and U has a zero pivot: as JAX's
  // slogdet, but not JAX's det, whose cofactor rule is finite at rank n - 1.
  for (const Array& a : {f64({1, 2, 2, 4}, {2, 2}), f64({1, 2, 3, 2, 4, 6, 1, 0, 1}, {3, 3})}) {
    CHECK(jit([](const Tensor& x) { return la::det(x); })(a).at(0) == 0);
    const Array gd = jit(grad([](const Tensor& x) { return la::det(x); }))(a);
    const Array gl = jit(grad([](const Tensor& x) { return la::slogdet(x).logabsdet; }))(a);
    for (int64_t i = 0; i < gd.size(); ++i) CHECK(std::isnan(gd.at(i)));
    for (int64_t i = 0; i < gl.size(); ++i) CHECK(!std::isfinite(gl.at(i)));
  }
}

TEST_CASE("the second derivative of logdet: d/dA 2 sum log diag cholesky(A) = A^-1, and its derivative") {
  std::mt19937 rng(7);
  const Array a = spd({5, 5}, rng);
  auto logdet = [](const Tensor& x) { return 2.0 * sum(log(la::diagonal(la::cholesky(x)))); };
  // the gradient is A^-1 (symmetric)
  auto g = jit(grad(logdet));
  auto inverse = jit([](const Tensor& x) { return la::inv(x); });
  ADJIT_CHECK_CLOSE(g(a), inverse(a), 1e-10);
  // its directional derivative along V is -A^-1 V A^-1, by forward over reverse
  const Array v = spd({5, 5}, rng);
  auto hv = jit([&](const Tensor& x, const Tensor& d) { return std::get<1>(jvp(grad(logdet), std::tuple{x}, std::tuple{d})); });
  auto want = jit([](const Tensor& x, const Tensor& d) { const Tensor i = la::inv(x); return -matmul(matmul(i, d), i); });
  ADJIT_CHECK_CLOSE(hv(a, v), want(a, v), 1e-9);
  check_grads(logdet, a, {.order = 2, .modes = {"rev", "fwd"}, .eps = 1e-5, .rtol = 1e-5});
  // and the same through slogdet
  check_grads([](const Tensor& x) { return la::slogdet(x).logabsdet; }, a, {.order = 2, .modes = {"rev", "fwd"}, .eps = 1e-5, .rtol = 1e-5});
}

TEST_CASE("linalg: errors name the function, what it expected and what it got, at the caller's line") {
  auto fails = [](auto f, const std::vector<Type>& types, const char* message) {
    INFO(message);
    if constexpr (requires { f(Tensor{}); }) CHECK_THROWS_WITH_AS(trace(f, types.at(0)), doctest::Contains(message), Error);
    else CHECK_THROWS_WITH_AS(trace(f, types.at(0), types.at(1)), doctest::Contains(message), Error);
  };
  const Type rect{DType::f64, {2, 3}}, vec{DType::f64, {3}}, ints{DType::i32, {2, 2}}, sq{DType::f64, {3, 3}};
  fails([](Tensor a) { return la::cholesky(a); }, {rect}, "cholesky: expected a floating-point square matrix (or a batch of them), got f64[2,3]");
  fails([](Tensor a) { return la::cholesky(a); }, {vec}, "cholesky: expected a floating-point square matrix (or a batch of them), got f64[3]");
  fails([](Tensor a) { return la::cholesky(a); }, {ints}, "got i32[2,2]");
  fails([](Tensor a) { return la::lu(a).lu; }, {vec}, "lu: expected a floating-point matrix (or a batch of them), got f64[3]");
  fails([](Tensor a) { return la::inv(a); }, {rect}, "inv: expected a floating-point square matrix");
  fails([](Tensor a) { return la::det(a); }, {rect}, "det: expected a floating-point square matrix");
  fails([](Tensor a, Tensor b) { return la::solve(a, b); }, {sq, Type{DType::f64, {4}}}, "solve: a has 3 rows but b f64[4] has 4");
  fails([](Tensor a, Tensor b) { return la::triangular_solve(a, b); }, {sq, Type{DType::f32, {3, 3}}}, "triangular_solve: mismatched dtypes");
  fails([](Tensor a, Tensor b) { return la::triangular_solve(a, b); }, {Type{DType::f64, {2, 3, 3}}, Type{DType::f64, {3, 3, 3}}},
        "triangular_solve: the batch axes of f64[2,3,3] and f64[3,3,3] do not broadcast");
  fails([](Tensor a) { return la::diagonal(a, 0, 1, 1); }, {sq}, "diagonal: axis1 and axis2 are both axis 1 of f64[3,3]");
  fails([](Tensor a) { return la::diag(a); }, {Type{DType::f64, {2, 2, 2}}}, "diag: expected a 1-D or 2-D operand, got f64[2,2,2]");
  fails([](Tensor a) { return la::norm(a, 3); }, {vec}, "norm: expected ord 1, 2, inf or -inf, got 3");
  // the error points at this file
  try {
    trace([](Tensor a) { return la::cholesky(a); }, rect);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.location().file.find("test_linalg.cpp") != std::string::npos);
  }
}

namespace {

/// One program of torch_linalg.py: its op and parameters, inputs, weights, value and gradients by PyTorch
/// float64; b is empty for one-operand programs; `ints` holds lu's pivots then its permutation.
struct TorchCase {
  const char* name;
  const char* op;
  std::vector<double> p;
  Shape as;
  std::vector<double> a;
  Shape bs;
  std::vector<double> b;
  Shape ws;
  std::vector<double> w;
  double value;
  std::vector<double> ga, gb;
  std::vector<int32_t> ints;
};

/// The programs of torch_linalg.py, written with adjit (b is unused by one-operand programs).
Tensor torchProgram(const TorchCase& c, const Tensor& a, const Tensor& b) {
  const std::string_view op = c.op;
  const auto& p = c.p;
  if (op == "cholesky") return la::cholesky(a, p.empty() || p[0] != 0);
  if (op == "solve") return la::solve(a, b);
  if (op == "inv") return la::inv(a);
  if (op == "det") return reshape(la::det(a), {1});
  if (op == "slogdet") return reshape(la::slogdet(a).logabsdet, {1});
  if (op == "cho_solve") return la::cho_solve(la::cholesky(a), b);
  if (op == "triangular_solve")
    return la::triangular_solve(a, b, {.lower = p[0] != 0, .left_side = p[1] != 0, .transpose_a = p[2] != 0,
                                       .unit_diagonal = p[3] != 0});
  if (op == "lu") return la::lu(a).lu;
  if (op == "matrix_power") return la::matrix_power(a, int64_t(p[0]));
  if (op == "trace") return la::trace(a, int64_t(p[0]));
  if (op == "diagonal") return la::diagonal(a, int64_t(p[0]), int64_t(p[1]), int64_t(p[2]));
  if (op == "diag") return la::diag(a, int64_t(p[0]));
  if (op == "outer") return la::outer(a, b);
  if (op == "kron") return la::kron(a, b);
  if (op == "norm") return la::norm(a, p[0], std::vector<int64_t>(p.begin() + 2, p.end()), p[1] != 0);
  throw std::runtime_error("unknown program " + std::string(op));
}

const std::vector<TorchCase>& torchLinalgCases() {
  constexpr double inf = std::numeric_limits<double>::infinity(); // the norms' ord
  constexpr double nan = std::numeric_limits<double>::quiet_NaN(); // a singular matrix's lu gradient
  static const std::vector<TorchCase> cases = {
#include "torch_linalg_expected.inc"
  };
  return cases;
}

} // namespace

TEST_CASE("linalg values and gradients agree with PyTorch float64") {
  const std::vector<TorchCase>& cases = torchLinalgCases();
  REQUIRE(cases.size() == 103);
  for (const TorchCase& c : cases) {
    INFO("program " << std::string(c.name));
    const Array a = f64(c.a, c.as), w = f64(c.w, c.ws);
    if (c.b.empty()) {
      auto loss = [&c, w](const Tensor& x) { return sum(constant(w) * torchProgram(c, x, x)); };
      CHECK(jit(loss)(a).at(0) == doctest::Approx(c.value).epsilon(1e-10));
      ADJIT_CHECK_CLOSE(jit(grad(loss))(a), f64(c.ga, c.as), 1e-9);
    } else {
      const Array b = f64(c.b, c.bs);
      auto loss = [&c, w](const Tensor& x, const Tensor& y) { return sum(constant(w) * torchProgram(c, x, y)); };
      CHECK(jit(loss)(a, b).at(0) == doctest::Approx(c.value).epsilon(1e-10));
      auto [ga, gb] = jit(grad(loss, argnums<0, 1>))(a, b);
      ADJIT_CHECK_CLOSE(ga, f64(c.ga, c.as), 1e-9);
      ADJIT_CHECK_CLOSE(gb, f64(c.gb, c.bs), 1e-9);
    }
    if (std::string_view(c.op) == "lu") {
      // torch.linalg.lu_factor's pivots less one, and the permutation read off torch.linalg.lu's P
      auto f = jit([](const Tensor& x) { const la::LU<> r = la::lu(x); return std::make_tuple(r.pivots, r.permutation); });
      auto [pivots, permutation] = f(a);
      // pivots [..., k] (k = min(m, n)), then the permutation [..., m]
      const int64_t m = c.as[c.as.size() - 2], k = std::min(m, c.as.back());
      Shape ps(c.as.begin(), c.as.end() - 2), qs = ps;
      ps.push_back(k);
      qs.push_back(m);
      const auto split = c.ints.begin() + std::ptrdiff_t(num_elements(ps));
      INFO("pivots " << pivots.str() << ", permutation " << permutation.str());
      CHECK(bytesOf(pivots) == bytesOf(i32(std::vector<int32_t>(c.ints.begin(), split), ps)));
      CHECK(bytesOf(permutation) == bytesOf(i32(std::vector<int32_t>(split, c.ints.end()), qs)));
    }
  }
}

TEST_CASE("guide: a Gaussian process's negative log marginal likelihood and its gradient") {
  const Array x(std::vector<double>{0.0, 0.4, 1.1, 1.5, 2.3}), y(std::vector<double>{0.1, 0.5, 0.9, 1.0, 0.7});
  // [snippet:gp]
  // -log p(y | x) for a Gaussian process with a squared-exponential kernel of
  // length scale `ell` and noise 0.1, up to a constant; and its gradient in ell.
  auto nll = [](const Tensor& x, const Tensor& y, const Tensor& ell) {
    const Tensor d = reshape(x, {-1, 1}) - reshape(x, {1, -1});
    const Tensor k = exp(-0.5 * d * d / (ell * ell)) + 0.1 * linalg::diag(ones_like(x));
    const Tensor L = linalg::cholesky(k);           // k = L L^T
    const Tensor alpha = linalg::cho_solve(L, y);   // k^-1 y
    return 0.5 * sum(y * alpha) + sum(log(linalg::diagonal(L)));  // log det k = 2 sum log diag L
  };
  auto [value, dell] = value_and_grad(nll, argnums<2>)(x, y, Array(0.7));
  // [/snippet:gp]
  auto f = jit(nll);
  const double h = 1e-6;
  const double fd = (f(x, y, Array(0.7 + h)).at(0) - f(x, y, Array(0.7 - h)).at(0)) / (2 * h);
  CHECK(value.at(0) == doctest::Approx(f(x, y, Array(0.7)).at(0)));
  CHECK(dell.at(0) == doctest::Approx(fd).epsilon(1e-6));
}

TEST_CASE("linalg: empty matrices and empty batches") {
  check3([](V x) { return la::cholesky(x[0]); }, {Array(Type{DType::f64, {0, 0}})}, Array(Type{DType::f64, {0, 0}}));
  check3([](V x) { return la::cholesky(x[0]); }, {Array(Type{DType::f64, {0, 3, 3}})}, Array(Type{DType::f64, {0, 3, 3}}));
  check3([](V x) { return la::lu(x[0]).lu; }, {Array(Type{DType::f32, {2, 0, 0}})}, Array(Type{DType::f32, {2, 0, 0}}));
  check3([](V x) { return la::triangular_solve(x[0], x[1], {.lower = true, .left_side = true}); },
         {f64({2, 0, 1, 4}, {2, 2}), Array(Type{DType::f64, {2, 0}})}, Array(Type{DType::f64, {2, 0}}));
  check3([](V x) { return la::det(x[0]); }, {Array(Type{DType::f64, {0, 0}})}, f64({1}));
}

