// bench/bench.cpp — adjit's compiled code next to hand-written C++ baselines,
// measured in the same process: adjit at one thread against the baseline at
// one thread, adjit at all threads against the baseline threaded with OpenMP,
// every side of a comparison in turn (bench/compare.h), ratios with their
// spread; the MLP rows beside PyTorch at one thread (bench/mlp_torch.py, a
// child process taking turns) and as fractions of the measured FMA peak
// (bench/fma_probe.cpp), which also serves as every section's phase probe.
// Prints the cold compile time (first call: trace + compile + run). Not a test.
//   adjit_bench [ROUNDS [random | ROWS]]: ROUNDS rounds (21); "random" runs
//   the random-number section only; ROWS, names separated by commas
//   ("G3,B2"), runs those rows of B0-B4 and G1-G4 only.
#include <adjit/adjit.h>

#include <omp.h>
#include <unistd.h>

#include "compare.h"
#include "fma_probe.h"
#include "torch_peer.h"

#include <cmath>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

extern "C" {
float base_b1(const float* x, int64_t n);
float base_b2(const float* x, float a, float b, int64_t n);
float base_b3(const float* x, int64_t rows, int64_t cols);
float base_b4(const float* x, const float* w1, const float* w2, float* h, float* o, int64_t m, int64_t k, int64_t n);
float base_g1(const float* x, float* g, int64_t n);
float base_g2(const float* x, float a, float b, float* gx, float* ga, float* gb, int64_t n);
float base_g3(const float* x, float* g, int64_t rows, int64_t cols);
float base_g4(const float* x, const float* w1, const float* w2, float* h, float* o, float* dh, float* dw1, float* dw2,
              int64_t m, int64_t k, int64_t n);
double base_ode(const double* s0, const double* p, int64_t steps, double h, double* states);
double base_ode_adjoint(const double* s0, const double* p, int64_t steps, double h, double* states, double* ds0, double* dp);
void base_normal(uint32_t k0, uint32_t k1, float* out, int64_t n);
}

using namespace adjit;
using bench::Clock;
using bench::Side;

/// The rows asked for on the command line; empty: all.
static std::string gRows;
static bool wanted(const char* row) {
  return gRows.empty() || ("," + gRows + ",").find("," + std::string(row) + ",") != std::string::npos;
}

static double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

static std::vector<float> randomVector(std::size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

/// Largest relative difference between two float buffers.
static double maxRelDiff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]) / std::max(1.0, std::fabs(double(b[i]))));
  return m;
}

/// The first call's time (trace, compile, run); then waits for the optimised
/// tier (JitOptions::tiers), so that what is timed next is the optimised code.
template <class F, class... A> static double cold(F& f, const A&... args) {
  auto t0 = Clock::now();
  f(args...);
  const double t = ms(Clock::now() - t0);
  if constexpr (requires { f.wait_optimized(); }) f.wait_optimized();
  return t;
}

/// The FMA probe on `threads` OpenMP threads at once for `millis` ms: the
/// sum of their GFLOP/s (below threads x the one-thread reading when other
/// processes hold cores).
static double probeThreads(int threads, double millis) {
  if (threads == 1) return fma_probe_gflops(millis);
  double g = 0;
#pragma omp parallel num_threads(threads) reduction(+ : g)
  g += fma_probe_gflops(millis);
  return g;
}

/// adjit's default thread count: ADJIT_NUM_THREADS, else the hardware's.
static int allThreads() {
  const char* env = std::getenv("ADJIT_NUM_THREADS");
  return env && std::atoi(env) > 0 ? std::atoi(env) : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

/// The phase probe: the FMA peak now at one thread and on all (medians of
/// five 4 ms readings), and one 200 ms reading of each.
static void printProbe() {
  const int all = allThreads();
  std::vector<double> one, many;
  for (int i = 0; i < 5; ++i) one.push_back(fma_probe_gflops(4));
  for (int i = 0; i < 5; ++i) many.push_back(probeThreads(all, 4));
  // One long run each: what a thread got beside the machine's other
  // processes (the short runs' median reads the phase's peak).
  const double oneLong = fma_probe_gflops(200), manyLong = probeThreads(all, 200);
  std::printf("phase probe: FMA peak %.1f GFLOP/s (one thread, %s), %.1f GFLOP/s on %d threads at once; "
              "over 200 ms %.1f / %.1f GFLOP/s\n",
              bench::spreadOf(one).median, fma_probe_isa(), bench::spreadOf(many).median, all, oneLong, manyLong);
  std::this_thread::sleep_for(std::chrono::milliseconds(20)); // OpenMP's threads go to sleep
}

/// Sides that read the FMA probe for 2 ms each round, at one thread and on
/// all: their values are GFLOP/s.
static Side probeSide() { return Side{.round = [] { return fma_probe_gflops(2); }}; }
static Side probeSideAll(int all) { return Side{.round = [all] { return probeThreads(all, 2); }, .pooled = true}; }

/// Two sides run in turn for `reps` rounds.
static void interleavePair(Side& a, Side& b, int reps, Side* probe = nullptr) {
  std::vector<Side*> sides = {&a, &b};
  if (probe) sides.push_back(probe);
  bench::interleave(sides, reps);
}

/// The bytes of a result (an Array, or pairs and tuples of them): one
/// thread's results and all threads' must be bitwise equal.
template <class R> static void appendBytes(std::string& s, const R& r) {
  if constexpr (std::is_same_v<R, Array>) s.append(static_cast<const char*>(r.raw()), r.bytes());
  else std::apply([&](const auto&... e) { (appendBytes(s, e), ...); }, r);
}
template <class R> static bool bitwiseEqual(const R& a, const R& b) {
  std::string x, y;
  appendBytes(x, a);
  appendBytes(y, b);
  return x == y;
}

/// Runs part(t, begin, end) for the T ranges of [0, n) on T OpenMP threads:
/// how an expert threads the hand-written baselines. One thread calls part
/// directly: the plain loop, no OpenMP region.
template <class F> static void ompRanges(int threads, int64_t n, F&& part) {
  if (threads == 1) return part(0, 0, n);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    part(t, n * t / T, n * (t + 1) / T);
  }
}

