// ops/LinalgSolve.cpp — the factorisations and solves of linear systems:
// cholesky, triangular_solve and lu (jax.lax.linalg's semantics), each on a
// matrix or a batch of them (leading axes), f32 and f64. Their derivatives are
// matrix expressions written with differentiable ops (triangular solves,
// matmuls, triangles), never the factorisation's loops differentiated, so
// second derivatives work.
//
// Lowering, chosen by measurement. A batch of at least one SIMD
// vector of matrices of order up to 32 goes across the batch, one matrix per
// lane (cholesky, triangular_solve and square lu: LinalgSmallLowering.cpp,
// tried first by the lower hooks). Otherwise generated code per matrix of the batch,
// unblocked, with the inner loops over contiguous rows (dot products or row
// updates, vectorised by LLVM); orders up to 8 unrolled as they are emitted
// (Loops below). Measured by bench/linalg_bench.cpp against OpenBLAS's
// LAPACK (same process) and by bench/linalg_torch_small.py against PyTorch
// 1.13 (run just before), one thread, AVX-512 host, a shared 2-core machine
// at load ~20 (noisy; medians of 3 runs; their time / adjit's, above 1 is
// faster):
//                                        LAPACK  PyTorch  LAPACK, per-matrix loops
//   1000 × 8×8 cholesky + cho_solve  f64    11×     13×      4.4×
//                                    f32    18×     21×      6.5×
//   100 × 32×32 cholesky + cho_solve f64    3.3×    3.8×     0.65×
//                                    f32    4.6×    4.7×     0.70×
//   gradient of sum(cho_solve(cholesky(a), b) * w), 100 × 32×32 f64: 0.53 ms
//     (PyTorch 20-28 ms); 1000 × 8×8 f64: 0.21 ms (PyTorch 17-25 ms)
// lu across the batch, each lane pivoting on its own (row swaps by gather
// and scatter), against the per-matrix loops, the same process and machine
// (load ~4, best of interleaved runs; LAPACK's getrf / adjit, then gesv /
// adjit's solve): 1000 × 8×8 f64 5.2-6.3× (per matrix 2.0×), solve 5.4-5.7×
// (2.7×); f32 6.2-7.8× (2.6×), solve 7.2-7.7× (3.2×); 100 × 32×32 f64
// 2.8-2.9× (1.3×), solve 2.9-3.5× (1.4×); f32 2.8-3.0× (1.5×), solve
// 3.0-3.2× (1.7×). LLVM's time for a 1000 × 8×8 f32 lu (adjit dump, user
// time): 0.30 s against the per-matrix loops' 0.39 s; 100 × 32×32 f64 0.18
// against 0.08 s.
// From an order of kLapack<Op> on, the JIT calls LAPACK instead where it is
// loaded at run time (LinalgLapack.h; never in objects, nor with
// ADJIT_LAPACK=0). `linalg_bench --thresholds`, one matrix, generated time /
// LAPACK path's time (above 1: LAPACK faster), two runs on a loaded machine:
//   order             8     12    16    24    32    48    64    96    128
//   cholesky          1.05  3.5   3.8   1.6   1.8   2.0   2.2   2.4   2.3
//   lu                0.83  0.83  0.78  0.78  0.86  0.93  1.22  1.48  1.70
//   triangular_solve  1.8   1.9   2.8   3.3   0.64  1.41  1.36  1.20  1.03
// so lu from 64; cholesky and triangular_solve from 48, although LAPACK
// wins earlier for one matrix: up to 32 (the GMM and Kalman sizes) batches
// are the generated code's to win, vectorised across the batch. Above the
// thresholds (adjit / LAPACK called directly, the bench's large rows, 512²
// f64, best of 3 or 9 interleaved, six runs at load 2.5–6): cholesky
// 1.03–1.10× dpotrf("U") (the same row-major L; "L" is ~12% faster but
// leaves Lᵀ's layout), its gradient 0.90–0.95×; solve 1.01–1.14× dgetrf +
// dgetrs, its gradient 1.06–1.13×. (Were, in the lead's quick run: cholesky 1.33× and
// 1.21× against dpotrf("L") with the same rule; solve 1.48× and 1.78×: lu's
// transposing copy took 0.76 ms, P b was a one-hot matmul, and trsm for one
// vector packs all of a; see runtime/Lapack.cpp and trace/Linalg.cpp's
// permuteRows.)
// What is left of solve's gap: getrf pivots rows of a column-major matrix,
// so lu's a is transposed in place and back (0.18 ms each at 512²).
#include "codegen/Emitter.h"
#include "autodiff/JvpCtx.h"
#include "autodiff/VjpCtx.h"
#include "ops/Common.h"
#include "ops/LinalgLapack.h"
#include "ops/LinalgSmall.h"

#include <adjit/linalg.h>

#include <limits>

