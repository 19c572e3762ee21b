// test/unit/test_codegen.cpp — code generation scales: emitted LLVM IR, loop
// bodies, functions and alias metadata grow linearly with the program
// (counted, not timed), and long programs split across functions compute
// what the interpreter computes.
#include "Check.h"

#include "codegen/FusionPlan.h"
#include "codegen/Stats.h"
#include "codegen/StepGroups.h"
#include "codegen/Gemm.h"
#include "codegen/Target.h"
#include "jit/Engine.h"
#include "ir/OpInfo.h"
#include "codegen/Lowering.h"
#include "transforms/Passes.h"

#include "../../bench/UnrolledLstm.h"

#include <fmt/format.h>

#include <random>

using namespace adjit;
using namespace adjit::test;

namespace {

/// Traces f over one f32[n] argument and runs the default passes, as jit does.
template <class F> Module traced(F f, int64_t n = 1000) {
  Module m = trace(f, Type{DType::f32, {n}});
  transforms::runPipeline(m.impl(), transforms::defaultPipeline());
  return m;
}

codegen::LoweringStats lowered(const Module& m) { return codegen::measureLowering(m.impl(), "f"); }

auto swish(int n) {
  return [n](Tensor x) {
    for (int i = 0; i < n; ++i) x = x * sigmoid(x);
    return sum(x);
  };
}

/// A chain whose steps all differ (each its own constant): no kernel repeats,
/// so the plan's loops and functions follow its length.
auto distinctChain(int n) {
  return [n](Tensor x) {
    for (int i = 0; i < n; ++i) x = i % 3 == 0 ? sin(x) : i % 3 == 1 ? x * (1.0f + 1e-6f * float(i)) : x + 0.1f * float(i % 7);
    return sum(x);
  };
}

/// The step groups the planner finds in f, with what it stores anyway
/// (parameters and outputs) and the default body budget.
codegen::StepGroups stepGroupsOf(const ir::Function& f) {
  std::vector<int> position(f.types.size(), -1);
  for (std::size_t i = 0; i < f.ops.size(); ++i)
    for (ir::ValueId r : f.ops[i].results) position[static_cast<std::size_t>(r)] = static_cast<int>(i);
  std::vector<char> stored(f.types.size(), 0);
  for (ir::ValueId v : f.params) stored[static_cast<std::size_t>(v)] = 1;
  for (ir::ValueId v : f.outputs) stored[static_cast<std::size_t>(v)] = 1;
  return codegen::findStepGroups(f, codegen::Users::of(f), position, stored, codegen::PlanOptions{}.bodyBudget);
}

/// True when g(4k) - g(2k) is within 15% of 2 (g(2k) - g(k)): linear growth.
bool linear(double a, double b, double c) {
  const double first = b - a, second = c - b;
  INFO("sizes " << a << ", " << b << ", " << c);
  return first > 0 && second >= 1.7 * first && second <= 2.3 * first;
}

} // namespace

TEST_CASE("a value used twice per layer is emitted once: swish chains grow linearly") {
  // Small sizes first: emission exponential in n fails here instead of hanging at n = 40.
  REQUIRE(linear(double(lowered(traced(swish(3))).instructions), double(lowered(traced(swish(6))).instructions),
                 double(lowered(traced(swish(12))).instructions)));
  const auto s10 = lowered(traced(swish(10))), s20 = lowered(traced(swish(20))), s40 = lowered(traced(swish(40)));
  CHECK(linear(double(s10.instructions), double(s20.instructions), double(s40.instructions)));
  // Each layer is a sigmoid and a multiply: a handful of instructions, not 2^n.
  CHECK(s40.instructions < 40 * 20 + 200);
}

TEST_CASE("long chains become bounded loops in bounded functions") {
  const auto a = lowered(traced(distinctChain(1000))), b = lowered(traced(distinctChain(2000))),
             c = lowered(traced(distinctChain(4000)));
  CHECK(linear(double(a.instructions), double(b.instructions), double(c.instructions)));
  CHECK(b.functions > a.functions);
  CHECK(c.functions > b.functions);
  // The largest function does not grow with the program.
  CHECK(c.maxFunctionInstructions <= a.maxFunctionInstructions * 12 / 10);
  const codegen::FusionPlan plan = codegen::planFusion(*traced(distinctChain(4000)).impl().lookup("f"));
  for (const codegen::Kernel& k : plan.kernels) CHECK(k.bodySize <= codegen::PlanOptions{}.bodyBudget);
}

TEST_CASE("large code doing much work per call is cut into parts that compile in parallel") {
  // 600 ops per point over 1,000 points: code worth several LLVM functions
  // and 600,000 ops per call, cut into about four functions (whole kernels
  // each) that the JIT compiles on separate cores (jit/Engine.cpp).
  const Module big = traced(distinctChain(600), 1000);
  const codegen::FusionPlan plan = codegen::planFusion(*big.impl().lookup("f"));
  CHECK(plan.compileParts);
  CHECK(plan.functions >= 3);
  CHECK(plan.functions <= 8);
  CHECK(plan.str().find("functions (compiled in parallel)") != std::string::npos);
  // Buffers read only inside the function that writes them stay on its stack.
  CHECK(plan.stackBytes > 0);
  std::vector<float> xs(1000);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = 1e-3f * float(i);
  const Array x(xs);
  ADJIT_CHECK_CLOSE(jit(distinctChain(600))(x), big.interpret("f", {x}).at(0), 1e-4);
  // The same code over 16 points does too little per call to pay for calls
  // between more functions: only the size budget cuts it.
  const Module few = traced(distinctChain(600), 16);
  const codegen::FusionPlan small = codegen::planFusion(*few.impl().lookup("f"));
  CHECK(!small.compileParts);
  CHECK(small.functions < plan.functions);
  CHECK(small.str().find("(compiled in parallel)") == std::string::npos);
}

/// Per row of x (rows × 3): residuals of a small nonlinear function and the
/// rows of their Jacobian, ADBench BA's shape of work: every loop reads
/// the others' values at its own row.
auto perRow = [](Tensor x) {
  auto r = [](Tensor a, Tensor b, Tensor c) {
    Tensor s = sin(a) * b + exp(c * 0.5), t = cos(b) * c - a * a;
    return stack({s * t + c, s / (1.0 + t * t)}, 1);
  };
  auto [y, pullback] = vjp(r, x(all, 0), x(all, 1), x(all, 2));
  Tensor one = ones_like(x(all, 0)), zero = zeros_like(one);
  std::vector<Tensor> g0 = pullback(stack({one, zero}, 1)), g1 = pullback(stack({zero, one}, 1));
  return std::make_tuple(y, stack({g0[0], g0[1], g0[2], g1[0], g1[1], g1[2]}, 1));
};

/// Checks f's two results on x, jitted for two threads, against the
/// interpreter within tol, and that one thread gives the same bits (row
/// group blocks and chunks are what threads share).
template <class F> void checkOnThreads(const F& f, const Array& x, double tol) {
  const Module m = trace(f, x.type());
  const std::vector<Array> want = m.interpret("f", {x});
  auto [a, b] = jit(f, {.threads = 2})(x);
  ADJIT_CHECK_CLOSE(a, want[0], tol);
  ADJIT_CHECK_CLOSE(b, want[1], tol);
  auto [a1, b1] = jit(f, {.threads = 1})(x);
  CHECK(std::memcmp(a1.raw(), a.raw(), a.bytes()) == 0);
  CHECK(std::memcmp(b1.raw(), b.raw(), b.bytes()) == 0);
}

/// rows × 3 values of sin(step · i).
Array perRowInput(int64_t rows, double step) {
  std::vector<double> xv(static_cast<std::size_t>(rows * 3));
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(step * double(i));
  return Array(xv, {rows, 3});
}

TEST_CASE("loops over many rows run block by block, their values in a cache-sized block buffer") {
  const Array x = perRowInput(100000, 0.1);
  const std::string plan = jit(perRow).lower(x).plan;
  INFO(plan);
  // One group: the loops, and the concatenations writing the results.
  CHECK(plan.find("row group 0 #0..#") != std::string::npos);
  CHECK(plan.find("row group 1") == std::string::npos);
  CHECK(plan.find("-> block+") != std::string::npos);
  CHECK(plan.find("-> scratch+") == std::string::npos);
  checkOnThreads(perRow, x, 1e-12);
  // A small problem stays in cache: no group.
  const Array small = perRowInput(1000, 0.1);
  CHECK(jit(perRow).lower(small).plan.find("row group") == std::string::npos);
}