/// One benchmark against its hand-written baseline.
struct Row {
  const char* name;
  std::function<void()> adjit1, adjitAll; ///< JitOptions::threads = 1 and the default (all)
  std::function<void(int)> baseline;      ///< the hand-written code on this many OpenMP threads
  double cold = 0;                        ///< the first call of adjit1 (trace, compile, run), ms
  std::function<std::string()> check;     ///< after the runs: the results against the baseline's
  std::function<void()> forward1 = {};    ///< gradient rows: adjit's forward at one thread
  double flops = 0;                       ///< per call, for rows bound by matrix products
  const char* torch = nullptr;            ///< "fwd" or "grad": PyTorch at one thread beside it
};

/// Times a row: adjit and the baseline at one thread, adjit and the OpenMP
/// baseline at all threads, the FMA probe, and where asked adjit's own
/// forward and PyTorch, all in turn in the same rounds. Prints
///   NAME 1 thread: adjit, baseline, ratio   N threads: adjit, OpenMP, ratio   cold compile, probe (1 / N threads), check
/// and for gradient rows the ratio to the forward, for matmul rows PyTorch
/// and the fractions of the FMA peak.
static void runRow(const Row& row, int reps, int all, bench::TorchPeer* torch) {
  if (!wanted(row.name)) return;
  Side a1{.round = bench::batchOf(row.adjit1)}, b1{.round = bench::batchOf([&] { row.baseline(1); })};
  Side aN{.round = bench::batchOf(row.adjitAll), .pooled = true};
  Side bN{.round = bench::batchOf([&] { row.baseline(all); }), .pooled = true};
  Side probe = probeSide(), probeAll = probeSideAll(all), f1{.round = bench::batchOf(row.forward1)};
  double torchValue = 0;
  Side pt{.round = [&] {
    const std::vector<double> t = torch->run(row.torch, 3, torchValue);
    return t.size() == 3 ? (t[1] + t[2]) / 2 : std::nan("");
  }};
  std::vector<Side*> sides = {&a1, &b1, &probe, &aN, &bN, &probeAll};
  if (row.forward1) sides.push_back(&f1);
  const bool withTorch = row.torch && torch && torch->available();
  if (withTorch) sides.push_back(&pt);
  bench::interleave(sides, reps);
  const double peak = bench::median(probe);
  std::printf("%-4s 1 thread: adjit %8.3f ms  baseline %8.3f ms  ratio %s   %d threads: adjit %8.3f ms  OpenMP %8.3f ms  "
              "ratio %s   cold compile %6.1f ms   probe %.0f / %.0f GFLOP/s   (%s)\n",
              row.name, bench::median(a1), bench::median(b1), bench::ratioText(bench::ratioOf(a1, b1)).c_str(), all,
              bench::median(aN), bench::median(bN), bench::ratioText(bench::ratioOf(aN, bN)).c_str(), row.cold, peak, bench::median(probeAll),
              row.check().c_str());
  if (row.forward1)
    std::printf("%-4s vs own forward (1 thread): %s\n", row.name, bench::ratioText(bench::ratioOf(a1, f1)).c_str());
  if (row.flops > 0) {
    // Per round: the side's GFLOP/s over the probe's reading of that round.
    auto ofPeak = [&](const Side& s) {
      std::vector<double> f;
      for (std::size_t i = 0; i < s.values.size() && i < probe.values.size(); ++i)
        f.push_back(row.flops / (s.values[i] * 1e6) / probe.values[i]);
      return 100 * bench::spreadOf(f).median;
    };
    std::string torchText = torch ? "PyTorch " + torch->status() : std::string("PyTorch not run");
    if (withTorch && torch->available()) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "PyTorch 1 thread %8.3f ms  adjit/PyTorch %s  (%s, loss %.6g)", bench::median(pt),
                    bench::ratioText(bench::ratioOf(a1, pt)).c_str(), torch->status().c_str(), torchValue);
      torchText = buf;
    }
    std::printf("%-4s %s   FMA peak %.1f GFLOP/s: adjit %.0f%%, baseline %.0f%%", row.name, torchText.c_str(), peak,
                ofPeak(a1), ofPeak(b1));
    if (withTorch && torch->available()) std::printf(", PyTorch %.0f%%", ofPeak(pt));
    std::printf(" of it at one thread\n");
  }
  std::fflush(stdout);
}

