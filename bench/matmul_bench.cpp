// bench/matmul_bench.cpp — adjit's matmul next to OpenBLAS (one thread), in
// the same process: GFLOP/s of C = A B for square sizes 64-2048 in f32 and
// f64, a batched product, the transposed forms a VJP uses, and the B4 MLP's
// shapes; then layers relu(X @ W + b) and relu(X) @ W against sgemm and a
// loop. Not a test.
// `--quick` stops at 512; `--size N` runs N^3 only; `--abt` runs only the
// small A B^T products (a GMM gradient's); `--layers` only the layers.
#include <adjit/adjit.h>

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

extern "C" void openblas_set_num_threads(int);

using namespace adjit;
using Clock = std::chrono::steady_clock;

/// Best time of runs totalling about 0.3 s (at least 3), in seconds.
static double bestTime(const std::function<void()>& fn) {
  fn();
  double best = 1e30, total = 0;
  for (int i = 0; i < 3 || total < 0.3; ++i) {
    auto t0 = Clock::now();
    fn();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  }
  return best;
}

template <class T> static std::vector<T> filled(std::size_t n, double phase) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(std::sin(0.37 * double(i) + phase));
  return v;
}

/// One row: batch × (m×k @ k×n), op(A), op(B) transposed as flagged.
template <class T>
static void row(const char* label, int64_t batch, int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  const DType dt = dtype_of<T>();
  std::vector<T> a = filled<T>(std::size_t(batch * m * k), 0), b = filled<T>(std::size_t(batch * k * n), 1);
  const Shape as = ta ? Shape{batch, k, m} : Shape{batch, m, k}, bs = tb ? Shape{batch, n, k} : Shape{batch, k, n};
  const Array A(a, as), B(b, bs);
  auto product = [ta, tb](Tensor x, Tensor y) { return matmul(x, y, {.transpose_a = ta, .transpose_b = tb}); };
  auto f = jit(product, {.threads = 1});
  auto all = jit(product); // every core
  Array C = f(A, B);       // compiles
  all(A, B);
  f.wait_optimized(); // time the optimised code (JitOptions::tiers)
  all.wait_optimized();
  const double tAdjit = bestTime([&] { C = f(A, B); });
  const double tAll = bestTime([&] { all(A, B); });
  std::vector<T> c(std::size_t(batch * m * n));
  const double tBlas = bestTime([&] {
    for (int64_t i = 0; i < batch; ++i) {
      const T* ap = a.data() + i * m * k;
      const T* bp = b.data() + i * k * n;
      T* cp = c.data() + i * m * n;
      const auto tA = ta ? CblasTrans : CblasNoTrans, tB = tb ? CblasTrans : CblasNoTrans;
      const int lda = int(ta ? m : k), ldb = int(tb ? k : n);
      if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, tA, tB, int(m), int(n), int(k), 1.0f, ap, lda, bp, ldb, 0.0f, cp, int(n));
      else
        cblas_dgemm(CblasRowMajor, tA, tB, int(m), int(n), int(k), 1.0, ap, lda, bp, ldb, 0.0, cp, int(n));
    }
  });
  double err = 0;
  for (std::size_t i = 0; i < c.size(); ++i) err = std::max(err, std::fabs(double(C.at(int64_t(i))) - double(c[i])));
  const double flops = 2.0 * double(batch * m * n * k);
  std::printf("%-28s %s  adjit %7.1f GFLOP/s   OpenBLAS %7.1f GFLOP/s   ratio %5.2fx   all cores %7.1f GFLOP/s   (max abs diff %.1e)\n",
              label, std::string(name_of(dt)).c_str(), flops / tAdjit * 1e-9, flops / tBlas * 1e-9, tBlas / tAdjit,
              flops / tAll * 1e-9, err);
}

/// One row of the layers: adjit's times (one thread, all cores), the
/// baseline's, and how far adjit's result Y is from the baseline's c
/// (relative to the larger of 1 and the baseline's element).
static void layerReport(const char* what, int64_t m, int64_t n, int64_t k, const char* baseline, double tAdjit, double tBase,
                        double tAll, const Array& Y, const std::vector<float>& c) {
  double err = 0;
  for (std::size_t i = 0; i < c.size(); ++i)
    err = std::max(err, std::fabs(double(Y.at(int64_t(i))) - double(c[i])) / std::max(1.0, std::fabs(double(c[i]))));
  char label[64];
  std::snprintf(label, sizeof label, "%s %lldx%lldx%lld", what, static_cast<long long>(m), static_cast<long long>(n),
                static_cast<long long>(k));
  std::printf("%-34s adjit %8.3f ms   %s %8.3f ms   ratio %5.2fx   all cores %8.3f ms   (max rel diff %.1e)\n", label,
              tAdjit * 1e3, baseline, tBase * 1e3, tAdjit / tBase, tAll * 1e3, err);
}