TEST_CASE("loops split into chunks start every chunk on a cache line") {
  // Whatever the ops per point, a chunk's rows cover a multiple of 16
  // elements: its loads and stores of 4-byte elements and wider never
  // straddle two lines (G2's 977 rows per chunk cost 10%).
  auto check = [](const Module& m) {
    codegen::PlanOptions options;
    options.parallel = true;
    const codegen::FusionPlan plan = codegen::planFusion(*m.impl().lookup("f"), options);
    int split = 0;
    for (const codegen::Kernel& k : plan.kernels) {
      if (k.chunks < 2) continue;
      ++split;
      const int64_t inner = num_elements(k.domain) / k.domain[0];
      CAPTURE(k.chunkRows);
      CAPTURE(inner);
      CHECK(k.chunkRows * inner % 16 == 0);
    }
    CHECK(split > 0);
  };
  check(traced([](Tensor x) { return sum(log1p(exp(x))); }, 1000000));
  check(traced([](Tensor x) { return grad([](Tensor x) { return sum(tanh(x * 0.5f + 0.25f) * exp(-x * x) + sqrt(x * x + 1.0f)); })(x); }, 999999));
  for (int64_t cols : {3, 10, 1000}) {
    Module m = trace([](Tensor x) { return sum(exp(x) * x, {1}); }, Type{DType::f32, {300000 / cols * 10, cols}});
    transforms::runPipeline(m.impl(), transforms::defaultPipeline());
    check(m);
  }
  // Unless it would cost balance: 20 rows of 99,999 stay 20 chunks, not one
  // of 16 rows and one of 4.
  Module tall = trace([](Tensor x) { return sum(exp(x) * x, {1}); }, Type{DType::f32, {20, 99999}});
  transforms::runPipeline(tall.impl(), transforms::defaultPipeline());
  codegen::PlanOptions options;
  options.parallel = true;
  const codegen::FusionPlan plan = codegen::planFusion(*tall.impl().lookup("f"), options);
  REQUIRE(!plan.kernels.empty());
  CHECK(plan.kernels[0].chunks == 20);
}

TEST_CASE("row reductions and small per-row loops join a group: a softmax gradient passes over x once") {
  // The gradient of sum(logsumexp(x, rows)) is softmax(x): per row a max, a
  // sum of exp, a reciprocal, a product. The max and the reciprocal write one
  // value per row, too little to make a group of their own; in one they keep
  // exp(x - max) in cache between the sum and the product: in the result's
  // rows, which the product then scales in place (Planner::outputFor; a
  // block buffer beside them took as much cache again, and the result's cache
  // misses came in the product's loop, where no math hides them: G3 1.17x).
  auto f = value_and_grad([](Tensor x) { return sum(logsumexp(x, {1})); });
  std::vector<float> xv(1000 * 1000);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = 5.0f * std::sin(0.37f * float(i));
  const Array x(xv, {1000, 1000});
  const std::string plan = jit(f, {.threads = 2}).lower(x).plan;
  INFO(plan);
  CHECK(plan.find("reduce_max(%0) -> block+") != std::string::npos);
  const std::size_t e = plan.find("= exp(");
  REQUIRE(e != std::string::npos);
  CHECK(plan.substr(e, plan.find('\n', e) - e).find("-> output 1") != std::string::npos);
  const std::size_t m = plan.find("= mul(");
  REQUIRE(m != std::string::npos);
  CHECK(plan.substr(m, plan.find('\n', m) - m).find("-> output 1") != std::string::npos);
  CHECK(plan.find("scratch 0 bytes") != std::string::npos); // nothing of x's size goes to memory but the result
  CHECK(plan.find("row group 1") == std::string::npos);
  checkOnThreads(f, x, 1e-5);
}

TEST_CASE("a loop reading a group's value at another row stays out of the group") {
  // w reads the Jacobian rows at row r + 1: the Jacobian goes to memory, and
  // w's loop runs after the group, over whole rows.
  const int64_t rows = 100000;
  std::vector<int32_t> next(static_cast<std::size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) next[static_cast<std::size_t>(i)] = int32_t((i + 1) % rows);
  const Array nextRow(next, {rows});
  auto f = [&](Tensor x) {
    auto [y, jac] = perRow(x);
    return std::make_tuple(y, take(jac, constant(nextRow), 0) * 2.0 + jac);
  };
  const Array x = perRowInput(rows, 0.01);
  auto jf = jit(f);
  const std::string plan = jf.lower(x).plan;
  INFO(plan);
  CHECK(plan.find("row group 0") != std::string::npos);
  CHECK(plan.find("row group 1") == std::string::npos);
  CHECK(plan.find("-> scratch+") != std::string::npos);
  const std::size_t last = plan.rfind("  #");
  CHECK(plan.find("row group", last) > plan.find('\n', last)); // the last kernel is in no group
  const Module m = trace(f, x.type());
  const std::vector<Array> want = m.interpret("f", {x});
  auto [a, b] = jf(x);
  ADJIT_CHECK_CLOSE(a, want[0], 1e-12);
  ADJIT_CHECK_CLOSE(b, want[1], 1e-12);
}

TEST_CASE("the gradient of a repeated chain is a few kernels repeated, however long the chain") {
  // The chain of the compile-time benchmark: sin, * 1.01, + 0.1 in turn.
  auto chain = [](int n) {
    return [n](Tensor x) {
      for (int i = 0; i < n; ++i) x = i % 3 == 0 ? sin(x) : i % 3 == 1 ? x * 1.01f : x + 0.1f;
      return sum(x);
    };
  };
  auto codes = [&](int n) {
    const Module m = traced([&](Tensor x) { return grad(chain(n))(x); });
    const codegen::FusionPlan plan = codegen::planFusion(*m.impl().lookup("f"));
    int distinct = 0;
    for (std::size_t k = 0; k < plan.kernels.size(); ++k)
      distinct += plan.kernels[k].sameAs < 0 || plan.kernels[k].sameAs == static_cast<int>(k);
    return distinct;
  };
  // LLVM's time follows the distinct codes. The budget cuts made before the
  // residuals were known to be stored used to leave a transient of differing
  // loops 44 codes long at 3,000 ops.
  const int a = codes(3000), b = codes(6000);
  INFO("distinct kernel codes " << a << ", " << b);
  CHECK(a <= 12);
  CHECK(b <= a + 2); // the chain's two ends, where the cut phase differs

}

TEST_CASE("an unrolled LSTM's gradient is cut in step: its loops repeat with the steps") {
  // ADBench's LSTM cell (two layers of diagonal gates, 14 wide), unrolled
  // over a constant input sequence (bench/UnrolledLstm.h).
  // A step is ~40 ops forward and ~100 backward; the body budget alone cut
  // the chains at offsets that drift against the steps, so no loop repeated
  // within 12 steps (82 distinct codes at 64 steps, no runs). Stored step
  // carries make every group of steps plan alike.
  auto lstm = [](int steps) {
    std::vector<float> xs(static_cast<std::size_t>(steps) * 14);
    for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = std::cos(0.3f * float(i));
    const Array inputs(xs, {steps, 14});
    return [steps, inputs](Tensor p) { return programs::unrolledLstm(p, constant(inputs), steps); };
  };
  auto plan = [&](int steps, Module& keep) {
    keep = trace([&](Tensor p) { return grad(lstm(steps))(p); }, Type{DType::f32, {4, 56}});
    transforms::runPipeline(keep.impl(), transforms::defaultPipeline());
    return codegen::planFusion(*keep.impl().lookup("f"));
  };
  Module m64;
  const codegen::FusionPlan p = plan(64, m64);
  int distinct = 0;
  std::size_t inRuns = 0;
  for (std::size_t k = 0; k < p.kernels.size(); ++k) {
    distinct += p.kernels[k].sameAs < 0 || p.kernels[k].sameAs == static_cast<int>(k);
    inRuns += p.kernels[k].run >= 0;
  }
  // The groups keep the steps' phase from the first step of the forward to
  // the last of the backward: consecutive cuts lie one step apart but where
  // the forward hands over to the backward (the loss and the backward's
  // first step, which the seed makes unlike the others) and at the last
  // step. The groups once started where the finder saw the fifth copy of a
  // step, and its phase slipped where an operand read from near by hashed
  // apart: 8 changes of gap, 56 distinct codes.
  const codegen::StepGroups g = stepGroupsOf(*m64.impl().lookup("f"));
  int phaseChanges = 0;
  std::string gaps;
  for (std::size_t c = 1; c < g.cuts.size(); ++c) {
    gaps += std::to_string(g.cuts[c] - g.cuts[c - 1]) + " ";
    if (c >= 2) phaseChanges += g.cuts[c] - g.cuts[c - 1] != g.cuts[c - 1] - g.cuts[c - 2];
  }
  INFO("distinct kernel codes " << distinct << " of " << p.kernels.size() << ", " << inRuns << " in runs; gaps between cuts "
                                << gaps);
  CHECK(g.cuts.size() >= 64 / 2 + 64 - 8); // forward groups of two steps, backward groups of one
  CHECK(phaseChanges <= 4);
  CHECK(distinct <= 32);
  CHECK(inRuns * 2 >= p.kernels.size()); // most kernels are steps of runs
  // And the grouped plan computes what the interpreter computes.
  std::vector<float> pv(4 * 56);
  for (std::size_t i = 0; i < pv.size(); ++i) pv[i] = 0.3f * std::sin(0.7f * float(i));
  const Array params(pv, {4, 56});
  ADJIT_CHECK_CLOSE(grad(lstm(64))(params), m64.interpret("f", {params})[0], 1e-4);
}

