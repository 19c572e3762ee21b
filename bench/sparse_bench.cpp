// bench/sparse_bench.cpp — sparse_jacobian on a banded Jacobian (3 columns
// per row) and an arrowhead one (a diagonal and a dense last row) of size n:
// the planning time (pattern + colorings, at n and n/10: linear in the
// nonzeros), colors against the n JVPs of a column-by-column Jacobian, time
// per call, and dense jacfwd where its n x n matrix fits. Printed, not
// asserted. usage: adjit_sparse_bench [n] (default 100000)
#include <adjit/adjit.h>
#include <adjit/sparse_derivatives.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace adjit;

namespace {
double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
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

/// r_i = x_i x_{i+1} + sin(x_{i+2}): 3 nonzeros per row.
Tensor band3(const Tensor& x) {
  const int64_t n = x.shape()[0];
  return slice(x, {0}, {n - 2}) * slice(x, {1}, {n - 1}) + sin(slice(x, {2}, {n}));
}
/// r_i = x_i^2 for i < n - 1, and r_{n-1} = sum of sin(x): a diagonal and a dense last row.
Tensor arrow(const Tensor& x) {
  const int64_t n = x.shape()[0];
  return concatenate({slice(x, {0}, {n - 1}) * slice(x, {0}, {n - 1}), reshape(sum(sin(x)), {1})});
}

Array pointOf(int64_t n) {
  Array x(DType::f64, Shape{n});
  for (int64_t i = 0; i < n; ++i) x.set(i, 1.0 + 0.001 * static_cast<double>(i % 97));
  return x;
}

/// Pattern and plan (pattern + colorings, the kernel from the process's
/// cache) of f at size m.
template <class F> void planning(const char* name, F f, int64_t m) {
  const Array x = pointOf(m);
  auto t0 = std::chrono::steady_clock::now();
  const SparsityPattern p = jacobian_sparsity(f, x);
  const double pattern = msSince(t0);
  (void)sparse_jacobian(f)(x); // compile once
  auto fresh = sparse_jacobian(f);
  t0 = std::chrono::steady_clock::now();
  (void)fresh(x);
  const double plan = msSince(t0);
  std::printf("%s n=%lld: nnz %lld, pattern %.1f ms, plan (pattern + colorings + call) %.1f ms, %.0f ns per nonzero\n",
              name, static_cast<long long>(m), static_cast<long long>(p.nnz()), pattern, plan,
              1e6 * plan / static_cast<double>(p.nnz()));
}

template <class F> void run(const char* name, F f, int64_t n) {
  planning(name, f, n / 10);
  planning(name, f, n);
  const Array x = pointOf(n);
  auto sj = sparse_jacobian(f);
  auto t0 = std::chrono::steady_clock::now();
  SparseMatrix s = sj(x);
  const double first = msSince(t0);
  sj.wait_optimized(); // time the optimised code (JitOptions::tiers)
  std::printf("%s: first call (plan + compile) %.1f ms; colors %lld (%s mode) against %lld JVPs column by column\n", name,
              first, static_cast<long long>(s.colors), s.mode == SparseMode::forward ? "forward" : "reverse",
              static_cast<long long>(n));
  std::printf("%s: sparse_jacobian per call %.3f ms (%lld nonzeros)\n", name, best(20, [&] { s = sj(x); }),
              static_cast<long long>(s.nnz()));
  // Dense jacfwd at a size where its matrix fits (n^2 doubles).
  const int64_t m = std::min<int64_t>(n, 10000);
  const Array xm = pointOf(m);
  SparseMatrix sm = sj(xm);
  auto jf = jacfwd(f);
  t0 = std::chrono::steady_clock::now();
  Array d = jf(xm);
  const double firstJf = msSince(t0);
  jf.wait_optimized();
  sj.wait_optimized();
  std::printf("%s n=%lld: jacfwd first call %.1f ms, per call %.3f ms; sparse_jacobian per call %.3f ms\n", name,
              static_cast<long long>(m), firstJf, best(3, [&] { d = jf(xm); }), best(20, [&] { sm = sj(xm); }));
  double err = 0;
  for (int64_t r = 0; r < sm.rows; ++r)
    for (int64_t k = sm.row_ptr[r]; k < sm.row_ptr[r + 1]; ++k)
      err = std::max(err, std::abs(sm.values.at(k) - d.at(r * m + sm.col_idx[k])));
  std::printf("%s n=%lld: max |sparse - dense| on the pattern: %g\n\n", name, static_cast<long long>(m), err);
}
} // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 100000;
  run("banded", band3, n);
  run("arrowhead", arrow, n);
}