/// A layer, relu(X @ W + b) (f32): adjit, where the bias and relu run on
/// each tile of the product as the matmul writes it (a tile epilogue),
/// against OpenBLAS's sgemm and then one pass over C adding the bias and
/// clamping in place, what a hand-written layer does. One thread each.
static void layerRow(int64_t m, int64_t n, int64_t k) {
  std::vector<float> x = filled<float>(std::size_t(m * k), 0), w = filled<float>(std::size_t(k * n), 1),
                     b = filled<float>(std::size_t(n), 2);
  const Array X(x, {m, k}), W(w, {k, n}), B(b, {n});
  auto layer = [](Tensor x, Tensor w, Tensor b) {
    Tensor c = matmul(x, w);
    return maximum(c + broadcast_to(b, c.shape()), zeros_like(c));
  };
  auto f = jit(layer, {.threads = 1});
  auto all = jit(layer);
  Array Y = f(X, W, B);
  all(X, W, B);
  f.wait_optimized(); // time the optimised code (JitOptions::tiers)
  all.wait_optimized();
  const double tAdjit = bestTime([&] { Y = f(X, W, B); });
  const double tAll = bestTime([&] { all(X, W, B); });
  std::vector<float> c(std::size_t(m * n));
  const double tBase = bestTime([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), 1.0f, x.data(), int(k), w.data(), int(n), 0.0f,
                c.data(), int(n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float& e = c[std::size_t(i * n + j)];
        e = std::max(e + b[std::size_t(j)], 0.0f);
      }
  });
  layerReport("relu(X @ W + b)", m, n, k, "OpenBLAS + loop", tAdjit, tBase, tAll, Y, c);
}

/// A loss, sum((X @ W - Y)^2) (f32): adjit, where each tile of the product
/// is folded into a partial sum as the matmul makes it (a reducing tile
/// epilogue: the product is never stored), against OpenBLAS's sgemm and
/// then one pass over C summing the squared errors in 16 lanes (which the
/// compiler vectorises). One thread each.
static void lossRow(int64_t m, int64_t n, int64_t k) {
  std::vector<float> x = filled<float>(std::size_t(m * k), 0), w = filled<float>(std::size_t(k * n), 1),
                     y = filled<float>(std::size_t(m * n), 2);
  const Array X(x, {m, k}), W(w, {k, n}), Yt(y, {m, n});
  auto loss = [](Tensor x, Tensor w, Tensor y) {
    Tensor e = matmul(x, w) - y;
    return sum(e * e);
  };
  auto f = jit(loss, {.threads = 1});
  auto all = jit(loss);
  Array L = f(X, W, Yt);
  all(X, W, Yt);
  f.wait_optimized(); // time the optimised code (JitOptions::tiers)
  all.wait_optimized();
  const double tAdjit = bestTime([&] { L = f(X, W, Yt); });
  const double tAll = bestTime([&] { all(X, W, Yt); });
  std::vector<float> c(std::size_t(m * n)), total(1);
  const double tBase = bestTime([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), 1.0f, x.data(), int(k), w.data(), int(n), 0.0f,
                c.data(), int(n));
    float lanes[16] = {};
    const std::size_t size = c.size(), whole = size / 16 * 16;
    for (std::size_t i = 0; i < whole; i += 16)
      for (std::size_t l = 0; l < 16; ++l) {
        const float e = c[i + l] - y[i + l];
        lanes[l] += e * e;
      }
    float s = 0;
    for (std::size_t i = whole; i < size; ++i) s += (c[i] - y[i]) * (c[i] - y[i]);
    for (float l : lanes) s += l;
    total[0] = s;
  });
  layerReport("sum((X @ W - Y)^2)", m, n, k, "OpenBLAS + loop", tAdjit, tBase, tAll, L, total);
}