TEST_CASE("layers alike in shape do not hide an unrolled LSTM's steps") {
  // Four layers of one shape: a window of ops in layer 2 hashes like the
  // same window in layer 1, so the nearest repeat of every position was one
  // layer back, four copies in a row, never the five that make a period; no
  // step was found, and ADBench's l4 gradient compiled 157 distinct LLVM
  // functions (2 s). The layers differ in the weights they read: an operand read by
  // many ops hashes by identity, so the period is the step again.
  const int steps = 64, layers = 4;
  std::vector<float> xs(static_cast<std::size_t>(steps) * 14);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = std::cos(0.3f * float(i));
  const Array inputs(xs, {steps, 14});
  auto loss = [&](Tensor p) { return programs::unrolledLstm(p, constant(inputs), steps, layers); };
  Module m = trace([&](Tensor p) { return grad(loss)(p); }, Type{DType::f32, {2 * layers, 56}});
  transforms::runPipeline(m.impl(), transforms::defaultPipeline());
  const ir::Function& f = *m.impl().lookup("f");
  const codegen::StepGroups g = stepGroupsOf(f);
  const codegen::FusionPlan p = codegen::planFusion(f);
  int distinct = 0;
  std::size_t inRuns = 0;
  for (std::size_t k = 0; k < p.kernels.size(); ++k) {
    distinct += p.kernels[k].sameAs < 0 || p.kernels[k].sameAs == static_cast<int>(k);
    inRuns += p.kernels[k].run >= 0;
  }
  INFO(f.ops.size() << " ops, " << g.cuts.size() << " cuts; distinct kernel codes " << distinct << " of " << p.kernels.size()
                    << ", " << inRuns << " in runs");
  CHECK(g.cuts.size() >= static_cast<std::size_t>(steps) / 8);
  CHECK(distinct <= 48); // 80 before the groups kept the steps' phase
  // The plan says what the step groups bought.
  CHECK(p.steps.boundaries == g.cuts.size());
  CHECK(p.steps.codeWith < p.steps.codeWithout);
  CHECK(p.str().find(fmt::format("  step groups: {} boundaries; code {} ops per point with them, {} without: planned with them\n",
                                 g.cuts.size(), p.steps.codeWith, p.steps.codeWithout)) != std::string::npos);
  CHECK(inRuns * 2 >= p.kernels.size());
  std::vector<float> pv(static_cast<std::size_t>(2 * layers) * 56);
  for (std::size_t i = 0; i < pv.size(); ++i) pv[i] = 0.3f * std::sin(0.7f * float(i));
  const Array params(pv, {2 * layers, 56});
  ADJIT_CHECK_CLOSE(grad(loss)(params), m.interpret("f", {params})[0], 1e-4);
}

TEST_CASE("a large function drafted on a second thread gets the plan of one thread") {
  // planFusion drafts without step groups on a thread of its own while it
  // drafts with them (a function of kConcurrentDraftOps = 4,096 ops or
  // more); the plan must not depend on it. An unrolled LSTM's gradient (with
  // step groups: both drafts) and an aperiodic chain's (without: one), ~10,000
  // ops each.
  const Array inputs(std::vector<float>(64 * 14, 0.25f), {64, 14});
  Module lstm = trace([&](Tensor p) { return grad([&](Tensor q) { return programs::unrolledLstm(q, constant(inputs), 64); })(p); },
                      Type{DType::f32, {4, 56}});
  transforms::runPipeline(lstm.impl(), transforms::defaultPipeline());
  auto aperiodic = [](Tensor x) { // op kinds drawn by a hash of the step: nothing repeats
    for (uint32_t i = 0; i < 2000; ++i) {
      const uint32_t h = (i * 2654435761u) >> 29;
      x = h < 2 ? sin(x) : h < 4 ? x * (1.0f + 1e-6f * float(i)) : h < 6 ? tanh(x) : x + 0.1f;
    }
    return sum(x);
  };
  Module chain = traced([&](Tensor x) { return grad(aperiodic)(x); });
  for (const Module* m : {&lstm, &chain}) {
    const ir::Function& f = *m->impl().lookup("f");
    INFO(f.ops.size() << " ops");
    CHECK(f.ops.size() >= 4096);
    CHECK(stepGroupsOf(f).cuts.empty() == (m == &chain));
    const std::string two = codegen::planFusion(f).str(), one = codegen::planFusion(f, {.concurrent = false}).str();
    CHECK(two == one);
  }
}

TEST_CASE("the step-group finder's work grows linearly with an unrolled LSTM's gradient") {
  // Counted in the finder's inner-loop steps (StepGroups::work), at 32, 64
  // and 128 steps: every loop over periods, users and groups stays linear.
  auto work = [](int steps) {
    const Array inputs(std::vector<float>(static_cast<std::size_t>(steps) * 14, 0.25f), {steps, 14});
    Module m = trace([&](Tensor p) { return grad([&](Tensor q) { return programs::unrolledLstm(q, constant(inputs), steps); })(p); },
                     Type{DType::f32, {4, 56}});
    transforms::runPipeline(m.impl(), transforms::defaultPipeline());
    const ir::Function& f = *m.impl().lookup("f");
    const codegen::StepGroups g = stepGroupsOf(f);
    INFO(steps << " steps: " << f.ops.size() << " ops, " << g.cuts.size() << " cuts, work " << g.work);
    CHECK(g.cuts.size() >= static_cast<std::size_t>(steps) / 8); // it found the steps
    CHECK(g.work <= 40 * f.ops.size());
    return double(g.work);
  };
  CHECK(linear(work(32), work(64), work(128)));
}

TEST_CASE("step groups reach back over steps alike, not into the code before a recurrence") {
  // 1,500 ops drawn by a hash (nothing repeats), then 300 steps of a
  // recurrence. The groups reach back from where the finder saw the
  // recurrence repeat over the steps before that, one group at a time while
  // its ops are those of the next; the ops before the recurrence differ, so
  // at most one cut falls among them (the one that sets the first step
  // apart).
  auto f = [](Tensor x) {
    for (uint32_t i = 0; i < 1500; ++i) {
      const uint32_t h = (i * 2654435761u) >> 30;
      x = h == 0 ? sin(x) : h == 1 ? x * (1.0f + 1e-6f * float(i)) : x + 0.1f;
    }
    for (int t = 0; t < 300; ++t) x = tanh(x * 0.5f) + 0.25f;
    return sum(x);
  };
  Module m = traced(f);
  const ir::Function& fn = *m.impl().lookup("f");
  const codegen::StepGroups g = stepGroupsOf(fn);
  int firstStep = 0;
  while (firstStep < static_cast<int>(fn.ops.size()) && fn.ops[static_cast<std::size_t>(firstStep)].kind != ir::OpKind::Tanh)
    ++firstStep;
  const auto before = std::count_if(g.cuts.begin(), g.cuts.end(), [&](int c) { return c < firstStep; });
  INFO(fn.ops.size() << " ops, recurrence from op " << firstStep << ", " << g.cuts.size() << " cuts, " << before << " before it");
  CHECK(g.cuts.size() >= 10);
  CHECK(before <= 1);
  CHECK(std::adjacent_find(g.cuts.begin(), g.cuts.end(), std::greater_equal<>()) == g.cuts.end()); // ascending
}

TEST_CASE("alias metadata grows linearly with the buffers") {
  auto steps = [](int n) {
    return [n](Tensor x) {
      Tensor m = reshape(x, {8, 8});
      for (int i = 0; i < n; ++i) m = tanh(matmul(m, m)) * 0.5f;
      return sum(m);
    };
  };
  auto size = [&](int n) { return double(lowered(traced(steps(n), 64)).aliasOperands); };
  // Repeated steps share one kernel function now, so the metadata may stop
  // growing at all; it must never grow faster than the program.
  const double a = size(50), b = size(100), c = size(200);
  INFO("sizes " << a << ", " << b << ", " << c);
  CHECK(c - b <= 2.3 * (b - a) + 64);
}

TEST_CASE("repeated kernels are emitted once: an unrolled recurrence grows by calls") {
  auto rnn = [](int n) {
    return [n](Tensor x) {
      Tensor w = reshape(x * 0.01f, {32, 32}), xs = reshape(x, {32, 32}), h = xs[0] * 0;
      for (int t = 0; t < n; ++t) h = tanh(matmul(w, h) + xs[t % 32]);
      return sum(h * h);
    };
  };
  auto instructions = [&](int n) { return double(lowered(traced(rnn(n), 1024)).instructions); };
  const double a = instructions(100), b = instructions(200);
  // Each further step is two calls (matmul, then tanh and add) and their
  // arguments, not a matmul's loops.
  INFO("instructions " << a << ", " << b);
  CHECK((b - a) / 100 < 16);
  // The steps form a run: one loop of calls stepping through the buffers.
  const codegen::FusionPlan plan = codegen::planFusion(*traced(rnn(200), 1024).impl().lookup("f"));
  int longest = 0;
  for (const codegen::Run& r : plan.runs) longest = std::max(longest, r.count);
  CHECK(longest >= 190);
  // And the shared kernels compute what the interpreter computes.
  std::vector<float> xv(1024);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37f * float(i));
  const Array x(xv);
  for (int n : {3, 40}) {
    const Module m = trace(rnn(n), x.type());
    ADJIT_CHECK_CLOSE(jit(rnn(n))(x), m.interpret("f", {x})[0], 1e-4);
    const Module gm = trace([&](Tensor x) { return grad(rnn(n))(x); }, x.type());
    ADJIT_CHECK_CLOSE(grad(rnn(n))(x), gm.interpret("f", {x})[0], 1e-4);
  }
  // Steps reading the two states before them, every state a result: each
  // step's buffers come from its row of the argument table.
  auto rnn2 = [](Tensor x) {
    Tensor w = reshape(x * 0.01f, {32, 32}), xs = reshape(x, {32, 32});
    std::vector<Tensor> hs{xs[0] * 0, xs[1] * 0.1f};
    for (int t = 2; t < 24; ++t) hs.push_back(tanh(matmul(w, hs[hs.size() - 1]) + 0.5f * hs[hs.size() - 2] + xs[t]));
    return std::make_tuple(stack(hs), sum(hs.back() * hs[10]));
  };
  REQUIRE(!codegen::planFusion(*traced(rnn2, 1024).impl().lookup("f")).runs.empty());
  CHECK(jit(rnn2).lower(x).llvm_ir.find("call.args") != std::string::npos); // a table is used
  const Module m2 = trace(rnn2, x.type());
  const std::vector<Array> want = m2.interpret("f", {x});
  auto [states, s] = jit(rnn2)(x);
  ADJIT_CHECK_CLOSE(states, want[0], 1e-5);
  ADJIT_CHECK_CLOSE(s, want[1], 1e-5);
  auto g2 = [&](Tensor x) { return std::get<1>(rnn2(x)); };
  const Module gm2 = trace([&](Tensor x) { return grad(g2)(x); }, x.type());
  ADJIT_CHECK_CLOSE(grad(g2)(x), gm2.interpret("f", {x})[0], 1e-4);
}

