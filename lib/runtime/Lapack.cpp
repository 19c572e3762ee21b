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
#include <memory>
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
  void (*trsv)(const char*, const char*, const char*, const int*, const T*, const int*, T*, const int*, Len, Len, Len);
  void (*getrf)(const int*, const int*, T*, const int*, int*, int*);
  void (*syevd)(const char*, const char*, const int*, T*, const int*, T*, T*, const int*, int*, const int*, int*, Len, Len);
  void (*gesdd)(const char*, const int*, const int*, T*, const int*, T*, T*, const int*, T*, const int*, T*, const int*, int*,
                int*, Len);
  void (*geqrf)(const int*, const int*, T*, const int*, T*, T*, const int*, int*);
  void (*orgqr)(const int*, const int*, const int*, T*, const int*, const T*, T*, const int*, int*);
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
                     bind(h, "dtrsm_", lib->d.trsm) && bind(h, "strsv_", lib->s.trsv) &&
                     bind(h, "dtrsv_", lib->d.trsv) && bind(h, "sgetrf_", lib->s.getrf) && bind(h, "dgetrf_", lib->d.getrf) &&
                     bind(h, "ssyevd_", lib->s.syevd) && bind(h, "dsyevd_", lib->d.syevd) && bind(h, "sgesdd_", lib->s.gesdd) &&
                     bind(h, "dgesdd_", lib->d.gesdd) && bind(h, "sgeqrf_", lib->s.geqrf) && bind(h, "dgeqrf_", lib->d.geqrf) &&
                     bind(h, "sorgqr_", lib->s.orgqr) && bind(h, "dorgqr_", lib->d.orgqr);
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

/// `count` elements of scratch for the calling thread, kept between calls
/// (grown, never shrunk; uninitialised): LAPACK's workspaces and working
/// copies. Allocated per call they came from fresh pages each time, and a
/// 2048² eigh's 67 MB workspace faulted in cost 10-20% of dsyevd's own time
/// (adjit's eigh 1.17-1.22x the benchmark's dsyevd, whose workspace is
/// allocated once). Slot distinguishes a call's buffers of one type.
template <class U, int Slot> U* threadScratch(std::size_t count) {
  thread_local std::unique_ptr<U[]> buffer;
  thread_local std::size_t size = 0;
  if (count > size) {
    buffer.reset(); // the old one first: the peak is the new size, not both
    buffer.reset(new U[count]);
    size = count;
  }
  return buffer.get();
}

/// Out-of-place transposes go in tiles of kTile × kTile. A row of a large
/// matrix is 4 KiB or a multiple, so a column's elements share one L1 set; 8
/// rows of a tile fit its 8 ways. Measured on 512² f64: untiled 1.26 ms,
/// tiles of 32 1.41 ms, of 16 0.54 ms, of 8 0.39 ms (2048²: 80, 68, 30, 36
/// ms). The loop inside a tile runs along the destination's rows: along the
/// source's (stores 4 KiB apart) it took 0.44–0.64 ms at 512², 1.7–2.4 ms at
/// 1024², against 0.11 and 1.0 ms (one thread, tiles of 8, a loaded machine).
constexpr int64_t kTile = 8;

/// dst[j * dstLd + i] = src[i * srcLd + j] for i < rows, j < cols: dst (cols
/// × rows) is the transpose of src (rows × cols), each with its row stride.
template <class T> void transposeInto(const T* src, int64_t srcLd, T* dst, int64_t dstLd, int64_t rows, int64_t cols) {
  for (int64_t j0 = 0; j0 < cols; j0 += kTile)
    for (int64_t i0 = 0; i0 < rows; i0 += kTile)
      for (int64_t j = j0; j < std::min(cols, j0 + kTile); ++j)
        for (int64_t i = i0; i < std::min(rows, i0 + kTile); ++i) dst[j * dstLd + i] = src[i * srcLd + j];
}

