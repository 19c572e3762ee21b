// ops/LinalgSpectral.cpp — the decompositions of (batches of) matrices:
// qr (reduced, Householder), eigh (symmetric eigenproblem, Jacobi)
// and svd (reduced, one-sided Jacobi). Each algorithm is written twice with
// the same steps: here in C++ for the interpreter (`eval`), and as generated
// code (`lower`, no library calls) in LinalgSpectralLowering.cpp. Their
// derivatives are matrix expressions over the results, written with
// differentiable ops, never the loops'.
//
// Conventions (deterministic, the interpreter's and the JIT's alike):
// - qr: R's diagonal has LAPACK's signs (dgeqrf: R_jj = -sign(a_jj') |x|,
//   where a_jj' is the column's leading element when it is reflected).
// - eigh reads (A + Aᵀ)/2 (jnp.linalg.eigh's symmetrize_input): eigenvalues
//   ascending; each eigenvector's largest-magnitude component (the first of
//   equal ones) is positive.
// - svd: singular values descending; each column of u has its
//   largest-magnitude component positive (row of vt flipped with it).
//   Singular vectors for zero singular values complete the others to an
//   orthonormal set (completeColumns), as LAPACK's do.
// - eigh and svd of a matrix with a NaN or inf entry: every result NaN
//   (qr's reflections spread NaNs on their own; its LAPACK path makes every
//   result NaN, runtime/Lapack.cpp's qr says why).
//
// Lowering: the generated Householder QR and Jacobi methods, or from an
// order of kLapackQr, kLapackEigh (kLapackQr and kLapackSvd on min(m, n))
// LAPACK's geqrf + orgqr, syevd and gesdd (s or d) where the JIT has it
// loaded at run time (LinalgLapack.h; never in objects, nor with
// ADJIT_LAPACK=0), with the same conventions (signs, order, NaN but qr's); the
// vectors of repeated or zero eigen- and singular values are another basis
// of the same space. `linalg_bench --thresholds`, one f64 matrix, generated
// time / LAPACK path's time (above 1: LAPACK faster), loaded 2-core machine:
//   order   8     12    16    24    32    48    64    96    128
//   qr      0.37  0.61  0.55  0.95  1.38  2.1   2.9   3.3   7.5
//   eigh    1.3   2.5   1.8   3.0   4.0   4.4   8.5   47    44
//   svd     0.75  1.02  1.05  1.39  1.86  2.2   2.6   2.6   3.1
// eigh at 512²: 4.2 s generated; through the LAPACK path 1.06–1.09× dsyevd
// called directly, 1.00× at 2048² (bench/linalg_bench.cpp). qr (square,
// f64): generated 67× the LAPACK path's time at 256² (173 / 2.6 ms), 74× at
// 512² (2.6 s / 36 ms); the LAPACK path 1.05–1.11× dgeqrf + dorgqr called
// directly on the buffer (the QR of aᵀ: no transposes; runtime/Lapack.cpp's
// qr says why not dgelqf + dorglq, which would need none).
#include "ops/LinalgSpectral.h"
#include "autodiff/JvpCtx.h"
#include "autodiff/VjpCtx.h"
#include "ops/Common.h"
#include "ops/LinalgLapack.h"

#include <adjit/linalg.h>

#include <algorithm>
#include <array>
#include <limits>
#include <numeric>