namespace adjit::ops {
namespace {

using codegen::LowerCtx;
using ir::EvalCtx;
using ir::InferCtx;
using linalg::TriangularSolveOptions;

/// x with its last two axes swapped.
Tensor mT(const Tensor& x) {
  std::vector<int64_t> perm(static_cast<std::size_t>(x.rank()));
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transpose(x, perm);
}

/// A boolean attribute, false when absent.
bool flag(const ir::Attrs& attrs, std::string_view name) { return attrs.has(name) && attrs.boolean(name); }

/// Checks operand `i` is a floating batch of square matrices; returns n.
int64_t expectSquare(const InferCtx& c, std::size_t i, std::string_view what) {
  const Type& a = c.operands[i];
  if (!is_floating(a.dtype)) c.fail("expected a floating-point {}, got {}", what, a.str());
  if (a.rank() < 2 || a.shape[a.shape.size() - 1] != a.shape[a.shape.size() - 2])
    c.fail("expected a square matrix (or a batch of them) as {}, got {}", what, a.str());
  return a.shape.back();
}

/// The number of matrices in a batch of [..., r, c].
int64_t batchOf(const Shape& s) { return num_elements(Shape(s.begin(), s.end() - 2)); }

/// The matrix orders from which the JIT calls LAPACK (LinalgLapack.h), where
/// it is loaded: measured, see the header comment.
constexpr int64_t kLapackCholesky = 48, kLapackTriangularSolve = 48, kLapackLu = 64;

// ---- cholesky ----------------------------------------------------------------------

/// Cholesky–Banachiewicz, row by row: L[i, j] = (a[i, j] - <L[i, :j], L[j, :j]>) / L[j, j],
/// L[i, i] = sqrt(a[i, i] - |L[i, :i]|²). Reads a's lower triangle only.
template <class T> void choleskyRef(const T* a, T* l, int64_t n) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < i; ++j) {
      T acc = 0;
      for (int64_t k = 0; k < j; ++k) acc += l[i * n + k] * l[j * n + k];
      l[i * n + j] = (a[i * n + j] - acc) / l[j * n + j];
    }
    T acc = 0;
    for (int64_t k = 0; k < i; ++k) acc += l[i * n + k] * l[i * n + k];
    const T d = a[i * n + i] - acc;
    ok = ok && d > 0;
    l[i * n + i] = std::sqrt(d);
    for (int64_t j = i + 1; j < n; ++j) l[i * n + j] = 0;
  }
  if (!ok) std::fill(l, l + n * n, std::numeric_limits<T>::quiet_NaN());
}

/// Φ(X): the lower triangle of X with its diagonal halved (Murray 2016).
Tensor phi(const Tensor& x) { return 0.5 * (tril(x) + tril(x, -1)); }

/// The symmetric matrix the op factors, from a's lower triangle: tril(a) + tril(a, -1)^T.
Tensor symmetricFromLower(const Tensor& a) { return tril(a) + mT(tril(a, -1)); }

// ---- triangular_solve --------------------------------------------------------------

struct SolveForm {
  bool lower, left, transpose, unit;
  /// Whether op(a) is lower triangular.
  bool effLower() const { return lower != transpose; }
};
SolveForm solveFormOf(const ir::Attrs& attrs) {
  return {flag(attrs, "lower"), flag(attrs, "left_side"), flag(attrs, "transpose_a"), flag(attrs, "unit_diagonal")};
}
TriangularSolveOptions optionsOf(const SolveForm& f) {
  return {.lower = f.lower, .left_side = f.left, .transpose_a = f.transpose, .unit_diagonal = f.unit};
}

/// cholesky's dependency rule: L[i, j] (j <= i) = (a[i, j] - sum_{k<j}
/// L[i, k] L[j, k]) / L[j, j] reads, through the recurrence, the leading
/// (j+1)-square lower triangle of a and a[i, 0..j]; the upper triangle of L
/// reads nothing. One term per element (nonlinear: every two reads couple).
void choleskyDeps(const sparsity::SparsityCtx& c) {
  const Shape& s = c.type(0).shape;
  const int64_t n = s.back();
  std::vector<sparsity::Read> reads;
  for (int64_t b = 0; b < batchOf(s); ++b) {
    const int64_t base = b * n * n;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        reads.clear();
        for (int64_t p = 0; p <= j; ++p)
          for (int64_t q = 0; q <= p; ++q) reads.push_back(sparsity::Read{0, base + p * n + q});
        if (i > j)
          for (int64_t q = 0; q <= j; ++q) reads.push_back(sparsity::Read{0, base + i * n + q});
        c.term(0, base + i * n + j, reads);
      }
  }
}

/// triangular_solve's dependency rule. Left side, op(a) = T lower: x[i, c]
/// = (b[i, c] - sum_{k<i} T[i, k] x[k, c]) / T[i, i] reads, through the
/// recurrence, T's leading (i+1)-square triangle (without its diagonal if
/// unit) and b[0..i, c]; T upper runs from the end. A right-side solve is
/// the left one of the transposes. One term per element, coupled by the
/// op's traits (linear in b): exact for the Jacobian; for the Hessian it
/// also pairs a's entries that enter only linearly (a superset).
void triangularSolveDeps(const sparsity::SparsityCtx& c) {
  const SolveForm f = solveFormOf(c.op.attrs);
  const Shape& bs = c.type(1).shape;
  const int64_t m = c.type(0).shape.back();
  const int64_t rows = bs[bs.size() - 2], cols = bs.back();
  // The solve as a left one on U = T (left) or T^T (right), lower if uLower;
  // its unknowns x'[i, r] are x[i, r] (left) or x[r, i] (right).
  const bool uLower = f.left ? f.effLower() : !f.effLower();
  const int64_t others = f.left ? cols : rows;
  // U[k, l] as an element of a: T[k, l] = a[k, l], or a[l, k] when transposed.
  auto aAt = [&](int64_t k, int64_t l) {
    const bool swap = f.left == f.transpose; // U = T^T (right side) undoes one transpose
    return swap ? l * m + k : k * m + l;
  };
  auto bAt = [&](int64_t i, int64_t r) { return f.left ? i * cols + r : r * cols + i; };
  std::vector<sparsity::Read> reads;
  for (int64_t bt = 0; bt < batchOf(bs); ++bt) {
    const int64_t aBase = bt * m * m, bBase = bt * rows * cols;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t r = 0; r < others; ++r) {
        reads.clear();
        // The rows of U and b the unknown reads: 0..i (lower) or i..m-1 (upper).
        const int64_t lo = uLower ? 0 : i, hi = uLower ? i : m - 1;
        for (int64_t k = lo; k <= hi; ++k) {
          reads.push_back(sparsity::Read{1, bBase + bAt(k, r)});
          for (int64_t l = uLower ? 0 : k; l <= (uLower ? k : m - 1); ++l)
            if (!(f.unit && l == k)) reads.push_back(sparsity::Read{0, aBase + aAt(k, l)});
        }
        c.term(0, bBase + bAt(i, r), reads);
      }
  }
}