TEST_CASE("the gradient of many slices of one tensor adds each slice into its region once") {
  // Each step reads row t of x and one of its first four rows again: the
  // gradient is a sum of a pad per read. As a fused sum every element of x
  // would test every pad; as one pad_sum each read is added into its row.
  auto rows = [](int n) {
    return [n](Tensor x) {
      Tensor xs = reshape(x, {n, 16}), h = xs[0] * 0;
      for (int t = 0; t < n; ++t) h = tanh(h * 0.5f + xs[t] + xs[t % 4]);
      return sum(h * h);
    };
  };
  auto gradOf = [&](int n) { return [n, rows](Tensor x) { return grad(rows(n))(x); }; };
  for (int n : {8, 50}) {
    const Module m = traced(gradOf(n), 16 * n);
    int padSums = 0, pads = 0;
    for (const ir::Op& op : m.impl().lookup("f")->ops) {
      padSums += op.kind == ir::OpKind::PadSum;
      pads += op.kind == ir::OpKind::Pad;
    }
    CHECK(padSums == 1);
    CHECK(pads == 0);
    // Reads of one row are summed before they are placed: n regions, not n + 4n.
    for (const ir::Op& op : m.impl().lookup("f")->ops)
      if (op.kind == ir::OpKind::PadSum) CHECK(op.operands.size() == static_cast<std::size_t>(n));
    std::vector<float> xv(static_cast<std::size_t>(16 * n));
    for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = 0.3f * std::sin(0.37f * float(i));
    const Array x(xv);
    const Module unoptimised = trace(gradOf(n), x.type());
    ADJIT_CHECK_CLOSE(jit(gradOf(n))(x), unoptimised.interpret("f", {x})[0], 1e-5);
  }
  // Code: a few instructions per step (a fused sum of pads: over 50).
  auto size = [&](int n) { return double(lowered(traced(gradOf(n), 16 * n)).instructions); };
  const double a = size(100), b = size(200);
  INFO("instructions " << a << ", " << b);
  CHECK((b - a) / 100 < 20);
  // Work: the loops' points times their ops per point grow with the steps,
  // not with the steps squared.
  auto work = [&](int n) {
    double w = 0;
    for (const codegen::Kernel& k : codegen::planFusion(*traced(gradOf(n), 16 * n).impl().lookup("f")).kernels)
      if (k.kind == codegen::Kernel::Kind::Loop) w += double(num_elements(k.domain)) * std::max(k.bodySize, 1);
    return w;
  };
  const double w1 = work(100), w2 = work(200);
  INFO("work " << w1 << ", " << w2);
  CHECK(w2 < 2.3 * w1);
}

TEST_CASE("a stack of many computed rows is one loop over tables of offsets") {
  // Each step's row gets a buffer; concatenate reads them all through one
  // loop over constant tables of source and destination offsets: no loop,
  // and no stored pointer, per row (either took LLVM seconds at 1,000 rows).
  auto stacked = [](int n) {
    return [n](Tensor x) {
      Tensor xs = reshape(x, {n, 16}), h = xs[0] * 0;
      std::vector<Tensor> hs;
      for (int t = 0; t < n; ++t) {
        h = tanh(h * 0.5f + xs[t]);
        hs.push_back(h * 2.0f + 1.0f);
      }
      return stack(hs);
    };
  };
  auto size = [&](int n) { return double(lowered(traced(stacked(n), 16 * n)).instructions); };
  const double a = size(100), b = size(200);
  INFO("instructions " << a << ", " << b);
  CHECK((b - a) / 100 < 10);
  // A few operands stay inline: each computed in its own loop, no buffers.
  for (int n : {3, 12, 300}) {
    std::vector<float> xv(static_cast<std::size_t>(16 * n));
    for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37f * float(i));
    const Array x(xv);
    ADJIT_CHECK_CLOSE(jit(stacked(n))(x), trace(stacked(n), x.type()).interpret("f", {x})[0], 1e-6);
  }
  const codegen::FusionPlan few = codegen::planFusion(*traced(stacked(3), 48).impl().lookup("f"));
  int lowers = 0;
  for (const codegen::Kernel& k : few.kernels) lowers += k.kind == codegen::Kernel::Kind::Lower;
  CHECK(lowers == 1);
  CHECK(few.kernels.size() <= 2); // the steps' loop (fused into each row) and the concatenate
}

TEST_CASE("steps over the rows of a constant share code: the constant is read from a global") {
  // An unrolled loop over a constant sequence (ADBench's LSTM reads its
  // characters so): each step slices another row. Were the constant computed
  // inside each step's loop, every step would be its own code.
  // (The matmul makes each step a kernel.)
  std::vector<float> rows(64 * 32);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = std::cos(0.11f * float(i));
  const Array seq(rows, {64, 32});
  auto f = [seq](Tensor x) {
    Tensor c = constant(seq), w = reshape(x * 0.01f, {32, 32}), h = reshape(x, {32, 32})[0];
    for (int t = 0; t < 64; ++t) h = tanh(matmul(w, h) * c[t] + 0.5f);
    return sum(h * h);
  };
  const Module tm = traced(f, 1024);
  const codegen::FusionPlan plan = codegen::planFusion(*tm.impl().lookup("f"));
  CHECK(plan.str().find("global %") != std::string::npos);
  int longest = 0;
  for (const codegen::Run& r : plan.runs) longest = std::max(longest, r.count);
  CHECK(longest >= 60);
  std::vector<float> xv(1024);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37f * float(i));
  const Array x(xv);
  const Module m = trace(f, x.type());
  ADJIT_CHECK_CLOSE(jit(f)(x), m.interpret("f", {x})[0], 1e-5);
  const Module gm = trace([&](Tensor x) { return grad(f)(x); }, x.type());
  ADJIT_CHECK_CLOSE(grad(f)(x), gm.interpret("f", {x})[0], 1e-4);
}

TEST_CASE("a repeated kernel with many buffers is called through the argument table") {
  // Each step reads the eight states before it: a shared kernel of more
  // buffers than go in registers. Its call sites pass a row of the argument
  // table, so a step costs a few instructions however many buffers it reads.
  // (The matmul keeps every state in a buffer.)
  auto net = [](int n) {
    return [n](Tensor x) {
      Tensor w = reshape(x * 0.01f, {32, 32}), xs = reshape(x, {32, 32});
      std::vector<Tensor> hs;
      for (int t = 0; t < 8; ++t) hs.push_back(xs[t] * 0.1f);
      for (int t = 8; t < n; ++t) {
        Tensor acc = matmul(w, hs.back()) + xs[t % 32];
        for (int k = 1; k <= 8; ++k) acc = acc + hs[hs.size() - std::size_t(k)] * (0.1f * float(k));
        hs.push_back(tanh(acc));
      }
      return sum(hs.back() * hs.back());
    };
  };
  auto instructions = [&](int n) { return double(lowered(traced(net(n), 1024)).instructions); };
  const double a = instructions(100), b = instructions(200);
  INFO("instructions " << a << ", " << b);
  CHECK((b - a) / 100 < 40);
  std::vector<float> xv(1024);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37f * float(i));
  const Array x(xv);
  CHECK(jit(net(40)).lower(x).llvm_ir.find("call.args") != std::string::npos);
  for (int n : {12, 40}) {
    const Module m = trace(net(n), x.type());
    ADJIT_CHECK_CLOSE(jit(net(n))(x), m.interpret("f", {x})[0], 1e-4);
    const Module gm = trace([&](Tensor x) { return grad(net(n))(x); }, x.type());
    ADJIT_CHECK_CLOSE(grad(net(n))(x), gm.interpret("f", {x})[0], 1e-4);
  }
}

