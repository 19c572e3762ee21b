// bench/linalg_bench.cpp — adjit::linalg next to LAPACK (OpenBLAS, one
// thread), in the same process, adjit and LAPACK timed in turn: batched 8×8
// and 32×32 cholesky + cho_solve and cholesky alone (mixture-model sizes,
// generated code vectorised across the batch), f64 and f32, with the gradient
// of sum(cho_solve(cholesky(a), b) * w) and each program's first call
// (LAPACK / adjit, above 1: adjit is faster; bench/linalg_torch_small.py times
// PyTorch on the same problems); 512² and 2048² cholesky, solve and eigh,
// forward and gradient (where adjit's JIT calls LAPACK itself; adjit / LAPACK,
// the target is below 1.2), against the same computations written with LAPACK
// and BLAS calls (bench/linalg_torch.py times PyTorch on them); the gradient
// of a 64×64 and 256×256 solve (LAPACK's: dgesv, dgetrs and an outer product
// by hand). Not a test.
// `--quick`: fewer repetitions, no 2048²; `--no-2048`; `--large-only`: the
// 512² and 2048² rows alone; `--small-only`: the batches of small matrices alone; `--reps N`: N rounds of each large row (best of
// N, interleaved); `--thresholds`: the sweep the LAPACK thresholds come from.
#include <adjit/adjit.h>

#include "runtime/Lapack.h" // the generated path for the threshold sweep (bench/ sees lib/)

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

extern "C" {
void openblas_set_num_threads(int);
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info);
void dpotrs_(const char* uplo, const int* n, const int* nrhs, const double* a, const int* lda, double* b, const int* ldb, int* info);
void spotrf_(const char* uplo, const int* n, float* a, const int* lda, int* info);
void spotrs_(const char* uplo, const int* n, const int* nrhs, const float* a, const int* lda, float* b, const int* ldb, int* info);
void dgesv_(const int* n, const int* nrhs, double* a, const int* lda, int* ipiv, double* b, const int* ldb, int* info);
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void sgetrf_(const int* m, const int* n, float* a, const int* lda, int* ipiv, int* info);
void sgesv_(const int* n, const int* nrhs, float* a, const int* lda, int* ipiv, float* b, const int* ldb, int* info);
void dgetrs_(const char* trans, const int* n, const int* nrhs, const double* a, const int* lda, const int* ipiv, double* b, const int* ldb,
             int* info);
void dtrmm_(const char* side, const char* uplo, const char* transa, const char* diag, const int* m, const int* n, const double* alpha,
            const double* a, const int* lda, double* b, const int* ldb);
void dtrsm_(const char* side, const char* uplo, const char* transa, const char* diag, const int* m, const int* n, const double* alpha,
            const double* a, const int* lda, double* b, const int* ldb);
void dger_(const int* m, const int* n, const double* alpha, const double* x, const int* incx, const double* y, const int* incy, double* a,
           const int* lda);
void dgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k, const double* alpha, const double* a, const int* lda,
            const double* b, const int* ldb, const double* beta, double* c, const int* ldc);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work, const int* lwork, int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau, double* work, const int* lwork,
             int* info);
void dgelqf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work, const int* lwork, int* info);
void dorglq_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau, double* work, const int* lwork,
             int* info);
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w, double* work, const int* lwork,
             int* iwork, const int* liwork, int* info);
}

using namespace adjit;
using Clock = std::chrono::steady_clock;

namespace {

double gBudget = 0.3; ///< seconds per measurement

/// Best times of `a` and `b`, run in turn until each has had gBudget.
std::pair<double, double> interleaved(const std::function<void()>& a, const std::function<void()>& b) {
  a();
  b();
  double bestA = 1e30, bestB = 1e30, total = 0;
  for (int i = 0; i < 3 || total < 2 * gBudget; ++i)
    for (const auto* f : {&a, &b}) {
      auto t0 = Clock::now();
      (*f)();
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      (f == &a ? bestA : bestB) = std::min(f == &a ? bestA : bestB, s);
      total += s;
    }
  return {bestA, bestB};
}

/// batch symmetric positive definite n × n matrices: x x^T + n I.
std::vector<double> spd(int64_t batch, int64_t n) {
  std::vector<double> x(static_cast<std::size_t>(n * n)), a(static_cast<std::size_t>(batch * n * n));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < n * n; ++i) x[std::size_t(i)] = std::sin(0.37 * double(i) + double(b));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = i == j ? double(n) : 0;
        for (int64_t k = 0; k < n; ++k) s += x[std::size_t(i * n + k)] * x[std::size_t(j * n + k)];
        a[std::size_t(b * n * n + i * n + j)] = s;
      }
  }
  return a;
}

void report(const char* label, std::pair<double, double> t, double err) {
  std::printf("%-52s adjit %10.2f us   LAPACK %10.2f us   LAPACK/adjit %5.2fx   (max abs diff %.1e)\n", label,
              t.first * 1e6, t.second * 1e6, t.second / t.first, err);
}