/// relu(X) @ W (f32): adjit, where the packing computes relu(X) (a tile
/// prologue: it is never stored), against a loop writing relu(X) and then
/// OpenBLAS's sgemm. One thread each.
static void producerRow(int64_t m, int64_t n, int64_t k) {
  std::vector<float> x = filled<float>(std::size_t(m * k), 0), w = filled<float>(std::size_t(k * n), 1);
  const Array X(x, {m, k}), W(w, {k, n});
  auto layer = [](Tensor x, Tensor w) { return matmul(maximum(x, zeros_like(x)), w); };
  auto f = jit(layer, {.threads = 1});
  auto all = jit(layer);
  Array Y = f(X, W);
  all(X, W);
  f.wait_optimized(); // time the optimised code (JitOptions::tiers)
  all.wait_optimized();
  const double tAdjit = bestTime([&] { Y = f(X, W); });
  const double tAll = bestTime([&] { all(X, W); });
  std::vector<float> a(x.size()), c(std::size_t(m * n));
  const double tBase = bestTime([&] {
    for (std::size_t i = 0; i < x.size(); ++i) a[i] = std::max(x[i], 0.0f);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), 1.0f, a.data(), int(k), w.data(), int(n), 0.0f,
                c.data(), int(n));
  });
  layerReport("relu(X) @ W", m, n, k, "loop + OpenBLAS", tAdjit, tBase, tAll, Y, c);
}

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const bool abtOnly = argc > 1 && std::strcmp(argv[1], "--abt") == 0; // the rows of small A B^T products only
  openblas_set_num_threads(1);
  // Layers: the product's consumer fused into its tiles. B4's first layer,
  // then products with a short k, where the pass over C is a large part.
  auto layers = [] {
    std::printf("layers: adjit's time / (OpenBLAS sgemm + a pass adding the bias and clamping), one thread each\n");
    layerRow(256, 512, 512);
    layerRow(2048, 2048, 64);
    layerRow(4096, 1024, 16);
    std::printf("losses: adjit's time / (OpenBLAS sgemm + a pass summing the squared errors), one thread each\n");
    lossRow(256, 512, 512);
    lossRow(2048, 2048, 64);
    lossRow(4096, 1024, 16);
    std::printf("producers: adjit's time / (a loop writing relu(X), then OpenBLAS sgemm), one thread each\n");
    producerRow(256, 512, 512);
    producerRow(2048, 64, 2048);
    producerRow(4096, 32, 1024);
  };
  if (argc > 1 && std::strcmp(argv[1], "--layers") == 0) {
    layers();
    return 0;
  }
  if (argc > 2 && std::strcmp(argv[1], "--size") == 0) { // one square size, f32 and f64
    const int64_t s = std::atoll(argv[2]);
    row<float>("x", 1, s, s, s, false, false);
    row<double>("x", 1, s, s, s, false, false);
    return 0;
  }
  openblas_set_num_threads(1);
  std::printf("matmul: adjit against OpenBLAS, one thread each; ratio = adjit speed / OpenBLAS speed; then adjit on all cores\n");
  for (int64_t s : {64, 128, 256, 512, 1024, 2048}) {
    if ((quick && s > 512) || abtOnly) break;
    char label[64];
    std::snprintf(label, sizeof label, "%lld^3", static_cast<long long>(s));
    row<float>(label, 1, s, s, s, false, false);
    row<double>(label, 1, s, s, s, false, false);
  }
  if (!abtOnly) {
    row<float>("batch 16 x 128^3", 16, 128, 128, 128, false, false);
    row<float>("A^T B 512^3 (dW = X^T dY)", 1, 512, 512, 512, true, false);
    row<float>("A B^T 512^3 (dX = dY W^T)", 1, 512, 512, 512, false, true);
    // B4's shapes: X [256, 512] @ W1 [512, 512], then @ W2.
    row<float>("B4 256x512 @ 512x512", 1, 256, 512, 512, false, false);
    layers();
  }
  // The GMM gradient's dQ = dY X^T: a small matrix per component summed
  // over 1,000 points (ADBench 1k, D = 10 and 20, K = 25).
  row<double>("GMM 25 x 10x1000 @ (10x1000)^T", 25, 10, 10, 1000, false, true);
  row<double>("GMM 25 x 20x1000 @ (20x1000)^T", 25, 20, 20, 1000, false, true);
  if (quick) return 0;
  for (int64_t s : {8, 32, 64, 128})
    for (int64_t k : {256, 4096}) {
      char label[64];
      std::snprintf(label, sizeof label, "A B^T %lldx%lld, k = %lld", static_cast<long long>(s), static_cast<long long>(s),
                    static_cast<long long>(k));
      row<double>(label, 1, s, s, k, false, true);
    }
  return 0;
}