/// The part of a the solve reads: its triangle, without the diagonal if unit.
Tensor readPart(const Tensor& a, const SolveForm& f) {
  return f.lower ? tril(a, f.unit ? -1 : 0) : triu(a, f.unit ? 1 : 0);
}

/// Reference solve of one system: a [m, m], b and x [m, n] (left) or [n, m] (right).
template <class T> void triangularSolveRef(const T* a, const T* b, T* x, int64_t m, int64_t n, const SolveForm& f) {
  auto M = [&](int64_t i, int64_t k) { return f.transpose ? a[k * m + i] : a[i * m + k]; };
  const bool fwd = f.effLower();
  std::copy(b, b + m * n, x);
  if (f.left) { // rows of x in order: x[i, :] = (b[i, :] - sum_k M[i, k] x[k, :]) / M[i, i]
    for (int64_t ii = 0; ii < m; ++ii) {
      const int64_t i = fwd ? ii : m - 1 - ii;
      for (int64_t k = fwd ? 0 : i + 1; k < (fwd ? i : m); ++k)
        for (int64_t j = 0; j < n; ++j) x[i * n + j] -= M(i, k) * x[k * n + j];
      if (!f.unit)
        for (int64_t j = 0; j < n; ++j) x[i * n + j] /= M(i, i);
    }
    return;
  }
  // x M = b, one row r of x at a time; unknowns from the end for a lower M.
  for (int64_t r = 0; r < n; ++r) {
    T* xr = x + r * m;
    for (int64_t jj = 0; jj < m; ++jj) {
      const int64_t j = fwd ? m - 1 - jj : jj;
      T acc = 0;
      for (int64_t k = fwd ? j + 1 : 0; k < (fwd ? m : j); ++k) acc += xr[k] * M(k, j);
      xr[j] = f.unit ? xr[j] - acc : (xr[j] - acc) / M(j, j);
    }
  }
}

// ---- lu ------------------------------------------------------------------------------

/// Right-looking LU with partial pivoting (LAPACK's getf2): at step k the row
/// with the largest |lu[i, k]|, i >= k (the first of equals) is swapped into
/// row k, the column below the pivot divided by it (left alone when the
/// pivot is 0: the column is zero then), and the trailing matrix updated.
/// P a = L U of one row-major m × n matrix, partial pivoting (the first row
/// of the largest magnitude), k = min(m, n) steps: lu gets L's strict lower
/// part and U, pivots[0..k) the rows swapped in, perm[0..m) P's rows.
template <class T> void luRef(const T* a, T* lu, int32_t* pivots, int32_t* perm, int64_t m, int64_t n) {
  std::copy(a, a + m * n, lu);
  for (int64_t i = 0; i < m; ++i) perm[i] = static_cast<int32_t>(i);
  for (int64_t k = 0; k < std::min(m, n); ++k) {
    int64_t p = k;
    T best = std::fabs(lu[k * n + k]);
    for (int64_t i = k + 1; i < m; ++i)
      if (std::fabs(lu[i * n + k]) > best) best = std::fabs(lu[i * n + k]), p = i;
    pivots[k] = static_cast<int32_t>(p);
    for (int64_t j = 0; j < n; ++j) std::swap(lu[k * n + j], lu[p * n + j]);
    std::swap(perm[k], perm[p]);
    const T piv = lu[k * n + k];
    for (int64_t i = k + 1; i < m; ++i) {
      const T l = piv != 0 ? lu[i * n + k] / piv : lu[i * n + k];
      lu[i * n + k] = l;
      for (int64_t j = k + 1; j < n; ++j) lu[i * n + j] -= l * lu[k * n + j];
    }
  }
}

/// The permutation matrix P of `perm` ([..., n] i32), P[i, j] = (perm[i] == j): (P a)[i] = a[perm[i]].
Tensor permutationMatrix(const Tensor& perm, DType dtype) { return one_hot(perm, perm.shape().back(), dtype); }

/// The square factors of lu's m × n result, for the rules: L (m × m) with
/// lu's first min(m, n) columns as its strict lower part and the identity's
/// columns after them, and U (n × n) with lu's first min(m, n) rows as its
/// upper part and the identity's rows after them. Read by the triangular
/// solves and triangles below as unit lower and upper, so only the padding
/// of a rectangular lu adds anything: P a = L U holds with U's first m rows
/// (m < n) or L's first n columns (m > n), and the rules' F = L^-1 P da U^-1
/// is again strictly lower (dL's part) plus upper (dU's).
std::pair<Tensor, Tensor> squareFactors(const Tensor& lu) {
  const Shape& s = lu.shape();
  const std::size_t r = s.size();
  const int64_t m = s[r - 2], n = s[r - 1];
  if (m == n) return {lu, lu};
  std::vector<int64_t> zero(r, 0), extra(r, 0);
  if (m > n) { // L: zero columns after lu's (the unit diagonal is implied); U: lu's first n rows
    extra[r - 1] = m - n;
    std::vector<int64_t> limit(s.begin(), s.end());
    limit[r - 2] = n;
    return {pad(lu, zero, extra), slice(lu, zero, limit)};
  }
  // m < n: L is lu's first m columns; U takes rows [0 | I] below lu's
  std::vector<int64_t> limit(s.begin(), s.end());
  limit[r - 1] = m;
  Shape eyeShape(s.begin(), s.end() - 2);
  eyeShape.push_back(n - m);
  eyeShape.push_back(n - m);
  std::vector<int64_t> low(r, 0);
  low[r - 2] = m, low[r - 1] = m;
  const Tensor eye = broadcast_to(linalg::diag(full({n - m}, 1.0, lu.dtype())), eyeShape);
  Shape square(s.begin(), s.end() - 2);
  square.push_back(n);
  square.push_back(n);
  return {slice(lu, zero, limit), pad_sum({lu, eye}, square, {zero, low})};
}