/// B1-B4 and G1-G4 against the hand-written baselines of baselines.cpp.
static void handWrittenSection(int reps, int all) {
  const int64_t n = 1000000, M = 256, K = 512, N = 512;
  const Array x(randomVector(n, -3, 3, 1)), a(0.5f), b(0.25f);
  const Array m(randomVector(1000 * 1000, -5, 5, 2), {1000, 1000});
  const Array X(randomVector(M * K, -1, 1, 3), {M, K}), W1(randomVector(K * N, -0.05f, 0.05f, 4), {K, N}),
      W2(randomVector(N * N, -0.05f, 0.05f, 5), {N, N});
  const float* xs = x.data<float>();
  const float* mrow = m.data<float>();

  // PyTorch beside the MLP rows, in a child process taking turns with this one.
  std::unique_ptr<bench::TorchPeer> torch;
  const char* py = std::getenv("ADJIT_BENCH_PYTHON");
  std::string folder = "/tmp/adjit_bench.XXXXXX";
  if ((!py || *py) && (wanted("B4") || wanted("G4")) && mkdtemp(folder.data()))
    torch = std::make_unique<bench::TorchPeer>(py ? py : "/usr/bin/python3", ADJIT_BENCH_DIR "/mlp_torch.py", folder,
                                               X.data<float>(), W1.data<float>(), W2.data<float>(), M, K, N);

  std::printf("\nrun time against hand-written C++ (-O3 -march=" ADJIT_BASELINE_MARCH " -ffast-math, libmvec): adjit at 1 thread against the "
              "baseline at 1 thread, adjit at all threads (JitOptions::threads; ADJIT_NUM_THREADS sets the default) "
              "against the baseline threaded with OpenMP over row ranges; times are medians of %d rounds in which every "
              "side runs in turn, ratios = adjit / baseline, median [quartiles] of the rounds' ratios\n", reps);
  printProbe();
  // Per-thread outputs of the baselines (partial sums, gradients of shared weights).
  std::vector<float> out(static_cast<std::size_t>(std::max(n, M * N))), out2(out.size()), out3(out.size());
  std::vector<std::vector<float>> dw1(static_cast<std::size_t>(all), std::vector<float>(K * N)),
      dw2(static_cast<std::size_t>(all), std::vector<float>(N * N));
  std::vector<float> sums(static_cast<std::size_t>(all) * 3);
  auto total = [&](int T) { // the sum of T threads' partial results
    float s = 0;
    for (int t = 0; t < T; ++t) s += sums[t];
    return s;
  };
  auto elementwise = [&](auto part) { return [&, part](int T) { ompRanges(T, n, part); }; };
  auto rows = [&](auto part) { return [&, part](int T) { ompRanges(T, 1000, part); }; };
  auto mlpRows = [&](auto part) { return [&, part](int T) { ompRanges(T, M, part); }; };
  auto forwardCheck = [&](const Array& r1, const Array& rN, const std::function<void(int)>& baseline) {
    baseline(1);
    char buf[160];
    std::snprintf(buf, sizeof buf, "result %.6g vs %.6g, threads %s", r1.item<double>(), double(total(1)),
                  bitwiseEqual(r1, rN) ? "bitwise equal" : "DIFFER");
    return std::string(buf);
  };
  auto gradCheck = [&](double err, bool equal) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "max rel. diff %.1e, threads %s", err, equal ? "bitwise equal" : "DIFFER");
    return std::string(buf);
  };

  auto b1f = [](Tensor x) { return sum(log1p(exp(x))); };
  auto b2f = [](Tensor x, Tensor a, Tensor b) { return sum(tanh(a * x + b) * exp(-x * x) + sqrt(x * x + 1.0f)); };
  auto b3f = [](Tensor x) { return sum(logsumexp(x, {1})); };
  auto b4f = [](Tensor x, Tensor w1, Tensor w2) {
    Tensor o = matmul(tanh(matmul(x, w1)), w2);
    return 0.5f * sum(o * o);
  };
  auto f1 = jit(b1f, {.name = "b1", .threads = 1}), fN = jit(b1f, {.name = "b1"});
  auto f2 = jit(b2f, {.name = "b2", .threads = 1}), f2N = jit(b2f, {.name = "b2"});
  auto f3 = jit(b3f, {.name = "b3", .threads = 1}), f3N = jit(b3f, {.name = "b3"});
  auto f4 = jit(b4f, {.name = "b4", .threads = 1}), f4N = jit(b4f, {.name = "b4"});
  Array r1, rN;

  const std::function<void(int)> base1 = elementwise([&](int t, int64_t i, int64_t e) { sums[t] = base_b1(xs + i, e - i); });
  const double coldB1 = cold(f1, x); // before fN: they may share a kernel
  cold(fN, x);
  runRow({.name = "B1", .adjit1 = [&] { r1 = f1(x); }, .adjitAll = [&] { rN = fN(x); }, .baseline = base1,
          .cold = coldB1, .check = [&] { return forwardCheck(r1, rN, base1); }}, reps, all, torch.get());
  const std::function<void(int)> base2 =
      elementwise([&](int t, int64_t i, int64_t e) { sums[t] = base_b2(xs + i, 0.5f, 0.25f, e - i); });
  const double coldB2 = cold(f2, x, a, b); // before f2N: they may share a kernel
  cold(f2N, x, a, b);
  runRow({.name = "B2", .adjit1 = [&] { r1 = f2(x, a, b); }, .adjitAll = [&] { rN = f2N(x, a, b); }, .baseline = base2,
          .cold = coldB2, .check = [&] { return forwardCheck(r1, rN, base2); }}, reps, all, torch.get());
  const std::function<void(int)> base3 =
      rows([&](int t, int64_t r, int64_t e) { sums[t] = base_b3(mrow + r * 1000, e - r, 1000); });
  const double coldB3 = cold(f3, m); // before f3N: they may share a kernel
  cold(f3N, m);
  runRow({.name = "B3", .adjit1 = [&] { r1 = f3(m); }, .adjitAll = [&] { rN = f3N(m); }, .baseline = base3,
          .cold = coldB3, .check = [&] { return forwardCheck(r1, rN, base3); }}, reps, all, torch.get());
  // Two products of 2*M*K*N and 2*M*N*N flops.
  const double mlpFlops = 2.0 * M * K * N + 2.0 * M * N * N;
  const std::function<void(int)> base4 = mlpRows([&](int t, int64_t r, int64_t e) {
    sums[t] = base_b4(X.data<float>() + r * K, W1.data<float>(), W2.data<float>(), out.data() + r * N, out2.data() + r * N,
                      e - r, K, N);
  });
  const double coldB4 = cold(f4, X, W1, W2); // before f4N: they may share a kernel
  cold(f4N, X, W1, W2);
  runRow({.name = "B4", .adjit1 = [&] { r1 = f4(X, W1, W2); }, .adjitAll = [&] { rN = f4N(X, W1, W2); },
          .baseline = base4, .cold = coldB4, .check = [&] { return forwardCheck(r1, rN, base4); },
          .flops = mlpFlops, .torch = "fwd"}, reps, all, torch.get());

  { // G1
    auto vg = value_and_grad(b1f);
    auto g1 = jit([vg](Tensor x) { return vg(x); }, {.name = "g1", .threads = 1});
    auto gN = jit([vg](Tensor x) { return vg(x); }, {.name = "g1"});
    decltype(g1(x)) q1, qN;
    const std::function<void(int)> base =
        elementwise([&](int t, int64_t i, int64_t e) { sums[t] = base_g1(xs + i, out.data() + i, e - i); });
    const double coldG = cold(g1, x); // before gN: they may share a kernel
    cold(gN, x);
    runRow({.name = "G1", .adjit1 = [&] { q1 = g1(x); }, .adjitAll = [&] { qN = gN(x); }, .baseline = base,
            .cold = coldG, .check = [&] {
              base(1);
              return gradCheck(maxRelDiff(q1.second.data<float>(), out.data(), n), bitwiseEqual(q1, qN));
            }, .forward1 = [&] { f1(x); }}, reps, all, torch.get());
  }
  { // G2
    auto vg = value_and_grad(b2f, argnums<0, 1, 2>);
    auto g1 = jit([vg](Tensor x, Tensor a, Tensor b) { return vg(x, a, b); }, {.name = "g2", .threads = 1});
    auto gN = jit([vg](Tensor x, Tensor a, Tensor b) { return vg(x, a, b); }, {.name = "g2"});
    decltype(g1(x, a, b)) q1, qN;
    const std::function<void(int)> base = elementwise([&](int t, int64_t i, int64_t e) {
      sums[t] = base_g2(xs + i, 0.5f, 0.25f, out.data() + i, &sums[all + t], &sums[2 * all + t], e - i);
    });
    const double coldG = cold(g1, x, a, b); // before gN: they may share a kernel
    cold(gN, x, a, b);
    runRow({.name = "G2", .adjit1 = [&] { q1 = g1(x, a, b); }, .adjitAll = [&] { qN = gN(x, a, b); }, .baseline = base,
            .cold = coldG, .check = [&] {
              base(1);
              const double ga = sums[all], gb = sums[2 * all];
              const double err = std::max({maxRelDiff(std::get<0>(q1.second).data<float>(), out.data(), n),
                                           std::fabs(std::get<1>(q1.second).item<double>() - ga) / std::max(1.0, std::fabs(ga)),
                                           std::fabs(std::get<2>(q1.second).item<double>() - gb) / std::max(1.0, std::fabs(gb))});
              return gradCheck(err, bitwiseEqual(q1, qN));
            }, .forward1 = [&] { f2(x, a, b); }}, reps, all, torch.get());
  }
  { // G3
    auto vg = value_and_grad(b3f);
    auto g1 = jit([vg](Tensor x) { return vg(x); }, {.name = "g3", .threads = 1});
    auto gN = jit([vg](Tensor x) { return vg(x); }, {.name = "g3"});
    decltype(g1(m)) q1, qN;
    const std::function<void(int)> base = rows([&](int t, int64_t r, int64_t e) {
      sums[t] = base_g3(mrow + r * 1000, out.data() + r * 1000, e - r, 1000);
    });
    const double coldG = cold(g1, m); // before gN: they may share a kernel
    cold(gN, m);
    runRow({.name = "G3", .adjit1 = [&] { q1 = g1(m); }, .adjitAll = [&] { qN = gN(m); }, .baseline = base,
            .cold = coldG, .check = [&] {
              base(1);
              return gradCheck(maxRelDiff(q1.second.data<float>(), out.data(), 1000 * 1000), bitwiseEqual(q1, qN));
            }, .forward1 = [&] { f3(m); }}, reps, all, torch.get());
  }
  { // G4: each thread's rows give partial weight gradients; the sum of the partials is threaded too.
    auto vg = value_and_grad(b4f, argnums<1, 2>);
    auto g1 = jit([vg](Tensor x, Tensor w1, Tensor w2) { return vg(x, w1, w2); }, {.name = "g4", .threads = 1});
    auto gN = jit([vg](Tensor x, Tensor w1, Tensor w2) { return vg(x, w1, w2); }, {.name = "g4"});
    decltype(g1(X, W1, W2)) q1, qN;
    const std::function<void(int)> base = [&](int T) {
      ompRanges(T, M, [&](int t, int64_t r, int64_t e) {
        sums[t] = base_g4(X.data<float>() + r * K, W1.data<float>(), W2.data<float>(), out.data() + r * N,
                          out2.data() + r * N, out3.data() + r * N, dw1[t].data(), dw2[t].data(), e - r, K, N);
      });
      for (auto* dw : {&dw1, &dw2})
        ompRanges(T, static_cast<int64_t>((*dw)[0].size()), [&](int, int64_t i, int64_t e) {
          for (int u = 1; u < T; ++u)
            for (int64_t j = i; j < e; ++j) (*dw)[0][j] += (*dw)[u][j];
        });
    };
    // The forward's flops, H^T O and X^T dH for the weights' gradients, O W2^T for dH.
    const double flops = mlpFlops + 2.0 * M * N * N + 2.0 * M * N * N + 2.0 * M * K * N;
    const double coldG = cold(g1, X, W1, W2); // before gN: they may share a kernel
    cold(gN, X, W1, W2);
    runRow({.name = "G4", .adjit1 = [&] { q1 = g1(X, W1, W2); }, .adjitAll = [&] { qN = gN(X, W1, W2); }, .baseline = base,
            .cold = coldG, .check = [&] {
              base(1);
              return gradCheck(std::max(maxRelDiff(std::get<0>(q1.second).data<float>(), dw1[0].data(), K * N),
                                        maxRelDiff(std::get<1>(q1.second).data<float>(), dw2[0].data(), N * N)),
                               bitwiseEqual(q1, qN));
            }, .forward1 = [&] { f4(X, W1, W2); }, .flops = flops, .torch = "grad"}, reps, all, torch.get());
  }
  torch.reset();
  for (const char* f : {"x.f32", "w1.f32", "w2.f32"}) std::remove((folder + "/" + f).c_str());
  rmdir(folder.c_str());
}

