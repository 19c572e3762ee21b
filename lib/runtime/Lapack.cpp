// runtime/Lapack.cpp — finds LAPACK at run time (dlopen, once) and runs
// adjit's large factorisations through it: the C entry points compiled code
// calls, each a loop over the batch around one LAPACK routine. Row-major
// matrices are handed over as the column-major transposes they are, so most
// routines work in place on the result buffer (see each entry point).
#include "runtime/Lapack.h"

#include "support/Log.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string_view>
#include <vector>

namespace adjit::runtime::lapack {
namespace {

// Fortran calling convention: every argument by pointer, the lengths of
// character arguments appended (gfortran's hidden arguments; routines
// written in C ignore them). LAPACK integers are 32 bits (Debian's OpenBLAS;
// its 64-bit-integer build is a library of another name, never loaded).
using Len = std::size_t;
template <class T> struct Routines {
  void (*potrf)(const char*, const int*, T*, const int*, int*, Len);
  void (*trsm)(const char*, const char*, const char*, const char*, const int*, const int*, const T*, const T*, const int*, T*,
               const int*, Len, Len, Len, Len);
  void (*getrf)(const int*, const int*, T*, const int*, int*, int*);
  void (*syevd)(const char*, const char*, const int*, T*, const int*, T*, T*, const int*, int*, const int*, int*, Len, Len);
  void (*gesdd)(const char*, const int*, const int*, T*, const int*, T*, T*, const int*, T*, const int*, T*, const int*, int*,
                int*, Len);
};

struct Library {
  std::string name;
  Routines<float> s;
  Routines<double> d;
  template <class T> const Routines<T>& get() const {
    if constexpr (std::is_same_v<T, float>) return s;
    else return d;
  }
};

template <class F> bool bind(void* h, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(h, name));
  return fn != nullptr;
}

/// The library with every routine, or null. OpenBLAS first (the measured
/// one; liblapack.so.3 is OpenBLAS on Debian only where it is the chosen
/// alternative, else the slow reference LAPACK).
const Library* load() {
  const char* env = std::getenv("ADJIT_LAPACK");
  const std::string_view setting = env ? env : "";
  if (setting == "0") return nullptr;
  std::vector<std::string> candidates{"libopenblas.so.0", "liblapack.so.3"};
  if (!setting.empty() && setting != "1") candidates = {std::string(setting)};
  for (const std::string& name : candidates) {
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    auto* lib = new Library{name, {}, {}};
    const bool all = bind(h, "spotrf_", lib->s.potrf) && bind(h, "dpotrf_", lib->d.potrf) && bind(h, "strsm_", lib->s.trsm) &&
                     bind(h, "dtrsm_", lib->d.trsm) && bind(h, "sgetrf_", lib->s.getrf) && bind(h, "dgetrf_", lib->d.getrf) &&
                     bind(h, "ssyevd_", lib->s.syevd) && bind(h, "dsyevd_", lib->d.syevd) && bind(h, "sgesdd_", lib->s.gesdd) &&
                     bind(h, "dgesdd_", lib->d.gesdd);
    if (!all) {
      delete lib;
      dlclose(h);
      continue;
    }
    // adjit runs kernels on its own threads: OpenBLAS's would only compete
    // with them. Calls from several threads at once are safe in OpenBLAS's
    // threaded builds (its buffers are locked).
    void (*setThreads)(int) = nullptr;
    if (bind(h, "openblas_set_num_threads", setThreads)) setThreads(1);
    return lib; // kept for the process's life, as the handle
  }
  return nullptr;
}

const Library* lib() {
  static const Library* l = [] {
    const Library* found = load();
    if (logEnabled("compile")) logLine("compile", found ? "lapack: loaded " + found->name : std::string("lapack: none found"));
    return found;
  }();
  return l;
}

std::atomic<uint64_t> done{0};

template <class T> void fillNaN(T* p, int64_t count) { std::fill(p, p + count, std::numeric_limits<T>::quiet_NaN()); }

/// Transposes go in tiles of kTile × kTile. A row of a large matrix is 4 KiB
/// or a multiple, so a column's elements share one L1 set; 8 rows of a tile
/// fit its 8 ways. Measured on 512² f64 (out of place / in place): untiled
/// 1.26 / 1.16 ms, tiles of 32 1.41 / 1.29 ms, of 16 0.54 / 0.34 ms, of 8
/// 0.39 / 0.09 ms (2048²: 80 / 59, 68 / 67, 30 / 21, 36 / 10 ms).
constexpr int64_t kTile = 8;

/// dst = srcᵀ for square n×n matrices.
template <class T> void transposeInto(const T* src, T* dst, int64_t n) {
  for (int64_t i0 = 0; i0 < n; i0 += kTile)
    for (int64_t j0 = 0; j0 < n; j0 += kTile)
      for (int64_t i = i0; i < std::min(n, i0 + kTile); ++i)
        for (int64_t j = j0; j < std::min(n, j0 + kTile); ++j) dst[j * n + i] = src[i * n + j];
}

/// x = xᵀ for a square n×n matrix.
template <class T> void transposeInPlace(T* x, int64_t n) {
  for (int64_t i0 = 0; i0 < n; i0 += kTile)
    for (int64_t j0 = i0; j0 < n; j0 += kTile)
      for (int64_t i = i0; i < std::min(n, i0 + kTile); ++i)
        for (int64_t j = std::max(j0, i + 1); j < std::min(n, j0 + kTile); ++j) std::swap(x[i * n + j], x[j * n + i]);
}

/// Makes the largest-magnitude entry (the first of equal ones) of the
/// strided vector x[0], x[stride], ... positive; returns whether it flipped it.
template <class T> bool flipToPositive(T* x, int64_t len, int64_t stride) {
  int64_t best = 0;
  T bestAbs = 0;
  for (int64_t i = 0; i < len; ++i)
    if (std::abs(x[i * stride]) > bestAbs) bestAbs = std::abs(x[i * stride]), best = i;
  if (!(x[best * stride] < 0)) return false;
  for (int64_t i = 0; i < len; ++i) x[i * stride] = -x[i * stride];
  return true;
}

/// Row-major a is column-major aᵀ: potrf of the upper triangle of aᵀ (a's
/// lower one) gives U with Uᵀ U = S, whose row-major reading is L = Uᵀ.
/// LAPACK leaves the other triangle alone: zeroed here. Not positive
/// definite (info > 0, or a NaN pivot OpenBLAS lets through): all NaN, as
/// the generated code.
template <class T> void cholesky(int64_t batch, int64_t n, const T* a, T* l) {
  const Routines<T>& r = lib()->get<T>();
  const int N = static_cast<int>(n);
  for (int64_t b = 0; b < batch; ++b) {
    const T* A = a + b * n * n;
    T* L = l + b * n * n;
    std::copy(A, A + n * n, L);
    int info = 0;
    r.potrf("U", &N, L, &N, &info, 1);
    bool ok = info == 0;
    for (int64_t i = 0; i < n && ok; ++i) ok = L[i * n + i] > 0;
    if (!ok) {
      fillNaN(L, n * n);
      continue;
    }
    for (int64_t i = 0; i < n; ++i) std::fill(L + i * n + i + 1, L + (i + 1) * n, T(0));
  }
}

/// Row-major a, x are column-major aᵀ, xᵀ. op(a) x = b is xᵀ op(a)ᵀ = bᵀ (a
/// right-side solve) and x op(a) = b is op(a)ᵀ xᵀ = bᵀ; op(a)ᵀ is aᵀ
/// untransposed (transpose_a off) or transposed, and aᵀ's triangle is the
/// other one. One trsm per matrix, in place on x.
template <class T> void triangularSolve(int32_t flags, int64_t batch, int64_t m, int64_t n, const T* a, const T* b, T* x) {
  const Routines<T>& r = lib()->get<T>();
  const bool lower = flags & 1, left = flags & 2, trans = flags & 4, unit = flags & 8;
  const char side = left ? 'R' : 'L', uplo = lower ? 'U' : 'L', transa = trans ? 'T' : 'N', diag = unit ? 'U' : 'N';
  const int M = static_cast<int>(left ? n : m), N = static_cast<int>(left ? m : n), lda = static_cast<int>(m);
  const T one = 1;
  std::copy(b, b + batch * m * n, x);
  for (int64_t i = 0; i < batch; ++i) r.trsm(&side, &uplo, &transa, &diag, &M, &N, &one, a + i * m * m, &lda, x + i * m * n, &M, 1, 1, 1, 1);
}

/// getrf pivots rows of a column-major matrix: the row-major a is copied
/// transposed (the one copy: row pivoting of aᵀ would pivot a's columns),
/// factored, and transposed back in place. LAPACK's pivots are 1-based
/// swaps in order, adjit's 0-based; the permutation applies them to 0..n-1.
template <class T> void lu(int64_t batch, int64_t n, const T* a, T* out, int32_t* pivots, int32_t* permutation) {
  const Routines<T>& r = lib()->get<T>();
  const int N = static_cast<int>(n);
  std::vector<int> ipiv(static_cast<std::size_t>(n));
  for (int64_t b = 0; b < batch; ++b) {
    const T* A = a + b * n * n;
    T* LU = out + b * n * n;
    transposeInto(A, LU, n);
    int info = 0; // > 0: a zero pivot, the factorisation is complete (singular a is fine)
    r.getrf(&N, &N, LU, &N, ipiv.data(), &info);
    transposeInPlace(LU, n);
    int32_t* piv = pivots + b * n;
    int32_t* perm = permutation + b * n;
    std::iota(perm, perm + n, 0);
    for (int64_t k = 0; k < n; ++k) {
      int64_t p = ipiv[static_cast<std::size_t>(k)] - 1;
      if (p < k || p >= n) p = k; // never from LAPACK; kept from indexing out of bounds
      piv[k] = static_cast<int32_t>(p);
      std::swap(perm[k], perm[p]);
    }
  }
}

/// S = (a + aᵀ)/2 (symmetric: its row- and column-major layouts agree) into
/// v, syevd in place; v then holds the eigenvectors as rows (column-major
/// columns), whose signs are normalised before v is transposed.
template <class T> void eigh(int64_t batch, int64_t n, const T* a, T* w, T* v) {
  const Routines<T>& r = lib()->get<T>();
  const int N = static_cast<int>(n);
  int info = 0, lwork = -1, liwork = -1, iq = 0;
  T wq = 0;
  r.syevd("V", "L", &N, v, &N, w, &wq, &lwork, &iq, &liwork, &info, 1, 1); // workspace query
  lwork = static_cast<int>(std::max<double>(double(wq) * (1 + 1.0 / 64) + 1, 1 + 6 * N + 2 * N * N)); // as svd's
  liwork = std::max(iq, 3 + 5 * N);
  std::vector<T> work(static_cast<std::size_t>(lwork));
  std::vector<int> iwork(static_cast<std::size_t>(liwork));
  for (int64_t b = 0; b < batch; ++b) {
    const T* A = a + b * n * n;
    T* W = w + b * n;
    T* V = v + b * n * n;
    T norm2 = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const T x = (A[i * n + j] + A[j * n + i]) * T(0.5);
        V[i * n + j] = x;
        norm2 += x * x;
      }
    info = 0;
    if (norm2 < std::numeric_limits<T>::infinity()) r.syevd("V", "L", &N, V, &N, W, work.data(), &lwork, iwork.data(), &liwork, &info, 1, 1);
    if (!(norm2 < std::numeric_limits<T>::infinity()) || info != 0) { // a NaN or inf entry, or no convergence: all NaN
      fillNaN(W, n);
      fillNaN(V, n * n);
      continue;
    }
    for (int64_t j = 0; j < n; ++j) flipToPositive(V + j * n, n, 1);
    transposeInPlace(V, n);
  }
}