/// x = xᵀ for a square n×n matrix: tiles of kSwapTile × kSwapTile, each
/// pair across the diagonal read into two buffers along their rows and
/// written back transposed, along rows too. Cold caches, one thread, f64:
/// 512² 0.18 ms (swapping element by element in tiles of 8, as before, 0.23
/// ms; buffered tiles of 8 0.30 ms), 1024² 0.67 ms (0.94), 2048² 3.1 ms
/// (8.8: there a column of a tile of 8 spans 8 pages and every swap misses).
constexpr int64_t kSwapTile = 16;
template <class T> void transposeInPlace(T* x, int64_t n) {
  constexpr int64_t S = kSwapTile;
  T u[S * S], v[S * S];
  for (int64_t i0 = 0; i0 < n; i0 += S)
    for (int64_t j0 = i0; j0 < n; j0 += S) {
      const int64_t ih = std::min(n, i0 + S) - i0, jh = std::min(n, j0 + S) - j0;
      if (i0 == j0) {
        for (int64_t i = 0; i < ih; ++i)
          for (int64_t j = i + 1; j < jh; ++j) std::swap(x[(i0 + i) * n + j0 + j], x[(j0 + j) * n + i0 + i]);
        continue;
      }
      for (int64_t i = 0; i < ih; ++i)
        for (int64_t j = 0; j < jh; ++j) u[i * S + j] = x[(i0 + i) * n + j0 + j];
      for (int64_t j = 0; j < jh; ++j)
        for (int64_t i = 0; i < ih; ++i) v[j * S + i] = x[(j0 + j) * n + i0 + i];
      for (int64_t j = 0; j < jh; ++j)
        for (int64_t i = 0; i < ih; ++i) x[(j0 + j) * n + i0 + i] = u[i * S + j];
      for (int64_t i = 0; i < ih; ++i)
        for (int64_t j = 0; j < jh; ++j) x[(i0 + i) * n + j0 + j] = v[j * S + i];
    }
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
/// other one. One trsm per matrix, in place on x; for one right-hand side
/// (n = 1: x a vector) trsv, on op(a) (left side: aᵀ transposed unless
/// transpose_a) or op(a)ᵀ (right side). OpenBLAS's trsm packs a whatever
/// the width of x: one vector, f64, one thread, best of 200, trsm / trsv
/// 1.0 / 0.6 µs at 64², 54 / 18 µs at 512², 1.17 / 0.37 ms at 2048² (its
/// own getrs takes trsv for one right-hand side too).
template <class T> void triangularSolve(int32_t flags, int64_t batch, int64_t m, int64_t n, const T* a, const T* b, T* x) {
  const Routines<T>& r = lib()->get<T>();
  const bool lower = flags & 1, left = flags & 2, trans = flags & 4, unit = flags & 8;
  const char side = left ? 'R' : 'L', uplo = lower ? 'U' : 'L', transa = trans ? 'T' : 'N', diag = unit ? 'U' : 'N';
  const int M = static_cast<int>(left ? n : m), N = static_cast<int>(left ? m : n), lda = static_cast<int>(m);
  const T one = 1;
  std::copy(b, b + batch * m * n, x);
  if (n == 1) {
    const char transv = left != trans ? 'T' : 'N';
    const int inc = 1;
    for (int64_t i = 0; i < batch; ++i) r.trsv(&uplo, &transv, &diag, &lda, a + i * m * m, &lda, x + i * m, &inc, 1, 1, 1);
    return;
  }
  for (int64_t i = 0; i < batch; ++i) r.trsm(&side, &uplo, &transa, &diag, &M, &N, &one, a + i * m * m, &lda, x + i * m * n, &M, 1, 1, 1, 1);
}

/// getrf pivots rows of a column-major matrix: the row-major a is copied and
/// transposed in place (row pivoting of aᵀ would pivot a's columns),
/// factored, and transposed back. (A copy and a transpose in place, cold
/// caches: 0.09 + 0.18 ms at 512² f64; transposeInto 0.42 ms, and the
/// transposing copy this was, with the loop along the source's rows, 0.76
/// ms warm.) A rectangular a goes through a column-major copy instead. LAPACK's
/// pivots are 1-based swaps in order, adjit's 0-based; the permutation applies
/// them to 0..m-1.
template <class T> void lu(int64_t batch, int64_t m, int64_t n, const T* a, T* out, int32_t* pivots, int32_t* permutation) {
  const Routines<T>& r = lib()->get<T>();
  const int M = static_cast<int>(m), N = static_cast<int>(n);
  const int64_t k = std::min(m, n);
  std::vector<int> ipiv(static_cast<std::size_t>(k));
  std::vector<T> col(m == n ? 0 : static_cast<std::size_t>(m * n)); // a rectangular matrix, column-major
  for (int64_t b = 0; b < batch; ++b) {
    const T* A = a + b * m * n;
    T* LU = out + b * m * n;
    int info = 0; // > 0: a zero pivot, the factorisation is complete (singular a is fine)
    if (m == n) {
      std::copy(A, A + n * n, LU);
      transposeInPlace(LU, n);
      r.getrf(&N, &N, LU, &N, ipiv.data(), &info);
      transposeInPlace(LU, n);
    } else {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) col[static_cast<std::size_t>(j * m + i)] = A[i * n + j];
      r.getrf(&M, &N, col.data(), &M, ipiv.data(), &info);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) LU[i * n + j] = col[static_cast<std::size_t>(j * m + i)];
    }
    int32_t* piv = pivots + b * k;
    int32_t* perm = permutation + b * m;
    std::iota(perm, perm + m, 0);
    for (int64_t s = 0; s < k; ++s) {
      int64_t p = ipiv[static_cast<std::size_t>(s)] - 1;
      if (p < s || p >= m) p = s; // never from LAPACK; kept from indexing out of bounds
      piv[s] = static_cast<int32_t>(p);
      std::swap(perm[s], perm[p]);
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
  T* work = threadScratch<T, 0>(static_cast<std::size_t>(lwork));
  int* iwork = threadScratch<int, 0>(static_cast<std::size_t>(liwork));
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
    if (norm2 < std::numeric_limits<T>::infinity()) r.syevd("V", "L", &N, V, &N, W, work, &lwork, iwork, &liwork, &info, 1, 1);
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
  T* copy = threadScratch<T, 1>(static_cast<std::size_t>(m * n));
  int* iwork = threadScratch<int, 0>(static_cast<std::size_t>(8 * k));
  int info = 0, lwork = -1;
  T wq = 0;
  r.gesdd("S", &rows, &cols, copy, &rows, s, vt, &rows, u, &K, &wq, &lwork, iwork, &info, 1); // workspace query
  // the query's answer, a float for sgesdd (rounded: with a margin), and at least LAPACK's minimum for jobz = 'S'
  lwork = static_cast<int>(std::max<double>(double(wq) * (1 + 1.0 / 64) + 1, double(5 * k * k + 7 * k + std::max(m, n))));
  T* work = threadScratch<T, 0>(static_cast<std::size_t>(lwork));
  for (int64_t b = 0; b < batch; ++b) {
    const T* A = a + b * m * n;
    T *U = u + b * m * k, *S = s + b * k, *VT = vt + b * k * n;
    T norm2 = 0;
    for (int64_t i = 0; i < m * n; ++i) norm2 += A[i] * A[i];
    std::copy(A, A + m * n, copy);
    info = 0;
    if (norm2 < std::numeric_limits<T>::infinity())
      r.gesdd("S", &rows, &cols, copy, &rows, S, VT, &rows, U, &K, work, &lwork, iwork, &info, 1);
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

/// geqrf and orgqr on a column-major copy of a (m×n, ld m: a transposed),
/// then r (k×n) and q (m×k) transposed out of it. Not gelqf + orglq on a as
/// it is (column-major aᵀ = L Q is a = Qᵀ Lᵀ, no transposes): OpenBLAS's
/// are slower, gelqf + orglq / geqrf + orgqr 1.35× at 256², 1.32× at 512²
/// (f64, one thread), against transposes of ~0.1 ms at 512². geqrf's
/// diagonal signs are qr's convention (LinalgSpectral.cpp). A NaN or inf
/// entry makes q and r all NaN: OpenBLAS's sgeqrf + sorgqr left entries of
/// q and r finite that depend on a NaN (80², f32; the generated
/// reflections spread it from its column on).
template <class T> void qr(int64_t batch, int64_t m, int64_t n, const T* a, T* q, T* r) {
  const Routines<T>& lp = lib()->get<T>();
  const int64_t k = std::min(m, n);
  const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  std::vector<T> f(static_cast<std::size_t>(m * n)), tau(static_cast<std::size_t>(k));
  int info = 0, lwork = -1;
  T wq = 0, wq2 = 0;
  lp.geqrf(&M, &N, f.data(), &M, tau.data(), &wq, &lwork, &info); // workspace queries
  lp.orgqr(&M, &K, &K, f.data(), &M, tau.data(), &wq2, &lwork, &info);
  lwork = static_cast<int>(std::max<double>(std::max(double(wq), double(wq2)) * (1 + 1.0 / 64) + 1, double(std::max(m, n))));
  std::vector<T> work(static_cast<std::size_t>(lwork));
  for (int64_t b = 0; b < batch; ++b) {
    const T* A = a + b * m * n;
    T *Q = q + b * m * k, *R = r + b * k * n;
    bool finite = true;
    for (int64_t i = 0; i < m * n; ++i) finite = finite && std::isfinite(A[i]);
    if (!finite) {
      fillNaN(Q, m * k);
      fillNaN(R, k * n);
      continue;
    }
    transposeInto(A, n, f.data(), m, m, n);
    info = 0;
    lp.geqrf(&M, &N, f.data(), &M, tau.data(), work.data(), &lwork, &info);
    transposeInto(f.data(), m, R, n, n, k); // R[i, j] = f[i + j m], rows i < k
    for (int64_t i = 1; i < k; ++i) std::fill(R + i * n, R + i * n + i, T(0)); // below the diagonal: the reflectors
    lp.orgqr(&M, &K, &K, f.data(), &M, tau.data(), work.data(), &lwork, &info);
    transposeInto(f.data(), m, Q, k, k, m); // Q[i, j] = f[i + j m]
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

extern "C" void adjit_lapack_lu(int32_t f64, int64_t batch, int64_t m, int64_t n, const void* a, void* out, int32_t* pivots,
                                int32_t* permutation) noexcept {
  if (std::min(m, n) == 0) return;
  run(f64, batch, [&](auto t) {
    using T = decltype(t);
    lu(batch, m, n, static_cast<const T*>(a), static_cast<T*>(out), pivots, permutation);
  }, [&](auto t) {
    const int64_t k = std::min(m, n);
    fillNaN(static_cast<decltype(t)*>(out), batch * m * n);
    for (int64_t i = 0; i < batch * k; ++i) pivots[i] = static_cast<int32_t>(i % k);
    for (int64_t i = 0; i < batch * m; ++i) permutation[i] = static_cast<int32_t>(i % m);
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

extern "C" void adjit_lapack_qr(int32_t f64, int64_t batch, int64_t m, int64_t n, const void* a, void* q, void* r) noexcept {
  if (std::min(m, n) == 0) return;
  run(f64, batch, [&](auto t) {
    using T = decltype(t);
    qr(batch, m, n, static_cast<const T*>(a), static_cast<T*>(q), static_cast<T*>(r));
  }, [&](auto t) {
    using T = decltype(t);
    const int64_t k = std::min(m, n);
    fillNaN(static_cast<T*>(q), batch * m * k);
    fillNaN(static_cast<T*>(r), batch * k * n);
  });
}
