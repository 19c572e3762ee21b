// bench/compile_bench.cpp — compile time: for each program, the first call's
// trace, IR passes, LLVM and total time, and time per op; then run time of the
// GMM log-likelihood in einsum and matmul form (ADBench inputs), the tiers
// (JitOptions::tiers) of B1-B3, G1-G3, an MLP and the GMM gradient, and a disk
// cache hit in a fresh process. Prints, asserts nothing.
//   adjit_compile_bench [--quick]     (--quick skips the 100,000-op chains)
//   adjit_compile_bench --ba          (only the BA full Jacobian)
//   adjit_compile_bench --only TEXT   (only the compile-time programs whose name contains TEXT)
//   adjit_compile_bench --tiers [--only TEXT]  (only the tiers section: JitOptions::tiers' first
//                                     calls, time until the optimised tier is live, run time of each tier)
#include <adjit/adjit.h>

#include "UnrolledLstm.h"
#include "jit/Background.h" // holds the optimised tier back to time the first tier

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include <unistd.h>

using namespace adjit;
using Clock = std::chrono::steady_clock;

namespace {

double msSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

/// Sums of what the compilations of one first call cost.
struct Costs {
  double trace = 0, key = 0, passes = 0, llvm = 0, load = 0;
  int kernels = 0, diskHits = 0;
};
Costs costs;
/// `--only TEXT`: run just the programs whose name contains TEXT (profiling).
const char* only = nullptr;

/// Times the first call of `first` and prints its breakdown; `ops` is the
/// program's size in traced ops. Returns the total (0 when skipped).
double report(const char* name, long ops, const std::function<void()>& first) {
  if (only && !std::strstr(name, only)) return 0;
  costs = {};
  auto t0 = Clock::now();
  first();
  const double total = msSince(t0);
  char perOp[32] = "";
  if (ops > 0) std::snprintf(perOp, sizeof perOp, "%6.1f us/op", 1000 * total / double(ops));
  std::printf("%-34s %8ld ops  trace %8.1f  passes %8.1f  llvm %8.1f  total %8.1f ms  %s%s\n", name, ops, costs.trace,
              costs.passes, costs.llvm, total, perOp, costs.diskHits ? "  (disk hit)" : "");
  std::fflush(stdout);
  return total;
}

Array vec(int64_t n, float scale = 1) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = scale * std::sin(0.37f * float(i) + 0.1f);
  return Array(v);
}

auto chain(int n) {
  return [n](Tensor x) {
    for (int i = 0; i < n; ++i) x = i % 3 == 0 ? sin(x) : i % 3 == 1 ? x * 1.01f : x + 0.1f;
    return sum(x);
  };
}

auto swish(int n) {
  return [n](Tensor x) {
    for (int i = 0; i < n; ++i) x = x * sigmoid(x);
    return sum(x);
  };
}

// ---- BA reprojection residuals and their full Jacobian (ADBench) ------------

