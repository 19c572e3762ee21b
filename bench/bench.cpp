// bench/bench.cpp — adjit's compiled code next to hand-written C++ baselines,
// measured in the same process. Prints times, the ratio adjit/baseline, and
// the cold compile time (first call: trace + compile + run). Not a test.
#include <adjit/adjit.h>

#include <omp.h>

#include <cmath>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <cstdlib>
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
using Clock = std::chrono::steady_clock;

static double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

/// Median time of `reps` runs of fn, in ms.
static double timeIt(const std::function<void()>& fn, int reps) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    fn();
    t.push_back(ms(Clock::now() - t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

static std::vector<float> randomVector(std::size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

static void reportGrad(const char* name, double cold, double adjitMs, double baseMs, double fwdMs, double maxErr) {
  std::printf("%-4s adjit %9.3f ms   baseline %9.3f ms   ratio %5.2fx   vs own forward %5.2fx   cold compile %7.1f ms   (max rel. diff %.1e)\n",
              name, adjitMs, baseMs, adjitMs / baseMs, adjitMs / fwdMs, cold, maxErr);
}

/// Largest relative difference between two float buffers.
static double maxRelDiff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]) / std::max(1.0, std::fabs(double(b[i]))));
  return m;
}

static void report(const char* name, double cold, double adjitMs, double baseMs, float got, float want) {
  std::printf("%-4s adjit %9.3f ms   baseline %9.3f ms   ratio %5.2fx   cold compile %7.1f ms   (result %.6g vs %.6g)\n",
              name, adjitMs, baseMs, adjitMs / baseMs, cold, got, want);
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

/// Runs part(t, begin, end) for the T ranges of [0, n) on T OpenMP threads:
/// how an expert threads the hand-written baselines.
template <class F> static void ompRanges(int threads, int64_t n, F&& part) {
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    part(t, n * t / T, n * (t + 1) / T);
  }
}