/// Row-major a (m×n) is column-major aᵀ (n×m) = U' S VT', so a = VT'ᵀ S U'ᵀ:
/// u = VT'ᵀ, whose row-major layout is VT' column-major (k×m, ld k), and
/// vt = U'ᵀ, row-major U' column-major (n×k, ld n). gesdd writes both into
/// the result buffers; only a is copied (gesdd overwrites it).
template <class T> void svd(int64_t batch, int64_t m, int64_t n, const T* a, T* u, T* s, T* vt) {
  const Routines<T>& r = lib()->get<T>();
  const int64_t k = std::min(m, n);
  const int rows = static_cast<int>(n), cols = static_cast<int>(m), K = static_cast<int>(k);
  std::vector<T> copy(static_cast<std::size_t>(m * n));
  std::vector<int> iwork(static_cast<std::size_t>(8 * k));
  int info = 0, lwork = -1;
  T wq = 0;
  r.gesdd("S", &rows, &cols, copy.data(), &rows, s, vt, &rows, u, &K, &wq, &lwork, iwork.data(), &info, 1); // workspace query
  // the query's answer, a float for sgesdd (rounded: with a margin), and at least LAPACK's minimum for jobz = 'S'
  lwork = static_cast<int>(std::max<double>(double(wq) * (1 + 1.0 / 64) + 1, double(5 * k * k + 7 * k + std::max(m, n))));
  std::vector<T> work(static_cast<std::size_t>(lwork));
  for (int64_t b = 0; b < batch; ++b) {
    const T* A = a + b * m * n;
    T *U = u + b * m * k, *S = s + b * k, *VT = vt + b * k * n;
    T norm2 = 0;
    for (int64_t i = 0; i < m * n; ++i) norm2 += A[i] * A[i];
    std::copy(A, A + m * n, copy.data());
    info = 0;
    if (norm2 < std::numeric_limits<T>::infinity())
      r.gesdd("S", &rows, &cols, copy.data(), &rows, S, VT, &rows, U, &K, work.data(), &lwork, iwork.data(), &info, 1);
    if (!(norm2 < std::numeric_limits<T>::infinity()) || info != 0) { // a NaN or inf entry, or no convergence: all NaN
      fillNaN(U, m * k);
      fillNaN(S, k);
      fillNaN(VT, k * n);
      continue;
    }
    for (int64_t j = 0; j < k; ++j)
      if (flipToPositive(U + j, m, k))
        for (int64_t i = 0; i < n; ++i) VT[j * n + i] = -VT[j * n + i];
  }
}