/// ADBench's BA residuals for p observations, observation i seeing camera i
/// and point i: 2p reprojection errors w_i (proj(cam_i, X_i) - m_i), then p
/// weight errors 1 - w_i^2. cams [p, 11] (rotation, centre, f, x0, k), X [p, 3].
Tensor baResiduals(Tensor cams, Tensor X, Tensor w, const Array& feats) {
  auto col = [&](Tensor t, int64_t j) { return take(t, constant(Array(int32_t(j))), 1); };
  Tensor r0 = col(cams, 0), r1 = col(cams, 1), r2 = col(cams, 2);
  Tensor y0 = col(X, 0) - col(cams, 3), y1 = col(X, 1) - col(cams, 4), y2 = col(X, 2) - col(cams, 5);
  // Rodrigues: y cos t + (k x y) sin t + k (k . y)(1 - cos t), k = r / t.
  Tensor t = sqrt(r0 * r0 + r1 * r1 + r2 * r2), c = cos(t), sn = sin(t);
  Tensor k0 = r0 / t, k1 = r1 / t, k2 = r2 / t, kd = (k0 * y0 + k1 * y1 + k2 * y2) * (1.0 - c);
  Tensor z0 = y0 * c + (k1 * y2 - k2 * y1) * sn + k0 * kd;
  Tensor z1 = y1 * c + (k2 * y0 - k0 * y2) * sn + k1 * kd;
  Tensor z2 = y2 * c + (k0 * y1 - k1 * y0) * sn + k2 * kd;
  Tensor p0 = -z0 / z2, p1 = -z1 / z2, rsq = p0 * p0 + p1 * p1;
  Tensor distort = 1.0 + col(cams, 9) * rsq + col(cams, 10) * rsq * rsq;
  Tensor e0 = w * (col(cams, 6) * p0 * distort + col(cams, 7) - take(constant(feats), constant(Array(int32_t(0))), 1));
  Tensor e1 = w * (col(cams, 6) * p1 * distort + col(cams, 8) - take(constant(feats), constant(Array(int32_t(1))), 1));
  return concatenate({e0, e1, 1.0 - w * w});
}

/// The full Jacobian of the BA residuals by one VJP per residual, each seeded
/// with a one-hot constant: the program the issue saw spend 245 s in LLVM at
/// p = 10 when folding copied such constants into every use.
void baJacobianBench(const std::string& data) {
  const std::string path = data + "/ba/ba1_n49_m7776_p31843.txt";
  std::ifstream in(path);
  if (!in) {
    std::printf("BA: cannot read %s (skipped)\n", path.c_str());
    return;
  }
  long n = 0, m = 0, p = 0;
  in >> n >> m >> p;
  std::vector<double> cam(11), x(3), feat(2);
  double w0 = 0;
  for (double& v : cam) in >> v;
  for (double& v : x) in >> v;
  in >> w0 >> feat[0] >> feat[1];
  for (int obs : {10, 33}) {
    std::vector<double> cams, xs, ws, feats;
    for (int i = 0; i < obs; ++i) { // ADBench replicates one sample; vary it a little
      for (double v : cam) cams.push_back(v * (1 + 0.01 * std::sin(i + v)));
      for (double v : x) xs.push_back(v * (1 + 0.01 * std::cos(i + v)));
      ws.push_back(w0);
      feats.insert(feats.end(), feat.begin(), feat.end());
    }
    const Array feats2(feats, {obs, 2});
    auto jacobian = [obs, feats2](Tensor cams, Tensor X, Tensor w) {
      auto [r, back] = vjp([&](Tensor c, Tensor x, Tensor ww) { return baResiduals(c, x, ww, feats2); }, cams, X, w);
      std::vector<Tensor> rows;
      for (int k = 0; k < 3 * obs; ++k) {
        std::vector<double> onehot(static_cast<std::size_t>(3 * obs), 0.0);
        onehot[static_cast<std::size_t>(k)] = 1;
        std::vector<Tensor> g = back(constant(Array(onehot)));
        rows.push_back(concatenate({reshape(g[0], {-1}), reshape(g[1], {-1}), g[2]}));
      }
      return std::make_pair(r, stack(rows));
    };
    char name[64];
    std::snprintf(name, sizeof name, "BA full Jacobian, p = %d", obs);
    auto f = jit(jacobian);
    report(name, 0, [&] { f(Array(cams, {obs, 11}), Array(xs, {obs, 3}), Array(ws)); });
  }
}

// ---- GMM log-likelihood (ADBench inputs) ------------------------------------

struct Gmm {
  int d = 0, k = 0, n = 0;
  Array alpha, mu, q, l, x; // f64
  std::vector<int32_t> triIndex; // Q_k[r][c] from [exp(q_k), l_k, 0] (host-made, column order)
};

