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

// ---- hand-written analytic gradients (value and gradient in one pass) ----
extern "C" {

// G1: d/dx sum(log1p(exp(x))) = sigmoid(x)
float base_g1(const float* x, float* g, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    float e = std::exp(x[i]);
    s += std::log1p(e);
    g[i] = e / (1 + e);
  }
  return s;
}

// G2: f = sum(tanh(a x + b) e^{-x^2} + sqrt(x^2 + 1)); gradients for x, a, b
float base_g2(const float* x, float a, float b, float* gx, float* ga, float* gb, int64_t n) {
  float s = 0, sa = 0, sb = 0;
#pragma omp simd reduction(+ : s, sa, sb)
  for (int64_t i = 0; i < n; ++i) {
    float xi = x[i], t = std::tanh(a * xi + b), e = std::exp(-xi * xi), r = std::sqrt(xi * xi + 1);
    float dt = (1 - t * t) * e;
    s += t * e + r;
    gx[i] = dt * a - 2 * xi * t * e + xi / r;
    sa += dt * xi;
    sb += dt;
  }
  *ga = sa;
  *gb = sb;
  return s;
}

// G3: d/dx sum_rows logsumexp(row) = softmax of each row
float base_g3(const float* x, float* g, int64_t rows, int64_t cols) {
  float total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    float* grow = g + r * cols;
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t c = 0; c < cols; ++c) m = std::fmax(m, row[c]);
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < cols; ++c) {
      grow[c] = std::exp(row[c] - m);
      s += grow[c];
    }
    float inv = 1 / s;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) grow[c] *= inv;
    total += m + std::log(s);
  }
  return total;
}

// G4: L = 0.5 sum(O^2), O = tanh(X W1) W2; dW2 = H^T O, dW1 = X^T ((O W2^T) * (1 - H^2))
float base_g4(const float* x, const float* w1, const float* w2, float* h, float* o, float* dh, float* dw1, float* dw2,
              int64_t m, int64_t k, int64_t n) {
  matmul(x, w1, h, m, k, n);
#pragma omp simd
  for (int64_t i = 0; i < m * n; ++i) h[i] = std::tanh(h[i]);
  matmul(h, w2, o, m, n, n);
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < m * n; ++i) s += o[i] * o[i];
  // dW2 = H^T O: accumulate outer products of rows.
  for (int64_t i = 0; i < n * n; ++i) dw2[i] = 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < n; ++i) {
      float hv = h[r * n + i];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) dw2[i * n + j] += hv * o[r * n + j];
    }
  // dH = O W2^T (row dot row), then through tanh.
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < n; ++i) {
      float acc = 0;
#pragma omp simd reduction(+ : acc)
      for (int64_t j = 0; j < n; ++j) acc += o[r * n + j] * w2[i * n + j];
      float hv = h[r * n + i];
      dh[r * n + i] = acc * (1 - hv * hv);
    }
  // dW1 = X^T dH.
  for (int64_t i = 0; i < k * n; ++i) dw1[i] = 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < k; ++i) {
      float xv = x[r * k + i];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) dw1[i * n + j] += xv * dh[r * n + j];
    }
  return 0.5f * s;
}

// ODE: a damped, driven pendulum, RK4 (examples/ode). f(s, p) = (w, -p0 w - p1 sin t + p2 cos t).
static inline void pendulum(const double* s, const double* p, double* d) {
  d[0] = s[1];
  d[1] = -p[0] * s[1] - p[1] * std::sin(s[0]) + p[2] * std::cos(s[0]);
}

/// RK4's stages from s: k1..k3 and the states s2..s4 they are evaluated at.
static inline void rk4Stages(const double* s, const double* p, double h, double* k1, double* k2, double* k3, double* s2,
                             double* s3, double* s4) {
  pendulum(s, p, k1);
  s2[0] = s[0] + h / 2 * k1[0], s2[1] = s[1] + h / 2 * k1[1];
  pendulum(s2, p, k2);
  s3[0] = s[0] + h / 2 * k2[0], s3[1] = s[1] + h / 2 * k2[1];
  pendulum(s3, p, k3);
  s4[0] = s[0] + h * k3[0], s4[1] = s[1] + h * k3[1];
}

/// The final angle after `steps` RK4 steps of size h; `states` (2 * (steps + 1)) keeps every state.
double base_ode(const double* s0, const double* p, int64_t steps, double h, double* states) {
  states[0] = s0[0];
  states[1] = s0[1];
  for (int64_t n = 0; n < steps; ++n) {
    const double* s = states + 2 * n;
    double k1[2], k2[2], k3[2], k4[2], s2[2], s3[2], s4[2];
    rk4Stages(s, p, h, k1, k2, k3, s2, s3, s4);
    pendulum(s4, p, k4);
    double* o = states + 2 * (n + 1);
    o[0] = s[0] + h / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0]);
    o[1] = s[1] + h / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1]);
  }
  return states[2 * steps];
}