/// The same programs with one thread and with all (JitOptions::threads): the
/// speedup, and whether the results are bitwise equal (they must be). Next to
/// it, the hand-written baselines threaded with OpenMP over row ranges, timed
/// right after: what this machine gives two threads on the same work at about
/// the same moment (a shared VM's second core varies by the minute).
static void threadsSection(int reps, const Array& x) {
  auto b1 = [](Tensor x) { return sum(log1p(exp(x))); };
  auto b2 = [](Tensor x, Tensor a, Tensor b) { return sum(tanh(a * x + b) * exp(-x * x) + sqrt(x * x + 1.0f)); };
  auto b3 = [](Tensor x) { return sum(logsumexp(x, {1})); };
  auto b4 = [](Tensor x, Tensor w1, Tensor w2) {
    Tensor o = matmul(tanh(matmul(x, w1)), w2);
    return 0.5f * sum(o * o);
  };
  const Array a(0.5f), b(0.25f);
  const Array m(randomVector(1000 * 1000, -5, 5, 2), {1000, 1000});
  const int64_t M = 256, K = 512, N = 512, n = x.size();
  const Array X(randomVector(M * K, -1, 1, 3), {M, K}), W1(randomVector(K * N, -0.05f, 0.05f, 4), {K, N}),
      W2(randomVector(N * N, -0.05f, 0.05f, 5), {N, N});
  const char* env = std::getenv("ADJIT_NUM_THREADS");
  const int all = env && std::atoi(env) > 0 ? std::atoi(env) : static_cast<int>(std::thread::hardware_concurrency());
  std::printf("\nthreads (JitOptions::threads; ADJIT_NUM_THREADS sets the default): 1 thread vs all; the hand-written "
              "baseline threaded with OpenMP alike\n");
  // Per-thread outputs of the baselines (partial sums, gradients of shared weights).
  std::vector<float> out(static_cast<std::size_t>(std::max(n, M * N))), out2(out.size()), out3(out.size());
  std::vector<std::vector<float>> dw1(static_cast<std::size_t>(all), std::vector<float>(K * N)),
      dw2(static_cast<std::size_t>(all), std::vector<float>(N * N));
  std::vector<float> sums(static_cast<std::size_t>(all) * 3);
  const float* xs = x.data<float>();
  auto row = [&](const char* name, const std::function<void(int)>& baseline, auto fn, const auto&... args) {
    auto one = jit(fn, {.threads = 1});
    auto many = jit(fn);
    one(args...);
    many(args...);
    one.wait_optimized();
    many.wait_optimized();
    baseline(1);
    baseline(all);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // One thread and all alternating, so that the machine's slow drifts hit
    // both alike, in batches of three calls of which the last two are timed:
    // what a program calling one of them again and again sees. (Single calls
    // in turn timed each on data the other had just written from other
    // cores: in this VM's slow phases B4's one-thread calls took 1.33 ms
    // after a two-thread call, against 1.22 ms after one of their own.)
    // Adjit's runs, then the baseline's. Not all four in turn:
    // an idle pool thread spins a while before it sleeps (adjit's and
    // OpenMP's alike), and a spinning thread of one runtime takes the core
    // the other's thread needs (both fell to 1.0x so).
    std::vector<double> a, b, c, d;
    auto alternate = [&](std::vector<double>& x, const auto& first, std::vector<double>& y, const auto& second) {
      auto batch = [](std::vector<double>& times, const auto& fn) {
        for (int call = 0; call < 3; ++call) {
          const auto t0 = Clock::now();
          fn();
          if (call > 0) times.push_back(ms(Clock::now() - t0));
        }
      };
      for (int i = 0; i < reps; ++i) {
        batch(x, first);
        batch(y, second);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20)); // the pool threads go to sleep
    };
    alternate(a, [&] { one(args...); }, b, [&] { many(args...); });
    alternate(c, [&] { baseline(1); }, d, [&] { baseline(all); });
    auto median = [](std::vector<double>& v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double t1 = median(a), tn = median(b), b1 = median(c), bn = median(d);
    auto bytes = [](const auto& r) {
      std::string s;
      auto add = [&](const Array& a) { s.append(static_cast<const char*>(a.raw()), a.bytes()); };
      if constexpr (std::is_same_v<std::decay_t<decltype(r)>, Array>) add(r);
      else {
        add(r.first);
        std::apply([&](const auto&... g) { (add(g), ...); }, [&] {
          if constexpr (std::is_same_v<std::decay_t<decltype(r.second)>, Array>) return std::tuple<Array>{r.second};
          else return r.second;
        }());
      }
      return s;
    };
    std::printf("%-4s 1 thread %9.3f ms   %d threads %9.3f ms   speedup %5.2fx   baseline %5.2fx (%.3f / %.3f ms)   (results %s)\n",
                name, t1, all, tn, t1 / tn, b1 / bn, b1, bn, bytes(one(args...)) == bytes(many(args...)) ? "bitwise equal" : "DIFFER");
  };
  auto elementwise = [&](auto part) { return [&, part](int T) { ompRanges(T, n, part); }; };
  row("B1", elementwise([&](int t, int64_t i, int64_t e) { sums[t] = base_b1(xs + i, e - i); }), b1, x);
  row("B2", elementwise([&](int t, int64_t i, int64_t e) { sums[t] = base_b2(xs + i, 0.5f, 0.25f, e - i); }), b2, x, a, b);
  row("B3", [&](int T) { ompRanges(T, 1000, [&](int t, int64_t r, int64_t e) { sums[t] = base_b3(m.data<float>() + r * 1000, e - r, 1000); }); },
      b3, m);
  row("B4", [&](int T) {
        ompRanges(T, M, [&](int t, int64_t r, int64_t e) {
          sums[t] = base_b4(X.data<float>() + r * K, W1.data<float>(), W2.data<float>(), out.data() + r * N, out2.data() + r * N, e - r, K, N);
        });
      }, b4, X, W1, W2);
  row("G1", elementwise([&](int t, int64_t i, int64_t e) { sums[t] = base_g1(xs + i, out.data() + i, e - i); }), value_and_grad(b1), x);
  row("G2", elementwise([&](int t, int64_t i, int64_t e) {
        sums[t] = base_g2(xs + i, 0.5f, 0.25f, out.data() + i, &sums[all + t], &sums[2 * all + t], e - i);
      }), value_and_grad(b2, argnums<0, 1, 2>), x, a, b);
  row("G3", [&](int T) {
        ompRanges(T, 1000, [&](int t, int64_t r, int64_t e) {
          sums[t] = base_g3(m.data<float>() + r * 1000, out.data() + r * 1000, e - r, 1000);
        });
      }, value_and_grad(b3), m);
  // G4: each thread's rows give partial weight gradients; the sum of the partials is threaded too.
  row("G4", [&](int T) {
        ompRanges(T, M, [&](int t, int64_t r, int64_t e) {
          sums[t] = base_g4(X.data<float>() + r * K, W1.data<float>(), W2.data<float>(), out.data() + r * N, out2.data() + r * N,
                            out3.data() + r * N, dw1[t].data(), dw2[t].data(), e - r, K, N);
        });
        for (auto* dw : {&dw1, &dw2})
          ompRanges(T, static_cast<int64_t>((*dw)[0].size()), [&](int, int64_t i, int64_t e) {
            for (int u = 1; u < T; ++u)
              for (int64_t j = i; j < e; ++j) (*dw)[0][j] += (*dw)[u][j];
          });
      }, value_and_grad(b4, argnums<1, 2>), X, W1, W2);
}