bool readGmm(const std::string& path, int points, Gmm& g) {
  std::ifstream in(path);
  if (!in) return false;
  in >> g.d >> g.k >> g.n;
  const int d = g.d, k = g.k, nl = d * (d - 1) / 2;
  std::vector<double> alpha(static_cast<std::size_t>(k)), mu(static_cast<std::size_t>(k * d)),
      q(static_cast<std::size_t>(k * d)), l(static_cast<std::size_t>(k * nl)), x;
  for (double& a : alpha) in >> a;
  for (double& m : mu) in >> m;
  for (int c = 0; c < k; ++c) {
    for (int j = 0; j < d; ++j) in >> q[static_cast<std::size_t>(c * d + j)];
    for (int j = 0; j < nl; ++j) in >> l[static_cast<std::size_t>(c * nl + j)];
  }
  // ADBench's files hold one point repeated after the first line: read it and
  // make N distinct points from it deterministically.
  std::vector<double> first(static_cast<std::size_t>(d));
  for (double& v : first) in >> v;
  g.n = points;
  for (int i = 0; i < points; ++i)
    for (int j = 0; j < d; ++j) x.push_back(first[static_cast<std::size_t>(j)] + 0.5 * std::sin(0.7 * i + 1.3 * j));
  g.alpha = Array(alpha, {k});
  g.mu = Array(mu, {k, d});
  g.q = Array(q, {k, d});
  g.l = Array(l, {k, nl});
  g.x = Array(x, {points, d});
  // Index into [exp(q_k) (d), l_k (nl), 0]: diagonal, strict lower column by column, zero above.
  g.triIndex.assign(static_cast<std::size_t>(d * d), d + nl);
  int idx = 0;
  for (int c = 0; c < d; ++c) {
    g.triIndex[static_cast<std::size_t>(c * d + c)] = c;
    for (int r = c + 1; r < d; ++r) g.triIndex[static_cast<std::size_t>(r * d + c)] = d + idx++;
  }
  return true;
}

/// Q_k as [K, D, D] from q and l.
Tensor buildQ(const Gmm& g, Tensor q, Tensor l) {
  Tensor packed = concatenate({exp(q), l, zeros_like(q)}, 1);
  Tensor idx = constant(Array(g.triIndex, {g.d * g.d}));
  return reshape(take(packed, idx, 1), {g.k, g.d, g.d});
}

/// LL without its data-only constant: sum_i lse_k(beta_ik) - N lse(alpha).
Tensor logLikelihood(const Gmm& g, Tensor alpha, Tensor mu, Tensor q, Tensor l, Tensor x, bool einsumForm) {
  Tensor Q = buildQ(g, q, l);                                            // [K, D, D]
  Tensor diff = reshape(x, {g.n, 1, g.d}) - reshape(mu, {1, g.k, g.d}); // [N, K, D]
  Tensor qd;                                                             // [N, K, D]: Q_k diff_ik
  if (einsumForm) {
    qd = sum(reshape(Q, {1, g.k, g.d, g.d}) * reshape(diff, {g.n, g.k, 1, g.d}), {3});
  } else {
    Tensor dk = transpose(diff, {1, 2, 0}); // [K, D, N]
    qd = transpose(matmul(Q, dk), {2, 0, 1});
  }
  Tensor beta = reshape(alpha + sum(q, {1}), {1, g.k}) - 0.5 * sum(qd * qd, {2}); // [N, K]
  return sum(logsumexp(beta, {1})) - double(g.n) * logsumexp(alpha, {0});
}