/// report's line with the time per matrix and the first call's time.
void report(const char* label, std::pair<double, double> t, double err, double firstCall, int64_t batch) {
  std::printf("%-52s adjit %10.2f us  (%7.1f ns per matrix)   LAPACK %10.2f us   LAPACK/adjit %5.2fx   "
              "(max abs diff %.1e)   first call %6.1f ms\n",
              label, t.first * 1e6, t.first * 1e9 / double(batch), t.second * 1e6, t.second / t.first, err, firstCall * 1e3);
}

/// LAPACK's potrf and potrs for T.
template <class T> void potrf(const int* n, T* a, int* info) {
  if constexpr (std::is_same_v<T, double>) dpotrf_("U", n, a, n, info);
  else spotrf_("U", n, a, n, info);
}
template <class T> void potrs(const int* n, const T* a, T* b, int* info) {
  const int one = 1;
  if constexpr (std::is_same_v<T, double>) dpotrs_("U", n, &one, a, n, b, n, info);
  else spotrs_("U", n, &one, a, n, b, n, info);
}

/// Seconds of f's first call (tracing and compiling included).
template <class F> double firstCall(F&& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// batch × (cholesky + cho_solve with one right-hand side), and cholesky
/// alone, against LAPACK's potrf + potrs per matrix; the gradient of
/// sum(cho_solve(cholesky(a), b) * w) in a and b (no LAPACK counterpart:
/// bench/linalg_torch_small.py times PyTorch's on the same problems).
template <class T> void choleskySolve(int64_t batch, int64_t n) {
  const char* dt = std::is_same_v<T, double> ? "f64" : "f32";
  const std::vector<double> a64 = spd(batch, n);
  const std::vector<T> a(a64.begin(), a64.end());
  std::vector<T> b(static_cast<std::size_t>(batch * n)), w(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = T(std::cos(0.1 * double(i))), w[i] = T(std::sin(0.3 * double(i)));
  const Array A(a, {batch, n, n}), B(b, {batch, n, 1}), Wt(w, {batch, n, 1});
  auto f = jit([](const Tensor& x, const Tensor& y) { return linalg::cho_solve(linalg::cholesky(x, false), y); }, {.threads = 1});
  auto chol = jit([](const Tensor& x) { return linalg::cholesky(x, false); }, {.threads = 1});
  auto loss = [&](const Tensor& x, const Tensor& y) { return sum(linalg::cho_solve(linalg::cholesky(x, false), y) * constant(Wt)); };
  auto g = jit(grad(loss, argnums<0, 1>), {.threads = 1});
  Array X, L;
  std::tuple<Array, Array> G;
  const double compile = firstCall([&] { X = f(A, B); }), compileChol = firstCall([&] { L = chol(A); }),
               compileGrad = firstCall([&] { G = g(A, B); });
  f.wait_optimized(); // time the optimised code (JitOptions::tiers)
  chol.wait_optimized();
  g.wait_optimized();
  std::vector<T> work(a.size()), x(b.size());
  const int ni = int(n);
  auto lapackChol = [&] {
    std::memcpy(work.data(), a.data(), a.size() * sizeof(T));
    for (int64_t k = 0; k < batch; ++k) {
      int info = 0;
      potrf(&ni, work.data() + k * n * n, &info); // row-major lower = column-major upper
    }
  };
  auto lapack = [&] {
    std::memcpy(work.data(), a.data(), a.size() * sizeof(T));
    std::memcpy(x.data(), b.data(), b.size() * sizeof(T));
    for (int64_t k = 0; k < batch; ++k) {
      int info = 0;
      potrf(&ni, work.data() + k * n * n, &info);
      potrs(&ni, work.data() + k * n * n, x.data() + k * n, &info);
    }
  };
  char label[96];
  const auto t = interleaved([&] { X = f(A, B); }, lapack);
  double err = 0;
  for (std::size_t i = 0; i < x.size(); ++i) err = std::max(err, std::fabs(X.at(int64_t(i)) - double(x[i])));
  std::snprintf(label, sizeof label, "%s cholesky + cho_solve %lld x [%lld, %lld]", dt, (long long)batch, (long long)n, (long long)n);
  report(label, t, err, compile, batch);
  const auto tc = interleaved([&] { L = chol(A); }, lapackChol);
  err = 0;
  for (int64_t k = 0; k < batch; ++k)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j)
        err = std::max(err, std::fabs(L.at(k * n * n + i * n + j) - double(work[std::size_t(k * n * n + i * n + j)])));
  std::snprintf(label, sizeof label, "%s cholesky %lld x [%lld, %lld]", dt, (long long)batch, (long long)n, (long long)n);
  report(label, tc, err, compileChol, batch);
  const auto tg = interleaved([&] { G = g(A, B); }, [] {});
  std::snprintf(label, sizeof label, "%s grad of sum(cho_solve(cholesky) * w) %lld x [%lld, %lld]", dt, (long long)batch,
                (long long)n, (long long)n);
  std::printf("%-52s adjit %10.2f us  (%7.1f ns per matrix)                     first call %6.1f ms\n", label, tg.first * 1e6,
              tg.first * 1e9 / double(batch), compileGrad * 1e3);
}

/// A symmetric n×n matrix with entries in [-1, 1] (its row- and column-major layouts agree).
std::vector<double> symmetricMatrix(int64_t n, double phase) {
  std::vector<double> w(static_cast<std::size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) w[std::size_t(i * n + j)] = w[std::size_t(j * n + i)] = std::sin(0.37 * double(i * n + j) + phase);
  return w;
}

/// Best time of `reps` runs of `a` and `b` in turn (for the slow large sizes).
std::pair<double, double> interleavedReps(int reps, const std::function<void()>& a, const std::function<void()>& b) {
  double bestA = 1e30, bestB = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    a();
    bestA = std::min(bestA, std::chrono::duration<double>(Clock::now() - t0).count());
    t0 = Clock::now();
    b();
    bestB = std::min(bestB, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return {bestA, bestB};
}

void reportLarge(const char* what, int64_t n, std::pair<double, double> t, double err) {
  std::printf("%-34s [%4lld²]  adjit %10.2f ms   LAPACK %10.2f ms   adjit/LAPACK %5.2fx   (max abs diff %.1e)\n", what, (long long)n,
              t.first * 1e3, t.second * 1e3, t.first / t.second, err);
  std::fflush(stdout);
}

/// cholesky of an n×n SPD matrix, forward (dpotrf) and the gradient of
/// sum(cholesky(a) * W) (Murray's rule with BLAS: dpotrf, dtrmm, two dtrsm).
/// LAPACK gives what adjit gives, from a's lower triangle: the row-major L,
/// which is the column-major U = Lᵀ of dpotrf("U"). (dpotrf("L") of the
/// same symmetric buffer leaves Lᵀ's row-major layout instead, the other
/// output: at 512², one thread, it is ~12% faster than "U": 1.26 against
/// 1.41 ms. adjit cannot take it without transposing a and L, 0.1 ms each.)
void largeCholesky(int64_t n, int reps) {
  const std::vector<double> a = spd(1, n), w = symmetricMatrix(n, 0.5);
  const Array A(a, {n, n}), W(w, {n, n});
  const int ni = int(n);
  const double one = 1;
  std::vector<double> l(a.size()), g(a.size());
  auto fwd = jit([](const Tensor& x) { return linalg::cholesky(x, false); }, {.threads = 1});
  Array L = fwd(A);
  fwd.wait_optimized(); // time the optimised code (JitOptions::tiers)
  auto lapackFwd = [&] { // l's upper triangle (column-major) is row-major L; below it, a's entries are left
    std::memcpy(l.data(), a.data(), a.size() * sizeof(double));
    int info = 0;
    dpotrf_("U", &ni, l.data(), &ni, &info);
  };
  auto t = interleavedReps(reps, [&] { L = fwd(A); }, lapackFwd);
  double err = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) err = std::max(err, std::fabs(L.at(i * n + j) - l[std::size_t(i * n + j)]));
  reportLarge("cholesky forward", n, t, err);

  auto gradient = jit(grad([](const Tensor& x, const Tensor& wt) { return sum(linalg::cholesky(x, false) * wt); }), {.threads = 1});
  Array G = gradient(A, W);
  gradient.wait_optimized();
  // Row-major X is column-major Xᵀ: with U = Lᵀ (l, column-major) and W's
  // buffer column-major Wᵀ, the rule's Lᵀ W is (Wᵀ L)ᵀ = (Wᵀ Uᵀ)ᵀ (one dtrmm),
  // and G = L⁻ᵀ Φ(Lᵀ W) L⁻¹ is Gᵀ = U⁻¹ Φ(..)ᵀ U⁻ᵀ (two dtrsm), g read row-major
  // is G: abar = tril(G) + triu(G, 1)ᵀ, row-major as adjit's.
  auto lapackGrad = [&] {
    lapackFwd();
    std::memcpy(g.data(), w.data(), w.size() * sizeof(double));
    dtrmm_("R", "U", "T", "N", &ni, &ni, &one, l.data(), &ni, g.data(), &ni);
    for (int64_t i = 0; i < n; ++i) { // row-major: Φ keeps the lower triangle, the diagonal halved
      for (int64_t j = i + 1; j < n; ++j) g[std::size_t(i * n + j)] = 0;
      g[std::size_t(i * n + i)] *= 0.5;
    }
    dtrsm_("L", "U", "N", "N", &ni, &ni, &one, l.data(), &ni, g.data(), &ni);
    dtrsm_("R", "U", "T", "N", &ni, &ni, &one, l.data(), &ni, g.data(), &ni);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) {
        g[std::size_t(i * n + j)] += g[std::size_t(j * n + i)];
        g[std::size_t(j * n + i)] = 0;
      }
  };
  t = interleavedReps(reps, [&] { G = gradient(A, W); }, lapackGrad);
  err = 0;
  for (std::size_t i = 0; i < g.size(); ++i) err = std::max(err, std::fabs(G.at(int64_t(i)) - g[i]));
  reportLarge("cholesky gradient", n, t, err);
}

