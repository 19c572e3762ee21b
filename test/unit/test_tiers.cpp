// test/unit/test_tiers.cpp — tiered compilation (JitOptions::tiers): the first
// tier and the optimised tier compute bitwise the same, the swap under calls
// from many threads, kernels freed while their optimised tier compiles, a
// failing optimised compile, turning tiers off, and waiting for the optimised
// tiers of one object or of all.
#include "Check.h"
#include "RandomPrograms.h"
#include "autodiff/Reverse.h"
#include "jit/Background.h"
#include "jit/Engine.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>

using namespace adjit;
using namespace adjit::test;

namespace {

/// Holds the optimised tiers back while it lives, so that calls run the first tier.
struct PauseOptimizedTiers {
  PauseOptimizedTiers() { engine::background::testing::pause(true); }
  ~PauseOptimizedTiers() { engine::background::testing::pause(false); }
};

/// Sets the hook each optimised compile calls first, while it lives.
struct OptimizedTierHook {
  explicit OptimizedTierHook(std::function<void()> hook) { engine::testing::onOptimizedTier(std::move(hook)); }
  ~OptimizedTierHook() { engine::testing::onOptimizedTier({}); }
};

std::string bytes(const std::vector<Array>& outs) {
  std::string s;
  for (const Array& a : outs) s.append(static_cast<const char*>(a.raw()), a.bytes());
  return s;
}

std::vector<float> uniform(std::size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

/// Compiles `function` of `m` tiered, runs the first tier, then the
/// optimised one: the results' bytes of each, and whether the kernel started
/// at the first tier (false: an earlier kernel of the same key was found).
struct TierResults {
  std::string first, optimized;
  bool startedFirst = false;
};
TierResults bothTiers(const ir::Module& m, const std::string& function, const std::vector<Array>& args, int optLevel = 2) {
  std::vector<detail::Leaf> leaves;
  for (const Array& a : args) leaves.push_back({a.raw(), &a.type()});
  TierResults r;
  std::vector<Array> outs;
  std::shared_ptr<engine::Kernel> k;
  {
    PauseOptimizedTiers pause;
    k = engine::compile({.module = m, .function = function, .options = {.optLevel = optLevel}, .tiers = true});
    r.startedFirst = !engine::optimized(*k);
    engine::run(*k, leaves, outs);
    r.first = bytes(outs);
  }
  engine::waitOptimized(*k);
  REQUIRE(engine::optimized(*k));
  engine::run(*k, leaves, outs);
  r.optimized = bytes(outs);
  return r;
}

/// The same through jit: the first call's results (first tier), then the
/// optimised code's after wait_optimized.
template <class F, class... Args> void checkJitTiers(const char* name, const F& f, const Args&... args) {
  INFO(name);
  auto collect = [](const auto& r) {
    std::vector<Array> outs;
    using R = std::decay_t<decltype(r)>;
    if constexpr (std::is_same_v<R, Array>) outs.push_back(r);
    else {
      outs.push_back(r.first);
      if constexpr (std::is_same_v<std::decay_t<decltype(r.second)>, Array>) outs.push_back(r.second);
      else std::apply([&](const auto&... g) { (outs.push_back(g), ...); }, r.second);
    }
    return bytes(outs);
  };
  engine::background::drain(); // earlier tests' optimised tiers: in place before counting ours
  auto jitted = jit(f, {.name = name});
  int tier = 0;
  set_compile_listener([&](const CompileEvent& e) { tier = e.tier; });
  std::string first;
  uint64_t before = 0;
  {
    PauseOptimizedTiers pause;
    first = collect(jitted(args...));
    before = engine::counters().optimizedTiers; // read while ours cannot have run
  }
  set_compile_listener({});
  CHECK(tier == 1);
  jitted.wait_optimized();
  CHECK(engine::counters().optimizedTiers == before + 1);
  CHECK(collect(jitted(args...)) == first);
}

} // namespace

TEST_CASE("tiers: the first and the optimised tier compute bitwise the same on random programs and their gradients") {
  int compared = 0;
  for (unsigned seed = 0; seed < 12; ++seed) {
    Module traced = traceProgram(randomProgram(seed));
    auto m = std::shared_ptr<ir::Module>(traced.impl().clone());
    const std::string vjp = autodiff::combinedVjp(m, "f");
    std::mt19937 rng(seed + 7919);
    std::uniform_real_distribution<double> d(-1.5, 1.5);
    std::vector<Array> args = {Array(Type{DType::f64, {4}}), Array(Type{DType::f64, {4}}), Array(Type{DType::f64, {}})};
    for (Array& a : args)
      for (int64_t i = 0; i < a.size(); ++i) a.set(i, d(rng));
    args.push_back(Array(1.0)); // the cotangent
    const TierResults r = bothTiers(*m, vjp, args, 1 + static_cast<int>(seed % 3));
    INFO("program " << seed << "\n" << traced.str());
    CHECK(r.first == r.optimized);
    compared += r.startedFirst;
  }
  CHECK(compared == 12);
}

TEST_CASE("tiers: the first and the optimised tier compute bitwise the same on the benchmarks' programs") {
  // bench/bench.cpp's B1-B3 and their gradients (G1-G3), an MLP's value and
  // gradient (matmul's packed kernel) and a GMM-like log-likelihood, at odd
  // sizes (vector loops with remainders).
  const int64_t n = 4099;
  const Array x(uniform(n, -3, 3, 1)), a(0.5f), b(0.25f), m(uniform(37 * 129, -5, 5, 2), {37, 129});
  auto b1 = [](Tensor x) { return sum(log1p(exp(x))); };
  auto b2 = [](Tensor x, Tensor a, Tensor b) { return sum(tanh(a * x + b) * exp(-x * x) + sqrt(x * x + 1.0f)); };
  auto b3 = [](Tensor x) { return sum(logsumexp(x, {1})); };
  checkJitTiers("B1", b1, x);
  checkJitTiers("B2", b2, x, a, b);
  checkJitTiers("B3", b3, m);
  checkJitTiers("G1", [b1](Tensor x) { return value_and_grad(b1)(x); }, x);
  checkJitTiers("G2", [b2](Tensor x, Tensor a, Tensor b) { return value_and_grad(b2, argnums<0, 1, 2>)(x, a, b); }, x, a, b);
  checkJitTiers("G3", [b3](Tensor x) { return value_and_grad(b3)(x); }, m);
  auto mlp = [](Tensor w1, Tensor w2, Tensor x, Tensor y) {
    Tensor logits = matmul(tanh(matmul(x, w1)), w2);
    return sum(logsumexp(logits, {1})) - sum(logits * y);
  };
  const Array w1(uniform(96 * 64, -0.1f, 0.1f, 3), {96, 64}), w2(uniform(64 * 10, -0.1f, 0.1f, 4), {64, 10});
  const Array X(uniform(33 * 96, 0, 1, 5), {33, 96}), Y(uniform(33 * 10, 0, 1, 6), {33, 10});
  checkJitTiers("MLP", [mlp](Tensor w1, Tensor w2, Tensor x, Tensor y) {
    return value_and_grad(mlp, argnums<0, 1>)(w1, w2, x, y);
  }, w1, w2, X, Y);
  auto gmm = [](Tensor mu, Tensor x) { // sum_i logsumexp_k(-|x_i - mu_k|^2 / 2), f64
    Tensor d = reshape(x, {101, 1, 7}) - reshape(mu, {1, 5, 7});
    return sum(logsumexp(-0.5 * sum(d * d, {2}), {1}));
  };
  std::vector<double> mu(35), xs(707);
  for (std::size_t i = 0; i < mu.size(); ++i) mu[i] = std::sin(0.3 * double(i));
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = std::cos(0.7 * double(i));
  checkJitTiers("GMM", [gmm](Tensor mu, Tensor x) { return value_and_grad(gmm)(mu, x); }, Array(mu, {5, 7}), Array(xs, {101, 7}));
}

TEST_CASE("tiers: calls from many threads while the optimised tier is swapped in") {
  auto f = jit([](Tensor x) { return sum(tanh(x * 0.5f + 0.25f) * exp(-x * x)); }, {.name = "swapped"});
  const Array x(uniform(2053, -3, 3, 7));
  std::string want;
  {
    PauseOptimizedTiers pause;
    want = bytes({f(x)});
  }
  // Calls run before, during and after the swap; one more round after it.
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0}, calls{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      while (!stop.load()) {
        if (bytes({f(x)}) != want) ++wrong;
        ++calls;
      }
    });
  f.wait_optimized();
  const int atSwap = calls.load();
  while (calls.load() < atSwap + 8) std::this_thread::yield();
  stop = true;
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
  CHECK(bytes({f(x)}) == want);
}