void gmmBench(const std::string& data) {
  for (int d : {10, 20}) {
    Gmm g;
    const std::string path = data + "/gmm/1k/gmm_d" + std::to_string(d) + "_K25.txt";
    if (!readGmm(path, 1000, g)) {
      std::printf("GMM: cannot read %s (skipped)\n", path.c_str());
      continue;
    }
    double times[2][2] = {};
    for (int form = 0; form < 2; ++form) {
      const bool einsumForm = form == 0;
      auto f = [&g, einsumForm](Tensor alpha, Tensor mu, Tensor q, Tensor l, Tensor x) {
        return logLikelihood(g, alpha, mu, q, l, x, einsumForm);
      };
      auto fwd = jit(f);
      auto vg = value_and_grad(f, argnums<0, 1, 2, 3>);
      char name[64];
      std::snprintf(name, sizeof name, "gmm D=%d K=25 %s forward", d, einsumForm ? "einsum" : "matmul");
      report(name, 0, [&] { fwd(g.alpha, g.mu, g.q, g.l, g.x); });
      std::snprintf(name, sizeof name, "gmm D=%d K=25 %s gradient", d, einsumForm ? "einsum" : "matmul");
      report(name, 0, [&] { vg(g.alpha, g.mu, g.q, g.l, g.x); });
      fwd.wait_optimized(); // the run times below are the optimised code's
      vg.wait_optimized();
      auto median = [](const std::function<void()>& fn) {
        std::vector<double> t;
        for (int i = 0; i < 9; ++i) {
          auto t0 = Clock::now();
          fn();
          t.push_back(msSince(t0));
        }
        std::sort(t.begin(), t.end());
        return t[t.size() / 2];
      };
      times[form][0] = median([&] { fwd(g.alpha, g.mu, g.q, g.l, g.x); });
      times[form][1] = median([&] { vg(g.alpha, g.mu, g.q, g.l, g.x); });
      std::printf("    value %.6f\n", fwd(g.alpha, g.mu, g.q, g.l, g.x).item<double>());
    }
    std::printf("gmm D=%d run: einsum %.3f / %.3f ms, matmul %.3f / %.3f ms (forward / value+gradient), einsum/matmul %.2fx / %.2fx\n",
                d, times[0][0], times[0][1], times[1][0], times[1][1], times[0][0] / times[1][0], times[0][1] / times[1][1]);
  }
}

// ---- tiers: first call, time until optimised, run time of each tier ---------

/// FNV-1a of every result's bytes: both tiers must print the same.
struct BytesHash {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(const Array& a) {
    const auto* p = static_cast<const unsigned char*>(a.raw());
    for (std::size_t i = 0; i < a.bytes(); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  }
  template <class T> void addAll(const T& r) {
    if constexpr (std::is_same_v<T, Array>) add(r);
    else if constexpr (requires { r.first; r.second; }) {
      addAll(r.first);
      addAll(r.second);
    } else if constexpr (requires { std::tuple_size<T>::value; }) std::apply([&](const auto&... x) { (addAll(x), ...); }, r);
    else for (const auto& x : r) addAll(x);
  }
};

std::vector<float> uniform(std::size_t n, float lo, float hi, unsigned seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = lo + (hi - lo) * float((s >> 40) & 0xFFFFFF) / float(0x1000000);
  }
  return v;
}

/// The MLP of a new user's first program: 784-128-10, tanh, softmax cross-entropy, a batch of 64.
Tensor mlpLoss(Tensor w1, Tensor b1, Tensor w2, Tensor b2, Tensor x, Tensor y) {
  Tensor h = tanh(matmul(x, w1) + b1);
  Tensor logits = matmul(h, w2) + b2;
  return sum(logsumexp(logits, {1})) - sum(logits * y);
}

/// Median time of `reps` calls of `fn`, and its results' hash.
template <class F, class... Args> std::pair<double, uint64_t> runTime(const F& fn, const Args&... args) {
  std::vector<double> t;
  BytesHash h;
  for (int i = 0; i < 15; ++i) {
    auto t0 = Clock::now();
    auto r = fn(args...);
    t.push_back(msSince(t0));
    if (i == 0) h.addAll(r);
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], h.h};
}