/// solve(a, b) of an n×n system with one right-hand side, forward (dgesv)
/// and the gradient in a of sum(solve(a, b) * c) (dgetrf, two dgetrs, dger).
void largeSolve(int64_t n, int reps) {
  std::vector<double> a(static_cast<std::size_t>(n * n)), b(static_cast<std::size_t>(n)), c(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37 * double(i));
  for (int64_t i = 0; i < n; ++i) a[std::size_t(i * n + i)] += 2.0;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.1 * double(i)), c[i] = std::sin(0.3 * double(i));
  const Array A(a, {n, n}), B(b, {n}), C(c, {n});
  const int ni = int(n), one = 1;
  const double minusOne = -1;
  std::vector<double> work(a.size()), x(b.size()), y(b.size()), g(a.size());
  std::vector<int> ipiv(static_cast<std::size_t>(n));
  auto fwd = jit([](const Tensor& m, const Tensor& v) { return linalg::solve(m, v); }, {.threads = 1});
  Array X = fwd(A, B);
  fwd.wait_optimized(); // time the optimised code (JitOptions::tiers)
  // the row-major a is column-major aᵀ: factor it, and solve with 'T' for a
  auto lapackFwd = [&] {
    std::memcpy(work.data(), a.data(), a.size() * sizeof(double));
    std::memcpy(x.data(), b.data(), b.size() * sizeof(double));
    int info = 0;
    dgetrf_(&ni, &ni, work.data(), &ni, ipiv.data(), &info);
    dgetrs_("T", &ni, &one, work.data(), &ni, ipiv.data(), x.data(), &ni, &info);
  };
  auto t = interleavedReps(reps, [&] { X = fwd(A, B); }, lapackFwd);
  double err = 0;
  for (std::size_t i = 0; i < x.size(); ++i) err = std::max(err, std::fabs(X.at(int64_t(i)) - x[i]));
  reportLarge("solve forward (lu + 2 solves)", n, t, err);

  auto gradient = jit(grad([](const Tensor& m, const Tensor& v, const Tensor& w) { return sum(linalg::solve(m, v) * w); }), {.threads = 1});
  Array G = gradient(A, B, C);
  gradient.wait_optimized();
  auto lapackGrad = [&] { // abar = -(a^-T c) xᵀ; row-major abar is column-major -x yᵀ
    lapackFwd();
    std::memcpy(y.data(), c.data(), c.size() * sizeof(double));
    int info = 0;
    dgetrs_("N", &ni, &one, work.data(), &ni, ipiv.data(), y.data(), &ni, &info);
    std::fill(g.begin(), g.end(), 0.0);
    dger_(&ni, &ni, &minusOne, x.data(), &one, y.data(), &one, g.data(), &ni);
  };
  t = interleavedReps(reps, [&] { G = gradient(A, B, C); }, lapackGrad);
  err = 0;
  for (std::size_t i = 0; i < g.size(); ++i) err = std::max(err, std::fabs(G.at(int64_t(i)) - g[i]));
  reportLarge("solve gradient", n, t, err);
}

