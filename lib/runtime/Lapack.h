// runtime/Lapack.h — LAPACK at run time, for the JIT only: the library is
// found with dlopen once (never linked), and compiled code calls the C entry
// points below, which lay adjit's row-major matrices out for LAPACK's
// column-major routines and keep adjit's conventions (NaN results, pivots,
// signs). Ahead-of-time objects never call them.
#pragma once

#include <cstdint>
#include <string>

namespace adjit::runtime::lapack {

/// Whether LAPACK can be called: $ADJIT_LAPACK is not "0" and a library with
/// every routine used was loaded (libopenblas.so.0, else liblapack.so.3, or
/// the file $ADJIT_LAPACK names). Loads it on the first call (thread-safe) and
/// sets OpenBLAS to one thread: adjit's kernels run on adjit's threads.
bool available();
/// The library loaded, or "" when none is.
std::string library();
/// While alive, code compiled on this thread does not call LAPACK (the
/// generated path, as with ADJIT_LAPACK=0): how tests compare both paths in
/// one process. Compilations happen on the calling thread.
class GeneratedOnlyHere {
public:
  GeneratedOnlyHere();
  ~GeneratedOnlyHere();
  GeneratedOnlyHere(const GeneratedOnlyHere&) = delete;
  GeneratedOnlyHere& operator=(const GeneratedOnlyHere&) = delete;

private:
  bool saved_;
};
/// Whether a GeneratedOnlyHere is alive on this thread.
bool generatedOnlyHere();

/// The number of matrices factored or solved through LAPACK so far in this
/// process (for tests and logs).
uint64_t matricesDone();

} // namespace adjit::runtime::lapack

// Entry points compiled code calls (the JIT resolves them to these
// functions). `f64` selects double (1) or float (0); buffers are row-major
// batches of `batch` matrices; results as the op blocks of ops/LinalgSolve.cpp
// and ops/LinalgSpectral.cpp define them.
extern "C" {
/// cholesky: l = lower factor of the matrix a's lower triangle defines, all NaN if not positive definite.
void adjit_lapack_cholesky(int32_t f64, int64_t batch, int64_t n, const void* a, void* l) noexcept;
/// triangular_solve: flags bit 0 lower, 1 left_side, 2 transpose_a, 3 unit_diagonal;
/// a [m, m], b and x [m, n] (left) or [n, m] (right).
void adjit_lapack_triangular_solve(int32_t f64, int32_t flags, int64_t batch, int64_t m, int64_t n, const void* a, const void* b,
                                   void* x) noexcept;
/// lu: P a = L U with partial pivoting; pivots and permutation 0-based.
void adjit_lapack_lu(int32_t f64, int64_t batch, int64_t m, int64_t n, const void* a, void* lu, int32_t* pivots, int32_t* permutation) noexcept;
/// eigh of (a + aᵀ)/2: w ascending, v's columns with their largest-magnitude entry positive.
void adjit_lapack_eigh(int32_t f64, int64_t batch, int64_t n, const void* a, void* w, void* v) noexcept;
/// Reduced qr: q [m, k] with orthonormal columns, r [k, n] upper triangular, LAPACK's signs (k = min(m, n)).
void adjit_lapack_qr(int32_t f64, int64_t batch, int64_t m, int64_t n, const void* a, void* q, void* r) noexcept;
/// Reduced svd: u [m, k], s [k] descending, vt [k, n]; u's columns with their largest-magnitude entry positive.
void adjit_lapack_svd(int32_t f64, int64_t batch, int64_t m, int64_t n, const void* a, void* u, void* s, void* vt) noexcept;
}