/// One program of the tiers section. Each jit has its own name, hence its own
/// kernel (no cache hit between them), on one thread:
///  - tiers off: the first call compiles the optimised code itself (before);
///  - tiered: the first call (tier 1), the time until the optimised tier is
///    live (wait_optimized), the optimised code's run time;
///  - tier 1 alone (the optimised tier held back): its run time.
template <class F, class... Args> void tierRow(const char* name, const F& f, const Args&... args) {
  if (only && !std::strstr(name, only)) return;
  engine::background::drain();
  auto untiered = jit(f, {.name = "untiered", .threads = 1, .tiers = false});
  auto t0 = Clock::now();
  untiered(args...);
  const double before = msSince(t0);
  auto tiered = jit(f, {.name = "tiered", .threads = 1});
  t0 = Clock::now();
  tiered(args...);
  const double first = msSince(t0);
  tiered.wait_optimized();
  const double live = msSince(t0);
  const auto [optimizedMs, optimizedHash] = runTime(tiered, args...);
  auto fast = jit(f, {.name = "fast", .threads = 1});
  double fastMs = 0;
  uint64_t fastHash = 0;
  {
    engine::background::testing::pause(true);
    std::tie(fastMs, fastHash) = runTime(fast, args...);
    engine::background::testing::pause(false);
  }
  std::printf("%-24s %8.1f ms  %8.1f ms  %8.1f ms  %9.3f ms  %9.3f ms  %5.2fx  %s\n", name, before, first, live, fastMs,
              optimizedMs, fastMs / optimizedMs, fastHash == optimizedHash ? "bitwise equal" : "DIFFER");
  std::fflush(stdout);
}

void tiersBench(const std::string& data) {
  std::printf("tiers (JitOptions::tiers), one thread: first call with tiers off, first call with tiers (tier 1), time until the\n"
              "optimised tier is live, run time of tier 1 and of the optimised code (median of 15), their ratio, results\n");
  std::printf("%-24s %11s  %11s  %11s  %12s  %12s  %6s\n", "program", "tiers off", "tier 1", "optimised", "tier 1 run", "opt. run",
              "ratio");
  const Array x(uniform(1000000, -3, 3, 1)), a(0.5f), b(0.25f);
  const Array m(uniform(1000 * 1000, -5, 5, 2), {1000, 1000});
  auto b1 = [](Tensor x) { return sum(log1p(exp(x))); };
  auto b2 = [](Tensor x, Tensor a, Tensor b) { return sum(tanh(a * x + b) * exp(-x * x) + sqrt(x * x + 1.0f)); };
  auto b3 = [](Tensor x) { return sum(logsumexp(x, {1})); };
  tierRow("B1", b1, x);
  tierRow("B2", b2, x, a, b);
  tierRow("B3", b3, m);
  tierRow("G1", [b1](Tensor x) { return value_and_grad(b1)(x); }, x);
  tierRow("G2", [b2](Tensor x, Tensor a, Tensor b) { return value_and_grad(b2, argnums<0, 1, 2>)(x, a, b); }, x, a, b);
  tierRow("G3", [b3](Tensor x) { return value_and_grad(b3)(x); }, m);
  {
    const Array w1(uniform(784 * 128, -0.05f, 0.05f, 3), {784, 128}), bb1(uniform(128, -0.1f, 0.1f, 4));
    const Array w2(uniform(128 * 10, -0.1f, 0.1f, 5), {128, 10}), bb2(uniform(10, -0.1f, 0.1f, 6));
    const Array X(uniform(64 * 784, 0, 1, 7), {64, 784});
    std::vector<float> y(64 * 10, 0.0f);
    for (int i = 0; i < 64; ++i) y[static_cast<std::size_t>(i * 10 + (i * 7) % 10)] = 1;
    const Array Y(y, {64, 10});
    tierRow("MLP 784-128-10 v&g", [](Tensor w1, Tensor b1, Tensor w2, Tensor b2, Tensor x, Tensor y) {
      return value_and_grad(mlpLoss, argnums<0, 1, 2, 3>)(w1, b1, w2, b2, x, y);
    }, w1, bb1, w2, bb2, X, Y);
  }
  for (int d : {10, 20}) {
    Gmm g;
    if (!readGmm(data + "/gmm/1k/gmm_d" + std::to_string(d) + "_K25.txt", 1000, g)) continue;
    auto f = [&g](Tensor alpha, Tensor mu, Tensor q, Tensor l, Tensor x) { return logLikelihood(g, alpha, mu, q, l, x, false); };
    char name[64];
    std::snprintf(name, sizeof name, "GMM D=%d K=25 gradient", d);
    tierRow(name, [f](Tensor alpha, Tensor mu, Tensor q, Tensor l, Tensor x) {
      return value_and_grad(f, argnums<0, 1, 2, 3>)(alpha, mu, q, l, x);
    }, g.alpha, g.mu, g.q, g.l, g.x);
  }
}