TEST_CASE("a 200,000-op chain goes through every stage without deep recursion") {
  // Trace, passes, plan and lowering, the module printed and parsed back;
  // then its gradient (600,000 ops). A recursion as deep as the program
  // overflows the stack long before this size.
  const Module m = traced(distinctChain(200000));
  const auto s = lowered(m);
  CHECK(s.functions > 200);
  CHECK(s.maxFunctionInstructions < 4000);
  const std::string text = m.str();
  CHECK(Module::parse(text).str() == text);
  Module g = trace(grad(distinctChain(200000)), Type{DType::f32, {8}});
  transforms::runPipeline(g.impl(), transforms::defaultPipeline());
  CHECK(lowered(g).functions > 200);
}

TEST_CASE("programs split across functions compute what the interpreter computes") {
  // Buffers pass between functions: x is read again at the end, and so is a
  // value from the middle of the chain.
  auto f = [](Tensor x) {
    Tensor y = x, mid = x;
    for (int i = 0; i < 900; ++i) {
      y = i % 3 == 0 ? sin(y) : i % 3 == 1 ? y * (1.01f + 1e-6f * float(i)) : y + 0.1f;
      if (i == 300) mid = exp(y * 0.01f);
    }
    return std::make_tuple(sum(y * mid + x), y);
  };
  std::vector<float> xs(257);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(float(i)) * 2;
  const Array x(xs);
  const Module m = trace(f, x.type());
  REQUIRE(codegen::planFusion(*traced(f, 257).impl().lookup("f")).functions > 2);
  const std::vector<Array> want = m.interpret("f", {x});
  auto [s, y] = jit(f)(x);
  // f32 over 900 steps: sin is within 4 ulp in vector code, the sum reassociates.
  ADJIT_CHECK_CLOSE(y, want[1], 1e-4);
  ADJIT_CHECK_CLOSE(s, want[0], 1e-4);
}

TEST_CASE("einsum written with broadcasts runs as a matmul, forward and gradient") {
  // qd[n,k,r] = sum_c Q[k,r,c] d[n,k,c]; its gradients are contractions too.
  auto f = [](Tensor q, Tensor d) {
    Tensor qd = sum(reshape(q, {1, 5, 6, 7}) * reshape(d, {40, 5, 1, 7}), {3});
    return sum(qd * qd);
  };
  std::vector<double> qv(5 * 6 * 7), dv(40 * 5 * 7);
  for (std::size_t i = 0; i < qv.size(); ++i) qv[i] = std::sin(0.3 * double(i));
  for (std::size_t i = 0; i < dv.size(); ++i) dv[i] = std::cos(0.7 * double(i));
  const Array q(qv, {5, 6, 7}), d(dv, {40, 5, 7});
  // The optimised IR has matmuls and no broadcast product.
  const std::string opt = jit(f).lower(q, d).optimized_adj;
  CHECK(opt.find("matmul") != std::string::npos);
  auto vg = value_and_grad(f, argnums<0, 1>);
  const std::string optGrad = jit(vg).lower(q, d).optimized_adj;
  std::size_t matmuls = 0;
  for (std::size_t at = optGrad.find("= matmul("); at != std::string::npos; at = optGrad.find("= matmul(", at + 1)) ++matmuls;
  CHECK(matmuls == 3); // the forward and one per gradient
  // dQ[k,r,c] = sum_n dqd[n,k,r] d[n,k,c] reads dqd ([n,k,r], r innermost) transposed in place.
  CHECK(optGrad.find("{transpose_a = true}") != std::string::npos);
  // Values: against the reference interpreter on the traced (uncontracted) IR.
  const Module m = trace(vg, q.type(), d.type());
  const std::vector<Array> want = m.interpret("f", {q, d});
  auto [v, g] = vg(q, d);
  ADJIT_CHECK_CLOSE(v, want[0], 1e-12);
  ADJIT_CHECK_CLOSE(std::get<0>(g), want[1], 1e-12);
  ADJIT_CHECK_CLOSE(std::get<1>(g), want[2], 1e-12);
}

TEST_CASE("contract leaves a function whose sums of products are all small untouched") {
  // An unrolled LSTM's gradient sums thousands of small products, none worth
  // a matmul; rebuilding its op list for them cost a tenth of the passes.
  auto f = [](Tensor a, Tensor b) {
    Tensor s = sum(reshape(a, {1, 4, 3}) * reshape(b, {5, 1, 3}), {2}); // a 60-element product
    return sum(s * s);
  };
  Module m = trace(f, Type{DType::f64, {4, 3}}, Type{DType::f64, {5, 3}});
  ir::Function& fn = *m.impl().lookup("f");
  const ir::Op* before = fn.ops.data();
  const std::string text = m.str();
  transforms::contract(m.impl());
  CHECK(fn.ops.data() == before); // not rebuilt
  CHECK(m.str() == text);
}

TEST_CASE("every libm function an op declares is vectorised through libmvec") {
  // Each op block names the libm function its lowering calls (Hooks::libm);
  // compiled for AVX2, a loop of the op calls the 8-lane f32 variant, not
  // eight scalar calls. A new math op that forgot its declaration fails here.
  int checked = 0;
  for (ir::OpKind k : ir::allOps()) {
    const ir::OpInfo& info = ir::info(k);
    if (!codegen::lowering(k).libm.name || !codegen::lowering(k).libm.vector) continue;
    CAPTURE(info.name);
    REQUIRE(info.has(ir::kElementwise));
    std::string params, operands;
    for (int i = 0; i < info.arity; ++i) {
      params += (i ? ", " : "") + std::string("%") + std::to_string(i) + ": f32[1024]";
      operands += (i ? ", %" : "%") + std::to_string(i);
    }
    const std::string text = "func @f(" + params + ") -> (f32[1024]) {\n  %r = " + std::string(info.name) + "(" +
                             operands + ") : f32[1024]\n  return %r\n}\n";
    Module m = Module::parse(text);
    CompiledStages stages;
    engine::compile({.module = m.impl(), .function = "f", .options = {.optLevel = 2, .cpu = "x86-64-v3"}}, &stages);
    const std::string variant =
        "_ZGVdN8" + std::string(static_cast<std::size_t>(codegen::lowering(k).libm.arity), 'v') + "_" + codegen::lowering(k).libm.name + "f";
    CHECK_MESSAGE(stages.assembly.find(variant) != std::string::npos, "no call of " << variant);
    ++checked;
  }
  CHECK(checked >= 9); // exp log log1p expm1 sin cos tanh sigmoid pow
}

TEST_CASE("rows and reshapes of buffers are views: read in place, no copies, same results") {
  // Rows of a parameter go to a jitted call and into a loop; a row of an
  // intermediate (a view whose buffer must outlive the loop that wrote it)
  // feeds a matmul; a result is a reshape of a row (copied at the end).
  auto step = jit([](Tensor w, Tensor h, Tensor x) { return tanh(matmul(w, h) + x); }, {.name = "step"});
  auto f = [step](Tensor w, Tensor xs) {
    Tensor h = reshape(xs[0], {16, 1});
    for (int t = 1; t < 6; ++t) h = step(w, h, reshape(xs[t], {16, 1}));
    Tensor both = matmul(xs, w);          // [8,16]
    Tensor row = reshape(both[3], {1, 16}); // a view of the matmul's buffer
    Tensor last = reshape(xs[7], {16});
    return std::make_tuple(sum(h) + sum(matmul(row, w)), last, reshape(xs[2], {4, 4}));
  };
  std::vector<float> wv(256), xv(128);
  for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = 0.2f * std::sin(0.3f * float(i));
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::cos(0.7f * float(i));
  const Array w(wv, {16, 16}), xs(xv, {8, 16});
  Module m = trace(f, w.type(), xs.type());
  transforms::runPipeline(m.impl(), transforms::defaultPipeline());
  const codegen::FusionPlan plan = codegen::planFusion(*m.impl().lookup("f"));
  int views = 0;
  for (const codegen::Placement& p : plan.place) views += p.where == codegen::Storage::View;
  CHECK(views >= 10);
  // No loop reads a row through a slice: calls and matmuls read rows in place.
  const ir::Function& fn = *m.impl().lookup("f");
  std::vector<std::string_view> opOf(fn.types.size());
  for (const ir::Op& op : fn.ops)
    for (ir::ValueId r : op.results) opOf[static_cast<std::size_t>(r)] = ir::info(op.kind).name;
  for (const codegen::Kernel& k : plan.kernels)
    for (ir::ValueId v : k.fused) CHECK(opOf[static_cast<std::size_t>(v)] != "slice");
  const std::vector<Array> want = m.interpret("f", {w, xs});
  auto [s, last, sq] = jit(f)(w, xs);
  ADJIT_CHECK_CLOSE(s, want[0], 1e-5);
  ADJIT_CHECK_CLOSE(last, want[1], 0);
  ADJIT_CHECK_CLOSE(sq, want[2], 0);
  // And the gradient, where rows of cotangents are padded back.
  auto g = grad([f](Tensor w, Tensor xs) { return std::get<0>(f(w, xs)); }, argnums<0, 1>);
  Module gm = trace([&](Tensor w, Tensor xs) { return g(w, xs); }, w.type(), xs.type());
  const std::vector<Array> gw = gm.interpret("f", {w, xs});
  auto [dw, dxs] = g(w, xs);
  ADJIT_CHECK_CLOSE(dw, gw[0], 1e-4);
  ADJIT_CHECK_CLOSE(dxs, gw[1], 1e-4);
}