/// eigh of a symmetric n×n matrix, forward (dsyevd) and the gradient of the
/// sign-invariant sum(w * cw) + sum(v ∘ v * W) (dsyevd, three dgemm).
void largeEigh(int64_t n, int reps) {
  const std::vector<double> a = symmetricMatrix(n, 0), w = symmetricMatrix(n, 0.5);
  std::vector<double> cw(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < cw.size(); ++i) cw[i] = std::cos(0.2 * double(i));
  const Array A(a, {n, n}), W(w, {n, n}), CW(cw, {n});
  const int ni = int(n);
  std::vector<double> v(a.size()), ev(cw.size()), work(1), gv(a.size()), x(a.size()), tmp(a.size()), g(a.size());
  std::vector<int> iwork(1);
  int lwork = -1, liwork = -1, info = 0;
  dsyevd_("V", "L", &ni, v.data(), &ni, ev.data(), work.data(), &lwork, iwork.data(), &liwork, &info);
  work.resize(std::size_t(work[0])), iwork.resize(std::size_t(iwork[0]));
  lwork = int(work.size()), liwork = int(iwork.size());
  auto fwd = jit([](const Tensor& m) { auto [e, vec] = linalg::eigh(m); return std::tuple{e, vec}; }, {.threads = 1});
  auto [E, Vec] = fwd(A);
  fwd.wait_optimized(); // time the optimised code (JitOptions::tiers)
  auto lapackFwd = [&] {
    std::memcpy(v.data(), a.data(), a.size() * sizeof(double));
    dsyevd_("V", "L", &ni, v.data(), &ni, ev.data(), work.data(), &lwork, iwork.data(), &liwork, &info);
  };
  auto t = interleavedReps(reps, [&] { std::tie(E, Vec) = fwd(A); }, lapackFwd);
  double err = 0;
  for (int64_t i = 0; i < n; ++i) err = std::max(err, std::fabs(E.at(i) - ev[std::size_t(i)]));
  reportLarge("eigh forward (values, vectors)", n, t, err);

  auto gradient = jit(grad([](const Tensor& m, const Tensor& c, const Tensor& wt) {
    auto [e, vec] = linalg::eigh(m);
    return sum(e * c) + sum(vec * vec * wt);
  }), {.threads = 1});
  Array G = gradient(A, CW, W);
  gradient.wait_optimized();
  const double one = 1, zero = 0;
  auto lapackGrad = [&] { // gS = V (diag(cw) + F ∘ (Vᵀ gV)) Vᵀ, gV = 2 V ∘ W; gA = (gS + gSᵀ)/2
    lapackFwd();
    for (std::size_t i = 0; i < gv.size(); ++i) gv[i] = 2 * v[i] * w[i];
    dgemm_("T", "N", &ni, &ni, &ni, &one, v.data(), &ni, gv.data(), &ni, &zero, x.data(), &ni);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < n; ++i)
        x[std::size_t(i + j * n)] = i == j ? cw[std::size_t(i)] : x[std::size_t(i + j * n)] / (ev[std::size_t(j)] - ev[std::size_t(i)]);
    dgemm_("N", "N", &ni, &ni, &ni, &one, v.data(), &ni, x.data(), &ni, &zero, tmp.data(), &ni);
    dgemm_("N", "T", &ni, &ni, &ni, &one, tmp.data(), &ni, v.data(), &ni, &zero, g.data(), &ni);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < j; ++i) {
        const double s = 0.5 * (g[std::size_t(i + j * n)] + g[std::size_t(j + i * n)]);
        g[std::size_t(i + j * n)] = g[std::size_t(j + i * n)] = s;
      }
  };
  t = interleavedReps(reps, [&] { G = gradient(A, CW, W); }, lapackGrad);
  err = 0;
  for (std::size_t i = 0; i < g.size(); ++i) err = std::max(err, std::fabs(G.at(int64_t(i)) - g[i]));
  reportLarge("eigh gradient", n, t, err);
}