/// Runs body(float) or body(double); where LAPACK's workspace cannot be
/// allocated (the one exception possible), fail(T) fills the results with NaN.
template <class F, class G> void run(int32_t f64, int64_t batch, F body, G fail) noexcept {
  auto typed = [&](auto t) {
    try {
      body(t);
      done += static_cast<uint64_t>(batch);
    } catch (...) {
      fail(t);
    }
  };
  if (f64) typed(double{});
  else typed(float{});
}

thread_local bool generatedOnly = false;

} // namespace

GeneratedOnlyHere::GeneratedOnlyHere() : saved_(generatedOnly) { generatedOnly = true; }
GeneratedOnlyHere::~GeneratedOnlyHere() { generatedOnly = saved_; }
bool generatedOnlyHere() { return generatedOnly; }

bool available() { return lib() != nullptr; }
std::string library() { return lib() ? lib()->name : std::string(); }
uint64_t matricesDone() { return done.load(); }

} // namespace adjit::runtime::lapack

using namespace adjit::runtime::lapack;

extern "C" void adjit_lapack_cholesky(int32_t f64, int64_t batch, int64_t n, const void* a, void* l) noexcept {
  run(f64, batch, [&](auto t) {
    using T = decltype(t);
    cholesky(batch, n, static_cast<const T*>(a), static_cast<T*>(l));
  }, [&](auto t) { fillNaN(static_cast<decltype(t)*>(l), batch * n * n); });
}

