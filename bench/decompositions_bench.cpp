// bench/decompositions_bench.cpp — adjit's eigh (cyclic Jacobi in generated
// code; from order 16 the JIT's call to LAPACK where it is loaded: run with
// ADJIT_LAPACK=0 for the generated code at every size) next to LAPACK's
// dsyevd (OpenBLAS, one thread) in the same process,
// runs interleaved: batches of 8×8 and 32×32 and one 512×512 matrix, f64,
// forward only; svd against dgesdd likewise for the batches. Not a test.
// `--quick` runs the small sizes only.
#include <adjit/adjit.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

extern "C" void openblas_set_num_threads(int);
extern "C" void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s, double* u, const int* ldu,
                        double* vt, const int* ldvt, double* work, const int* lwork, int* iwork, int* info);
extern "C" void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w, double* work,
                        const int* lwork, int* iwork, const int* liwork, int* info);

using namespace adjit;
using Clock = std::chrono::steady_clock;

static double seconds(const std::function<void()>& fn) {
  auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// A batch of symmetric n×n matrices with entries in [-1, 1].
static std::vector<double> symmetric(int64_t batch, int64_t n) {
  std::vector<double> a(static_cast<std::size_t>(batch * n * n));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j) a[(b * n + i) * n + j] = a[(b * n + j) * n + i] = std::sin(0.37 * double(i * n + j) + double(b));
  return a;
}

/// Best of `reps` interleaved runs of adjit and LAPACK; prints one row.
static void row(int64_t batch, int64_t n, int reps) {
  const std::vector<double> a = symmetric(batch, n);
  const Array A(a, Shape{batch, n, n});
  auto f = jit([](const Tensor& x) { auto [w, v] = linalg::eigh(x); return std::tuple{w, v}; }, {.threads = 1});
  auto [w0, v0] = f(A); // compiles
  f.wait_optimized();   // time the optimised code (JitOptions::tiers)
  const int ni = static_cast<int>(n);
  std::vector<double> work(1), copy(a), w(static_cast<std::size_t>(n));
  std::vector<int> iwork(1);
  int lwork = -1, liwork = -1, info = 0;
  dsyevd_("V", "L", &ni, copy.data(), &ni, w.data(), work.data(), &lwork, iwork.data(), &liwork, &info); // workspace query
  lwork = static_cast<int>(work[0]);
  liwork = iwork[0];
  work.resize(static_cast<std::size_t>(lwork));
  iwork.resize(static_cast<std::size_t>(liwork));
  double tAdjit = 1e30, tLapack = 1e30, maxDiff = 0;
  for (int r = 0; r < reps; ++r) {
    tAdjit = std::min(tAdjit, seconds([&] { f(A); }));
    tLapack = std::min(tLapack, seconds([&] {
      std::memcpy(copy.data(), a.data(), a.size() * sizeof(double));
      for (int64_t b = 0; b < batch; ++b)
        dsyevd_("V", "L", &ni, copy.data() + b * n * n, &ni, w.data(), work.data(), &lwork, iwork.data(), &liwork, &info);
    }));
  }
  // eigenvalues of the last matrix against LAPACK's
  for (int64_t i = 0; i < n; ++i) maxDiff = std::max(maxDiff, std::abs(w0.at((batch - 1) * n + i) - w[static_cast<std::size_t>(i)]));
  std::printf("eigh f64 %4lld x [%3lld x %3lld]   adjit %9.3f ms   dsyevd %9.3f ms   ratio %5.2f   max |dw| %.1e\n",
              static_cast<long long>(batch), static_cast<long long>(n), static_cast<long long>(n), tAdjit * 1e3, tLapack * 1e3,
              tAdjit / tLapack, maxDiff);
}

/// svd of a batch of n×n matrices against dgesdd (jobz = 'S'), interleaved.
static void svdRow(int64_t batch, int64_t n, int reps) {
  const std::vector<double> a = symmetric(batch, n); // any matrix will do; singular values are |eigenvalues|
  const Array A(a, Shape{batch, n, n});
  auto f = jit([](const Tensor& x) { auto [u, s, vt] = linalg::svd(x); return std::tuple{u, s, vt}; }, {.threads = 1});
  f(A); // compiles
  f.wait_optimized();
  const int ni = static_cast<int>(n);
  std::vector<double> copy(a), s(static_cast<std::size_t>(n)), u(static_cast<std::size_t>(n * n)), vt(u), work(1);
  std::vector<int> iwork(static_cast<std::size_t>(8 * n));
  int lwork = -1, info = 0;
  dgesdd_("S", &ni, &ni, copy.data(), &ni, s.data(), u.data(), &ni, vt.data(), &ni, work.data(), &lwork, iwork.data(), &info);
  lwork = static_cast<int>(work[0]);
  work.resize(static_cast<std::size_t>(lwork));
  double tAdjit = 1e30, tLapack = 1e30;
  for (int r = 0; r < reps; ++r) {
    tAdjit = std::min(tAdjit, seconds([&] { f(A); }));
    tLapack = std::min(tLapack, seconds([&] {
      std::memcpy(copy.data(), a.data(), a.size() * sizeof(double));
      for (int64_t b = 0; b < batch; ++b)
        dgesdd_("S", &ni, &ni, copy.data() + b * n * n, &ni, s.data(), u.data(), &ni, vt.data(), &ni, work.data(), &lwork, iwork.data(), &info);
    }));
  }
  std::printf("svd  f64 %4lld x [%3lld x %3lld]   adjit %9.3f ms   dgesdd %9.3f ms   ratio %5.2f\n", static_cast<long long>(batch),
              static_cast<long long>(n), static_cast<long long>(n), tAdjit * 1e3, tLapack * 1e3, tAdjit / tLapack);
}

int main(int argc, char** argv) {
  openblas_set_num_threads(1);
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  row(256, 8, 7);
  row(64, 32, 5);
  svdRow(256, 8, 7);
  svdRow(64, 32, 5);
  if (!quick) row(1, 512, 3);
}