/// The lowering's choice: adjit's generated code (compiled under GeneratedOnlyHere)
/// against the LAPACK path's entry point (runtime/Lapack.h, exported by
/// libadjit; the JIT's kernel is that one call), per op and order, one
/// matrix: what the thresholds in LinalgSolve.cpp and LinalgSpectral.cpp
/// were set from.
void thresholds() {
  std::printf("\nthreshold sweep: generated / LAPACK path (above 1: LAPACK faster), f64, one matrix\n");
  struct Op {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    std::function<void(int64_t n, const double* a, double* out)> lapack;
  };
  std::vector<double> w(128), x(128 * 128), y(128 * 128);
  std::vector<int32_t> p(128), q(128);
  const std::vector<Op> ops{
      {"cholesky", [](const Tensor& a) { return linalg::cholesky(a, false); },
       [&](int64_t n, const double* a, double* out) { adjit_lapack_cholesky(1, 1, n, a, out); }},
      {"lu", [](const Tensor& a) { return linalg::lu(a).lu; },
       [&](int64_t n, const double* a, double* out) { adjit_lapack_lu(1, 1, n, n, a, out, p.data(), q.data()); }},
      {"triangular_solve [n, n]", [](const Tensor& a) { return linalg::triangular_solve(a, a, {.lower = true, .left_side = true}); },
       [&](int64_t n, const double* a, double* out) { adjit_lapack_triangular_solve(1, 3, 1, n, n, a, a, out); }},
      {"qr", [](const Tensor& a) { return linalg::qr(a).q; },
       [&](int64_t n, const double* a, double* out) { adjit_lapack_qr(1, 1, n, n, a, out, y.data()); }},
      {"eigh", [](const Tensor& a) { return linalg::eigh(a).eigenvectors; },
       [&](int64_t n, const double* a, double* out) { adjit_lapack_eigh(1, 1, n, a, w.data(), out); }},
      {"svd", [](const Tensor& a) { return linalg::svd(a).u; },
       [&](int64_t n, const double* a, double* out) { adjit_lapack_svd(1, 1, n, n, a, out, w.data(), y.data()); }},
  };
  for (const Op& op : ops) {
    std::printf("%-24s", op.name);
    for (int64_t n : {8, 12, 16, 24, 32, 48, 64, 96, 128}) {
      const std::vector<double> a = spd(1, n);
      const Array A(a, {n, n});
      auto gen = jit([&](const Tensor& m) { return op.f(m); }, {.threads = 1});
      Array r = [&] { // compiled here, on this thread: the generated code
        runtime::lapack::GeneratedOnlyHere generated;
        return gen(A);
      }();
      gen.wait_optimized(); // the optimised tier compiles the same lowered code
      const auto t = interleaved([&] { r = gen(A); }, [&] { op.lapack(n, a.data(), x.data()); });
      std::printf("  %lld: %5.2f", (long long)n, t.first / t.second);
      std::fflush(stdout);
    }
    std::printf("\n");
  }
}

