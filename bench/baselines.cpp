// bench/baselines.cpp — hand-written C++ baselines, compiled as an expert would
// (-O3 -march=native -ffast-math -fopenmp-simd, linked with libmvec, so the
// exp/log1p/tanh loops vectorise).
#include <cmath>
#include <cstdint>

extern "C" {

// B1: sum(log1p(exp(x)))
float base_b1(const float* x, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += std::log1p(std::exp(x[i]));
  return s;
}

// B2: sum(tanh(a*x+b) * exp(-x*x) + sqrt(x*x+1))
float base_b2(const float* x, float a, float b, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += std::tanh(a * x[i] + b) * std::exp(-x[i] * x[i]) + std::sqrt(x[i] * x[i] + 1);
  return s;
}

// B3: sum over rows of logsumexp(row), stable
float base_b3(const float* x, int64_t rows, int64_t cols) {
  float total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t c = 0; c < cols; ++c) m = std::fmax(m, row[c]);
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < cols; ++c) s += std::exp(row[c] - m);
    total += m + std::log(s);
  }
  return total;
}

// B4: 0.5 * sum((tanh(X @ W1) @ W2)^2), straightforward i-k-j loops
static void matmul(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
  for (int64_t i = 0; i < m * n; ++i) c[i] = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      float av = a[i * k + p];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += av * b[p * n + j];
    }
}

float base_b4(const float* x, const float* w1, const float* w2, float* h, float* o, int64_t m, int64_t k, int64_t n) {
  matmul(x, w1, h, m, k, n);
#pragma omp simd
  for (int64_t i = 0; i < m * n; ++i) h[i] = std::tanh(h[i]);
  matmul(h, w2, o, m, n, n);
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < m * n; ++i) s += o[i] * o[i];
  return 0.5f * s;
}
}