/// examples/ode: RK4 over 1,000 steps of a damped pendulum with `scan`, next
/// to a hand-written RK4 and a hand-written discrete adjoint.
/// Forward mode: jvp of B1-B3 against their forward (target <= 1.5x), a
/// Hessian-vector product of G4's loss against its forward (target <= 4x),
/// and the Jacobian of R^16 -> R^1000 by jacfwd against jacrev.
static void forwardSection(int reps, const Array& x, const double* fwd) {
  std::printf("\nforward mode (ratio = adjit's jvp / adjit's forward)\n");
  const int64_t n = x.size();
  const Array dx(randomVector(static_cast<std::size_t>(n), -1, 1, 11));
  auto row = [&](const char* name, double c, double a, double forward) {
    std::printf("%-4s jvp  %9.3f ms   forward %9.3f ms   ratio %5.2fx (target <= 1.5)   cold %7.1f ms\n", name, a, forward,
                a / forward, c);
  };
  { // F1
    auto f = [](Tensor x) { return sum(log1p(exp(x))); };
    auto j = jit([f](Tensor x, Tensor dx) { return jvp(f, std::tuple{x}, std::tuple{dx}).second; }, {.name = "f1"});
    const double c = cold(j, x, dx);
    row("F1", c, timeIt([&] { j(x, dx); }, reps), fwd[1]);
  }
  { // F2
    auto f = [](Tensor x) { return sum(tanh(0.5f * x + 0.25f) * exp(-x * x) + sqrt(x * x + 1.0f)); };
    auto j = jit([f](Tensor x, Tensor dx) { return jvp(f, std::tuple{x}, std::tuple{dx}).second; }, {.name = "f2"});
    const double c = cold(j, x, dx);
    row("F2", c, timeIt([&] { j(x, dx); }, reps), fwd[2]);
  }
  { // F3
    Array m(randomVector(1000 * 1000, -5, 5, 2), {1000, 1000}), dm(randomVector(1000 * 1000, -1, 1, 12), {1000, 1000});
    auto f = [](Tensor x) { return sum(logsumexp(x, {1})); };
    auto j = jit([f](Tensor x, Tensor dx) { return jvp(f, std::tuple{x}, std::tuple{dx}).second; }, {.name = "f3"});
    const double c = cold(j, m, dm);
    row("F3", c, timeIt([&] { j(m, dm); }, reps), fwd[3]);
  }
  { // H4: the Hessian of G4's loss in W1 times a direction (forward over reverse)
    const int64_t M = 256, K = 512, N = 512;
    Array X(randomVector(M * K, -1, 1, 3), {M, K});
    Array W1(randomVector(K * N, -0.05f, 0.05f, 4), {K, N}), V(randomVector(K * N, -1, 1, 13), {K, N});
    Array W2(randomVector(N * N, -0.05f, 0.05f, 5), {N, N});
    auto loss = [](Tensor x, Tensor w1, Tensor w2) {
      Tensor o = matmul(tanh(matmul(x, w1)), w2);
      return 0.5f * sum(o * o);
    };
    auto h = jit([loss](Tensor x, Tensor w1, Tensor w2, Tensor v) {
      return hvp([&](Tensor w) { return loss(x, w, w2); }).traced(w1, v);
    }, {.name = "h4"});
    const double c = cold(h, X, W1, W2, V);
    const double a = timeIt([&] { h(X, W1, W2, V); }, std::max(3, reps / 3));
    std::printf("H4   hvp  %9.3f ms   forward %9.3f ms   ratio %5.2fx (target <= 4)     cold %7.1f ms\n", a, fwd[4], a / fwd[4], c);
  }
  { // J: jacfwd vs jacrev of R^16 -> R^1000
    Array A(randomVector(1000 * 16, -1, 1, 14), {1000, 16}), x16(randomVector(16, -1, 1, 15), {16});
    auto g = [](Tensor a, Tensor x) { return tanh(reshape(matmul(a, reshape(x, {16, 1})), {1000})); };
    auto jf = jacfwd(g, argnums<1>);
    auto jr = jacrev(g, argnums<1>);
    const double cf = cold(jf, A, x16), cr = cold(jr, A, x16);
    const double a = timeIt([&] { jf(A, x16); }, reps), b = timeIt([&] { jr(A, x16); }, reps);
    std::printf("J    jacfwd %7.3f ms   jacrev %9.3f ms   jacrev/jacfwd %5.2fx (R^16 -> R^1000: 16 tangents vs 1,000 cotangents, each batched)   cold %.1f / %.1f ms\n",
                a, b, b / a, cf, cr);
  }
}

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
  std::printf("\nODE (examples/ode: RK4, %lld steps, scan; ratio = adjit / hand-written RK4 and discrete adjoint)\n",
              static_cast<long long>(kSteps));
  auto f = jit(angle, {.name = "ode"});
  const double cf = cold(f, s0, p);
  double got = 0, want = 0;
  const double a = timeIt([&] { got = f(s0, p).item<double>(); }, reps);
  const double b = timeIt([&] { want = base_ode(s0.data<double>(), p.data<double>(), kSteps, kH, states.data()); }, reps);
  std::printf("ODE  forward         adjit %8.3f ms   baseline %8.3f ms   ratio %5.2fx (target <= 1.25x)   cold compile %6.1f ms   (%.9f vs %.9f)\n",
              a, b, a / b, cf, got, want);
  auto g = value_and_grad(angle, argnums<0, 1>);
  const double cg = cold(g, s0, p);
  const double ga = timeIt([&] { g(s0, p); }, reps);
  const double gb = timeIt([&] { base_ode_adjoint(s0.data<double>(), p.data<double>(), kSteps, kH, states.data(), ds0, dp); }, reps);
  auto r = g(s0, p);
  double err = 0;
  for (int i = 0; i < 3; ++i) err = std::max(err, std::fabs(std::get<1>(r.second).at(i) - dp[i]) / std::max(1.0, std::fabs(dp[i])));
  for (int i = 0; i < 2; ++i) err = std::max(err, std::fabs(std::get<0>(r.second).at(i) - ds0[i]) / std::max(1.0, std::fabs(ds0[i])));
  auto [y, back] = vjp(angle, s0, p);
  std::printf("ODE  value+gradient  adjit %8.3f ms   baseline %8.3f ms   ratio %5.2fx (target <= 1.5x)    cold compile %6.1f ms   "
              "(max rel. diff %.1e; residuals %zu bytes, baseline %zu)\n",
              ga, gb, ga / gb, cg, err, back.residual_bytes(), states.size() * sizeof(double));
  for (Checkpoint cp : {every(8), every(32), every(128), binomial(4), binomial(8), binomial(16)}) {
    auto gk = value_and_grad(angleWith(cp), argnums<0, 1>);
    const double ck = cold(gk, s0, p);
    const double t = timeIt([&] { gk(s0, p); }, reps);
    auto [yk, backk] = vjp(angleWith(cp), s0, p);
    std::printf("ODE  value+gradient, checkpoint %-12s adjit %8.3f ms   ratio %5.2fx   cold compile %6.1f ms   residuals %zu bytes\n",
                (cp.str() + ":").c_str(), t, t / gb, ck, backk.residual_bytes());
  }
}