/// qr of an n×n matrix (q and r): adjit (its LAPACK path above kLapackQr:
/// geqrf and orgqr on a transposed copy, q and r transposed out) against
/// dgeqrf + dorgqr on the row-major buffer as it is, which is the QR of aᵀ:
/// LAPACK's work without the transposes, other outputs (a bound, not the
/// same computation); the results checked against dgelqf + dorglq, whose
/// factorisation of column-major aᵀ = L Q is a = Qᵀ Lᵀ, a's QR in row-major
/// (the same outputs, no transposes; OpenBLAS's are slower: timed too).
/// Then adjit's generated code against its LAPACK path.
void largeQr(int64_t n, int reps) {
  std::vector<double> a(static_cast<std::size_t>(n * n));
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37 * double(i)) + (i % std::size_t(n + 1) == 0 ? 2.0 : 0.0);
  const Array A(a, {n, n});
  const int ni = int(n);
  std::vector<double> f(a.size()), r(a.size()), tau(static_cast<std::size_t>(n)), work(1);
  int lwork = -1, info = 0;
  dgelqf_(&ni, &ni, f.data(), &ni, tau.data(), work.data(), &lwork, &info);
  double most = work[0];
  dgeqrf_(&ni, &ni, f.data(), &ni, tau.data(), work.data(), &lwork, &info);
  most = std::max(most, work[0]);
  dorglq_(&ni, &ni, &ni, f.data(), &ni, tau.data(), work.data(), &lwork, &info);
  most = std::max(most, work[0]);
  dorgqr_(&ni, &ni, &ni, f.data(), &ni, tau.data(), work.data(), &lwork, &info);
  work.resize(std::size_t(std::max(most, work[0]))), lwork = int(work.size());
  auto qrOf = [](const Tensor& m) { auto d = linalg::qr(m); return std::tuple{d.q, d.r}; };
  auto fwd = jit(qrOf, {.threads = 1});
  auto gen = jit(qrOf, {.threads = 1});
  auto [Q, R] = fwd(A);
  auto [Qg, Rg] = [&] {
    runtime::lapack::GeneratedOnlyHere generated;
    return gen(A);
  }();
  fwd.wait_optimized(), gen.wait_optimized();
  auto lq = [&] {
    std::memcpy(f.data(), a.data(), a.size() * sizeof(double));
    dgelqf_(&ni, &ni, f.data(), &ni, tau.data(), work.data(), &lwork, &info);
    for (int64_t j = 0; j < n; ++j) // L, column-major, is row-major r
      for (int64_t i = 0; i < n; ++i) r[std::size_t(j * n + i)] = i >= j ? f[std::size_t(j * n + i)] : 0.0;
    dorglq_(&ni, &ni, &ni, f.data(), &ni, tau.data(), work.data(), &lwork, &info);
  };
  auto qrT = [&] {
    std::memcpy(f.data(), a.data(), a.size() * sizeof(double));
    dgeqrf_(&ni, &ni, f.data(), &ni, tau.data(), work.data(), &lwork, &info);
    dorgqr_(&ni, &ni, &ni, f.data(), &ni, tau.data(), work.data(), &lwork, &info);
  };
  auto t = interleavedReps(reps, [&] { std::tie(Q, R) = fwd(A); }, qrT);
  lq();
  double err = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    err = std::max({err, std::fabs(Q.at(int64_t(i)) - f[i]), std::fabs(R.at(int64_t(i)) - r[i])});
  reportLarge("qr forward (dgeqrf + dorgqr of aᵀ)", n, t, err);
  t = interleavedReps(reps, lq, qrT);
  reportLarge("  dgelqf+dorglq / dgeqrf+dorgqr", n, t, 0);
  t = interleavedReps(std::max(1, reps / 3), [&] { std::tie(Qg, Rg) = gen(A); }, [&] { std::tie(Q, R) = fwd(A); });
  err = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    err = std::max({err, std::fabs(Q.at(int64_t(i)) - Qg.at(int64_t(i))), std::fabs(R.at(int64_t(i)) - Rg.at(int64_t(i)))});
  reportLarge("  qr generated / LAPACK path", n, t, err);
}