TEST_CASE("a reshape of a computed value reads it at the same element, its axes mapped without division") {
  // Each reshape reads a value computed in the loop (a transpose, so not its
  // own buffer's order) and is read through a broadcast or transpose, so the
  // loop is a nest: unit axes inserted and removed, axes merged (mapped axis
  // by axis), an axis split (through the linear position), and rank 0.
  auto f = [](Tensor x, Tensor y, Tensor s) {
    Tensor xt = transpose(x, {1, 0}) * 2.0 + 1.0;                                  // [6,4]
    Tensor unit = broadcast_to(reshape(xt, {6, 1, 4}), {6, 3, 4});                  // a unit axis
    Tensor mixed = transpose(reshape(xt, {1, 6, 1, 4, 1}), {3, 1, 0, 2, 4});        // units and a transpose
    Tensor merged = transpose(reshape(transpose(y, {2, 1, 0}) - 0.5, {10, 3}), {1, 0}); // [5,2,3] -> [10,3]
    Tensor split = transpose(reshape(xt + 0.25, {2, 3, 4}), {2, 0, 1});              // [6,4] -> [2,3,4]
    Tensor scalar = broadcast_to(reshape(s * 3.0, {}), {2, 2});                     // [1,1] -> []
    return std::make_tuple(unit, mixed, merged, split, scalar);
  };
  std::vector<double> xv(24), yv(30);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = double(i) - 7.0;
  for (std::size_t i = 0; i < yv.size(); ++i) yv[i] = 0.5 * double(i);
  const Array x(xv, {4, 6}), y(yv, {3, 2, 5}), s(std::vector<double>{1.5}, {1, 1});
  const std::vector<Array> want = trace(f, x.type(), y.type(), s.type()).interpret("f", {x, y, s});
  auto [unit, mixed, merged, split, scalar] = jit(f)(x, y, s);
  ADJIT_CHECK_CLOSE(unit, want[0], 0);
  ADJIT_CHECK_CLOSE(mixed, want[1], 0);
  ADJIT_CHECK_CLOSE(merged, want[2], 0);
  ADJIT_CHECK_CLOSE(split, want[3], 0);
  ADJIT_CHECK_CLOSE(scalar, want[4], 0);
  CHECK(unit.shape() == Shape{6, 3, 4});
  CHECK(mixed.shape() == Shape{4, 6, 1, 1, 1});
}

/// sin(0.37 i + phase) · scale at every element i of an array of type t.
Array wave(Type t, double phase, double scale = 1.0) {
  Array a(t);
  auto fill = [&](auto* data) {
    for (int64_t i = 0; i < t.size(); ++i) data[i] = static_cast<std::remove_pointer_t<decltype(data)>>(std::sin(0.37 * double(i) + phase) * scale);
  };
  if (t.dtype == DType::f32) fill(a.data<float>());
  else if (t.dtype == DType::f64) fill(a.data<double>());
  else fill(a.data<int32_t>());
  return a;
}

/// Checks that f's product (a matmul) runs loops on its tiles as `fused`
/// says ("tile epilogue", "tile prologue"; neither when empty), and that the
/// JIT's results match the interpreter's, with the same bits on one thread
/// and on all.
template <class F> void checkTiles(F f, std::vector<std::string> fused, const Array& x, const Array& w, const Array& b) {
  auto jf = jit(f);
  const std::string plan = jf.lower(x, w, b).plan;
  INFO(plan);
  for (const char* kind : {"tile epilogue", "tile prologue"})
    CHECK((plan.find(kind) != std::string::npos) == (std::find(fused.begin(), fused.end(), kind) != fused.end()));
  const std::vector<Array> want = trace(f, x.type(), w.type(), b.type()).interpret("f", {x, w, b});
  auto [y, z] = jf(x, w, b);
  const double rtol = x.dtype() == DType::f32 ? 1e-4 : 1e-12; // sums of products, reassociated
  ADJIT_CHECK_CLOSE(y, want[0], rtol);
  ADJIT_CHECK_CLOSE(z, want[1], rtol);
  auto [y1, z1] = jit(f, {.threads = 1})(x, w, b);
  CHECK(bytesOf(y1) == bytesOf(y));
  CHECK(bytesOf(z1) == bytesOf(z));
}

/// A product for the tile tests: A (x) and B (w) as stored, and their flags.
struct ProductCase {
  std::string what;
  Shape x, w;
  bool ta = false, tb = false;
};

/// The generated kernels' three ways through a product, and plain loops.
const std::vector<ProductCase>& productCases() {
  static const std::vector<ProductCase> cases{
      {"packed, two blocks of k", {130, 600}, {600, 140}},
      {"packed, transposed A", {600, 130}, {600, 140}, true},
      {"packed, transposed B, edge panels", {301, 520}, {1100, 520}, false, true},
      {"packed, large enough for threads", {256, 512}, {512, 512}},
      {"direct", {64, 70}, {70, 96}},
      {"dot", {50, 200}, {40, 200}, false, true},
      {"plain loops (narrow)", {64, 8}, {8, 3}},
      {"batched", {3, 40, 50}, {3, 50, 60}},
  };
  return cases;
}

TEST_CASE("a matmul's elementwise consumer runs on each tile of the product, and its producers on the tiles it packs") {
  // Two results of one loop over the product: y reads it, and z = exp(b)
  // does not but is written first, in the product's place; every root's
  // value at a point is computed before any is stored.
  auto layer = [](bool ta, bool tb) {
    return [=](Tensor x, Tensor w, Tensor b) {
      Tensor c = matmul(x, w, {.transpose_a = ta, .transpose_b = tb});
      Tensor bb = broadcast_to(b, c.shape());
      return std::make_tuple(exp(bb * 0.1), tanh(c * 0.05 + bb) * c);
    };
  };
  // The same with both operands computed: the packed kernel computes them
  // itself, on the panels it packs; the others read them from buffers.
  auto produced = [](bool ta, bool tb) {
    return [=](Tensor x, Tensor w, Tensor b) {
      Tensor c = matmul(tanh(x), exp(w * 0.1), {.transpose_a = ta, .transpose_b = tb});
      Tensor bb = broadcast_to(b, c.shape());
      return std::make_tuple(bb * 2.0, c + bb);
    };
  };
  const codegen::VectorUnit unit = codegen::vectorUnit(*codegen::createTargetMachine({}));
  for (DType t : {DType::f32, DType::f64})
    for (const ProductCase& c : productCases()) {
      CAPTURE(c.what);
      CAPTURE(t);
      const Type xt{t, c.x}, wt{t, c.w};
      const Shape cs = trace(layer(c.ta, c.tb), xt, wt, Type{t, {1}}).impl().lookup("f")->types.back().shape;
      const Array x = wave(xt, 0.1), w = wave(wt, 0.7, 0.2), b = wave(Type{t, {cs.back()}}, 1.3);
      checkTiles(layer(c.ta, c.tb), {"tile epilogue"}, x, w, b);
      // Prologues where this target's kernel packs the operands.
      const std::size_t r = c.x.size();
      const codegen::GemmShape gs{t, num_elements(cs) / (cs[r - 2] * cs[r - 1]), cs[r - 2], cs[r - 1],
                                  c.ta ? c.x[r - 2] : c.x[r - 1], c.ta, c.tb};
      std::vector<std::string> tiles{"tile epilogue"};
      if (codegen::packsOperands(gs, unit)) tiles.push_back("tile prologue");
      CHECK((c.what.starts_with("packed") ? codegen::packsOperands(gs, unit) : true));
      checkTiles(produced(c.ta, c.tb), tiles, x, w, b);
    }
  // Integers: plain loops.
  auto integers = [](Tensor x, Tensor w, Tensor b) {
    Tensor c = matmul(x, w), bb = broadcast_to(b, c.shape());
    return std::make_tuple(bb + bb, (c + bb) * c);
  };
  checkTiles(integers, {"tile epilogue"}, wave(Type{DType::i32, {20, 30}}, 0, 9), wave(Type{DType::i32, {30, 40}}, 1, 9),
             wave(Type{DType::i32, {40}}, 2, 9));
  // The loop writes its first result in the place of d, which only its
  // second reads: every result's value at a point is computed before any is
  // stored. (c is written before d, so the loop runs on d's tiles.)
  auto order = [](Tensor x, Tensor w, Tensor v) {
    Tensor c = matmul(x, w), d = matmul(x, v);
    Tensor first = c * 2.0;         // d's place
    Tensor second = tanh(d) + c;
    return std::make_tuple(first, second);
  };
  checkTiles(order, {"tile epilogue"}, wave(Type{DType::f64, {64, 70}}, 0.1), wave(Type{DType::f64, {70, 96}}, 0.7, 0.2),
             wave(Type{DType::f64, {70, 96}}, 1.3, 0.2));
  // A consumer reading the product at another point runs after it.
  auto transposed = [](Tensor x, Tensor w, Tensor b) {
    Tensor c = matmul(x, w);
    return std::make_tuple(c + transpose(c, {1, 0}) + b, b * 2.0);
  };
  checkTiles(transposed, {}, wave(Type{DType::f32, {96, 80}}, 0), wave(Type{DType::f32, {80, 96}}, 1, 0.1),
             wave(Type{DType::f32, {96}}, 2));
}