/// Forward mode at one thread: jvp of B1-B3 against their forward (target
/// <= 1.5x), a Hessian-vector product of G4's loss against its forward
/// (target <= 4x), each pair in turn; and the Jacobian of R^16 -> R^1000 by
/// jacfwd against jacrev (all threads both).
static void forwardSection(int reps) {
  std::printf("\nforward mode at one thread (ratio = adjit's jvp / adjit's forward, median [quartiles] of %d rounds in turn)\n",
              reps);
  printProbe();
  const int64_t n = 1000000;
  const Array x(randomVector(n, -3, 3, 1)), dx(randomVector(static_cast<std::size_t>(n), -1, 1, 11));
  auto row = [&](const char* name, const char* kind, double c, double target, const std::function<void()>& tangent,
                 const std::function<void()>& forward) {
    Side a{.round = bench::batchOf(tangent)}, f{.round = bench::batchOf(forward)};
    interleavePair(a, f, reps);
    std::printf("%-4s %s  %9.3f ms   forward %9.3f ms   ratio %s (target <= %g)   cold %7.1f ms\n", name, kind,
                bench::median(a), bench::median(f), bench::ratioText(bench::ratioOf(a, f)).c_str(), target, c);
    std::fflush(stdout);
  };
  auto jvpRow = [&](const char* name, auto f, const Array& x, const Array& dx) {
    auto j = jit([f](Tensor x, Tensor dx) { return jvp(f, std::tuple{x}, std::tuple{dx}).second; },
                 {.name = name, .threads = 1});
    auto fwd = jit(f, {.name = name, .threads = 1});
    const double c = cold(j, x, dx);
    cold(fwd, x);
    row(name, "jvp", c, 1.5, [&] { j(x, dx); }, [&] { fwd(x); });
  };
  jvpRow("F1", [](Tensor x) { return sum(log1p(exp(x))); }, x, dx);
  jvpRow("F2", [](Tensor x) { return sum(tanh(0.5f * x + 0.25f) * exp(-x * x) + sqrt(x * x + 1.0f)); }, x, dx);
  {
    const Array m(randomVector(1000 * 1000, -5, 5, 2), {1000, 1000}), dm(randomVector(1000 * 1000, -1, 1, 12), {1000, 1000});
    jvpRow("F3", [](Tensor x) { return sum(logsumexp(x, {1})); }, m, dm);
  }
  { // H4: the Hessian of G4's loss in W1 times a direction (forward over reverse)
    const int64_t M = 256, K = 512, N = 512;
    const Array X(randomVector(M * K, -1, 1, 3), {M, K});
    const Array W1(randomVector(K * N, -0.05f, 0.05f, 4), {K, N}), V(randomVector(K * N, -1, 1, 13), {K, N});
    const Array W2(randomVector(N * N, -0.05f, 0.05f, 5), {N, N});
    auto loss = [](Tensor x, Tensor w1, Tensor w2) {
      Tensor o = matmul(tanh(matmul(x, w1)), w2);
      return 0.5f * sum(o * o);
    };
    auto h = jit([loss](Tensor x, Tensor w1, Tensor w2, Tensor v) {
      return hvp([&](Tensor w) { return loss(x, w, w2); }).traced(w1, v);
    }, {.name = "h4", .threads = 1});
    auto fwd = jit(loss, {.name = "b4", .threads = 1});
    const double c = cold(h, X, W1, W2, V);
    cold(fwd, X, W1, W2);
    row("H4", "hvp", c, 4, [&] { h(X, W1, W2, V); }, [&] { fwd(X, W1, W2); });
  }
  { // J: jacfwd vs jacrev of R^16 -> R^1000
    const Array A(randomVector(1000 * 16, -1, 1, 14), {1000, 16}), x16(randomVector(16, -1, 1, 15), {16});
    auto g = [](Tensor a, Tensor x) { return tanh(reshape(matmul(a, reshape(x, {16, 1})), {1000})); };
    auto jf = jacfwd(g, argnums<1>);
    auto jr = jacrev(g, argnums<1>);
    const double cf = cold(jf, A, x16), cr = cold(jr, A, x16);
    Side a{.round = bench::batchOf([&] { jf(A, x16); }), .pooled = true};
    Side b{.round = bench::batchOf([&] { jr(A, x16); }), .pooled = true};
    interleavePair(a, b, reps);
    std::printf("J    jacfwd %7.3f ms   jacrev %9.3f ms   jacrev/jacfwd %s (R^16 -> R^1000: 16 tangents vs 1,000 "
                "cotangents, each batched; all threads both)   cold %.1f / %.1f ms\n",
                bench::median(a), bench::median(b), bench::ratioText(bench::ratioOf(b, a)).c_str(), cf, cr);
  }
}