namespace adjit::ops {
namespace {

using ir::EvalCtx;
using spectral::kEps;
using spectral::kMaxSweeps;
using spectral::Mat;
using spectral::matOf;
using ir::InferCtx;

/// Checks a floating operand of rank >= 2 (square when `square`).
void expectMatrix(const InferCtx& c, bool square) {
  const Type& a = c.operands[0];
  if (!is_floating(a.dtype)) c.fail("expected a floating-point matrix (or a batch of them), got {}", a.str());
  if (a.rank() < 2) c.fail("expected a matrix (or a batch of them) of rank >= 2, got {}", a.str());
  if (square && a.shape[a.rank() - 1] != a.shape[a.rank() - 2])
    c.fail("expected square matrices, got {}", a.str());
}

/// `a`'s batch shape followed by `tail`.
Type withTail(const Type& a, std::initializer_list<int64_t> tail) {
  Shape s(a.shape.begin(), a.shape.end() - 2);
  s.insert(s.end(), tail);
  return Type{a.dtype, s};
}

// ---------------------------------------------------------------------------
// Reference algorithms (one matrix, row-major). The lowerings below follow
// them step by step.

/// Householder QR of the m×n matrix a: q (m×k) with orthonormal columns and
/// r (k×n) upper triangular, a = q r. Reflector j maps column j of the
/// remaining rows x to beta e_1: beta = -sign(x_0) |x|, tau = (beta - x_0) /
/// beta, v = (1, x_1.. / (x_0 - beta)); a column already zero below its
/// diagonal gets tau = 0 (the identity), as LAPACK's dlarfg.
template <class T> void qrMatrix(const T* a, int64_t m, int64_t n, T* q, T* r) {
  const int64_t k = std::min(m, n);
  std::vector<T> w(a, a + m * n), tau(static_cast<std::size_t>(k));
  for (int64_t j = 0; j < k; ++j) {
    const T alpha = w[j * n + j];
    T xnorm2 = 0;
    for (int64_t i = j + 1; i < m; ++i) xnorm2 += w[i * n + j] * w[i * n + j];
    const bool zero = xnorm2 == 0;
    const T beta = zero ? alpha : -std::copysign(std::sqrt(alpha * alpha + xnorm2), alpha);
    const T tj = zero ? T(0) : (beta - alpha) / beta;
    const T scale = zero ? T(0) : T(1) / (alpha - beta);
    tau[static_cast<std::size_t>(j)] = tj;
    for (int64_t i = j + 1; i < m; ++i) w[i * n + j] *= scale;
    w[j * n + j] = beta;
    for (int64_t col = j + 1; col < n; ++col) { // (I - tau v vᵀ) applied to the remaining columns
      T s = w[j * n + col];
      for (int64_t i = j + 1; i < m; ++i) s += w[i * n + j] * w[i * n + col];
      s *= tj;
      w[j * n + col] -= s;
      for (int64_t i = j + 1; i < m; ++i) w[i * n + col] -= s * w[i * n + j];
    }
  }
  for (int64_t i = 0; i < k; ++i)
    for (int64_t col = 0; col < n; ++col) r[i * n + col] = col >= i ? w[i * n + col] : T(0);
  // q = H_0 ... H_{k-1} I[:, :k], applied from the last reflector back.
  for (int64_t i = 0; i < m; ++i)
    for (int64_t col = 0; col < k; ++col) q[i * k + col] = i == col ? T(1) : T(0);
  for (int64_t jj = 0; jj < k; ++jj) {
    const int64_t j = k - 1 - jj;
    const T tj = tau[static_cast<std::size_t>(j)];
    for (int64_t col = j; col < k; ++col) {
      T s = q[j * k + col];
      for (int64_t i = j + 1; i < m; ++i) s += w[i * n + j] * q[i * k + col];
      s *= tj;
      q[j * k + col] -= s;
      for (int64_t i = j + 1; i < m; ++i) q[i * k + col] -= s * w[i * n + j];
    }
  }
}

/// The Jacobi rotation (c, s) that zeroes entry (p, q) of a symmetric matrix
/// with diagonal app, aqq and off-diagonal apq (apq != 0): theta = (aqq - app)
/// / (2 apq), t = sign(theta) / (|theta| + sqrt(theta² + 1)) (the smaller
/// root of t² + 2 theta t - 1 = 0), c = 1 / sqrt(t² + 1), s = t c. The
/// one-sided SVD uses it with alpha = |a_p|², beta = |a_q|², gamma = a_p·a_q.
template <class T> std::array<T, 3> rotation(T app, T aqq, T apq) {
  const T theta = (aqq - app) / (T(2) * apq);
  const T t = std::copysign(T(1), theta) / (std::abs(theta) + std::sqrt(theta * theta + T(1)));
  const T c = T(1) / std::sqrt(t * t + T(1));
  return {c, t * c, t};
}

/// Columns p, q of the rows×cols matrix x become c x_p - s x_q, s x_p + c x_q.
template <class T> void rotateColumns(T* x, int64_t rows, int64_t cols, int64_t p, int64_t q, T c, T s) {
  for (int64_t i = 0; i < rows; ++i) {
    const T xp = x[i * cols + p], xq = x[i * cols + q];
    x[i * cols + p] = c * xp - s * xq;
    x[i * cols + q] = s * xp + c * xq;
  }
}

/// Makes the largest-magnitude entry (the first of equal ones) of column j
/// of x (rows×cols) positive; flips column j of y (yrows×cols) with it.
template <class T> void normaliseSign(T* x, int64_t rows, int64_t cols, int64_t j, T* y, int64_t yrows) {
  int64_t best = 0;
  T bestAbs = 0;
  for (int64_t i = 0; i < rows; ++i)
    if (std::abs(x[i * cols + j]) > bestAbs) {
      bestAbs = std::abs(x[i * cols + j]);
      best = i;
    }
  if (!(x[best * cols + j] < 0)) return;
  for (int64_t i = 0; i < rows; ++i) x[i * cols + j] = -x[i * cols + j];
  for (int64_t i = 0; i < yrows; ++i) y[i * cols + j] = -y[i * cols + j];
}

/// Swaps columns i and j of the rows×cols matrix x.
template <class T> void swapColumns(T* x, int64_t rows, int64_t cols, int64_t i, int64_t j) {
  for (int64_t r = 0; r < rows; ++r) std::swap(x[r * cols + i], x[r * cols + j]);
}

/// Pair k of round r of a round robin over N (even) indices, as (min, max):
/// index 0 meets the player at position 0 of a circle of the other N - 1,
/// position k the one at N - 1 - k; the circle turns by one each round, so
/// N - 1 rounds meet every pair once.
inline std::pair<int64_t, int64_t> roundRobin(int64_t k, int64_t r, int64_t N) {
  auto player = [&](int64_t pos) { return 1 + (pos + r) % (N - 1); };
  const int64_t a = k == 0 ? 0 : player(k), b = k == 0 ? player(0) : player(N - 1 - k);
  return {std::min(a, b), std::max(a, b)};
}

/// A rotation of a round: the pair, (c, s), and the new diagonal entries.
template <class T> struct Pair {
  int64_t p, q;
  T c, s, pp, qq;
};

/// Eigenvalues w (ascending) and eigenvectors v (columns) of (a + aᵀ)/2, a
/// n×n. Jacobi in round-robin order: sweeps of rotations over every pair
/// p < q with a nonzero entry, until off(S)² = Σ_{p<q} s_pq² <= eps² ||S||²_F.
template <class T> void eighMatrix(const T* a, int64_t n, T* w, T* v) {
  const int64_t N = n + (n & 1);
  std::vector<T> s(static_cast<std::size_t>(n * n));
  T norm2 = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      s[i * n + j] = (a[i * n + j] + a[j * n + i]) * T(0.5);
      norm2 += s[i * n + j] * s[i * n + j];
      v[i * n + j] = i == j ? T(1) : T(0);
    }
  for (int64_t sweep = 0; sweep < kMaxSweeps; ++sweep) {
    T off = 0;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) off += s[p * n + q] * s[p * n + q];
    if (!(off > kEps<T> * kEps<T> * norm2)) break;
    // A sweep: N - 1 rounds of disjoint pairs (round robin; N = n rounded
    // up to even, pairs with the extra index skipped). A round's rotations
    // commute: each zeroes its own s_pq exactly, and S' = Jᵀ S J is applied
    // as a pass over rows for S J (every row in cache) and rotations of rows
    // p, q; the 2×2 blocks are then s_pp - t s_pq, s_qq + t s_pq, 0.
    for (int64_t round = 0; round < N - 1; ++round) {
      std::vector<Pair<T>> pairs;
      for (int64_t k = 0; k < N / 2; ++k) {
        const auto [p, q] = roundRobin(k, round, N);
        if (q >= n) continue;
        const T apq = s[p * n + q];
        if (!(apq != 0)) continue;
        const T app = s[p * n + p], aqq = s[q * n + q];
        const auto [c, sn, t] = rotation(app, aqq, apq);
        pairs.push_back({p, q, c, sn, app - t * apq, aqq + t * apq});
      }
      for (int64_t i = 0; i < n; ++i) // S J, row by row
        for (const Pair<T>& r : pairs) {
          const T xp = s[i * n + r.p], xq = s[i * n + r.q];
          s[i * n + r.p] = r.c * xp - r.s * xq;
          s[i * n + r.q] = r.s * xp + r.c * xq;
        }
      for (const Pair<T>& r : pairs) { // Jᵀ (S J), and V J
        for (int64_t i = 0; i < n; ++i) {
          const T sp = s[r.p * n + i], sq = s[r.q * n + i];
          s[r.p * n + i] = r.c * sp - r.s * sq;
          s[r.q * n + i] = r.s * sp + r.c * sq;
        }
        s[r.p * n + r.p] = r.pp;
        s[r.q * n + r.q] = r.qq;
        s[r.p * n + r.q] = 0;
        s[r.q * n + r.p] = 0;
        rotateColumns(v, n, n, r.p, r.q, r.c, r.s);
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) w[i] = s[i * n + i];
  if (!(norm2 < std::numeric_limits<T>::infinity())) { // a NaN or inf entry: all NaN
    std::fill(w, w + n, std::numeric_limits<T>::quiet_NaN());
    std::fill(v, v + n * n, std::numeric_limits<T>::quiet_NaN());
    return;
  }
  for (int64_t i = 0; i < n; ++i) { // selection sort, ascending (the first of equal ones)
    int64_t best = i;
    for (int64_t j = i + 1; j < n; ++j)
      if (w[j] < w[best]) best = j;
    std::swap(w[i], w[best]);
    swapColumns(v, n, n, i, best);
  }
  for (int64_t j = 0; j < n; ++j) normaliseSign(v, n, n, j, v, 0);
}

/// Replaces the zero columns of W (rows×k; those j with s_j = 0) by unit
/// vectors orthogonal to every other column: the first candidates e_c (c
/// rising, never revisited) whose part orthogonal to the columns (Gram-Schmidt,
/// twice) has |x|² >= 1/(2 rows). Such a candidate exists: over all c the
/// parts sum to rows - rank >= 1 in |x|², and skipped ones (which only shrink
/// as columns are added) to less than 1/2.
template <class T> void completeColumns(T* W, int64_t rows, int64_t k, const T* s) {
  std::vector<T> x(static_cast<std::size_t>(rows));
  const T threshold = T(0.5) / static_cast<T>(rows);
  int64_t c = 0;
  for (int64_t j = 0; j < k; ++j) {
    if (s[j] != 0) continue;
    bool found = false;
    for (; c < rows && !found; ++c) {
      for (int64_t i = 0; i < rows; ++i) x[i] = i == c ? T(1) : T(0);
      for (int pass = 0; pass < 2; ++pass)
        for (int64_t l = 0; l < k; ++l) { // column j (and later zero ones) are zero: no change
          T d = 0;
          for (int64_t i = 0; i < rows; ++i) d += W[i * k + l] * x[i];
          for (int64_t i = 0; i < rows; ++i) x[i] -= d * W[i * k + l];
        }
      T n2 = 0;
      for (int64_t i = 0; i < rows; ++i) n2 += x[i] * x[i];
      if (!(n2 >= threshold)) continue;
      const T scale = T(1) / std::sqrt(n2);
      for (int64_t i = 0; i < rows; ++i) W[i * k + j] = x[i] * scale;
      found = true;
    }
  }
}

/// Reduced SVD of the m×n matrix a: u (m×k), s (k, descending), vt (k×n).
/// One-sided Jacobi (Hestenes) on W = a (m >= n) or aᵀ (m < n), rows×k:
/// rotations of column pairs, accumulated in V (k×k), until every pair is
/// orthogonal to |w_p·w_q| <= sqrt(rows) eps |w_p| |w_q|; then s_j = |w_j|,
/// W's columns normalised. a = W V ᵀ, so u = W, vt = Vᵀ (or u = V, vt = Wᵀ).
template <class T> void svdMatrix(const T* a, int64_t m, int64_t n, T* u, T* s, T* vt) {
  const bool tall = m >= n;
  const int64_t rows = std::max(m, n), k = std::min(m, n);
  std::vector<T> W(static_cast<std::size_t>(rows * k)), V(static_cast<std::size_t>(k * k));
  T norm2 = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < k; ++j) {
      W[i * k + j] = tall ? a[i * n + j] : a[j * n + i];
      norm2 += W[i * k + j] * W[i * k + j];
    }
  if (!(norm2 < std::numeric_limits<T>::infinity())) { // a NaN or inf entry: all NaN
    std::fill(u, u + m * k, std::numeric_limits<T>::quiet_NaN());
    std::fill(s, s + k, std::numeric_limits<T>::quiet_NaN());
    std::fill(vt, vt + k * n, std::numeric_limits<T>::quiet_NaN());
    return;
  }
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j) V[i * k + j] = i == j ? T(1) : T(0);
  const T tol = kEps<T> * std::sqrt(static_cast<T>(rows));
  for (int64_t sweep = 0; sweep < kMaxSweeps; ++sweep) {
    bool rotated = false;
    for (int64_t p = 0; p < k; ++p)
      for (int64_t q = p + 1; q < k; ++q) {
        T alpha = 0, beta = 0, gamma = 0;
        for (int64_t i = 0; i < rows; ++i) {
          alpha += W[i * k + p] * W[i * k + p];
          beta += W[i * k + q] * W[i * k + q];
          gamma += W[i * k + p] * W[i * k + q];
        }
        if (!(std::abs(gamma) > tol * std::sqrt(alpha) * std::sqrt(beta))) continue;
        rotated = true;
        const auto [c, sn, t] = rotation(alpha, beta, gamma);
        rotateColumns(W.data(), rows, k, p, q, c, sn);
        rotateColumns(V.data(), k, k, p, q, c, sn);
      }
    if (!rotated) break;
  }
  for (int64_t j = 0; j < k; ++j) {
    T n2 = 0;
    for (int64_t i = 0; i < rows; ++i) n2 += W[i * k + j] * W[i * k + j];
    s[j] = std::sqrt(n2);
  }
  for (int64_t i = 0; i < k; ++i) { // selection sort, descending
    int64_t best = i;
    for (int64_t j = i + 1; j < k; ++j)
      if (s[j] > s[best]) best = j;
    std::swap(s[i], s[best]);
    swapColumns(W.data(), rows, k, i, best);
    swapColumns(V.data(), k, k, i, best);
  }
  for (int64_t j = 0; j < k; ++j) {
    const T scale = s[j] == 0 ? T(1) : T(1) / s[j];
    for (int64_t i = 0; i < rows; ++i) W[i * k + j] *= scale;
  }
  completeColumns(W.data(), rows, k, s);
  // u's columns: W's when tall, V's otherwise.
  for (int64_t j = 0; j < k; ++j) {
    if (tall) normaliseSign(W.data(), rows, k, j, V.data(), k);
    else normaliseSign(V.data(), k, k, j, W.data(), rows);
  }
  const T* U = tall ? W.data() : V.data();
  const T* Vr = tall ? V.data() : W.data(); // n×k
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < k; ++j) u[i * k + j] = U[i * k + j];
  for (int64_t j = 0; j < k; ++j)
    for (int64_t i = 0; i < n; ++i) vt[j * n + i] = Vr[i * k + j];
}