// ---- the programs ------------------------------------------------------------

void run(bool quick, const std::string& data) {
  std::printf("compile time of the first call (ms; llvm = planning, lowering, LLVM)\n");
  const Array x = vec(1000);
  // 8 examples of 125 elements: one run does the forward's work (the total includes a run).
  const Array xs8 = Array(vec(8 * 125).to_vector<float>(), {8, 125});
  for (int n : {100, 1000, 10000, 100000}) {
    if (quick && n > 10000) continue;
    auto f = jit(chain(n));
    auto g = grad(chain(n));
    char name[64];
    std::snprintf(name, sizeof name, "chain %d forward", n);
    const double forward = report(name, n, [&] { f(x); });
    std::snprintf(name, sizeof name, "chain %d grad", n);
    report(name, n, [&] { g(x); });
    // vmap over 8 examples: traced once for one example, every op batched (issue 53: within 1.5x of the forward).
    auto v = vmap(chain(n));
    std::snprintf(name, sizeof name, "chain %d vmap (8 examples)", n);
    const double batched = report(name, n, [&] { v(xs8); });
    if (forward > 0 && batched > 0)
      std::printf("chain %d: vmap compile / forward compile %.2fx (target <= 1.5x)\n", n, batched / forward);
  }
  for (int n : {10, 20, 40, 100}) {
    auto f = jit(swish(n));
    char name[64];
    std::snprintf(name, sizeof name, "swish %d layers forward", n);
    report(name, 2 * n, [&] { f(x); });
  }
  // h = tanh(W h + x_t) over 1,000 steps of f32[64], unrolled, then as a jitted step.
  const int steps = 1000, width = 64;
  const Array W = Array(vec(width * width, 0.1f).to_vector<float>(), {width, width});
  const Array xs = Array(vec(steps * width, 0.5f).to_vector<float>(), {steps, width});
  auto rnn = [](Tensor w, Tensor xs) {
    Tensor h = zeros_like(xs[0]);
    for (int t = 0; t < 1000; ++t) h = tanh(matmul(w, h) + xs[t]);
    return sum(h * h);
  };
  auto step = jit([](Tensor w, Tensor h, Tensor x) { return tanh(matmul(w, h) + x); }, {.name = "step"});
  auto rnnCalls = [step](Tensor w, Tensor xs) {
    Tensor h = zeros_like(xs[0]);
    for (int t = 0; t < 1000; ++t) h = step(w, h, xs[t]);
    return sum(h * h);
  };
  {
    auto f = jit(rnn);
    auto g = grad(rnn);
    report("recurrence 1000 steps forward", 4 * steps, [&] { f(W, xs); });
    report("recurrence 1000 steps grad", 4 * steps, [&] { g(W, xs); });
    auto fc = jit(rnnCalls);
    auto gc = grad(rnnCalls);
    report("recurrence, jitted step, forward", 4 * steps, [&] { fc(W, xs); });
    report("recurrence, jitted step, grad", 4 * steps, [&] { gc(W, xs); });
    // The gradient with respect to W and every x_t: 1,000 cotangent rows placed into one.
    auto gWx = grad(rnn, argnums<0, 1>);
    report("recurrence grad, W and all of xs", 4 * steps, [&] { gWx(W, xs); });
    // Every state kept: a stack of 1,000 computed rows.
    auto states = jit([](Tensor w, Tensor xs) {
      Tensor h = zeros_like(xs[0]);
      std::vector<Tensor> hs;
      for (int t = 0; t < 1000; ++t) {
        h = tanh(matmul(w, h) + xs[t]);
        hs.push_back(h * 2.0f + 1.0f);
      }
      return stack(hs);
    });
    report("recurrence, stack of 2h + 1", 6 * steps, [&] { states(W, xs); });
  }
  // ADBench's LSTM step, unrolled over `steps` characters (bench/UnrolledLstm.h).
  for (int lsteps : {64, 256, 1024}) {
    auto f64 = [](const Array& a) { const auto v = a.to_vector<float>(); return std::vector<double>(v.begin(), v.end()); };
    const Array seqConst = Array(f64(vec(lsteps * 14, 1.0f)), {lsteps, 14});
    auto lstm = [lsteps, seqConst](Tensor p, Tensor) { return programs::unrolledLstm(p, constant(seqConst), lsteps); };
    const Array params = Array(f64(vec(4 * 14 * 4, 0.3f)), {4, 56});
    const Array seq = Array(f64(vec(lsteps * 14, 1.0f)), {lsteps, 14});
    auto f = jit(lstm);
    auto g = grad(lstm);
    char name[64];
    const long ops = 40L * lsteps;
    std::snprintf(name, sizeof name, "lstm %d steps forward", lsteps);
    report(name, ops, [&] { f(params, seq); });
    std::snprintf(name, sizeof name, "lstm %d steps grad", lsteps);
    report(name, ops, [&] { g(params, seq); });
  }
  if (!only || std::strstr("gmm", only)) gmmBench(data);
  if (!only) baJacobianBench(data);
  tiersBench(data);
}

} // namespace

