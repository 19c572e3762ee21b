// bench/vmap_bench.cpp — batching (issue 53): per-example gradients of an MLP
// by vmap(grad(loss)) against a loop of grad calls and against the same
// gradients written batched by hand; Jacobians (jacfwd, jacrev, hessian) as
// one JVP or VJP batched over the basis against the scan of one JVP or VJP
// per basis vector. Every comparison runs at one thread (JitOptions
// threads = 1), the two sides interleaved; times are medians. Prints,
// asserts nothing. PyTorch's functorch.vmap(functorch.grad(loss)) on the same
// MLP is bench/per_example_grads_torch.py, run by hand (PyTorch cannot run
// in-process from C++).
//   adjit_vmap_bench [--quick]    (--quick: fewer repetitions)
//   adjit_vmap_bench --budget     (the measurements behind the Jacobian's byte budget)
//   adjit_vmap_bench --jacobians  (the Jacobian rows only)
#include <adjit/adjit.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace adjit;
using Clock = std::chrono::steady_clock;

namespace {

double msOf(const std::function<void()>& fn) {
  const auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Median times of a and b over `reps` interleaved runs each (after one warm-up run of each).
std::pair<double, double> interleaved(const std::function<void()>& a, const std::function<void()>& b, int reps) {
  a();
  b();
  std::vector<double> ta, tb;
  for (int i = 0; i < reps; ++i) {
    ta.push_back(msOf(a));
    tb.push_back(msOf(b));
  }
  return {median(ta), median(tb)};
}

Array randomArray(const Shape& shape, float lo, float hi, unsigned seed, DType t = DType::f32) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  Array a(Type{t, shape});
  for (int64_t i = 0; i < a.size(); ++i) a.set(i, d(g));
  return a;
}

/// Example b of `a` along axis 0, copied.
Array row(const Array& a, int64_t b) {
  Shape s(a.shape().begin() + 1, a.shape().end());
  Array r(Type{a.dtype(), s});
  std::memcpy(r.raw(), static_cast<const char*>(a.raw()) + r.bytes() * static_cast<std::size_t>(b), r.bytes());
  return r;
}

/// Largest |a - b| / max(1, |b|) over the elements.
double maxRelDiff(const Array& a, const Array& b) {
  double m = 0;
  for (int64_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(a.at(i) - b.at(i)) / std::max(1.0, std::fabs(b.at(i))));
  return m;
}

/// The size of a traced module: lines of its `.adj` text (about one per op).
std::size_t opsOf(const Module& m) {
  const std::string text = m.str();
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

// ---- per-example gradients -------------------------------------------------

constexpr int64_t kBatch = 256, kIn = 784, kHidden = 256, kOut = 10;

/// Softmax cross-entropy of a 784-256-10 tanh MLP on one example x [784]
/// with a one-hot label y [10].
Tensor mlpLoss(const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2, const Tensor& x, const Tensor& y) {
  const Tensor h = tanh(matmul(reshape(x, {1, kIn}), w1) + b1);
  const Tensor logits = reshape(matmul(h, w2) + b2, {kOut});
  return logsumexp(logits) - sum(logits * y);
}

void perExampleSection(int reps) {
  std::printf("per-example gradients: 784-256-10 tanh MLP, softmax cross-entropy, batch %lld, f32, one thread\n",
              static_cast<long long>(kBatch));
  const Array w1 = randomArray({kIn, kHidden}, -0.05f, 0.05f, 1), b1 = randomArray({kHidden}, -0.1f, 0.1f, 2);
  const Array w2 = randomArray({kHidden, kOut}, -0.1f, 0.1f, 3), b2 = randomArray({kOut}, -0.1f, 0.1f, 4);
  const Array X = randomArray({kBatch, kIn}, 0, 1, 5);
  Array Y(Type{DType::f32, {kBatch, kOut}});
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t k = 0; k < kOut; ++k) Y.set(b * kOut + k, k == (b * 7) % kOut ? 1.0 : 0.0);
  const std::optional<int64_t> no;
  auto grads = grad(mlpLoss, argnums<0, 1, 2, 3>);
  // vmap(grad(loss)): the parameters shared, the examples batched.
  auto viaVmap = jit([grads, no](Tensor w1, Tensor b1, Tensor w2, Tensor b2, Tensor x, Tensor y) {
    return vmap(grads, {.in_axes = {no, no, no, no, 0, 0}})(w1, b1, w2, b2, x, y);
  }, {.name = "per_example_vmap", .threads = 1});
  // (a) a loop of calls of the compiled gradient of one example.
  auto one = jit([grads](Tensor w1, Tensor b1, Tensor w2, Tensor b2, Tensor x, Tensor y) {
    return grads(w1, b1, w2, b2, x, y);
  }, {.name = "per_example_one", .threads = 1});
  // (b) by hand: the batch's forward, its backward, per-example outer products.
  auto byHand = jit([](Tensor w1, Tensor b1, Tensor w2, Tensor b2, Tensor x, Tensor y) {
    const Tensor h = tanh(matmul(x, w1) + b1);                  // [B, 256]
    const Tensor dl = softmax(matmul(h, w2) + b2) - y;          // [B, 10]: d loss / d logits
    const Tensor dz = matmul(dl, w2, {.transpose_b = true}) * (1.0f - h * h); // [B, 256]
    const Tensor dw1 = matmul(reshape(x, {kBatch, kIn, 1}), reshape(dz, {kBatch, 1, kHidden}));
    const Tensor dw2 = matmul(reshape(h, {kBatch, kHidden, 1}), reshape(dl, {kBatch, 1, kOut}));
    return std::make_tuple(dw1, dz, dw2, dl);
  }, {.name = "per_example_hand", .threads = 1});
  // (b') the same with the outer products as broadcast multiplies.
  auto byHandMul = jit([](Tensor w1, Tensor b1, Tensor w2, Tensor b2, Tensor x, Tensor y) {
    const Tensor h = tanh(matmul(x, w1) + b1);
    const Tensor dl = softmax(matmul(h, w2) + b2) - y;
    const Tensor dz = matmul(dl, w2, {.transpose_b = true}) * (1.0f - h * h);
    const Tensor dw1 = reshape(x, {kBatch, kIn, 1}) * reshape(dz, {kBatch, 1, kHidden});
    const Tensor dw2 = reshape(h, {kBatch, kHidden, 1}) * reshape(dl, {kBatch, 1, kOut});
    return std::make_tuple(dw1, dz, dw2, dl);
  }, {.name = "per_example_hand_mul", .threads = 1});
  std::vector<Array> xs, ys;
  for (int64_t b = 0; b < kBatch; ++b) {
    xs.push_back(row(X, b));
    ys.push_back(row(Y, b));
  }
  const double coldV = msOf([&] { viaVmap(w1, b1, w2, b2, X, Y); });
  const double coldL = msOf([&] { one(w1, b1, w2, b2, xs[0], ys[0]); });
  const double coldH = msOf([&] { byHand(w1, b1, w2, b2, X, Y); });
  viaVmap.wait_optimized(); // time the optimised code (JitOptions::tiers)
  one.wait_optimized();
  byHand.wait_optimized();
  byHandMul(w1, b1, w2, b2, X, Y);
  byHandMul.wait_optimized();
  // The three agree: dW1 of example 3, and all of dW1 against the hand-written form.
  const auto [vw1, vb1, vw2, vb2] = viaVmap(w1, b1, w2, b2, X, Y);
  const auto [hw1, hb1, hw2, hb2] = byHand(w1, b1, w2, b2, X, Y);
  const auto [lw1, lb1, lw2, lb2] = one(w1, b1, w2, b2, xs[3], ys[3]);
  const double diff = std::max({maxRelDiff(vw1, hw1), maxRelDiff(vb1, hb1), maxRelDiff(vw2, hw2), maxRelDiff(vb2, hb2),
                                maxRelDiff(row(vw1, 3), lw1)});
  std::vector<std::tuple<Array, Array, Array, Array>> kept(static_cast<std::size_t>(kBatch));
  auto vmapRun = [&] { viaVmap(w1, b1, w2, b2, X, Y); };
  auto loopRun = [&] {
    for (int64_t b = 0; b < kBatch; ++b) kept[static_cast<std::size_t>(b)] = one(w1, b1, w2, b2, xs[b], ys[b]);
  };
  auto handRun = [&] { byHand(w1, b1, w2, b2, X, Y); };
  auto handMulRun = [&] { byHandMul(w1, b1, w2, b2, X, Y); };
  const auto [va, la] = interleaved(vmapRun, loopRun, std::max(3, reps / 4));
  const auto [vb, hb] = interleaved(vmapRun, handRun, reps);
  const auto [vc, hc] = interleaved(vmapRun, handMulRun, reps);
  std::printf("PEG  vmap(grad)  adjit %8.3f ms   loop of %lld grad calls %8.3f ms   ratio %6.2fx (target >= 20x faster)\n",
              va, static_cast<long long>(kBatch), la, la / va);
  std::printf("PEG  vmap(grad)  adjit %8.3f ms   batched by hand         %8.3f ms   ratio %6.2fx (target <= 1.2x)\n", vb,
              hb, vb / hb);
  std::printf("PEG  vmap(grad)  adjit %8.3f ms   by hand, products as *  %8.3f ms   ratio %6.2fx (target <= 1.2x)\n", vc,
              hc, vc / hc);
  std::printf("PEG  cold compile: vmap(grad) %.1f ms, one grad %.1f ms, by hand %.1f ms; max rel. diff %.1e\n", coldV, coldL,
              coldH, diff);
  std::printf("PEG  functorch.vmap(functorch.grad(loss)), one thread: run /usr/bin/python3 bench/per_example_grads_torch.py "
              "(target: adjit >= 2x faster)\n");
}

// ---- Jacobians ---------------------------------------------------------------

/// The 2-D Rosenbrock terms summed along a vector.
Tensor rosenbrock(const Tensor& x) {
  const int64_t n = x.shape()[0];
  const Tensor a = slice(x, {0}, {n - 1}), b = slice(x, {1}, {n});
  return sum(100.0 * (b - a * a) * (b - a * a) + (1.0 - a) * (1.0 - a));
}

/// f compiled at one thread twice: with the Jacobians batched, and with the
/// scan forced (detail::setJacobianPolicy, for benchmarks). Prints both
/// times, the speedup and the traced programs' sizes.
template <class F, class... A> void jacobianRow(const char* name, const F& f, int reps, const A&... args) {
  using detail::JacobianPath;
  auto traceWith = [&](JacobianPath p) {
    const auto before = detail::setJacobianPolicy({.path = p});
    const Module m = jit(f).trace(args...);
    detail::setJacobianPolicy(before);
    return opsOf(m);
  };
  auto batched = jit(f, {.name = "jac_batched", .threads = 1});
  auto scanned = jit(f, {.name = "jac_scan", .threads = 1});
  auto coldWith = [&](auto& j, JacobianPath p) {
    const auto before = detail::setJacobianPolicy({.path = p});
    const double t = msOf([&] { j(args...); });
    j.wait_optimized();
    detail::setJacobianPolicy(before);
    return t;
  };
  const double cb = coldWith(batched, JacobianPath::batched), cs = coldWith(scanned, JacobianPath::scan);
  const double diff = maxRelDiff(batched(args...), scanned(args...));
  const auto [tb, ts] = interleaved([&] { batched(args...); }, [&] { scanned(args...); }, reps);
  std::printf("JAC  %-28s batched %8.3f ms   scan %9.3f ms   speedup %6.2fx   cold %6.1f / %6.1f ms   IR lines %zu / %zu   "
              "(max rel. diff %.1e)\n",
              name, tb, ts, ts / tb, cb, cs, traceWith(JacobianPath::batched), traceWith(JacobianPath::scan), diff);
  std::fflush(stdout);
}

/// Measured (one thread, shared 2-core host, load 8-15, three interleaved
/// runs): jacfwd of tanh(A x) 77-81x faster than the scan at R^256 -> R^256
/// (0.005 / 0.39 ms) and 5.6-5.7x at R^16 -> R^1000 (0.012 / 0.067 ms), where
/// the product with the basis folds away and A x, tanh and one fused loop
/// remain; jacrev 89-118x and 31-33x. Hessian of Rosenbrock R^100 (no
/// products form: the batched tangents are elementwise; jacfwd's rows [n, out]
/// are transposed to [out, n] by the loop that computes them): 0.68-0.78x
/// while that loop ran in the Jacobian's order, gathering its two reads of
/// the rows before it; 1.56-1.76x since it runs along those rows and stores
/// through register transposes (codegen.md, "Transposes stored along their
/// operand's rows"; AVX-512, load 4-7, five interleaved runs; x86-64-v2
/// 0.70-0.85x before, 1.20-1.25x after; x86-64-v3 1.15-1.26x, 1.33-1.47x).
void jacobianSection(int reps) {
  std::printf("\nJacobians: one JVP or VJP batched over the basis against a scan of one per basis vector, one thread "
              "(target >= 5x faster where products form, never slower)\n");
  auto tanhAx = [](Tensor a, Tensor x) { return tanh(matmul(a, x)); };
  const Array a256 = randomArray({256, 256}, -0.1f, 0.1f, 11), x256 = randomArray({256}, -1, 1, 12);
  const Array a1000 = randomArray({1000, 16}, -1, 1, 13), x16 = randomArray({16}, -1, 1, 14);
  jacobianRow("jacfwd tanh(Ax) R^256->R^256", [tanhAx](Tensor a, Tensor x) { return jacfwd(tanhAx, argnums<1>)(a, x); },
              reps, a256, x256);
  jacobianRow("jacrev tanh(Ax) R^256->R^256", [tanhAx](Tensor a, Tensor x) { return jacrev(tanhAx, argnums<1>)(a, x); },
              reps, a256, x256);
  jacobianRow("jacfwd tanh(Ax) R^16->R^1000", [tanhAx](Tensor a, Tensor x) { return jacfwd(tanhAx, argnums<1>)(a, x); },
              reps, a1000, x16);
  jacobianRow("jacrev tanh(Ax) R^16->R^1000", [tanhAx](Tensor a, Tensor x) { return jacrev(tanhAx, argnums<1>)(a, x); },
              reps, a1000, x16);
  const Array x100 = randomArray({100}, -1, 1, 15, DType::f64);
  jacobianRow("hessian Rosenbrock R^100 f64", [](Tensor x) { return hessian(rosenbrock)(x); }, reps, x100);
}

/// What the byte budget is measured on: the Jacobian of an elementwise
/// function (diagonal: the least work per byte of batched tangents, where the
/// scan's small steps stay in cache) and of tanh(A x) (products), for growing
/// n, batched against the scan.
void budgetSection() {
  std::printf("\nJacobian byte budget: batched against scan, one thread; tangent = n x n x 4 bytes\n");
  for (int64_t n : {1024, 2048, 4096, 8192}) {
    const Array x = randomArray({n}, -1, 1, 21);
    char name[64];
    std::snprintf(name, sizeof name, "jacfwd sin(x)*x n=%lld", static_cast<long long>(n));
    jacobianRow(name, [](Tensor x) { return jacfwd([](Tensor v) { return sin(v) * v; })(x); }, 3, x);
    std::snprintf(name, sizeof name, "jacrev sin(x)*x n=%lld", static_cast<long long>(n));
    jacobianRow(name, [](Tensor x) { return jacrev([](Tensor v) { return sin(v) * v; })(x); }, 3, x);
  }
}

} // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && !std::strcmp(argv[1], "--quick");
  if (argc > 1 && !std::strcmp(argv[1], "--budget")) {
    budgetSection();
    return 0;
  }
  const bool jacobiansOnly = argc > 1 && !std::strcmp(argv[1], "--jacobians");
  const int reps = quick ? 5 : 21;
  if (!jacobiansOnly) perExampleSection(reps);
  jacobianSection(reps);
  return 0;
}