// ---- lowering helpers ------------------------------------------------------------------

/// The loops of a factorisation of one matrix. For a small matrix (order up
/// to kSmallOrder) every loop of a constant trip count up to kMaxUnrolled is
/// unrolled as it is emitted: the triangular loops' bounds then become
/// constants in turn, and an 8 × 8 cholesky is straight-line code, with no
/// loop overhead and no vector loop with remainders for trips of 1 to 7.
/// Larger matrices get loops (LLVM vectorises the inner ones).
struct Loops {
  static constexpr int64_t kSmallOrder = 8;
  static constexpr int64_t kMaxUnrolled = 16;
  const LowerCtx& c;
  bool unroll;
  Loops(const LowerCtx& c, int64_t order) : c(c), unroll(order <= kSmallOrder) {}
  /// for (iv = lo; iv < hi; ++iv) body(iv).
  void range(llvm::Value* lo, llvm::Value* hi, const std::function<void(llvm::Value*)>& body) const {
    const auto* l = llvm::dyn_cast<llvm::ConstantInt>(lo);
    const auto* h = llvm::dyn_cast<llvm::ConstantInt>(hi);
    if (l && h && (h->getSExtValue() - l->getSExtValue() <= 1 || (unroll && h->getSExtValue() - l->getSExtValue() <= kMaxUnrolled))) {
      for (int64_t k = l->getSExtValue(); k < h->getSExtValue(); ++k) body(c.i64(k));
      return;
    }
    c.loopRange(lo, hi, body);
  }
  void loop(int64_t n, const std::function<void(llvm::Value*)>& body) const { range(c.i64(0), c.i64(n), body); }
};

/// Emits `acc = sum over k in [begin, end) of x(k) * y(k)` (vectorisable: reassociation allowed).
llvm::Value* dot(const Loops& lp, DType t, llvm::Value* begin, llvm::Value* end,
                 const std::function<std::pair<llvm::Value*, llvm::Value*>(llvm::Value*)>& terms) {
  const LowerCtx& c = lp.c;
  llvm::Value* slot = c.scalarSlot(t);
  c.b.CreateStore(c.constant(t, 0), slot);
  llvm::IRBuilder<>::FastMathFlagGuard guard(c.b);
  c.b.setFastMathFlags(c.reassocFlags());
  lp.range(begin, end, [&](llvm::Value* k) {
    auto [x, y] = terms(k);
    c.b.CreateStore(c.intrinsic(llvm::Intrinsic::fmuladd, {{x, y, c.b.CreateLoad(c.scalarType(t), slot)}}), slot);
  });
  return c.b.CreateLoad(c.scalarType(t), slot);
}

llvm::Value* add(const LowerCtx& c, llvm::Value* a, int64_t b) { return c.b.CreateAdd(a, c.i64(b)); }
llvm::Value* mulAdd(const LowerCtx& c, llvm::Value* a, int64_t m, llvm::Value* b) {
  return c.b.CreateAdd(c.b.CreateMul(a, c.i64(m)), b);
}

/// triangular_solve's batching rule. a batched: the batched solve, b
/// broadcast if it is not. Only b: the rows of x op(a) = b are independent
/// systems against one matrix, so the batch folds into b's rows,
/// [L..., B·rows, m], one solve against a (vectorised along B·rows); a
/// left-side system op(a) x = b is solved as its transpose xᵀ op(a)ᵀ = bᵀ,
/// whose rows are b's columns. For one right-hand side (a vector, n = 1) both
/// ends are reshapes; where the transposes would copy more than broadcasting
/// a (B·m² elements), the batched solve of the broadcast.
void batchTriangularSolve(const batching::BatchCtx& c) {
  using batching::permutationMoves;
  using batching::permuteAxes;
  if (c.batched(0)) return batching::leadingAxesBatch(c);
  const SolveForm f = solveFormOf(c.op.attrs);
  const Shape& bs = c.type(1).shape;
  const int64_t r = c.type(1).rank(), B = c.size;
  const int64_t rows = f.left ? bs[static_cast<std::size_t>(r - 1)] : bs[static_cast<std::size_t>(r - 2)];
  const int64_t m = f.left ? bs[static_cast<std::size_t>(r - 2)] : bs[static_cast<std::size_t>(r - 1)];
  // b's axes (batch 0, L 1..r-2, matrix r-1 and r) in the order [L..., B, rows, m] ...
  std::vector<int64_t> in, out{r - 2};
  for (int64_t d = 1; d <= r - 2; ++d) in.push_back(d);
  in.push_back(0);
  in.push_back(f.left ? r : r - 1);
  in.push_back(f.left ? r - 1 : r);
  // ... and x's [L..., B, rows, m] (axes 0..r) back to [B, L..., ·, ·].
  for (int64_t d = 0; d < r - 2; ++d) out.push_back(d);
  out.push_back(f.left ? r : r - 1);
  out.push_back(f.left ? r - 1 : r);
  Shape folded(bs.begin(), bs.end() - 2), unfolded = folded;
  folded.insert(folded.end(), {B * rows, m});
  unfolded.insert(unfolded.end(), {B, rows, m});
  const int64_t copies = (permutationMoves(c.x(1).shape(), in) ? num_elements(bs) : 0) +
                         (permutationMoves(unfolded, out) ? num_elements(bs) : 0);
  if (copies > num_elements(c.type(0).shape)) return batching::leadingAxesBatch(c);
  const Tensor x = linalg::triangular_solve(c.x(0), reshape(permuteAxes(c.x(1), in), folded),
                                            {.lower = f.lower, .left_side = false, .transpose_a = f.transpose != f.left,
                                             .unit_diagonal = f.unit});
  c.result(0, permuteAxes(reshape(x, unfolded), out));
}

} // namespace