/// R1: 10^7 standard normal f32 samples (adjit::random::normal) on one thread
/// against the hand-written Threefry + erf_inv loop of baselines.cpp, runs
/// interleaved so both see the same machine load.
static void randomSection(int reps) {
  const int64_t n = 10000000;
  std::printf("\nrandom numbers (R1: %lld normal f32 samples, one thread; ratio = adjit / hand-written Threefry loop)\n",
              static_cast<long long>(n));
  auto f = jit([n](Tensor key) { return random::normal(key, {n}); }, {.name = "r1", .threads = 1});
  const Array key = random::key_data(0);
  double c = cold(f, key);
  std::vector<float> base(static_cast<std::size_t>(n));
  Array got;
  std::vector<double> ta, tb;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    got = f(key);
    ta.push_back(ms(Clock::now() - t0));
    t0 = Clock::now();
    base_normal(0, 0, base.data(), n);
    tb.push_back(ms(Clock::now() - t0));
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  const double a = ta[ta.size() / 2], b = tb[tb.size() / 2];
  std::printf("R1   adjit %9.3f ms (%.2f GB/s)   baseline %9.3f ms (%.2f GB/s)   ratio %5.2fx   cold compile %7.1f ms   "
              "(max rel. diff %.1e)\n",
              a, 4e-6 * double(n) / a, b, 4e-6 * double(n) / b, a / b, c, maxRelDiff(got.data<float>(), base.data(), 1000));
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 21;
  if (argc > 2 && std::string(argv[2]) == "random") { // only the random-number section
    randomSection(reps);
    return 0;
  }
  std::printf("adjit benchmarks (median of %d runs; ratio = adjit / hand-written baseline)\n", reps);

  { // B0: call overhead of a jitted scalar function
    auto f = jit([](Tensor x) { return x * 2.0f + 1.0f; });
    double c = cold(f, 1.0f);
    const int n = 1000000;
    float acc = 0;
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) acc += f(static_cast<float>(i)).item<float>();
    double ns = ms(Clock::now() - t0) * 1e6 / n;
    std::printf("B0   adjit %9.1f ns per call (target < 100 ns)   cold compile %7.1f ms   (checksum %.3g)\n", ns, c, acc);
  }

  const int64_t n = 1000000;
  double fwd[5] = {0, 0, 0, 0, 0}; // adjit's forward times, for gradient / forward ratios
  Array x(randomVector(n, -3, 3, 1));
  { // B1
    auto f = jit([](Tensor x) { return sum(log1p(exp(x))); }, {.name = "b1"});
    double c = cold(f, x);
    float got = 0, want = 0;
    double a = timeIt([&] { got = f(x).item<float>(); }, reps);
    double b = timeIt([&] { want = base_b1(x.data<float>(), n); }, reps);
    report("B1", c, a, b, got, want);
    fwd[1] = a;
  }
  { // B2
    auto f = jit([](Tensor x, Tensor a, Tensor b) { return sum(tanh(a * x + b) * exp(-x * x) + sqrt(x * x + 1.0f)); },
                 {.name = "b2"});
    double c = cold(f, x, 0.5f, 0.25f);
    float got = 0, want = 0;
    double a = timeIt([&] { got = f(x, 0.5f, 0.25f).item<float>(); }, reps);
    double b = timeIt([&] { want = base_b2(x.data<float>(), 0.5f, 0.25f, n); }, reps);
    report("B2", c, a, b, got, want);
    fwd[2] = a;
  }
  { // B3
    Array m(randomVector(1000 * 1000, -5, 5, 2), {1000, 1000});
    auto f = jit([](Tensor x) { return sum(logsumexp(x, {1})); }, {.name = "b3"});
    double c = cold(f, m);
    float got = 0, want = 0;
    double a = timeIt([&] { got = f(m).item<float>(); }, reps);
    double b = timeIt([&] { want = base_b3(m.data<float>(), 1000, 1000); }, reps);
    report("B3", c, a, b, got, want);
    fwd[3] = a;
  }
  { // B4
    const int64_t M = 256, K = 512, N = 512;
    Array X(randomVector(M * K, -1, 1, 3), {M, K});
    Array W1(randomVector(K * N, -0.05f, 0.05f, 4), {K, N});
    Array W2(randomVector(N * N, -0.05f, 0.05f, 5), {N, N});
    auto f = jit([](Tensor x, Tensor w1, Tensor w2) {
      Tensor o = matmul(tanh(matmul(x, w1)), w2);
      return 0.5f * sum(o * o);
    }, {.name = "b4"});
    double c = cold(f, X, W1, W2);
    std::vector<float> h(M * N), o(M * N);
    float got = 0, want = 0;
    double a = timeIt([&] { got = f(X, W1, W2).item<float>(); }, std::max(3, reps / 3));
    double b = timeIt([&] { want = base_b4(X.data<float>(), W1.data<float>(), W2.data<float>(), h.data(), o.data(), M, K, N); },
                      std::max(3, reps / 3));
    report("B4", c, a, b, got, want);
    fwd[4] = a;
  }

  std::printf("\ngradients (value and gradient; ratio = adjit / hand-written analytic gradient)\n");
  { // G1
    auto g = value_and_grad([](Tensor x) { return sum(log1p(exp(x))); });
    double c = cold(g, x);
    std::vector<float> gb(n);
    double a = timeIt([&] { g(x); }, reps);
    double b = timeIt([&] { base_g1(x.data<float>(), gb.data(), n); }, reps);
    Array gx = g(x).second;
    reportGrad("G1", c, a, b, fwd[1], maxRelDiff(gx.data<float>(), gb.data(), n));
  }
  { // G2
    auto g = value_and_grad([](Tensor x, Tensor a, Tensor b) { return sum(tanh(a * x + b) * exp(-x * x) + sqrt(x * x + 1.0f)); },
                            argnums<0, 1, 2>);
    double c = cold(g, x, 0.5f, 0.25f);
    std::vector<float> gx(n);
    float ga = 0, gb = 0;
    double a = timeIt([&] { g(x, 0.5f, 0.25f); }, reps);
    double b = timeIt([&] { base_g2(x.data<float>(), 0.5f, 0.25f, gx.data(), &ga, &gb, n); }, reps);
    auto r = g(x, 0.5f, 0.25f);
    double err = std::max({maxRelDiff(std::get<0>(r.second).data<float>(), gx.data(), n),
                           std::fabs(std::get<1>(r.second).item<double>() - ga) / std::max(1.0, std::fabs(double(ga))),
                           std::fabs(std::get<2>(r.second).item<double>() - gb) / std::max(1.0, std::fabs(double(gb)))});
    reportGrad("G2", c, a, b, fwd[2], err);
  }
  { // G3
    Array m(randomVector(1000 * 1000, -5, 5, 2), {1000, 1000});
    auto g = value_and_grad([](Tensor x) { return sum(logsumexp(x, {1})); });
    double c = cold(g, m);
    std::vector<float> gb(1000 * 1000);
    double a = timeIt([&] { g(m); }, reps);
    double b = timeIt([&] { base_g3(m.data<float>(), gb.data(), 1000, 1000); }, reps);
    Array gx = g(m).second;
    reportGrad("G3", c, a, b, fwd[3], maxRelDiff(gx.data<float>(), gb.data(), 1000 * 1000));
  }
  { // G4
    const int64_t M = 256, K = 512, N = 512;
    Array X(randomVector(M * K, -1, 1, 3), {M, K});
    Array W1(randomVector(K * N, -0.05f, 0.05f, 4), {K, N});
    Array W2(randomVector(N * N, -0.05f, 0.05f, 5), {N, N});
    auto g = value_and_grad([](Tensor x, Tensor w1, Tensor w2) {
      Tensor o = matmul(tanh(matmul(x, w1)), w2);
      return 0.5f * sum(o * o);
    }, argnums<1, 2>);
    double c = cold(g, X, W1, W2);
    std::vector<float> h(M * N), o(M * N), dh(M * N), dw1(K * N), dw2(N * N);
    double a = timeIt([&] { g(X, W1, W2); }, std::max(3, reps / 3));
    double b = timeIt([&] { base_g4(X.data<float>(), W1.data<float>(), W2.data<float>(), h.data(), o.data(), dh.data(),
                                    dw1.data(), dw2.data(), M, K, N); }, std::max(3, reps / 3));
    auto r = g(X, W1, W2);
    double err = std::max(maxRelDiff(std::get<0>(r.second).data<float>(), dw1.data(), K * N),
                          maxRelDiff(std::get<1>(r.second).data<float>(), dw2.data(), N * N));
    reportGrad("G4", c, a, b, fwd[4], err);
  }
  forwardSection(reps, x, fwd);
  odeSection(reps);
  threadsSection(reps, x);
  randomSection(reps);
  return 0;
}