TEST_CASE("tiers: a kernel freed while its optimised tier compiles, and compiled again meanwhile") {
  auto body = [](Tensor x) { return sum(sin(x) * 3.0f); };
  const Array x = f32({1, 2, 3});
  const float want = 3 * (std::sin(1.0f) + std::sin(2.0f) + std::sin(3.0f));
  engine::background::drain();
  const std::size_t live = engine::liveKernels();
  std::atomic<bool> entered{false};
  OptimizedTierHook hook([&] {
    entered = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  });
  {
    auto f = jit(body, {.name = "freed_early"});
    CHECK(f(x).item<float>() == doctest::Approx(want));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!entered.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    REQUIRE(entered.load());
  } // freed while the background compile sleeps in the hook
  CHECK(engine::liveKernels() == live);
  auto again = jit(body, {.name = "freed_early"}); // the same key: a new first tier, while the old job runs
  CHECK(again(x).item<float>() == doctest::Approx(want));
  again.wait_optimized(); // the old job finds its kernel gone; the new one swaps in
  CHECK(again(x).item<float>() == doctest::Approx(want));
  engine::background::drain();
}

TEST_CASE("tiers: a failing optimised compile leaves the first tier running") {
  engine::background::drain();
  OptimizedTierHook hook([] { throw Error("injected failure"); });
  auto f = jit([](Tensor x) { return x * 5.0 + 1.0; }, {.name = "tier_fails"});
  const uint64_t before = engine::counters().optimizedTiers;
  CHECK(f(Array(2.0)).item<double>() == 11.0);
  f.wait_optimized(); // returns: the compile failed
  CHECK(engine::counters().optimizedTiers == before);
  CHECK(f(Array(3.0)).item<double>() == 16.0);
}