TEST_CASE("a matmul's reducing consumer folds each tile into partial results, the same bits on any number of threads") {
  // Each returns the reduction and a value not read from the product.
  auto squaredError = [](bool ta, bool tb) { // a loss: the product is never stored
    return [=](Tensor x, Tensor w, Tensor y) {
      Tensor e = matmul(x, w, {.transpose_a = ta, .transpose_b = tb}) - y;
      return std::make_tuple(sum(e * e), y * 2.0);
    };
  };
  auto rowMax = [](bool ta, bool tb) { // rows kept: partial results per row of a cell
    return [=](Tensor x, Tensor w, Tensor y) {
      return std::make_tuple(max(matmul(x, w, {.transpose_a = ta, .transpose_b = tb}) * 0.5 + y, {-1}), y * 2.0);
    };
  };
  auto matrixSums = [](bool ta, bool tb) { // a batch's matrices kept (terms of one sign: f32 sums compare closely)
    return [=](Tensor x, Tensor w, Tensor y) {
      Tensor c = matmul(x, w, {.transpose_a = ta, .transpose_b = tb});
      return std::make_tuple(sum(c * c + y * y, {-2, -1}), y * 2.0);
    };
  };
  auto stored = [](bool ta, bool tb) { // an elementwise result and a reduction in one loop
    return [=](Tensor x, Tensor w, Tensor y) {
      Tensor c = matmul(x, w, {.transpose_a = ta, .transpose_b = tb});
      return std::make_tuple(tanh(c) + y, min(c * c - y, {-2, -1}));
    };
  };
  auto check = [](auto f, const Array& x, const Array& w, const Array& y) {
    auto jf = jit(f);
    const std::string plan = jf.lower(x, w, y).plan;
    INFO(plan);
    CHECK(plan.find("partials each") != std::string::npos);
    const std::vector<Array> want = trace(f, x.type(), w.type(), y.type()).interpret("f", {x, w, y});
    auto [r, s] = jf(x, w, y);
    const double rtol = x.dtype() == DType::f32 ? 1e-3 : 1e-10; // sums of many products, in another order
    ADJIT_CHECK_CLOSE(r, want[0], rtol);
    ADJIT_CHECK_CLOSE(s, want[1], rtol);
    for (int threads : {1, 3}) {
      CAPTURE(threads);
      auto [r1, s1] = jit(f, {.threads = threads})(x, w, y);
      CHECK(bytesOf(r1) == bytesOf(r));
      CHECK(bytesOf(s1) == bytesOf(s));
    }
  };
  for (DType t : {DType::f32, DType::f64})
    for (const ProductCase& c : productCases()) {
      CAPTURE(c.what);
      CAPTURE(t);
      const Type xt{t, c.x}, wt{t, c.w};
      auto product = [&](Tensor x, Tensor w) { return matmul(x, w, {.transpose_a = c.ta, .transpose_b = c.tb}); };
      const Shape cs = trace(product, xt, wt).impl().lookup("f")->types.back().shape;
      const Array x = wave(xt, 0.1), w = wave(wt, 0.7, 0.2), y = wave(Type{t, cs}, 1.3); // y: the product's shape
      check(squaredError(c.ta, c.tb), x, w, y);
      check(rowMax(c.ta, c.tb), x, w, y);
      check(matrixSums(c.ta, c.tb), x, w, y);
      check(stored(c.ta, c.tb), x, w, y);
    }
  // Integers: plain loops, one cell per matrix.
  const Array xi = wave(Type{DType::i32, {20, 30}}, 0, 9), wi = wave(Type{DType::i32, {30, 40}}, 1, 9);
  const Array yi = wave(Type{DType::i32, {20, 40}}, 2, 9);
  check([](Tensor x, Tensor w, Tensor y) { return std::make_tuple(sum(matmul(x, w) * y), y * 2); }, xi, wi, yi);
  check([](Tensor x, Tensor w, Tensor y) { return std::make_tuple(max(matmul(x, w) - y, {-1}), y * 2); }, xi, wi, yi);
}

TEST_CASE("the SLP vectoriser is off: a small product before a switch keeps every lane, at every level") {
  // LLVM 19's SLP vectoriser built the lower-right 2x2 of e @ e^T from poison
  // here at -O2 on AVX-512 (the unrolled 4x4 product, gathered into <8 x
  // double> shuffles). Every level and the CPU levels CTest runs this under
  // (unit.x86-64-v2, -v3) must agree with the interpreter.
  auto f = [](Tensor x, Tensor k) {
    Tensor e = x * x;
    Tensor m = matmul(e, e, {.transpose_b = true});
    Tensor r = switch_case(k, std::tuple{[](Tensor t) { return t; }, [](Tensor t) { return sin(t); }}, m);
    return std::pair{r, matmul(r, e)};
  };
  const Array x = f64({0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}, {4, 2});
  const Module m = trace(f, x.type(), Type{DType::i32, {}});
  for (int32_t k : {0, 1}) {
    const std::vector<Array> want = m.interpret("f", {x, Array(k)});
    for (int level = 0; level <= 3; ++level) {
      INFO("-O" << level << ", branch " << k);
      auto [r, y] = jit(f, {.opt_level = level})(x, Array(k));
      ADJIT_CHECK_CLOSE(r, want[0], 1e-12);
      ADJIT_CHECK_CLOSE(y, want[1], 1e-12);
    }
  }
}

TEST_CASE("a transcendental a max's gradient compares is computed once, so the comparison finds the maximum") {
  // sin(w) feeds reduce_max over a leading axis (a reduction kernel) and the
  // rule's x == max(x). Computed in each kernel, once by libmvec's vector
  // variant and once by scalar glibc, the last bits differed and no element
  // matched: a zero gradient and a NaN JVP at -O2.
  auto f = [](Tensor w) { return sum(max(sin(w), {0})); };
  // Over the middle axis of a [3,17,4]: vectorised in one kernel, not in the other.
  auto h = [](Tensor w) { return sum(max(log1p(w * w), {1})); };
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-2, 2);
  for (int level = 0; level <= 3; ++level) {
    auto gf = jit(grad(f), {.opt_level = level});
    auto gh = jit(grad(h), {.opt_level = level});
    for (int t = 0; t < 20; ++t) {
      INFO("-O" << level << ", trial " << t);
      const Array w = f64({u(rng), u(rng)}, {2, 1});
      const double a = w.at(0), b = w.at(1);
      const double top = std::sin(a) >= std::sin(b) ? a : b;
      const Array g = gf(w);
      CHECK(g.at(0) == doctest::Approx(top == a ? std::cos(a) : 0.0));
      CHECK(g.at(1) == doctest::Approx(top == b ? std::cos(b) : 0.0));
      const auto [y, dy] = jvp(f, std::tuple{w}, std::tuple{f64({1, 1}, {2, 1})});
      CHECK(dy.at(0) == doctest::Approx(std::cos(top)));
      // The max's rule: one nonzero share per reduced slice (3 x 4 of them).
      std::vector<double> v(3 * 17 * 4);
      for (double& x : v) x = u(rng);
      const Array gv = gh(f64(v, {3, 17, 4}));
      int nonzero = 0;
      for (int64_t i = 0; i < gv.size(); ++i) nonzero += gv.at(i) != 0;
      CHECK(nonzero == 12);
    }
  }
}

TEST_CASE("scatter_add with known indices sums each element's run of updates: values as the interpreter's") {
  // Along axis 1 of [2, 5, 3]: -1 wraps to 4, 7 and -9 are dropped, element
  // 4 gets six updates (one group of four partial sums and a tail of two),
  // element 3 none. Codegen reads the indices when compiling
  // (lowerScatterAddKnown); the interpreter adds one update at a time.
  const std::vector<int32_t> idx{4, 0, -1, 4, 7, 4, 2, 4, -9, 1, 4};
  const int64_t n = static_cast<int64_t>(idx.size());
  std::vector<double> xv(2 * 5 * 3), uv(static_cast<std::size_t>(2 * n * 3));
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.7 * double(i));
  for (std::size_t i = 0; i < uv.size(); ++i) uv[i] = std::cos(1.3 * double(i)) * 1e3;
  const Array x(xv, {2, 5, 3}), u(uv, {2, n, 3});
  auto f = [&](Tensor x, Tensor u) { return scatter_add(x, constant(Array(idx, {n})), u * 2.0, 1); };
  const Module m = trace(f, x.type(), u.type());
  ADJIT_CHECK_CLOSE(jit(f)(x, u), m.interpret("f", {x, u})[0], 1e-13);
  // Integers: the same sums exactly.
  auto fi = [&](Tensor x, Tensor u) { return scatter_add(x, constant(Array(idx, {n})), u, 1); };
  std::vector<int32_t> xiv, uiv;
  for (double v : xv) xiv.push_back(static_cast<int32_t>(v * 100));
  for (double v : uv) uiv.push_back(static_cast<int32_t>(v));
  const Array xi(xiv, {2, 5, 3}), ui(uiv, {2, n, 3});
  const Module mi = trace(fi, xi.type(), ui.type());
  CHECK(jit(fi)(xi, ui).to_vector<int32_t>() == mi.interpret("f", {xi, ui})[0].to_vector<int32_t>());
  // A gather's gradient, its indices wrapped and clamped by ops on constants.
  auto g = [&](Tensor x) { return sum(square(take(reshape(x, {30}), constant(Array(idx, {n})) * 3))); };
  const Array flat(xv, {30});
  const Module gm = trace([&](Tensor x) { return grad(g)(x); }, flat.type());
  ADJIT_CHECK_CLOSE(grad(g)(flat), gm.interpret("f", {flat})[0], 1e-13);
}