extern "C" void adjit_lapack_triangular_solve(int32_t f64, int32_t flags, int64_t batch, int64_t m, int64_t n, const void* a,
                                              const void* b, void* x) noexcept {
  if (m == 0 || n == 0) return;
  run(f64, batch, [&](auto t) {
    using T = decltype(t);
    triangularSolve(flags, batch, m, n, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(x));
  }, [&](auto t) { fillNaN(static_cast<decltype(t)*>(x), batch * m * n); });
}

extern "C" void adjit_lapack_lu(int32_t f64, int64_t batch, int64_t n, const void* a, void* out, int32_t* pivots,
                                int32_t* permutation) noexcept {
  run(f64, batch, [&](auto t) {
    using T = decltype(t);
    lu(batch, n, static_cast<const T*>(a), static_cast<T*>(out), pivots, permutation);
  }, [&](auto t) {
    fillNaN(static_cast<decltype(t)*>(out), batch * n * n);
    for (int64_t i = 0; i < batch * n; ++i) pivots[i] = permutation[i] = static_cast<int32_t>(i % n);
  });
}

extern "C" void adjit_lapack_eigh(int32_t f64, int64_t batch, int64_t n, const void* a, void* w, void* v) noexcept {
  run(f64, batch, [&](auto t) {
    using T = decltype(t);
    eigh(batch, n, static_cast<const T*>(a), static_cast<T*>(w), static_cast<T*>(v));
  }, [&](auto t) {
    fillNaN(static_cast<decltype(t)*>(w), batch * n);
    fillNaN(static_cast<decltype(t)*>(v), batch * n * n);
  });
}

extern "C" void adjit_lapack_svd(int32_t f64, int64_t batch, int64_t m, int64_t n, const void* a, void* u, void* s,
                                 void* vt) noexcept {
  if (std::min(m, n) == 0) return;
  run(f64, batch, [&](auto t) {
    using T = decltype(t);
    svd(batch, m, n, static_cast<const T*>(a), static_cast<T*>(u), static_cast<T*>(s), static_cast<T*>(vt));
  }, [&](auto t) {
    using T = decltype(t);
    const int64_t k = std::min(m, n);
    fillNaN(static_cast<T*>(u), batch * m * k);
    fillNaN(static_cast<T*>(s), batch * k);
    fillNaN(static_cast<T*>(vt), batch * k * n);
  });
}