TEST_CASE("tiers: JitOptions::tiers = false compiles the optimised code on the first call") {
  std::vector<int> tiers;
  set_compile_listener([&](const CompileEvent& e) { tiers.push_back(e.tier); });
  auto f = jit([](Tensor x) { return x * 9.0 - 4.0; }, {.name = "untiered", .tiers = false});
  auto g = jit([](Tensor x) { return x * 9.0 - 5.0; }, {.name = "tiered"});
  {
    PauseOptimizedTiers pause; // the optimised tier of g cannot be in place yet
    CHECK(f(Array(1.0)).item<double>() == 5.0);
    CHECK(g(Array(1.0)).item<double>() == 4.0);
  }
  set_compile_listener({});
  CHECK(tiers == std::vector<int>{2, 1});
  f.wait_optimized(); // returns at once
  g.wait_optimized();
}

/// obj's first call (its first tier; the optimised one held back), then its
/// wait_optimized: an optimised tier more must be in place when it returns.
template <class Obj, class... A> void checkWaitOptimized(const char* name, const Obj& obj, const A&... args) {
  INFO(name);
  engine::background::drain(); // earlier tests' optimised tiers: in place before counting ours
  uint64_t before = 0;
  {
    PauseOptimizedTiers pause;
    obj(args...);
    before = engine::counters().optimizedTiers; // read while ours cannot have run
  }
  obj.wait_optimized();
  CHECK(engine::counters().optimizedTiers > before);
}

TEST_CASE("tiers: wait_optimized of map, jacfwd, jacrev, hvp and sparse_jacobian objects") {
  const Array xs(std::vector<double>{1, 2, 3}, {3, 1}), x(std::vector<double>{0.5, -1, 2}), v(std::vector<double>{1, 0, 2});
  checkWaitOptimized("map", map([](Tensor t) { return t * 3.0 + 1.0; }, {.name = "mapped_tiers"}), xs);
  checkWaitOptimized("jacfwd", jacfwd([](Tensor t) { return sin(t) * 2.0; }), x);
  checkWaitOptimized("jacrev", jacrev([](Tensor t) { return cos(t) * 3.0; }), x);
  checkWaitOptimized("hvp", hvp([](Tensor t) { return sum(exp(t) * t); }), x, v);
  checkWaitOptimized("sparse_jacobian", sparse_jacobian([](Tensor t) { return tanh(t) * 4.0; }), x);
}

TEST_CASE("tiers: wait_all_optimized waits for every object's optimised tier") {
  engine::background::drain(); // earlier tests' optimised tiers: in place before counting ours
  auto f = jit([](Tensor x) { return x * 7.0 + 2.0; }, {.name = "all_tiers_f"});
  auto g = grad([](Tensor x) { return sum(sin(x) * x); });
  const Array x(std::vector<double>{0.25, -1.5, 3});
  uint64_t before = 0;
  {
    PauseOptimizedTiers pause;
    f(x);
    g(x);
    before = engine::counters().optimizedTiers; // read while neither can have run
  }
  wait_all_optimized();
  CHECK(engine::counters().optimizedTiers >= before + 2);
  wait_all_optimized(); // nothing queued: returns at once
}