/// a += J_s(s)^T v and ap += J_p(s)^T v for the pendulum's f.
static inline void pendulumVjp(const double* s, const double* p, const double* v, double* a, double* ap) {
  a[0] += (-p[1] * std::cos(s[0]) - p[2] * std::sin(s[0])) * v[1];
  a[1] += v[0] - p[0] * v[1];
  ap[0] += -s[1] * v[1];
  ap[1] += -std::sin(s[0]) * v[1];
  ap[2] += std::cos(s[0]) * v[1];
}

/// The discrete adjoint of base_ode: d theta_N / d s0 and d theta_N / d p,
/// stepping back through the stored states (the stages are recomputed).
double base_ode_adjoint(const double* s0, const double* p, int64_t steps, double h, double* states, double* ds0, double* dp) {
  const double theta = base_ode(s0, p, steps, h, states);
  double l[2] = {1, 0};
  dp[0] = dp[1] = dp[2] = 0;
  for (int64_t n = steps; n-- > 0;) {
    const double* s = states + 2 * n;
    double k1[2], k2[2], k3[2], s2[2], s3[2], s4[2];
    rk4Stages(s, p, h, k1, k2, k3, s2, s3, s4);
    double a1[2] = {h / 6 * l[0], h / 6 * l[1]}, a2[2] = {h / 3 * l[0], h / 3 * l[1]};
    double a3[2] = {h / 3 * l[0], h / 3 * l[1]}, a4[2] = {h / 6 * l[0], h / 6 * l[1]};
    double as[2] = {0, 0};
    pendulumVjp(s4, p, a4, as, dp); // k4 = f(s4), s4 = s + h k3
    l[0] += as[0], l[1] += as[1], a3[0] += h * as[0], a3[1] += h * as[1];
    as[0] = as[1] = 0;
    pendulumVjp(s3, p, a3, as, dp); // k3 = f(s3), s3 = s + h/2 k2
    l[0] += as[0], l[1] += as[1], a2[0] += h / 2 * as[0], a2[1] += h / 2 * as[1];
    as[0] = as[1] = 0;
    pendulumVjp(s2, p, a2, as, dp); // k2 = f(s2), s2 = s + h/2 k1
    l[0] += as[0], l[1] += as[1], a1[0] += h / 2 * as[0], a1[1] += h / 2 * as[1];
    pendulumVjp(s, p, a1, l, dp);   // k1 = f(s)
  }
  ds0[0] = l[0];
  ds0[1] = l[1];
  return theta;
}

// R1: n standard normal f32 samples from a Threefry-2x32 key, written by hand
// as JAX computes them (counter (0, i), words xor'ed, 23 bits to a float in
// [1, 2), erf_inv by Giles' single-precision polynomial with logf).
static inline uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

void base_normal(uint32_t k0, uint32_t k1, float* out, int64_t n) {
  const uint32_t k2 = k0 ^ k1 ^ 0x1BD11BDA;
  const uint32_t ks[3] = {k0, k1, k2};
  static const int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    uint32_t x0 = k0, x1 = static_cast<uint32_t>(i) + k1;
    for (int g = 0; g < 5; ++g) {
      for (int r = 0; r < 4; ++r) {
        x0 += x1;
        x1 = rotl32(x1, rot[g % 2][r]) ^ x0;
      }
      x0 += ks[(g + 1) % 3];
      x1 += ks[(g + 2) % 3] + static_cast<uint32_t>(g + 1);
    }
    const uint32_t bits = ((x0 ^ x1) >> 9) | 0x3F800000u;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    const float u = std::fmax(-0.99999994f, (f - 1.0f) * 2.0f - 0.99999994f);
    float w = -std::log((1.0f - u) * (1.0f + u)), p;
    if (w < 5.0f) {
      w -= 2.5f;
      p = 2.81022636e-08f;
      p = 3.43273939e-07f + p * w; p = -3.5233877e-06f + p * w; p = -4.39150654e-06f + p * w;
      p = 0.00021858087f + p * w; p = -0.00125372503f + p * w; p = -0.00417768164f + p * w;
      p = 0.246640727f + p * w; p = 1.50140941f + p * w;
    } else {
      w = std::sqrt(w) - 3.0f;
      p = -0.000200214257f;
      p = 0.000100950558f + p * w; p = 0.00134934322f + p * w; p = -0.00367342844f + p * w;
      p = 0.00573950773f + p * w; p = -0.0076224613f + p * w; p = 0.00943887047f + p * w;
      p = 1.00167406f + p * w; p = 2.83297682f + p * w;
    }
    out[i] = 1.41421356f * p * u;
  }
}

}
