// adjit/decompositions.h — matrix decompositions with derivatives: QR,
// symmetric eigendecomposition and SVD, batched over leading axes, in f32
// and f64 (JAX's jnp.linalg.qr/eigh/svd in reduced form). Small matrices
// run generated code (Householder QR, Jacobi methods); for larger ones the
// JIT calls LAPACK where it is installed, while ahead-of-time objects keep
// the generated code (docs/guide/decompositions.md gives the sizes).
#pragma once

#include <adjit/tensor.h>

#include <source_location>

namespace adjit::linalg {

/// The reduced QR factors of a [..., m, n]: q [..., m, k] with orthonormal
/// columns and r [..., k, n] upper triangular, k = min(m, n).
struct QR {
  Tensor q; ///< [..., m, k], qᵀ q = I
  Tensor r; ///< [..., k, n], upper triangular
};

/// a = q r (Householder reflections); r's diagonal has LAPACK's signs
/// (possibly negative). Differentiable where r's diagonal has no zero (a of
/// full rank), for tall, square and wide a.
QR qr(const Tensor& a, std::source_location loc = std::source_location::current());

/// The eigendecomposition of a symmetric matrix.
struct Eigh {
  Tensor eigenvalues;  ///< [..., n], ascending
  Tensor eigenvectors; ///< [..., n, n], orthonormal columns, column i for eigenvalue i
};

/// Eigenvalues and eigenvectors of (a + aᵀ)/2 for a [..., n, n] (the
/// symmetric part, as jnp.linalg.eigh's default symmetrize_input; its
/// gradient is symmetric). Each eigenvector's largest-magnitude component
/// is positive. Eigenvalue gradients are defined everywhere; eigenvector
/// gradients are inf/NaN where eigenvalues repeat (as JAX's).
Eigh eigh(const Tensor& a, std::source_location loc = std::source_location::current());

/// The reduced singular value decomposition.
struct SVD {
  Tensor u;  ///< [..., m, k], orthonormal columns
  Tensor s;  ///< [..., k], descending, k = min(m, n)
  Tensor vt; ///< [..., k, n], orthonormal rows
};

/// a = u diag(s) vt for a [..., m, n] (one-sided Jacobi); each column of u
/// has its largest-magnitude component positive. Gradients of s are defined
/// everywhere; those of u and vt where singular values are distinct and
/// (for m != n) nonzero, inf/NaN elsewhere.
SVD svd(const Tensor& a, std::source_location loc = std::source_location::current());

} // namespace adjit::linalg