/// examples/ode: RK4 over 1,000 steps of a damped pendulum with `scan`, next
/// to a hand-written RK4 and a hand-written discrete adjoint; one thread,
/// each pair in turn.
static void odeSection(int reps) {
  constexpr int64_t kSteps = 1000;
  constexpr double kH = 0.01;
  auto deriv = [](const Tensor& s, const Tensor& p) {
    return stack({s[1], -p[0] * s[1] - p[1] * sin(s[0]) + p[2] * cos(s[0])});
  };
  auto angleWith = [deriv](Checkpoint cp) {
    return [deriv, cp](Tensor s0, Tensor p) {
      auto step = [&](Tensor s, std::tuple<>) {
        Tensor k1 = deriv(s, p), k2 = deriv(s + k1 * (kH / 2), p), k3 = deriv(s + k2 * (kH / 2), p), k4 = deriv(s + k3 * kH, p);
        return std::pair{s + (k1 + k2 * 2.0 + k3 * 2.0 + k4) * (kH / 6), std::tuple<>{}};
      };
      return scan(step, s0, std::tuple<>{}, {.length = kSteps, .checkpoint = cp}).first[0];
    };
  };
  auto angle = angleWith({});
  const Array s0(std::vector<double>{1.0, 0.0}), p(std::vector<double>{0.3, 9.81, 0.5});
  std::vector<double> states(2 * (kSteps + 1));
  double ds0[2], dp[3];
  std::printf("\nODE (examples/ode: RK4, %lld steps, scan, one thread; ratio = adjit / hand-written RK4 and discrete adjoint, "
              "median [quartiles] of %d rounds in turn)\n", static_cast<long long>(kSteps), reps);
  printProbe();
  auto pair = [&](const std::function<void()>& adjit, const std::function<void()>& base, double& a, double& b) {
    Side x{.round = bench::batchOf(adjit)}, y{.round = bench::batchOf(base)};
    interleavePair(x, y, reps);
    a = bench::median(x);
    b = bench::median(y);
    return bench::ratioText(bench::ratioOf(x, y));
  };
  auto f = jit(angle, {.name = "ode", .threads = 1});
  const double cf = cold(f, s0, p);
  double got = 0, want = 0, a = 0, b = 0;
  std::string r = pair([&] { got = f(s0, p).item<double>(); },
                       [&] { want = base_ode(s0.data<double>(), p.data<double>(), kSteps, kH, states.data()); }, a, b);
  std::printf("ODE  forward         adjit %8.3f ms   baseline %8.3f ms   ratio %s (target <= 1.25x)   cold compile %6.1f ms   (%.9f vs %.9f)\n",
              a, b, r.c_str(), cf, got, want);
  auto vg = value_and_grad(angle, argnums<0, 1>);
  auto g = jit([vg](Tensor s0, Tensor p) { return vg(s0, p); }, {.name = "ode_grad", .threads = 1});
  const double cg = cold(g, s0, p);
  auto baseAdjoint = [&] { base_ode_adjoint(s0.data<double>(), p.data<double>(), kSteps, kH, states.data(), ds0, dp); };
  r = pair([&] { g(s0, p); }, baseAdjoint, a, b);
  const double gb = b;
  auto res = g(s0, p);
  double err = 0;
  for (int i = 0; i < 3; ++i) err = std::max(err, std::fabs(std::get<1>(res.second).at(i) - dp[i]) / std::max(1.0, std::fabs(dp[i])));
  for (int i = 0; i < 2; ++i) err = std::max(err, std::fabs(std::get<0>(res.second).at(i) - ds0[i]) / std::max(1.0, std::fabs(ds0[i])));
  auto [y, back] = vjp(angle, s0, p);
  std::printf("ODE  value+gradient  adjit %8.3f ms   baseline %8.3f ms   ratio %s (target <= 1.5x)    cold compile %6.1f ms   "
              "(max rel. diff %.1e; residuals %zu bytes, baseline %zu)\n",
              a, gb, r.c_str(), cg, err, back.residual_bytes(), states.size() * sizeof(double));
  for (Checkpoint cp : {every(8), every(32), every(128), binomial(4), binomial(8), binomial(16)}) {
    auto vgk = value_and_grad(angleWith(cp), argnums<0, 1>);
    auto gk = jit([vgk](Tensor s0, Tensor p) { return vgk(s0, p); }, {.name = "ode_grad", .threads = 1});
    const double ck = cold(gk, s0, p);
    r = pair([&] { gk(s0, p); }, baseAdjoint, a, b);
    auto [yk, backk] = vjp(angleWith(cp), s0, p);
    std::printf("ODE  value+gradient, checkpoint %-12s adjit %8.3f ms   ratio %s   cold compile %6.1f ms   residuals %zu bytes\n",
                (cp.str() + ":").c_str(), a, r.c_str(), ck, backk.residual_bytes());
  }
}

