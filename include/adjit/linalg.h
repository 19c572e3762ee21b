// adjit/linalg.h — linear algebra beyond matmul, as jax.numpy.linalg and
// jax.lax.linalg have it: factorisations (cholesky, lu), triangular solves,
// and what is built on them (solve, inv, det, slogdet, cho_solve,
// matrix_power), with the small matrix helpers (trace, diagonal, diag,
// outer, kron, norm). Every function works on a matrix or a batch of them
// (leading axes), in f32 and f64, and is differentiable: derivatives are
// matrix expressions (docs/guide/linear-algebra.md), so second derivatives
// work too.
#pragma once

#include <adjit/tensor.h>
#include <adjit/tree.h>

#include <cstdint>
#include <source_location>

namespace adjit::linalg {

#define ADJIT_HERE std::source_location loc = std::source_location::current()

// ---- factorisations and triangular solves (ops of their own) ------------------------
/// The lower Cholesky factor L of each symmetric positive definite matrix a
/// ([..., n, n]): a = L L^T, L lower triangular with a positive diagonal,
/// zeros above it. With `symmetrize_input` (the default, as
/// jnp.linalg.cholesky) a is first replaced by (a + a^T) / 2; without it,
/// only a's lower triangle is read, as LAPACK's potrf. A matrix that is not
/// positive definite gives a matrix of NaNs, as in JAX: never an error.
Tensor cholesky(const Tensor& a, bool symmetrize_input = true, ADJIT_HERE);

/// Flags of triangular_solve, as lax.linalg.triangular_solve's (all false by default).
struct TriangularSolveOptions {
  bool lower = false;         ///< a is lower triangular (else upper); the other triangle is never read
  bool left_side = false;     ///< solve op(a) x = b (else x op(a) = b)
  bool transpose_a = false;   ///< op(a) = a^T (else a)
  bool unit_diagonal = false; ///< a's diagonal is taken to be ones (and never read)
};
/// x solving op(a) x = b (left_side) or x op(a) = b, a triangular
/// ([..., m, m]), b [..., m, n] (left_side) or [..., n, m]: lax.linalg's
/// triangular_solve. The batch axes of a and b broadcast.
Tensor triangular_solve(const Tensor& a, const Tensor& b, TriangularSolveOptions options = {}, ADJIT_HERE);

/// The result of lu for a [..., m, n] (k = min(m, n)): `lu` holds L (m × k,
/// unit lower) below the diagonal, its unit diagonal not stored, and U (k × n,
/// upper) on and above it; row i of P a is row permutation[i] of a; pivots[i]
/// is the row swapped with row i at step i (LAPACK's getrf, counted from 0).
/// As jax.lax.linalg.lu: P a = L U.
template <class T = Tensor> struct LU {
  T lu;          ///< L (strictly lower part) and U (upper part), a's type
  T pivots;      ///< i32 [..., k]
  T permutation; ///< i32 [..., m]
};
/// The LU factorisation of matrices a ([..., m, n], square or not) with
/// partial pivoting (the row with the largest magnitude; the first of
/// equals). A singular matrix factors (U has a zero on its diagonal), as
/// LAPACK. Differentiable for any m and n (JAX's rule, the factors padded
/// to square with the identity).
LU<> lu(const Tensor& a, ADJIT_HERE);

// ---- built on them (composites) -------------------------------------------------------
/// x solving a x = b, by lu: a [..., n, n], b [..., n] (one vector; only when
/// b is 1-D) or [..., n, k], batch axes broadcast (jnp.linalg.solve). Its
/// derivative (and inv's, det's, slogdet's) is a rule on lu's factors:
/// bbar = a^-T xbar, abar = -bbar x^T; NaN or inf where a is singular.
Tensor solve(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// The inverse of each square matrix, by lu (inf or NaN where a is singular).
Tensor inv(const Tensor& a, ADJIT_HERE);
/// The determinant of each square matrix, from lu: the product of U's
/// diagonal times the permutation's sign.
Tensor det(const Tensor& a, ADJIT_HERE);
/// The result of slogdet: det(a) = sign · exp(logabsdet).
template <class T = Tensor> struct SlogDet {
  T sign;      ///< -1, 0 or 1
  T logabsdet; ///< log |det(a)| (-inf where a is singular)
};
/// sign and log |det| of each square matrix, from lu (jnp.linalg.slogdet);
/// stable where det itself would overflow.
SlogDet<> slogdet(const Tensor& a, ADJIT_HERE);
/// x solving (c c^T) x = b given c = cholesky(a) (c^T c with `lower` false):
/// two triangular solves (jax.scipy.linalg.cho_solve). b is [..., n] (only
/// when 1-D) or [..., n, k].
Tensor cho_solve(const Tensor& c, const Tensor& b, bool lower = true, ADJIT_HERE);
/// a^n for square matrices by repeated squaring: the identity for n = 0,
/// inv(a)^-n for n < 0 (jnp.linalg.matrix_power).
Tensor matrix_power(const Tensor& a, int64_t n, ADJIT_HERE);

// ---- matrix helpers -----------------------------------------------------------------------
/// The sum along the diagonal `offset` of the last two axes (jnp.linalg.trace).
Tensor trace(const Tensor& x, int64_t offset = 0, ADJIT_HERE);
/// The diagonal `offset` (above the main one when positive, below when
/// negative) of the matrices on axes axis1 and axis2, as numpy: those axes
/// removed, the diagonal appended as the last axis.
Tensor diagonal(const Tensor& x, int64_t offset = 0, int64_t axis1 = -2, int64_t axis2 = -1, ADJIT_HERE);
/// numpy's diag: a 1-D x gives the square matrix with x on diagonal `k`
/// (zeros elsewhere); a 2-D x gives its diagonal `k`.
Tensor diag(const Tensor& x, int64_t k = 0, ADJIT_HERE);
/// The outer product of a and b, flattened first: r[i, j] = a[i] · b[j].
Tensor outer(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// The Kronecker product (numpy's kron): blocks a[i, j] · b; the operand of
/// lower rank gets leading axes of 1.
Tensor kron(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// The vector norm of the elements over `axes` (all when empty): ord 2 (the
/// Euclidean norm, the Frobenius norm over a matrix's two axes), 1 (sum of
/// |x|), or ±infinity (largest or smallest |x|). The gradient of the 2-norm
/// at 0 is 0 (a subgradient), not NaN.
Tensor norm(const Tensor& x, double ord = 2, std::vector<int64_t> axes = {}, bool keepdims = false, ADJIT_HERE);

#undef ADJIT_HERE

// The results are structures: jitted functions, grad and the control flow
// take and return them (LU<Array> from a compiled call).
ADJIT_TREE_TEMPLATE(LU, lu, pivots, permutation)
ADJIT_TREE_TEMPLATE(SlogDet, sign, logabsdet)

} // namespace adjit::linalg
