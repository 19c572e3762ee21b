// bench/sparse_bench.cpp — sparse_jacobian against dense jacfwd on a banded
// Jacobian (3 columns per row) of size n, and the planning (pattern +
// coloring) time. Printed, not asserted. usage: adjit_sparse_bench [n]
#include <adjit/adjit.h>
#include <adjit/sparse_derivatives.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

using namespace adjit;

namespace {
double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
Tensor band3(const Tensor& x) {
  const int64_t n = x.shape()[0];
  return slice(x, {0}, {n - 2}) * slice(x, {1}, {n - 1}) + sin(slice(x, {2}, {n}));
}
template <class G> double best(int reps, G&& g) {
  double b = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    g();
    b = std::min(b, msSince(t0));
  }
  return b;
}
} // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 10000;
  Array x(DType::f64, Shape{n});
  for (int64_t i = 0; i < n; ++i) x.set(i, 1.0 + 0.001 * static_cast<double>(i % 97));
  auto t0 = std::chrono::steady_clock::now();
  const SparsityPattern p = jacobian_sparsity(band3, x);
  std::printf("n=%lld: pattern %.2f ms, nnz %lld\n", static_cast<long long>(n), msSince(t0), static_cast<long long>(p.nnz()));
  auto sj = sparse_jacobian(band3);
  t0 = std::chrono::steady_clock::now();
  SparseMatrix s = sj(x);
  const double first = msSince(t0);
  auto sj2 = sparse_jacobian(band3); // a fresh cache: plan again, the kernel from the process's cache
  t0 = std::chrono::steady_clock::now();
  (void)sj2(x);
  std::printf("plan (pattern + colorings) with the kernel cached: %.1f ms\n", msSince(t0));
  std::printf("sparse_jacobian first call (plan + compile): %.1f ms, colors %lld, mode %s\n", first,
              static_cast<long long>(s.colors), s.mode == SparseMode::forward ? "forward" : "reverse");
  std::printf("sparse_jacobian per call: %.3f ms\n", best(20, [&] { s = sj(x); }));
  if (n > 20000) {
    std::printf("jacfwd skipped: its %lld x %lld dense Jacobian does not fit\n", static_cast<long long>(n - 2),
                static_cast<long long>(n));
    return 0;
  }
  auto jf = jacfwd(band3);
  t0 = std::chrono::steady_clock::now();
  Array d = jf(x);
  std::printf("jacfwd first call (compile): %.1f ms\n", msSince(t0));
  std::printf("jacfwd per call: %.3f ms\n", best(3, [&] { d = jf(x); }));
  double err = 0;
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t k = s.row_ptr[r]; k < s.row_ptr[r + 1]; ++k)
      err = std::max(err, std::abs(s.values.at(k) - d.at(r * n + s.col_idx[k])));
  std::printf("max |sparse - dense| on the pattern: %g\n", err);
}