/// Runs `one(T*-typed arrays, batch index)` for each matrix of operand 0.
template <class F> std::vector<Array> perMatrix(const EvalCtx& c, std::size_t nResults, F one) {
  const Array& a = c.args[0];
  std::vector<Array> out;
  for (std::size_t i = 0; i < nResults; ++i) out.emplace_back(c.resultType(i));
  const Mat d = matOf(a.shape());
  dispatch(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      for (int64_t b = 0; b < d.batch; ++b) one(elems<T>(a) + b * d.m * d.n, d, out, b, T{});
    }
  });
  return out;
}

// ---------------------------------------------------------------------------
// Derivative helpers: matrix expressions with differentiable ops.

/// x with its last two axes swapped.
Tensor mT(const Tensor& x) {
  std::vector<int64_t> perm(x.shape().size());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transpose(x, perm);
}
/// The n×n identity of dtype t.
Tensor eye(int64_t n, DType t) { return cast(eq(iota({n, n}, 0), iota({n, n}, 1)), t); }
/// [..., n] -> [..., 1, n]
Tensor rowVec(const Tensor& v) {
  const Shape shape = v.shape();
  std::vector<int64_t> s(shape.begin(), shape.end());
  s.insert(s.end() - 1, 1);
  return reshape(v, s);
}
/// [..., n] -> [..., n, 1]
Tensor colVec(const Tensor& v) {
  const Shape shape = v.shape();
  std::vector<int64_t> s(shape.begin(), shape.end());
  s.push_back(1);
  return reshape(v, s);
}
/// diag(v) for v [..., n]: [..., n, n].
Tensor diagEmbed(const Tensor& v) { return rowVec(v) * eye(v.shape().back(), v.dtype()); }
/// The diagonal of x [..., n, n]: [..., n].
Tensor diagPart(const Tensor& x) { return sum(x * eye(x.shape().back(), x.dtype()), {-1}); }
/// x[..., r0:r1, c0:c1]
Tensor block(const Tensor& x, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const Shape s = x.shape();
  std::vector<int64_t> lo(s.size(), 0), hi(s.begin(), s.end());
  lo[s.size() - 2] = r0, hi[s.size() - 2] = r1, lo[s.size() - 1] = c0, hi[s.size() - 1] = c1;
  return slice(x, lo, hi);
}
Tensor cols(const Tensor& x, int64_t c0, int64_t c1) { return block(x, 0, x.shape()[x.shape().size() - 2], c0, c1); }
/// acc += t, where acc may be absent (a symbolic zero).
void plus(std::optional<Tensor>& acc, const Tensor& t) { acc = acc ? *acc + t : t; }