void defineLinalgSolveOps(Table& t) {
  // cholesky(a): L lower with L L^T = S, S the symmetric matrix of a's lower
  // triangle; zeros above the diagonal; all NaN where S is not positive
  // definite (a pivot <= 0 or NaN), as JAX.
  set(t, OpKind::Cholesky, {
      .infer = [](const InferCtx& c) {
        expectSquare(c, 0, "operand");
        return std::vector<Type>{c.operands[0]};
      },
      .eval = [](const EvalCtx& c) {
        const Array& a = c.args[0];
        Array r(c.resultType());
        const int64_t n = a.shape().back();
        dispatch(a.dtype(), [&](auto tag) {
          using T = decltype(tag);
          if constexpr (std::is_floating_point_v<T>)
            for (int64_t bt = 0; bt < batchOf(a.shape()); ++bt) choleskyRef(elems<T>(a) + bt * n * n, elems<T>(r) + bt * n * n, n);
        });
        return std::vector<Array>{std::move(r)};
      },
      .fold = noFold,
      // Row by row (Cholesky–Banachiewicz): each element is a dot product of
      // two rows of L read contiguously.
      .lower = [](LowerCtx& c) {
        if (small::lowerCholeskyAcrossBatch(c)) return;
        const Type& at = c.operandType(0);
        if (lapack::use(c, at.shape.back(), kLapackCholesky)) return lapack::lowerCholesky(c);
        const DType t = at.dtype;
        const int64_t n = at.shape.back();
        llvm::Value *A = c.operandBuffer(0), *L = c.results[0];
        llvm::Value* ok = c.scalarSlot(DType::i1);
        const Loops lp(c, n);
        c.loop(batchOf(at.shape), [&](llvm::Value* bt) {
          llvm::Value* base = c.b.CreateMul(bt, c.i64(n * n));
          auto at2 = [&](llvm::Value* i, llvm::Value* j) { return c.b.CreateAdd(base, mulAdd(c, i, n, j)); };
          c.b.CreateStore(c.b.getTrue(), ok);
          lp.loop(n, [&](llvm::Value* i) {
            lp.range(c.i64(0), i, [&](llvm::Value* j) {
              llvm::Value* acc = dot(lp, t, c.i64(0), j, [&](llvm::Value* k) {
                return std::pair{c.load(t, L, at2(i, k)), c.load(t, L, at2(j, k))};
              });
              llvm::Value* s = c.b.CreateFSub(c.load(t, A, at2(i, j)), acc);
              c.store(t, c.b.CreateFDiv(s, c.load(t, L, at2(j, j))), L, at2(i, j));
            });
            llvm::Value* acc = dot(lp, t, c.i64(0), i, [&](llvm::Value* k) {
              llvm::Value* x = c.load(t, L, at2(i, k));
              return std::pair{x, x};
            });
            llvm::Value* d = c.b.CreateFSub(c.load(t, A, at2(i, i)), acc);
            c.b.CreateStore(c.b.CreateAnd(c.b.CreateLoad(c.b.getInt1Ty(), ok), c.b.CreateFCmpOGT(d, c.constant(t, 0))), ok);
            c.store(t, c.intrinsic(llvm::Intrinsic::sqrt, {{d}}), L, at2(i, i));
            lp.range(add(c, i, 1), c.i64(n), [&](llvm::Value* j) { c.store(t, c.constant(t, 0), L, at2(i, j)); });
          });
          // Not positive definite: the whole matrix is NaN.
          llvm::Value* good = c.b.CreateLoad(c.b.getInt1Ty(), ok);
          c.loop(n * n, [&](llvm::Value* e) {
            llvm::Value* idx = c.b.CreateAdd(base, e);
            c.store(t, c.b.CreateSelect(good, c.load(t, L, idx), c.constant(t, std::numeric_limits<double>::quiet_NaN())), L, idx);
          });
        });
      },
      // Murray 2016, with S = tril(a) + tril(a, -1)^T the matrix factored:
      //   dL = L Φ(L^-1 dS L^-T),  Φ(X) = tril(X) with its diagonal halved;
      // reverse: P = Φ(L^T Lbar), G = L^-T P L^-1, and since dS reads a's
      // lower triangle twice, abar = tril(G) + triu(G, 1)^T.
      .jvp = [](const autodiff::JvpCtx& c) {
        const Tensor L = c.y(0);
        const Tensor dS = symmetricFromLower(*c.dx(0));
        const Tensor right = linalg::triangular_solve(L, dS, {.lower = true, .transpose_a = true}); // dS L^-T
        const Tensor x = linalg::triangular_solve(L, right, {.lower = true, .left_side = true});     // L^-1 dS L^-T
        c.tangent(0, matmul(L, phi(x)));
      },
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] {
          const Tensor L = c.y(0);
          const Tensor P = phi(matmul(L, c.dy(), {.transpose_a = true}));
          const Tensor left = linalg::triangular_solve(L, P, {.lower = true, .left_side = true, .transpose_a = true}); // L^-T P
          const Tensor G = linalg::triangular_solve(L, left, {.lower = true});                                         // L^-T P L^-1
          return tril(G) + mT(triu(G, 1));
        });
      },
      // batched over leading axes already: the batch is one more of them
      .batch = batching::leadingAxesBatch,
      // the recurrence's reads, matrix by matrix (exact)
      .deps = choleskyDeps,
      .lapack = true,
  });

  // triangular_solve(a, b) {lower, left_side, transpose_a, unit_diagonal}:
  // x with op(a) x = b (left_side) or x op(a) = b, op(a) = a^T when
  // transpose_a; reads only a's triangle (not its diagonal when unit_diagonal).
  set(t, OpKind::TriangularSolve, {
      .infer = [](const InferCtx& c) {
        const int64_t m = expectSquare(c, 0, "a");
        const Type &a = c.operands[0], &b = c.operands[1];
        c.expectSameDtype(a, b);
        const bool left = c.boolean("left_side", false);
        c.boolean("lower", false), c.boolean("transpose_a", false), c.boolean("unit_diagonal", false);
        if (b.rank() != a.rank() || !std::equal(a.shape.begin(), a.shape.end() - 2, b.shape.begin()))
          c.fail("expected b with a's batch axes {}, got a {} and b {}", shape_str(Shape(a.shape.begin(), a.shape.end() - 2)), a.str(), b.str());
        const int64_t bm = left ? b.shape[b.shape.size() - 2] : b.shape.back();
        if (bm != m)
          c.fail("a {} solves for {} of b's {}, but b is {}{}", a.str(), left ? "rows" : "columns", m, b.str(),
                 left ? " (left_side)" : "");
        return std::vector<Type>{b};
      },
      .eval = [](const EvalCtx& c) {
        const Array &a = c.args[0], &b = c.args[1];
        const SolveForm f = solveFormOf(c.op.attrs);
        Array r(c.resultType());
        const int64_t m = a.shape().back();
        const int64_t n = f.left ? b.shape().back() : b.shape()[b.shape().size() - 2];
        dispatch(a.dtype(), [&](auto tag) {
          using T = decltype(tag);
          if constexpr (std::is_floating_point_v<T>)
            for (int64_t bt = 0; bt < batchOf(b.shape()); ++bt)
              triangularSolveRef(elems<T>(a) + bt * m * m, elems<T>(b) + bt * m * n, elems<T>(r) + bt * m * n, m, n, f);
        });
        return std::vector<Array>{std::move(r)};
      },
      .fold = noFold,
      // Left side: whole rows of x updated by rows of x already solved (the
      // inner loop runs along a row: contiguous); for one column, dot products
      // along rows of a instead. Right side: one row of x
      // at a time, as dot products along rows of a (transpose_a) or as
      // updates by rows of a (otherwise), whichever reads a's rows.
      .lower = [](LowerCtx& c) {
        const Type &at = c.operandType(0), &bt = c.operandType(1);
        if (lapack::use(c, at.shape.back(), kLapackTriangularSolve)) return lapack::lowerTriangularSolve(c);
        const DType t = at.dtype;
        const SolveForm f = solveFormOf(c.op.attrs);
        if (small::lowerTriangularSolveAcrossBatch(c, {f.lower, f.left, f.transpose, f.unit})) return;
        const int64_t m = at.shape.back();
        const int64_t n = f.left ? bt.shape.back() : bt.shape[bt.shape.size() - 2];
        const bool fwd = f.effLower();
        const Loops lp(c, m);
        llvm::Value *A = c.operandBuffer(0), *B = c.operandBuffer(1), *X = c.results[0];
        c.loop(batchOf(bt.shape), [&](llvm::Value* batch) {
          llvm::Value* aBase = c.b.CreateMul(batch, c.i64(m * m));
          llvm::Value* xBase = c.b.CreateMul(batch, c.i64(m * n));
          auto M = [&](llvm::Value* i, llvm::Value* k) {
            return c.load(t, A, c.b.CreateAdd(aBase, f.transpose ? mulAdd(c, k, m, i) : mulAdd(c, i, m, k)));
          };
          c.loop(m * n, [&](llvm::Value* e) {
            llvm::Value* idx = c.b.CreateAdd(xBase, e);
            c.store(t, c.load(t, B, idx), X, idx);
          });
          if (f.left && n == 1) { // one column: x[i] = (b[i] - <M[i, :], x>) / M[i, i], a dot product
            lp.loop(m, [&](llvm::Value* ii) {
              llvm::Value* i = fwd ? ii : c.b.CreateSub(c.i64(m - 1), ii);
              llvm::Value* acc = dot(lp, t, fwd ? c.i64(0) : add(c, i, 1), fwd ? i : c.i64(m), [&](llvm::Value* k) {
                return std::pair{M(i, k), c.load(t, X, c.b.CreateAdd(xBase, k))};
              });
              llvm::Value* xi = c.b.CreateAdd(xBase, i);
              llvm::Value* r = c.b.CreateFSub(c.load(t, X, xi), acc);
              c.store(t, f.unit ? r : c.b.CreateFDiv(r, M(i, i)), X, xi);
            });
            return;
          }
          if (f.left) {
            auto xAt = [&](llvm::Value* i, llvm::Value* j) { return c.b.CreateAdd(xBase, mulAdd(c, i, n, j)); };
            lp.loop(m, [&](llvm::Value* ii) {
              llvm::Value* i = fwd ? ii : c.b.CreateSub(c.i64(m - 1), ii);
              lp.range(fwd ? c.i64(0) : add(c, i, 1), fwd ? i : c.i64(m), [&](llvm::Value* k) {
                llvm::Value* mik = c.b.CreateFNeg(M(i, k));
                lp.loop(n, [&](llvm::Value* j) {
                  c.store(t, c.intrinsic(llvm::Intrinsic::fmuladd, {{mik, c.load(t, X, xAt(k, j)), c.load(t, X, xAt(i, j))}}), X, xAt(i, j));
                });
              });
              if (!f.unit) {
                llvm::Value* d = M(i, i);
                lp.loop(n, [&](llvm::Value* j) { c.store(t, c.b.CreateFDiv(c.load(t, X, xAt(i, j)), d), X, xAt(i, j)); });
              }
            });
            return;
          }
          lp.loop(n, [&](llvm::Value* r) {
            llvm::Value* row = c.b.CreateAdd(xBase, c.b.CreateMul(r, c.i64(m)));
            auto x = [&](llvm::Value* j) { return c.b.CreateAdd(row, j); };
            lp.loop(m, [&](llvm::Value* jj) {
              llvm::Value* j = fwd ? c.b.CreateSub(c.i64(m - 1), jj) : jj;
              if (f.transpose) { // x[j] = (x[j] - sum_k x[k] M[k, j]) / M[j, j], M[k, j] = a[j, k] along a row
                llvm::Value* acc = dot(lp, t, fwd ? add(c, j, 1) : c.i64(0), fwd ? c.i64(m) : j,
                                       [&](llvm::Value* k) { return std::pair{c.load(t, X, x(k)), M(k, j)}; });
                llvm::Value* s = c.b.CreateFSub(c.load(t, X, x(j)), acc);
                c.store(t, f.unit ? s : c.b.CreateFDiv(s, M(j, j)), X, x(j));
              } else { // x[j] /= M[j, j]; then x[k] -= x[j] M[j, k] for the unknowns k still ahead
                llvm::Value* xj = c.load(t, X, x(j));
                if (!f.unit) {
                  xj = c.b.CreateFDiv(xj, M(j, j));
                  c.store(t, xj, X, x(j));
                }
                llvm::Value* neg = c.b.CreateFNeg(xj);
                lp.range(fwd ? c.i64(0) : add(c, j, 1), fwd ? j : c.i64(m), [&](llvm::Value* k) {
                  c.store(t, c.intrinsic(llvm::Intrinsic::fmuladd, {{neg, M(j, k), c.load(t, X, x(k))}}), X, x(k));
                });
              }
            });
          });
        });
      },
      // X = op(A)^-1 B (left) or B op(A)^-1 (right), A read as its part A_r:
      //   dX = op(A)^-1 (dB - op(dA_r) X)      or  (dB - X op(dA_r)) op(A)^-1;
      //   Bbar = op(A)^-T Xbar                 or  Xbar op(A)^-T  (a solve with transpose_a flipped);
      //   op(A)bar = -Bbar X^T                 or  -X^T Bbar, then transposed back when transpose_a
      //   and restricted to the part read.
      .jvp = [](const autodiff::JvpCtx& c) {
        const SolveForm f = solveFormOf(c.op.attrs);
        const Tensor a = c.x(0), x = c.y(0);
        std::optional<Tensor> rhs = c.dx(1);
        if (std::optional<Tensor> da = c.dx(0)) {
          const Tensor part = readPart(*da, f);
          const Tensor prod = f.left ? matmul(part, x, {.transpose_a = f.transpose}) : matmul(x, part, {.transpose_b = f.transpose});
          rhs = rhs ? *rhs - prod : -prod;
        }
        if (rhs) c.tangent(0, linalg::triangular_solve(a, *rhs, optionsOf(f)));
      },
      .vjp = [](const autodiff::VjpCtx& c) {
        const SolveForm f = solveFormOf(c.op.attrs);
        SolveForm flipped = f;
        flipped.transpose = !f.transpose;
        const Tensor bbar = linalg::triangular_solve(c.x(0), c.dy(), optionsOf(flipped));
        c.grad(0, [&] {
          const Tensor x = c.y(0);
          // the cotangent of op(A), then of A
          const Tensor opbar = f.left ? -matmul(bbar, x, {.transpose_b = true}) : -matmul(x, bbar, {.transpose_a = true});
          return readPart(f.transpose ? mT(opbar) : opbar, f);
        });
        c.grad(1, [&] { return bbar; });
      },
      .batch = batchTriangularSolve,
      // the recurrence's reads, matrix by matrix (exact Jacobian)
      .deps = triangularSolveDeps,
      .lapack = true,
  });

  // lu(a) -> (lu, pivots, permutation) for a [..., m, n]: P a = L U with
  // partial pivoting, k = min(m, n) steps, P[i, perm[i]] = 1 (perm [..., m]),
  // pivots [..., k], L unit lower m × k (below lu's diagonal), U upper k × n.
  set(t, OpKind::Lu, {
      .infer = [](const InferCtx& c) {
        const Type& a = c.operands[0];
        if (!is_floating(a.dtype) || a.rank() < 2) c.fail("expected a floating-point matrix (or a batch of them) as operand, got {}", a.str());
        const int64_t m = a.shape[a.shape.size() - 2], n = a.shape.back();
        Shape p(a.shape.begin(), a.shape.end() - 2), q = p;
        p.push_back(std::min(m, n));
        q.push_back(m);
        return std::vector<Type>{a, Type{DType::i32, p}, Type{DType::i32, q}};
      },
      .eval = [](const EvalCtx& c) {
        const Array& a = c.args[0];
        Array lu(c.resultType(0)), piv(c.resultType(1)), perm(c.resultType(2));
        const int64_t m = a.shape()[a.shape().size() - 2], n = a.shape().back(), k = std::min(m, n);
        dispatch(a.dtype(), [&](auto tag) {
          using T = decltype(tag);
          if constexpr (std::is_floating_point_v<T>)
            for (int64_t bt = 0; bt < batchOf(a.shape()); ++bt)
              luRef(elems<T>(a) + bt * m * n, elems<T>(lu) + bt * m * n, elems<int32_t>(piv) + bt * k,
                    elems<int32_t>(perm) + bt * m, m, n);
        });
        return std::vector<Array>{std::move(lu), std::move(piv), std::move(perm)};
      },
      .fold = noFold,
      // Right-looking: the pivot search reads a column (m - k per step), the
      // row swap and the trailing update run along rows.
      .lower = [](LowerCtx& c) {
        const Type& at = c.operandType(0);
        const DType t = at.dtype;
        const int64_t m = at.shape[at.shape.size() - 2], n = at.shape.back(), kn = std::min(m, n);
        if (lapack::use(c, std::max(m, n), kLapackLu)) return lapack::lowerLu(c);
        if (small::lowerLuAcrossBatch(c)) return;
        llvm::Value *A = c.operandBuffer(0), *LU = c.results[0], *Piv = c.results[1], *Perm = c.results[2];
        llvm::Type* i64 = c.b.getInt64Ty();
        llvm::Type* i32 = c.b.getInt32Ty();
        llvm::Value* bestSlot = c.scalarSlot(t);
        llvm::Value* pSlot = c.scalarSlot(DType::i64);
        const Loops lp(c, std::max(m, n));
        c.loop(batchOf(at.shape), [&](llvm::Value* bt) {
          llvm::Value* base = c.b.CreateMul(bt, c.i64(m * n));
          llvm::Value* pbase = c.b.CreateMul(bt, c.i64(kn));
          llvm::Value* vbase = c.b.CreateMul(bt, c.i64(m));
          auto at2 = [&](llvm::Value* i, llvm::Value* j) { return c.b.CreateAdd(base, mulAdd(c, i, n, j)); };
          auto fabs = [&](llvm::Value* x) { return c.intrinsic(llvm::Intrinsic::fabs, {{x}}); };
          c.loop(m * n, [&](llvm::Value* e) {
            llvm::Value* idx = c.b.CreateAdd(base, e);
            c.store(t, c.load(t, A, idx), LU, idx);
          });
          lp.loop(m, [&](llvm::Value* i) { c.store(DType::i32, c.b.CreateTrunc(i, i32), Perm, c.b.CreateAdd(vbase, i)); });
          lp.loop(kn, [&](llvm::Value* k) {
            c.b.CreateStore(fabs(c.load(t, LU, at2(k, k))), bestSlot);
            c.b.CreateStore(k, pSlot);
            lp.range(add(c, k, 1), c.i64(m), [&](llvm::Value* i) {
              llvm::Value* v = fabs(c.load(t, LU, at2(i, k)));
              llvm::Value* better = c.b.CreateFCmpOGT(v, c.b.CreateLoad(c.scalarType(t), bestSlot));
              c.b.CreateStore(c.b.CreateSelect(better, v, c.b.CreateLoad(c.scalarType(t), bestSlot)), bestSlot);
              c.b.CreateStore(c.b.CreateSelect(better, i, c.b.CreateLoad(i64, pSlot)), pSlot);
            });
            llvm::Value* p = c.b.CreateLoad(i64, pSlot);
            c.store(DType::i32, c.b.CreateTrunc(p, i32), Piv, c.b.CreateAdd(pbase, k));
            lp.loop(n, [&](llvm::Value* j) {
              llvm::Value* x = c.load(t, LU, at2(k, j));
              llvm::Value* y = c.load(t, LU, at2(p, j));
              c.store(t, y, LU, at2(k, j));
              c.store(t, x, LU, at2(p, j));
            });
            llvm::Value* pk = c.b.CreateAdd(vbase, k);
            llvm::Value* pp = c.b.CreateAdd(vbase, p);
            llvm::Value* permK = c.load(DType::i32, Perm, pk);
            llvm::Value* permP = c.load(DType::i32, Perm, pp);
            c.store(DType::i32, permP, Perm, pk);
            c.store(DType::i32, permK, Perm, pp);
            llvm::Value* piv = c.load(t, LU, at2(k, k));
            llvm::Value* nonzero = c.b.CreateFCmpUNE(piv, c.constant(t, 0));
            lp.range(add(c, k, 1), c.i64(m), [&](llvm::Value* i) {
              llvm::Value* x = c.load(t, LU, at2(i, k));
              llvm::Value* l = c.b.CreateSelect(nonzero, c.b.CreateFDiv(x, piv), x);
              c.store(t, l, LU, at2(i, k));
              llvm::Value* neg = c.b.CreateFNeg(l);
              lp.range(add(c, k, 1), c.i64(n), [&](llvm::Value* j) {
                c.store(t, c.intrinsic(llvm::Intrinsic::fmuladd, {{neg, c.load(t, LU, at2(k, j)), c.load(t, LU, at2(i, j))}}), LU, at2(i, j));
              });
            });
          });
        });
      },
      // With P a = L U, L and U the square factors (squareFactors) and
      // F = L^-1 P dA U^-1 (JAX's rule; F is m × n):
      //   dLU = L tril(F, -1) + triu(F) U;
      // reverse, from LUbar: Fbar = tril(L^T LUbar, -1) + triu(LUbar U^T),
      //   abar = P^T L^-T Fbar U^-T.
      // L^-1 and U^-1 are triangular solves reading L as unit lower and U as upper.
      .jvp = [](const autodiff::JvpCtx& c) {
        const auto [L, U] = squareFactors(c.y(0));
        const Tensor P = permutationMatrix(c.y(2), L.dtype());
        const Tensor pda = matmul(P, *c.dx(0));
        const Tensor la = linalg::triangular_solve(L, pda, {.lower = true, .left_side = true, .unit_diagonal = true});
        const Tensor F = linalg::triangular_solve(U, la, {.lower = false});
        const Tensor lowerF = tril(F, -1);
        c.tangent(0, matmul(tril(L, -1), lowerF) + lowerF + matmul(triu(F), triu(U)));
      },
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] {
          const auto [L, U] = squareFactors(c.y(0));
          const Tensor ct = *c.ct(0);
          const Tensor ltc = matmul(tril(L, -1), ct, {.transpose_a = true}) + ct; // L^T LUbar
          const Tensor Fbar = tril(ltc, -1) + triu(matmul(ct, triu(U), {.transpose_b = true}));
          const Tensor h1 = linalg::triangular_solve(L, Fbar, {.lower = true, .left_side = true, .transpose_a = true, .unit_diagonal = true});
          const Tensor H = linalg::triangular_solve(U, h1, {.lower = false, .transpose_a = true}); // L^-T Fbar U^-T
          return matmul(permutationMatrix(c.y(2), L.dtype()), H, {.transpose_a = true});
        });
      },
      // batched over leading axes already: the batch is one more of them
      .batch = batching::leadingAxesBatch,
      // each matrix of the batch on its own
      .deps = sparsity::matrixBatchDeps,
      .lapack = true,
  });
}

} // namespace adjit::ops
