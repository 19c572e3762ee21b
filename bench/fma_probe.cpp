// bench/fma_probe.cpp — the machine's measured one-thread FMA peak: a
// register-resident loop of independent fused multiply-adds at the widest
// vector width this file is compiled for (-march=native: the host's).
// Matmul-bound benchmark rows read as a fraction of it, and every section
// of adjit_bench prints it as its phase probe (the machine kind has fast and
// slow phases lasting minutes: an absolute time means little without it).
#include "fma_probe.h"

#include <immintrin.h>

#include <chrono>
#include <cstdint>

namespace {

// Independent accumulators: enough to cover FMA latency x FMA units (4 x 2 on
// the x86 cores of the last decade) with room to spare, and few enough to
// stay in registers (32 vector registers with AVX-512, 16 below it).
#if defined(__AVX512F__)
using Vec = __m512;
constexpr int kLanes = 16, kAccs = 16;
constexpr const char* kIsa = "AVX-512, 512-bit FMA";
inline Vec splat(float x) { return _mm512_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float total(Vec v) { return _mm512_reduce_add_ps(v); }
#elif defined(__FMA__)
using Vec = __m256;
constexpr int kLanes = 8, kAccs = 12;
constexpr const char* kIsa = "AVX2, 256-bit FMA";
inline Vec splat(float x) { return _mm256_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float total(Vec v) {
  alignas(32) float f[8];
  _mm256_store_ps(f, v);
  return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}
#else
// SSE2 has no fused multiply-add: a multiply and an add per lane, counted as
// the two flops they are (the peak of such a machine is two ports' worth).
using Vec = __m128;
constexpr int kLanes = 4, kAccs = 12;
constexpr const char* kIsa = "SSE2, 128-bit mul+add (no FMA)";
inline Vec splat(float x) { return _mm_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm_add_ps(_mm_mul_ps(a, b), c); }
inline float total(Vec v) {
  alignas(16) float f[4];
  _mm_store_ps(f, v);
  return f[0] + f[1] + f[2] + f[3];
}
#endif

volatile float gSink; // keeps the accumulators' values live

/// `iters` rounds of kAccs independent FMAs; returns the seconds taken.
double run(int64_t iters) {
  Vec acc[kAccs];
  for (int j = 0; j < kAccs; ++j) acc[j] = splat(1.0f + 0.001f * j);
  // A contraction towards 1e-7 / (1 - 0.9999999): the values stay finite and
  // normal however long the loop runs.
  const Vec a = splat(0.9999999f), b = splat(1e-7f);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kAccs; ++j) acc[j] = fma(acc[j], a, b);
  }
  const auto t1 = std::chrono::steady_clock::now();
  Vec s = acc[0];
  for (int j = 1; j < kAccs; ++j) s = fma(s, a, acc[j]);
  gSink = total(s);
  return std::chrono::duration<double>(t1 - t0).count();
}

} // namespace

/// Iterations of run() per millisecond on this machine (thread-safe: a static's initialiser).
static int64_t iterationsPerMs() {
  static const int64_t perMs = [] {
    int64_t iters = 1 << 14;
    double s = run(iters);
    while (s < 2e-3) s = run(iters *= 2);
    return static_cast<int64_t>(double(iters) / (s * 1e3)) + 1;
  }();
  return perMs;
}

double fma_probe_gflops(double millis) {
  const int64_t iters = static_cast<int64_t>(double(iterationsPerMs()) * millis) + 1;
  const double s = run(iters);
  return 2.0 * kLanes * kAccs * double(iters) / s * 1e-9;
}

const char* fma_probe_isa() { return kIsa; }