/// R1: 10^7 standard normal f32 samples (adjit::random::normal) on one thread
/// against the hand-written Threefry + erf_inv loop of baselines.cpp, in turn.
static void randomSection(int reps) {
  const int64_t n = 10000000;
  std::printf("\nrandom numbers (R1: %lld normal f32 samples, one thread; ratio = adjit / hand-written Threefry loop, "
              "median [quartiles] of %d rounds in turn)\n", static_cast<long long>(n), reps);
  printProbe();
  auto f = jit([n](Tensor key) { return random::normal(key, {n}); }, {.name = "r1", .threads = 1});
  const Array key = random::key_data(0);
  const double c = cold(f, key);
  std::vector<float> base(static_cast<std::size_t>(n));
  Array got;
  Side x{.round = bench::batchOf([&] { got = f(key); })};
  Side y{.round = bench::batchOf([&] { base_normal(0, 0, base.data(), n); })};
  interleavePair(x, y, reps);
  const double a = bench::median(x), b = bench::median(y);
  std::printf("R1   adjit %9.3f ms (%.2f GB/s)   baseline %9.3f ms (%.2f GB/s)   ratio %s   cold compile %7.1f ms   "
              "(max rel. diff %.1e)\n",
              a, 4e-6 * double(n) / a, b, 4e-6 * double(n) / b, bench::ratioText(bench::ratioOf(x, y)).c_str(), c,
              maxRelDiff(got.data<float>(), base.data(), 1000));
  // R2: the samplers on ln (exponential -log1p(-u), gumbel -log(-log u)) against the same formulas on the log/log1p/exp ops (libmvec in
  // vector loops, whose bits differ per vector width): what bitwise
  // reproducibility costs (trace/PortableMath.cpp).
  const float tiny = std::numeric_limits<float>::min();
  struct Sampler {
    const char* name;
    int64_t n;
    std::function<Tensor(Tensor)> portable, libm;
  };
  const Sampler samplers[] = {
      {"exponential f32", n, [n](Tensor k) { return random::exponential(k, {n}); },
       [n](Tensor k) { return -log1p(-random::uniform(k, {n})); }},
      {"exponential f64", n / 2, [n](Tensor k) { return random::exponential(k, {n / 2}, DType::f64); },
       [n](Tensor k) { return -log1p(-random::uniform(k, {n / 2}, DType::f64)); }},
      {"gumbel f32", n, [n](Tensor k) { return random::gumbel(k, {n}); },
       [n, tiny](Tensor k) { return -log(-log(random::uniform(k, {n}, DType::f32, tiny, 1))); }},
      {"gumbel f64", n / 2, [n](Tensor k) { return random::gumbel(k, {n / 2}, DType::f64); },
       [n](Tensor k) { return -log(-log(random::uniform(k, {n / 2}, DType::f64, std::numeric_limits<double>::min(), 1))); }},
  };
  for (const Sampler& s : samplers) {
    auto p = jit(s.portable, {.name = "r2p", .threads = 1});
    auto l = jit(s.libm, {.name = "r2l", .threads = 1});
    p(key);
    l(key);
    Side sp{.round = bench::batchOf([&] { p(key); })}, sl{.round = bench::batchOf([&] { l(key); })};
    interleavePair(sp, sl, reps);
    std::printf("R2   %-16s %9lld samples   portable %8.3f ms   libm ops %8.3f ms   ratio %s\n", s.name,
                static_cast<long long>(s.n), bench::median(sp), bench::median(sl), bench::ratioText(bench::ratioOf(sp, sl)).c_str());
  }
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 21;
  if (argc > 2 && std::string(argv[2]) == "random") { // only the random-number section
    randomSection(reps);
    return 0;
  }
  if (argc > 2) gRows = argv[2];
  const int all = allThreads();
  std::printf("adjit benchmarks (%d rounds; ratio = adjit / hand-written baseline; every section's absolute times "
              "with its phase probe, the FMA peak measured in the same minutes)\n", reps);
  // Both sides must target the same instructions: the baselines are built
  // for ADJIT_BASELINE_MARCH, adjit compiles for ADJIT_CPU (else the host).
  const char* cpu = std::getenv("ADJIT_CPU");
  const std::string march = ADJIT_BASELINE_MARCH;
  std::printf("targets: baselines and probe -march=%s, adjit %s%s\n", march.c_str(), cpu && *cpu ? "ADJIT_CPU=" : "the host",
              cpu && *cpu ? cpu : "");
  if (march != "native" && (!cpu || march != cpu))
    std::printf("warning: the baselines are built for %s but ADJIT_CPU is %s: run with ADJIT_CPU=%s to compare like "
                "with like\n", march.c_str(), cpu && *cpu ? cpu : "unset", march.c_str());
  printProbe();
  if (wanted("B0")) { // B0: call overhead of a jitted scalar function
    auto f = jit([](Tensor x) { return x * 2.0f + 1.0f; });
    double c = cold(f, 1.0f);
    // The fastest of 7 batches: a call's cost, not the other processes'.
    const int n = 200000;
    float acc = 0;
    double ns = 1e300;
    for (int batch = 0; batch < 7; ++batch) {
      auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) acc += f(static_cast<float>(i)).item<float>();
      ns = std::min(ns, ms(Clock::now() - t0) * 1e6 / n);
    }
    std::printf("B0   adjit %9.1f ns per call, fastest of 7 batches (target <= 50 ns)   cold compile %7.1f ms   (checksum %.3g)\n",
                ns, c, acc);
  }
  handWrittenSection(reps, all);
  if (!gRows.empty()) return 0;
  forwardSection(reps);
  odeSection(reps);
  randomSection(reps);
  return 0;
}