/// F_ij = 1/(E_ij) off the diagonal, 0 on it, built as 1/(E + I) - I: JAX's
/// guard, which keeps the diagonal finite. Where E_ij = 0 off the diagonal
/// (repeated eigen- or singular values) F_ij is ±inf, and derivatives
/// through the vectors are inf or NaN there: they are not defined.
Tensor inverseGaps(const Tensor& e) {
  const Tensor i = eye(e.shape().back(), e.dtype());
  return 1.0 / (e + i) - i;
}

/// QR's tangents for square R (m >= n): with C = Qᵀ dA R⁻¹ and
/// Ω = L - Lᵀ, L = tril(C, -1) (Qᵀ dQ, antisymmetric on the square part):
///   dR = (C - Ω) R  (upper triangular),  dQ = dA R⁻¹ - Q (C - Ω).
std::pair<Tensor, Tensor> qrTangents(const Tensor& q, const Tensor& r, const Tensor& da) {
  const Tensor dar = linalg::triangular_solve(r, da); // dA R⁻¹: X R = dA, R upper
  const Tensor cm = matmul(q, dar, {.transpose_a = true});
  const Tensor l = tril(cm, -1);
  const Tensor cmo = cm - l + mT(l); // C - Ω
  return {dar - matmul(q, cmo), matmul(cmo, r)};
}