/// The gradient of sum(solve(a, b) * w) in a and b (one right-hand side):
/// adjit's reverse mode against LAPACK by hand (dgesv, then dgetrs with the
/// transpose for bbar = a^-T w, and abar = -bbar x^T).
/// batch × solve(a, b) of general n × n matrices with one right-hand side
/// (lu, one matrix per SIMD lane, then two triangular solves) against
/// LAPACK's gesv per matrix (on aᵀ: a row-major a is column-major aᵀ, the
/// same work), and lu alone against getrf.
template <class T> void luSolve(int64_t batch, int64_t n) {
  const char* dt = std::is_same_v<T, double> ? "f64" : "f32";
  std::vector<T> a(static_cast<std::size_t>(batch * n * n)), b(static_cast<std::size_t>(batch * n));
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = T(std::sin(0.37 * double(i) + 0.1 * double(i / std::size_t(n * n))));
  for (int64_t k = 0; k < batch; ++k)
    for (int64_t i = 0; i < n; ++i) a[std::size_t(k * n * n + i * n + (i + 1) % n)] += T(2); // pivots off the diagonal
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = T(std::cos(0.1 * double(i)));
  const Array A(a, {batch, n, n}), B(b, {batch, n, 1});
  auto f = jit([](const Tensor& x, const Tensor& y) { return linalg::solve(x, y); }, {.threads = 1});
  auto lu = jit([](const Tensor& x) { return linalg::lu(x).lu; }, {.threads = 1});
  Array X, LU;
  const double compile = firstCall([&] { X = f(A, B); }), compileLu = firstCall([&] { LU = lu(A); });
  f.wait_optimized(); // time the optimised code (JitOptions::tiers)
  lu.wait_optimized();
  std::vector<T> work(a.size()), x(b.size());
  std::vector<int> ipiv(static_cast<std::size_t>(n));
  const int ni = int(n), one = 1;
  auto lapack = [&](bool solve) {
    std::memcpy(work.data(), a.data(), a.size() * sizeof(T));
    if (solve) std::memcpy(x.data(), b.data(), b.size() * sizeof(T));
    for (int64_t k = 0; k < batch; ++k) {
      int info = 0;
      T* m = work.data() + k * n * n;
      if constexpr (std::is_same_v<T, double>) {
        if (solve) dgesv_(&ni, &one, m, &ni, ipiv.data(), x.data() + k * n, &ni, &info);
        else dgetrf_(&ni, &ni, m, &ni, ipiv.data(), &info);
      } else {
        if (solve) sgesv_(&ni, &one, m, &ni, ipiv.data(), x.data() + k * n, &ni, &info);
        else sgetrf_(&ni, &ni, m, &ni, ipiv.data(), &info);
      }
    }
  };
  char label[96];
  std::snprintf(label, sizeof label, "%s solve %lld x [%lld, %lld]", dt, (long long)batch, (long long)n, (long long)n);
  report(label, interleaved([&] { X = f(A, B); }, [&] { lapack(true); }), 0, compile, batch);
  std::snprintf(label, sizeof label, "%s lu %lld x [%lld, %lld]", dt, (long long)batch, (long long)n, (long long)n);
  report(label, interleaved([&] { LU = lu(A); }, [&] { lapack(false); }), 0, compileLu, batch);
}

/// batch × qr of m × n f64 matrices (reduced, one matrix per SIMD lane)
/// against LAPACK's dgeqrf + dorgqr per matrix (of aᵀ: the same work).
void qrSmall(int64_t batch, int64_t m, int64_t n) {
  std::vector<double> a(static_cast<std::size_t>(batch * m * n));
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37 * double(i));
  const Array A(a, {batch, m, n});
  auto f = jit([](const Tensor& x) { auto d = linalg::qr(x); return std::tuple{d.q, d.r}; }, {.threads = 1});
  Array Q, R;
  const double compile = firstCall([&] { std::tie(Q, R) = f(A); });
  f.wait_optimized(); // time the optimised code (JitOptions::tiers)
  // LAPACK on aᵀ (n × m column-major): its qr has the same cost
  const int mi = int(n), ni = int(m), k = int(std::min(m, n));
  std::vector<double> work(a.size()), tau(static_cast<std::size_t>(k)), w(1);
  int lwork = -1, info = 0;
  dgeqrf_(&mi, &ni, work.data(), &mi, tau.data(), w.data(), &lwork, &info);
  double most = w[0];
  dorgqr_(&mi, &k, &k, work.data(), &mi, tau.data(), w.data(), &lwork, &info);
  w.resize(std::size_t(std::max(most, w[0]))), lwork = int(w.size());
  auto lapack = [&] {
    std::memcpy(work.data(), a.data(), a.size() * sizeof(double));
    for (int64_t b = 0; b < batch; ++b) {
      double* x = work.data() + b * m * n;
      dgeqrf_(&mi, &ni, x, &mi, tau.data(), w.data(), &lwork, &info);
      dorgqr_(&mi, &k, &k, x, &mi, tau.data(), w.data(), &lwork, &info);
    }
  };
  char label[96];
  std::snprintf(label, sizeof label, "f64 qr %lld x [%lld, %lld]", (long long)batch, (long long)m, (long long)n);
  report(label, interleaved([&] { std::tie(Q, R) = f(A); }, lapack), 0, compile, batch);
}

