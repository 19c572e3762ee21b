// bench/linalg_bench.cpp — adjit::linalg's generated factorisations next to
// LAPACK (OpenBLAS's potrf/potrs/dgesv, one thread), in the same process,
// adjit and LAPACK timed in turn: batched 8×8 and 32×32 cholesky + cho_solve
// and cholesky alone (mixture-model sizes), f64 and f32, with the gradient of
// sum(cho_solve(cholesky(a), b) * w) and each program's first call (compile
// included); and a 512×512 cholesky and solve (f64). Prints the best time of
// each and the ratio LAPACK / adjit (above 1: adjit is faster). PyTorch's
// times for the small rows come from bench/linalg_torch_small.py, run by hand
// (same problems, same line labels). Not a test. `--quick` runs fewer
// repetitions.
#include <adjit/adjit.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
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

void cholesky(int64_t n) {
  const std::vector<double> a = spd(1, n);
  const Array A(a, {n, n});
  auto f = jit([](const Tensor& x) { return linalg::cholesky(x, false); }, {.threads = 1});
  Array L = f(A);
  std::vector<double> work(a.size());
  const int ni = int(n);
  auto lapack = [&] {
    std::memcpy(work.data(), a.data(), a.size() * sizeof(double));
    int info = 0;
    dpotrf_("U", &ni, work.data(), &ni, &info);
  };
  const auto t = interleaved([&] { L = f(A); }, lapack);
  double err = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) err = std::max(err, std::fabs(L.at(i * n + j) - work[std::size_t(i * n + j)]));
  char label[64];
  std::snprintf(label, sizeof label, "cholesky [%lld, %lld]", (long long)n, (long long)n);
  report(label, t, err);
}

void solve(int64_t n) {
  std::vector<double> a(static_cast<std::size_t>(n * n)), b(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37 * double(i));
  for (int64_t i = 0; i < n; ++i) a[std::size_t(i * n + i)] += 2.0;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.1 * double(i));
  const Array A(a, {n, n}), B(b, {n});
  auto f = jit([](const Tensor& x, const Tensor& y) { return linalg::solve(x, y); }, {.threads = 1});
  Array X = f(A, B);
  // LAPACK is column-major: solve a^T x = b with the row-major a, so transpose a first.
  std::vector<double> at(a.size()), work(a.size()), x(b.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) at[std::size_t(j * n + i)] = a[std::size_t(i * n + j)];
  std::vector<int> ipiv(static_cast<std::size_t>(n));
  const int ni = int(n), one = 1;
  auto lapack = [&] {
    std::memcpy(work.data(), at.data(), at.size() * sizeof(double));
    std::memcpy(x.data(), b.data(), b.size() * sizeof(double));
    int info = 0;
    dgesv_(&ni, &one, work.data(), &ni, ipiv.data(), x.data(), &ni, &info);
  };
  const auto t = interleaved([&] { X = f(A, B); }, lapack);
  double err = 0;
  for (std::size_t i = 0; i < x.size(); ++i) err = std::max(err, std::fabs(X.at(int64_t(i)) - x[i]));
  char label[64];
  std::snprintf(label, sizeof label, "solve [%lld, %lld] (lu + 2 triangular)", (long long)n, (long long)n);
  report(label, t, err);
}

} // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--quick") == 0) gBudget = 0.05;
  openblas_set_num_threads(1);
  std::printf("one thread; adjit's time includes its call overhead\n");
  choleskySolve<double>(1000, 8);
  choleskySolve<double>(100, 32);
  choleskySolve<float>(1000, 8);
  choleskySolve<float>(100, 32);
  cholesky(512);
  solve(512);
}