/// QR's cotangent of A for square R (m >= n), the transpose of qrTangents:
///   N = gR Rᵀ - Qᵀ gQ,  Z = triu(N) + triu(N, 1)ᵀ,  gA = (gQ + Q Z) R⁻ᵀ.
Tensor qrCotangent(const Tensor& q, const Tensor& r, const std::optional<Tensor>& gq, const std::optional<Tensor>& gr) {
  std::optional<Tensor> nm;
  if (gr) plus(nm, matmul(*gr, r, {.transpose_b = true}));
  if (gq) plus(nm, -matmul(q, *gq, {.transpose_a = true}));
  const Tensor z = triu(*nm) + mT(triu(*nm, 1));
  std::optional<Tensor> b = gq;
  plus(b, matmul(q, z));
  return linalg::triangular_solve(r, *b, {.transpose_a = true}); // B R⁻ᵀ: X Rᵀ = B, R upper
}

} // namespace

/// The orders (min(m, n) for svd) from which the JIT calls LAPACK
/// (LinalgLapack.h), where it is loaded: measured, see the header comment.
constexpr int64_t kLapackEigh = 16, kLapackSvd = 24, kLapackQr = 32;

void defineSpectralOps(Table& t) {
  // qr(a) -> q [..., m, k], r [..., k, n], k = min(m, n), a = q r, qᵀq = I,
  // r upper triangular with LAPACK's diagonal signs. Derivatives (R square
  // and invertible, m >= n; see qrTangents/qrCotangent). For m < n, A = [X Y]
  // with X m×m: X = Q R1 is a square QR and R2 = Qᵀ Y, so dQ, dR1 come from X,
  // dR2 = dQᵀ Y + Qᵀ dY; and gQ' = gQ + Y gR2ᵀ, gX from (gQ', gR1), gY = Q gR2.
  // Where R has a zero on its diagonal (rank-deficient A) they are inf/NaN.
  // R⁻¹ and R⁻ᵀ are one triangular_solve each (they were substitutions by
  // halves, O(n) slices, matmuls and concatenations). Gradient of
  // sum(q w1) + sum(r w2), f64, one thread, load ~15 (first call = trace,
  // differentiate, compile): [32, 16] 180 ms / 19 µs a run (was 330 ms /
  // 13 µs), [128, 64] 165 ms / 0.72 ms (810 ms / 0.60 ms), [256, 128] 190 ms /
  // 13 ms (1050 ms / 12 ms): compiling is 2-5× faster, running up to 1.4×
  // slower while triangular_solve's right-side lowering is unblocked.
  set(t, OpKind::Qr, {
      .infer = [](const InferCtx& c) {
        expectMatrix(c, false);
        const Type& a = c.operands[0];
        const int64_t m = a.shape[a.rank() - 2], n = a.shape[a.rank() - 1], k = std::min(m, n);
        return std::vector<Type>{withTail(a, {m, k}), withTail(a, {k, n})};
      },
      .eval = [](const EvalCtx& c) {
        return perMatrix(c, 2, [](const auto* a, const Mat& d, std::vector<Array>& out, int64_t b, auto tag) {
          using T = decltype(tag);
          const int64_t k = std::min(d.m, d.n);
          qrMatrix<T>(a, d.m, d.n, elems<T>(out[0]) + b * d.m * k, elems<T>(out[1]) + b * k * d.n);
        });
      },
      .fold = noFold,
      .lower = [](codegen::LowerCtx& c) {
        const Mat d = matOf(c.operandType(0).shape);
        if (spectral::lowerQrAcrossBatch(c)) return; // up to 32 × 32, before LAPACK (measured there)
        if (lapack::use(c, std::min(d.m, d.n), kLapackQr) && lapack::use(c, std::max(d.m, d.n), 0)) return lapack::lowerQr(c);
        spectral::lowerQr(c);
      },
      .jvp = [](const autodiff::JvpCtx& c) {
        const std::optional<Tensor> da = c.dx(0);
        if (!da) return;
        const Tensor q = c.y(0), r = c.y(1);
        const int64_t m = q.shape()[q.shape().size() - 2], n = r.shape().back();
        if (m >= n) {
          auto [dq, dr] = qrTangents(q, r, *da);
          c.tangent(0, dq);
          c.tangent(1, dr);
          return;
        }
        auto [dq, dr1] = qrTangents(q, cols(r, 0, m), cols(*da, 0, m));
        const Tensor dr2 = matmul(dq, cols(c.x(0), m, n), {.transpose_a = true}) + matmul(q, cols(*da, m, n), {.transpose_a = true});
        c.tangent(0, dq);
        c.tangent(1, concatenate({dr1, dr2}, static_cast<int64_t>(r.shape().size()) - 1));
      },
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] {
          const Tensor q = c.y(0), r = c.y(1);
          const std::optional<Tensor> gq = c.ct(0), gr = c.ct(1);
          const int64_t m = q.shape()[q.shape().size() - 2], n = r.shape().back();
          if (m >= n) return qrCotangent(q, r, gq, gr);
          std::optional<Tensor> gq1 = gq, gr1;
          std::optional<Tensor> gy;
          if (gr) {
            const Tensor gr2 = cols(*gr, m, n);
            plus(gq1, matmul(cols(c.x(0), m, n), gr2, {.transpose_b = true}));
            gr1 = cols(*gr, 0, m);
            gy = matmul(q, gr2);
          }
          const Tensor gx = qrCotangent(q, cols(r, 0, m), gq1, gr1);
          return concatenate({gx, gy ? *gy : zeros_like(cols(c.x(0), m, n))}, static_cast<int64_t>(r.shape().size()) - 1);
        });
      },
      // batched over leading axes already: the batch is one more of them
      .batch = batching::leadingAxesBatch,
      // Householder's: q[:, j] reads columns 0..j of a (0..j-1 for j = m-1,
      // whose reflector has no rows below it and only fixes a sign); r[i, j]
      // = q[:, i]ᵀ a[:, j] (j >= i) reads q[:, i]'s columns and column j;
      // below r's diagonal, nothing. One term per entry (nonlinear).
      .deps = [](const sparsity::SparsityCtx& c) {
        const Shape& s = c.type(0).shape;
        const int64_t m = s[s.size() - 2], n = s.back(), k = std::min(m, n);
        const int64_t batches = num_elements(Shape(s.begin(), s.end() - 2));
        auto last = [&](int64_t j) { return j == m - 1 ? j - 1 : j; }; // the last column q[:, j] reads
        std::vector<sparsity::Read> reads;
        for (int64_t b = 0; b < batches; ++b) {
          const int64_t base = b * m * n;
          auto columns = [&](int64_t upTo, int64_t also) {
            reads.clear();
            for (int64_t r = 0; r < m; ++r) {
              for (int64_t col = 0; col <= upTo; ++col) reads.push_back(sparsity::Read{0, base + r * n + col});
              if (also > upTo) reads.push_back(sparsity::Read{0, base + r * n + also});
            }
          };
          for (int64_t j = 0; j < k; ++j) {
            columns(last(j), -1);
            for (int64_t r = 0; r < m; ++r) c.term(0, b * m * k + r * k + j, reads);
          }
          for (int64_t i = 0; i < k; ++i)
            for (int64_t j = i; j < n; ++j) {
              columns(last(i), j);
              c.term(1, b * k * n + i * n + j, reads);
            }
        }
      },
      .lapack = true,
  });

  // eigh(a) -> w [..., n] ascending, v [..., n, n]: S = (a + aᵀ)/2 = v diag(w) vᵀ.
  // With dS = (dA + dAᵀ)/2 and P = vᵀ dS v:
  //   dw = diag(P),  dv = v (F ∘ P),  F_ij = 1/(w_j - w_i) (i != j), F_ii = 0
  // (inverseGaps: inf where eigenvalues repeat, so only dv is undefined there).
  // Transposed: gS = v (diag(gw) + F ∘ (vᵀ gv)) vᵀ, gA = (gS + gSᵀ)/2; without
  // gv, F is never built: eigenvalue gradients are defined everywhere.
  set(t, OpKind::Eigh, {
      .infer = [](const InferCtx& c) {
        expectMatrix(c, true);
        const Type& a = c.operands[0];
        Shape ws(a.shape.begin(), a.shape.end() - 1);
        return std::vector<Type>{Type{a.dtype, ws}, a};
      },
      .eval = [](const EvalCtx& c) {
        return perMatrix(c, 2, [](const auto* a, const Mat& d, std::vector<Array>& out, int64_t b, auto tag) {
          using T = decltype(tag);
          eighMatrix<T>(a, d.n, elems<T>(out[0]) + b * d.n, elems<T>(out[1]) + b * d.n * d.n);
        });
      },
      .fold = noFold,
      .lower = [](codegen::LowerCtx& c) {
        if (spectral::lowerEighAcrossBatch(c)) return; // up to 32 × 32, before LAPACK (measured there)
        if (lapack::use(c, c.operandType(0).shape.back(), kLapackEigh)) return lapack::lowerEigh(c);
        spectral::lowerEigh(c);
      },
      .jvp = [](const autodiff::JvpCtx& c) {
        const std::optional<Tensor> da = c.dx(0);
        if (!da) return;
        const Tensor w = c.y(0), v = c.y(1);
        const Tensor ds = (*da + mT(*da)) * 0.5;
        const Tensor p = matmul(v, matmul(ds, v), {.transpose_a = true});
        c.tangent(0, diagPart(p));
        c.tangent(1, matmul(v, inverseGaps(rowVec(w) - colVec(w)) * p));
      },
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] {
          const Tensor w = c.y(0), v = c.y(1);
          std::optional<Tensor> inner;
          if (const auto gw = c.ct(0)) plus(inner, diagEmbed(*gw));
          if (const auto gv = c.ct(1)) plus(inner, inverseGaps(rowVec(w) - colVec(w)) * matmul(v, *gv, {.transpose_a = true}));
          const Tensor gs = matmul(matmul(v, *inner), v, {.transpose_b = true});
          return (gs + mT(gs)) * 0.5;
        });
      },
      // batched over leading axes already: the batch is one more of them
      .batch = batching::leadingAxesBatch,
      // each matrix of the batch on its own
      .deps = sparsity::matrixBatchDeps,
      .lapack = true,
  });

  // svd(a) -> u [..., m, k], s [..., k] descending, vt [..., k, n]: a = u diag(s) vt.
  // With V = vtᵀ, dP = uᵀ dA V, F_ij = 1/(s_j² - s_i²) (i != j), 0 on the diagonal:
  //   ds = diag(dP)
  //   du = u (F ∘ (dP S + S dPᵀ)) + (I - u uᵀ) dA V S⁻¹      (second term when m > k)
  //   dV = V (F ∘ (S dP + dPᵀ S)) + (I - V Vᵀ) dAᵀ u S⁻¹     (second term when n > k)
  // Transposed, with X = F ∘ (uᵀ gu), Y = F ∘ (Vᵀ gV):
  //   gA = u (diag(gs) + (X + Xᵀ) S + S (Y + Yᵀ)) vt
  //        + (I - u uᵀ) gu S⁻¹ vt + u S⁻¹ gvt (I - V Vᵀ)
  // The vectors' derivatives are defined where singular values are distinct
  // (else F is inf) and, for m != n, nonzero (else S⁻¹ is): inf/NaN otherwise.
  // Gradients of s alone are u diag(gs) vt, defined everywhere.
  set(t, OpKind::Svd, {
      .infer = [](const InferCtx& c) {
        expectMatrix(c, false);
        const Type& a = c.operands[0];
        const int64_t m = a.shape[a.rank() - 2], n = a.shape[a.rank() - 1], k = std::min(m, n);
        Shape ss(a.shape.begin(), a.shape.end() - 2);
        ss.push_back(k);
        return std::vector<Type>{withTail(a, {m, k}), Type{a.dtype, ss}, withTail(a, {k, n})};
      },
      .eval = [](const EvalCtx& c) {
        return perMatrix(c, 3, [](const auto* a, const Mat& d, std::vector<Array>& out, int64_t b, auto tag) {
          using T = decltype(tag);
          const int64_t k = std::min(d.m, d.n);
          svdMatrix<T>(a, d.m, d.n, elems<T>(out[0]) + b * d.m * k, elems<T>(out[1]) + b * k, elems<T>(out[2]) + b * k * d.n);
        });
      },
      .fold = noFold,
      .lower = [](codegen::LowerCtx& c) {
        const Mat d = matOf(c.operandType(0).shape);
        if (spectral::lowerSvdAcrossBatch(c)) return; // up to 32 × 32, before LAPACK (measured there)
        if (lapack::use(c, std::min(d.m, d.n), kLapackSvd) && lapack::use(c, std::max(d.m, d.n), 0)) return lapack::lowerSvd(c);
        spectral::lowerSvd(c);
      },
      .jvp = [](const autodiff::JvpCtx& c) {
        const std::optional<Tensor> da = c.dx(0);
        if (!da) return;
        const Tensor u = c.y(0), s = c.y(1), vt = c.y(2);
        const int64_t m = u.shape()[u.shape().size() - 2], k = s.shape().back(), n = vt.shape().back();
        const Tensor v = mT(vt);
        const Tensor dav = matmul(*da, vt, {.transpose_b = true});
        const Tensor dp = matmul(u, dav, {.transpose_a = true});
        const Tensor sr = rowVec(s), sc = colVec(s);
        const Tensor f = inverseGaps(sr * sr - sc * sc);
        const Tensor dps = dp * sr, sdp = sc * dp;
        Tensor du = matmul(u, f * (dps + mT(dps)));
        Tensor dv = matmul(v, f * (sdp + mT(sdp)));
        if (m > k) du = du + (dav - matmul(u, dp)) / sr;
        if (n > k) dv = dv + (matmul(*da, u, {.transpose_a = true}) - matmul(v, dp, {.transpose_b = true})) / sr;
        c.tangent(0, du);
        c.tangent(1, diagPart(dp));
        c.tangent(2, mT(dv));
      },
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] {
          const Tensor u = c.y(0), s = c.y(1), vt = c.y(2);
          const int64_t m = u.shape()[u.shape().size() - 2], k = s.shape().back(), n = vt.shape().back();
          const std::optional<Tensor> gu = c.ct(0), gs = c.ct(1), gvt = c.ct(2);
          const Tensor sr = rowVec(s), sc = colVec(s);
          std::optional<Tensor> gp;
          if (gs) plus(gp, diagEmbed(*gs));
          if (gu || gvt) {
            const Tensor f = inverseGaps(sr * sr - sc * sc);
            if (gu) {
              const Tensor x = f * matmul(u, *gu, {.transpose_a = true});
              plus(gp, (x + mT(x)) * sr);
            }
            if (gvt) {
              const Tensor y = f * matmul(vt, *gvt, {.transpose_b = true}); // Vᵀ gV = vt gvtᵀ
              plus(gp, sc * (y + mT(y)));
            }
          }
          std::optional<Tensor> ga;
          if (gp) ga = matmul(matmul(u, *gp), vt);
          if (gu && m > k) plus(ga, matmul((*gu - matmul(u, matmul(u, *gu, {.transpose_a = true}))) / sr, vt));
          if (gvt && n > k) plus(ga, matmul(u, (*gvt - matmul(matmul(*gvt, vt, {.transpose_b = true}), vt)) / sc));
          return *ga;
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