void solveGrad(int64_t n) {
  std::vector<double> a(static_cast<std::size_t>(n * n)), b(static_cast<std::size_t>(n)), w(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37 * double(i));
  for (int64_t i = 0; i < n; ++i) a[std::size_t(i * n + i)] += 2.0;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.1 * double(i)), w[i] = std::sin(0.3 * double(i) + 1);
  const Array A(a, {n, n}), B(b, {n}), W(w, {n});
  auto loss = [](const Tensor& x, const Tensor& y, const Tensor& v) { return sum(linalg::solve(x, y) * v); };
  auto f = jit(grad(loss, argnums<0, 1>), {.threads = 1});
  auto g = f(A, B, W);
  f.wait_optimized(); // time the optimised code (JitOptions::tiers)
  std::vector<double> at(a.size()), work(a.size()), x(b.size()), bbar(b.size()), abar(a.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) at[std::size_t(j * n + i)] = a[std::size_t(i * n + j)];
  std::vector<int> ipiv(static_cast<std::size_t>(n));
  const int ni = int(n), one = 1;
  auto lapack = [&] {
    std::memcpy(work.data(), at.data(), at.size() * sizeof(double));
    std::memcpy(x.data(), b.data(), b.size() * sizeof(double));
    std::memcpy(bbar.data(), w.data(), w.size() * sizeof(double));
    int info = 0;
    dgesv_(&ni, &one, work.data(), &ni, ipiv.data(), x.data(), &ni, &info);
    dgetrs_("T", &ni, &one, work.data(), &ni, ipiv.data(), bbar.data(), &ni, &info);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) abar[std::size_t(i * n + j)] = -bbar[std::size_t(i)] * x[std::size_t(j)];
  };
  const auto t = interleaved([&] { g = f(A, B, W); }, lapack);
  double err = 0;
  for (std::size_t i = 0; i < abar.size(); ++i) err = std::max(err, std::fabs(std::get<0>(g).at(int64_t(i)) - abar[i]));
  for (std::size_t i = 0; i < bbar.size(); ++i) err = std::max(err, std::fabs(std::get<1>(g).at(int64_t(i)) - bbar[i]));
  char label[64];
  std::snprintf(label, sizeof label, "grad of solve [%lld, %lld] in a and b", (long long)n, (long long)n);
  report(label, t, err);
}

} // namespace

int main(int argc, char** argv) {
  bool quick = false, sweep = false, large = true, largeOnly = false, smallOnly = false;
  int reps512 = 0;
  for (int i = 1; i < argc; ++i) {
    quick = quick || std::strcmp(argv[i], "--quick") == 0;
    sweep = sweep || std::strcmp(argv[i], "--thresholds") == 0;
    largeOnly = largeOnly || std::strcmp(argv[i], "--large-only") == 0;
    smallOnly = smallOnly || std::strcmp(argv[i], "--small-only") == 0;
    if (std::strcmp(argv[i], "--no-2048") == 0) large = false;
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps512 = std::atoi(argv[++i]);
  }
  if (quick) gBudget = 0.05, large = false;
  openblas_set_num_threads(1);
  std::printf("one thread; adjit's time includes its call overhead\n");
  if (!largeOnly) {
    choleskySolve<double>(1000, 8);
    choleskySolve<double>(100, 32);
    choleskySolve<float>(1000, 8);
    choleskySolve<float>(100, 32);
    luSolve<double>(1000, 8);
    luSolve<double>(100, 32);
    luSolve<float>(1000, 8);
    luSolve<float>(100, 32);
    qrSmall(1000, 8, 8);
    qrSmall(1000, 16, 4);
    qrSmall(100, 32, 32);
    solveGrad(64);
    solveGrad(256);
  }
  if (sweep) thresholds();
  if (smallOnly) return 0;
  std::printf("\nlarge matrices (adjit/LAPACK: below 1.2 is the target)\n");
  for (int64_t n : {512, 2048}) {
    if (n > 512 && !large) break;
    const int reps = reps512 > 0 ? (n > 512 ? std::max(2, reps512 / 4) : reps512) : n > 512 ? 2 : quick ? 3 : 7;
    largeCholesky(n, reps);
    largeSolve(n, reps);
    largeEigh(n, n > 512 ? 1 : reps);
  }
  for (int64_t n : {256, 512}) largeQr(n, quick ? 3 : 7);
}
