// bench/linalg_bench.cpp — adjit::linalg's generated factorisations next to
// LAPACK (OpenBLAS's dpotrf/dpotrs/dgesv, one thread), in the same process,
// adjit and LAPACK timed in turn: batched 8×8 and 32×32 cholesky + cho_solve
// (mixture-model sizes), a 512×512 cholesky and solve, and the gradient of a
// 64×64 and 256×256 solve (LAPACK's: dgesv, dgetrs and an outer product by
// hand). Prints the best
// time of each and the ratio LAPACK / adjit (above 1: adjit is faster). Not a
// test. `--quick` runs fewer repetitions.
#include <adjit/adjit.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

extern "C" {
void openblas_set_num_threads(int);
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info);
void dpotrs_(const char* uplo, const int* n, const int* nrhs, const double* a, const int* lda, double* b, const int* ldb, int* info);
void dgesv_(const int* n, const int* nrhs, double* a, const int* lda, int* ipiv, double* b, const int* ldb, int* info);
void dgetrs_(const char* trans, const int* n, const int* nrhs, const double* a, const int* lda, const int* ipiv, double* b,
             const int* ldb, int* info);
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
  std::printf("%-40s adjit %10.2f us   LAPACK %10.2f us   LAPACK/adjit %5.2fx   (max abs diff %.1e)\n", label,
              t.first * 1e6, t.second * 1e6, t.second / t.first, err);
}

/// batch × (cholesky + cho_solve with one right-hand side).
void choleskySolve(int64_t batch, int64_t n) {
  const std::vector<double> a = spd(batch, n);
  std::vector<double> b(static_cast<std::size_t>(batch * n));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.1 * double(i));
  const Array A(a, {batch, n, n}), B(b, {batch, n, 1});
  auto f = jit([](const Tensor& x, const Tensor& y) { return linalg::cho_solve(linalg::cholesky(x, false), y); }, {.threads = 1});
  Array X = f(A, B);
  std::vector<double> work(a.size()), x(b.size());
  const int ni = int(n), one = 1;
  auto lapack = [&] {
    std::memcpy(work.data(), a.data(), a.size() * sizeof(double));
    std::memcpy(x.data(), b.data(), b.size() * sizeof(double));
    for (int64_t k = 0; k < batch; ++k) {
      int info = 0;
      // row-major lower = column-major upper
      dpotrf_("U", &ni, work.data() + k * n * n, &ni, &info);
      dpotrs_("U", &ni, &one, work.data() + k * n * n, &ni, x.data() + k * n, &ni, &info);
    }
  };
  const auto t = interleaved([&] { X = f(A, B); }, lapack);
  double err = 0;
  for (std::size_t i = 0; i < x.size(); ++i) err = std::max(err, std::fabs(X.at(int64_t(i)) - x[i]));
  char label[64];
  std::snprintf(label, sizeof label, "cholesky + cho_solve %lld x [%lld, %lld]", (long long)batch, (long long)n, (long long)n);
  report(label, t, err);
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

/// The gradient of sum(solve(a, b) * w) in a and b (one right-hand side):
/// adjit's reverse mode against LAPACK by hand (dgesv, then dgetrs with the
/// transpose for bbar = a^-T w, and abar = -bbar x^T).
void solveGrad(int64_t n) {
  std::vector<double> a(static_cast<std::size_t>(n * n)), b(static_cast<std::size_t>(n)), w(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37 * double(i));
  for (int64_t i = 0; i < n; ++i) a[std::size_t(i * n + i)] += 2.0;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.1 * double(i)), w[i] = std::sin(0.3 * double(i) + 1);
  const Array A(a, {n, n}), B(b, {n}), W(w, {n});
  auto loss = [](const Tensor& x, const Tensor& y, const Tensor& v) { return sum(linalg::solve(x, y) * v); };
  auto f = jit(grad(loss, argnums<0, 1>), {.threads = 1});
  auto g = f(A, B, W);
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
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--quick") == 0) gBudget = 0.05;
  openblas_set_num_threads(1);
  std::printf("f64, one thread; adjit's time includes its call overhead\n");
  choleskySolve(1000, 8);
  choleskySolve(100, 32);
  cholesky(512);
  solve(512);
  solveGrad(64);
  solveGrad(256);
}