TEST_CASE("scatter_adds alike but for their indices may share code: each sums by its own indices") {
  // Two scatters of one shape whose index constants differ, each large enough
  // for the plan to emit them as one shared kernel, which must then not bake
  // in either one's indices. Integer-valued updates: the sums are exact.
  const int64_t rows = 1024, n = 16;
  const std::vector<int32_t> i1{0, 1, 1, 3, 4, 0, 2, 1, 1, 1, 3, 0, -1, 2, 2, 1}, i2{3, 3, 2, 0, 3, 1, 3, 3, 3, 3, 0, 0, 1, 2, 3, 3};
  std::vector<double> uv(rows * n), want(rows * 8, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const double u = uv[r * n + j] = static_cast<double>((r * 5 + j * 3) % 17);
      if (i1[j] < 4) want[r * 8 + (i1[j] + 4) % 4] += 3 * u; // 4 is out of range: dropped; -1 is 3
      want[r * 8 + 4 + i2[j]] += 3 * u;
    }
  auto f = [&](Tensor u) {
    Tensor zero = full({rows, 4}, 0.0, DType::f64);
    return concatenate({scatter_add(zero, constant(Array(i1, {n})), u * 3.0, 1),
                        scatter_add(zero, constant(Array(i2, {n})), u * 3.0, 1)}, 1);
  };
  const Array u(uv, {rows, n});
  Module planned = trace(f, u.type());
  transforms::runPipeline(planned.impl(), transforms::defaultPipeline());
  const std::string plan = codegen::planFusion(*planned.impl().lookup("f")).str();
  INFO(plan);
  CHECK(plan.find("code of") != std::string::npos);
  CHECK(jit(f)(u).to_vector<double>() == want);
}

namespace {

/// sin(0.37 i + phase) over `shape`, in dtype t.
Array waves(Shape shape, DType t, double phase) {
  std::vector<double> v(static_cast<std::size_t>(num_elements(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37 * double(i) + phase);
  if (t == DType::f64) return Array(v, std::move(shape));
  return Array(std::vector<float>(v.begin(), v.end()), std::move(shape));
}

/// Checks f(x, y) jitted against the interpreter, and whether its plan cuts
/// a loop's last axis into pieces (and, with `threads`, splits it into chunks).
template <class F> void checkPeeled(const F& f, const Array& x, const Array& y, bool peeled, int threads = 1) {
  const Module m = trace(f, x.type(), y.type());
  const Array want = m.interpret("f", {x, y})[0];
  auto g = jit(f, {.threads = threads});
  const std::string plan = g.lower(x, y).plan;
  INFO(plan);
  CHECK((plan.find("last axis in pieces") != std::string::npos) == peeled);
  if (threads > 1) CHECK(plan.find("chunks of") != std::string::npos);
  ADJIT_CHECK_CLOSE(g(x, y), want, x.dtype() == DType::f32 ? 1e-5 : 1e-12);
}

/// A Runge-Kutta stage: y one point back, shifted again through a product.
Tensor shift2(const Tensor& x, const Tensor& y) {
  const int64_t n = x.shape()[0];
  Tensor a = pad(slice(y, {0}, {n - 1}), {1}, {0}) * x;
  return pad(slice(a, {0}, {n - 1}), {1}, {0}) + a * y;
}

} // namespace

// Each case compiles once: the cases share out the dtypes and sizes (below a
// vector, the smallest peeled loop, loops split into chunks for threads).
TEST_CASE("pads fused into a loop read their operands where the loop is cut, and compute what the interpreter computes") {
  const DType f32 = DType::f32, f64 = DType::f64;
  auto in = [](Shape s, DType t) { return std::pair{waves(s, t, 0.1), waves(s, t, 0.7)}; };
  {
    auto [x, y] = in({3}, f64); // fewer points than a vector: not cut
    checkPeeled(shift2, x, y, false);
  }
  {
    auto [x, y] = in({32}, f32);
    checkPeeled(shift2, x, y, true);
  }
  {
    auto [x, y] = in({40000}, f64); // chunks of rows, each cut where it crosses a piece
    checkPeeled(shift2, x, y, true, 2);
  }
  {
    // The transpose of a shift: one point ahead, zero at the end; and by 3 both ways.
    auto back = [](Tensor x, Tensor y) {
      const int64_t n = x.shape()[0];
      Tensor a = pad(slice(x * y, {1}, {n}), {0}, {1});
      return a + pad(slice(exp(y), {0}, {n - 3}), {3}, {0}) + pad(slice(x, {3}, {n}), {0}, {3});
    };
    auto [x, y] = in({1000}, f32);
    checkPeeled(back, x, y, true);
  }
  {
    // Pads wider than their operand, whose zeros fill whole pieces, and a pad of nothing.
    auto wide = [](Tensor x, Tensor y) {
      const int64_t n = x.shape()[0];
      Tensor p = pad(x * y, {2 * n + 5}, {n + 40}) + pad(y, {n + 40}, {2 * n + 5});
      return p * p + pad(pad(x, {0}, {0}), {3 * n + 45}, {0});
    };
    auto [x, y] = in({5}, f64);
    checkPeeled(wide, x, y, true);
  }
  {
    // Interior padding is left to the select (never cut), and still right.
    auto interior = [](Tensor x, Tensor y) { return pad(x, {1}, {0}, {1}) + pad(sin(y), {0}, {1}, {1}); };
    auto [x, y] = in({64}, f32);
    checkPeeled(interior, x, y, false);
  }
  {
    // A sum over the shifted axis, over chunks with partial sums.
    auto total = [](Tensor x, Tensor y) {
      const int64_t n = x.shape()[0];
      return sum(pad(slice(x, {0}, {n - 1}), {1}, {0}) * y) + sum(x);
    };
    auto [x, y] = in({40000}, f32);
    checkPeeled(total, x, y, true, 2);
  }
  {
    // Rows: the last axis of a nest, its rows kept (split into chunks of
    // rows for threads), or summed.
    auto rows = [](Tensor x, Tensor y) {
      return pad(slice(x, {0, 2}, {40, 1000}), {0, 0}, {0, 2}) * y + pad(slice(y, {1, 0}, {40, 998}), {0, 2}, {1, 0});
    };
    auto [x, y] = in({40, 1000}, f64);
    checkPeeled(rows, x, y, true, 2);
    auto rowSums = [](Tensor x, Tensor y) {
      return broadcast_to(sum(pad(slice(x, {0, 2}, {40, 600}), {0, 0}, {0, 2}) * y, {1}, true), {40, 600}) + y;
    };
    auto [x32, y32] = in({40, 600}, f32);
    checkPeeled(rowSums, x32, y32, true);
  }
}

// A loop storing a transpose of what it computes, whose operand reads rows of
// two or more buffers, runs along the operand's rows and stores through a
// tile transposed in registers (Kernel::swapped): same bits as the
// interpreter for sizes that are and are not multiples of a vector, with
// pads cut along the inner axis, a leading axis, and sizes below a vector.
TEST_CASE("a transpose of work reading buffer rows runs along those rows, and stores what the interpreter computes") {
  auto check = [](const auto& f, const Array& x, const Array& y, bool swapped) {
    const Module m = trace(f, x.type(), y.type());
    const Array want = m.interpret("f", {x, y})[0];
    auto g = jit(f, {.threads = 1});
    const std::string plan = g.lower(x, y).plan;
    INFO(plan);
    CHECK((plan.find("last two axes' loops exchanged") != std::string::npos) == swapped);
    CHECK(bytesOf(g(x, y)) == bytesOf(want));
  };
  auto shifted = [](Tensor x, Tensor y) {
    const int64_t m = x.shape()[0], n = x.shape()[1];
    const Tensor a = x * y;
    return transpose(pad(slice(a, {0, 0}, {m, n - 1}), {0, 1}, {0, 0}) + a + y, {1, 0});
  };
  check(shifted, waves({37, 45}, DType::f64, 0.1), waves({37, 45}, DType::f64, 0.7), true);
  check(shifted, waves({64, 48}, DType::f32, 0.1), waves({64, 48}, DType::f32, 0.7), true);
  check(shifted, waves({5, 3}, DType::f32, 0.1), waves({5, 3}, DType::f32, 0.7), true); // below a vector: element by element
  // Rows longer than the tile holds: in segments (f64 AVX-512: 128 columns), the last one partial.
  check(shifted, waves({20, 300}, DType::f64, 0.1), waves({20, 300}, DType::f64, 0.7), true);
  auto lead = [](Tensor x, Tensor y) { return transpose((x - y) * y, {0, 2, 1}); };
  check(lead, waves({3, 40, 24}, DType::f32, 0.1), waves({3, 40, 24}, DType::f32, 0.7), true);
  // One buffer row read (y is a row broadcast): its column reads cost what
  // the exchanged loop's stores would, and the loop keeps the result's order.
  auto one = [](Tensor x, Tensor y) { return transpose(x * y, {1, 0}); };
  check(one, waves({33, 40}, DType::f64, 0.1), waves({40}, DType::f64, 0.7), false);
}