int main(int argc, char** argv) {
  set_compile_listener([](const CompileEvent& e) {
    costs.trace += e.trace_ms;
    costs.key += e.key_ms;
    costs.passes += e.passes_ms;
    costs.llvm += e.llvm_ms;
    costs.load += e.load_ms;
    costs.kernels += 1;
    costs.diskHits += e.cache == CompileEvent::Cache::disk_hit;
  });
  const bool quick = argc > 1 && !std::strcmp(argv[1], "--quick");
  if (argc > 2 && !std::strcmp(argv[1], "--only")) only = argv[2];
  if (argc > 1 && !std::strcmp(argv[1], "--disk-child")) { // a fresh process of the disk-cache benchmark
    report("swish 40 layers, fresh process", 80, [] { jit(swish(40))(vec(1000)); });
    report("chain 10000 forward, fresh process", 10000, [] { jit(chain(10000))(vec(1000)); });
    return 0;
  }
  const char* data = std::getenv("ADBENCH_DATA");
  if (argc > 1 && !std::strcmp(argv[1], "--tiers")) { // only the tiers section
    if (argc > 3 && !std::strcmp(argv[2], "--only")) only = argv[3];
    tiersBench(data ? data : ADJIT_ADBENCH_DATA);
    return 0;
  }
  if (argc > 1 && !std::strcmp(argv[1], "--ba")) { // only the BA Jacobian
    baJacobianBench(data ? data : ADJIT_ADBENCH_DATA);
    return 0;
  }
  run(quick, data ? data : ADJIT_ADBENCH_DATA);
  if (only) return 0;
  // The disk cache: the same programs in two fresh processes sharing a cache directory.
  const std::string dir = std::filesystem::temp_directory_path() / ("adjit-bench-cache." + std::to_string(::getpid()));
  const std::string cmd = "ADJIT_CACHE_DIR='" + dir + "' '/proc/" + std::to_string(::getpid()) + "/exe' --disk-child";
  std::printf("disk cache, first process:\n");
  std::fflush(stdout);
  if (std::system(cmd.c_str()) != 0) std::printf("  (failed)\n");
  std::printf("disk cache, second process:\n");
  std::fflush(stdout);
  if (std::system(cmd.c_str()) != 0) std::printf("  (failed)\n");
  std::filesystem::remove_all(dir);
  return 0;
}
