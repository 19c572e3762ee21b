// test/unit/test_grad_fd.cpp — every differentiable op's VJP against central
// finite differences in f64, driven by the op table: plain floating
// elementwise ops get a synthesised example, the others carry one in their
// table entry. The combined VJP runs in the interpreter and compiled.
#include "autodiff/Reverse.h"
#include "ir/Interpreter.h"
#include "ir/Text.h"
#include "ir/Verifier.h"
#include "jit/Engine.h"
#include "ir/OpInfo.h"
#include "autodiff/Rules.h"
#include "Check.h"

#include <doctest/doctest.h>

#include <cmath>
#include <random>

using namespace adjit;

namespace {

/// Tolerances, relative to max(1, |gradient|). With h = 1e-5 the central
/// difference errs by about h^2 f''' + eps/h: 1e-6 covers f64 outputs. An f32
/// output is rounded to about 6e-8, which h turns into about 1e-2. Compiled
/// and interpreted gradients run the same f64 ops, reassociated at most.
constexpr double kFdToleranceF64 = 1e-6;
constexpr double kFdToleranceF32 = 2e-2;
constexpr double kJitTolerance = 1e-9;

/// L(args) = sum over floating outputs of sum(w_k * y_k).
double loss(const ir::Module& m, const std::vector<Array>& args, const std::vector<Array>& w) {
  std::vector<Array> ys = ir::interpret(m, "f", args);
  double l = 0;
  std::size_t k = 0;
  for (const Array& y : ys) {
    if (!is_floating(y.dtype())) continue;
    for (int64_t i = 0; i < y.size(); ++i) l += w[k].at(i) * y.at(i);
    ++k;
  }
  return l;
}

/// Checks the combined VJP of @f in `text` against finite differences, at a few random points.
void checkVjp(const std::string& name, const std::string& text, unsigned seed) {
  auto m = std::shared_ptr<ir::Module>(ir::parse(text, name + ".example"));
  ir::verify(*m);
  std::string vjp = autodiff::combinedVjp(m, "f");
  ir::verify(*m);
  const ir::Function& f = *m->lookup("f");
  double fdTolerance = kFdToleranceF64;
  for (ir::ValueId o : f.outputs)
    if (f.type(o).dtype == DType::f32) fdTolerance = kFdToleranceF32;
  std::shared_ptr<engine::Kernel> kernel = engine::compile({.module = *m, .function = vjp, .options = {.optLevel = 1}});
  std::mt19937 rng(seed);
  for (int point = 0; point < 3; ++point) {
    std::vector<Array> args = test::randomArgs(f, rng);
    std::vector<Array> w;
    for (ir::ValueId o : f.outputs)
      if (is_floating(f.type(o).dtype)) {
        Array a(f.type(o).dtype == DType::f64 ? f.type(o) : Type{DType::f64, f.type(o).shape});
        std::uniform_real_distribution<double> d(-1, 1);
        for (int64_t i = 0; i < a.size(); ++i) a.set(i, d(rng));
        w.push_back(std::move(a));
      }
    // Cotangents in each output's own dtype.
    std::vector<Array> inputs = args;
    std::size_t k = 0;
    for (ir::ValueId o : f.outputs)
      if (is_floating(f.type(o).dtype)) {
        Array dy(f.type(o));
        for (int64_t i = 0; i < dy.size(); ++i) dy.set(i, w[k].at(i));
        inputs.push_back(std::move(dy));
        ++k;
      }
    std::vector<Array> viaInterp = ir::interpret(*m, vjp, inputs);
    std::vector<detail::Leaf> leaves;
    for (const Array& a : inputs) leaves.push_back({a.raw(), &a.type()});
    std::vector<Array> viaJit;
    engine::run(*kernel, leaves, viaJit);
    const std::size_t nY = f.outputs.size();
    for (std::size_t p = 0; p < args.size(); ++p) {
      const Array& g = viaInterp.at(nY + p);
      for (int64_t i = 0; i < args[p].size(); ++i) {
        const double x = args[p].at(i), h = 1e-5 * std::max(1.0, std::fabs(x));
        std::vector<Array> plus = args, minus = args;
        plus[p].set(i, x + h);
        minus[p].set(i, x - h);
        const double fd = (loss(*m, plus, w) - loss(*m, minus, w)) / (2 * h);
        INFO(name << ": d/d%" << p << "[" << i << "] vjp " << g.at(i) << " vs finite difference " << fd);
        CHECK(std::fabs(g.at(i) - fd) <= fdTolerance * std::max(1.0, std::fabs(fd)));
        INFO(name << ": compiled " << viaJit.at(nY + p).at(i) << " vs interpreter " << g.at(i));
        CHECK(std::fabs(viaJit.at(nY + p).at(i) - g.at(i)) <= kJitTolerance * std::max(1.0, std::fabs(g.at(i))));
      }
    }
  }
}

} // namespace

namespace {

/// Calls check(kind, info, example) for every differentiable op, with its
/// table example or, for a plain elementwise op, a synthesised one.
template <class Check> void forEachDifferentiableOp(Check check) {
  for (ir::OpKind k : ir::allOps()) {
    const ir::OpInfo& info = ir::info(k);
    if (autodiff::rules(k).has(autodiff::kNonDifferentiable)) continue;
    std::string text;
    if (const char* example = test::opExample(info.name)) text = example;
    else if (info.has(ir::kElementwise) && info.arity >= 1) text = test::elementwiseExample(info.name, info.arity);
    INFO("op " << info.name);
    REQUIRE_MESSAGE(!text.empty(), "op " << info.name << " needs an example in test/unit/op_examples.inc");
    check(k, info, text);
  }
}

} // namespace

TEST_CASE("every differentiable op's VJP matches finite differences") {
  unsigned seed = 1;
  forEachDifferentiableOp([&](ir::OpKind k, const ir::OpInfo& info, const std::string& text) {
    if (autodiff::rules(k).has(autodiff::kGradientIsError)) {
      CHECK_THROWS_WITH_AS(checkVjp(std::string(info.name), text, seed++), doctest::Contains("No gradient defined"), Error);
      return;
    }
    checkVjp(std::string(info.name), text, seed++);
  });
}

namespace {

/// Checks the JVP of @f in `text` (the jvp pass's @f.jvp) against central
/// finite differences along a random tangent, at a few random points, in the
/// interpreter and compiled.
void checkJvp(const std::string& name, const std::string& text, unsigned seed) {
  auto m = std::shared_ptr<ir::Module>(ir::parse(text, name + ".example"));
  ir::verify(*m);
  const std::string jvp = autodiff::jvpFunction(m, "f");
  ir::verify(*m);
  const ir::Function& f = *m->lookup("f");
  double fdTolerance = kFdToleranceF64;
  for (ir::ValueId o : f.outputs)
    if (f.type(o).dtype == DType::f32) fdTolerance = kFdToleranceF32;
  std::shared_ptr<engine::Kernel> kernel = engine::compile({.module = *m, .function = jvp, .options = {.optLevel = 1}});
  std::mt19937 rng(seed);
  for (int point = 0; point < 3; ++point) {
    const std::vector<Array> args = test::randomArgs(f, rng);
    std::vector<Array> inputs = args, dirs;
    std::uniform_real_distribution<double> d(-1, 1);
    for (const Array& a : args) {
      Array t(a.type());
      if (is_floating(a.dtype()))
        for (int64_t i = 0; i < t.size(); ++i) t.set(i, d(rng));
      dirs.push_back(t);
      if (is_floating(a.dtype())) inputs.push_back(t);
    }
    const std::vector<Array> viaInterp = ir::interpret(*m, jvp, inputs);
    std::vector<detail::Leaf> leaves;
    for (const Array& a : inputs) leaves.push_back({a.raw(), &a.type()});
    std::vector<Array> viaJit;
    engine::run(*kernel, leaves, viaJit);
    const double h = 1e-5;
    std::vector<Array> plus = args, minus = args;
    for (std::size_t p = 0; p < args.size(); ++p)
      if (is_floating(args[p].dtype()))
        for (int64_t i = 0; i < args[p].size(); ++i) {
          plus[p].set(i, args[p].at(i) + h * dirs[p].at(i));
          minus[p].set(i, args[p].at(i) - h * dirs[p].at(i));
        }
    const std::vector<Array> yp = ir::interpret(*m, "f", plus), ym = ir::interpret(*m, "f", minus);
    std::size_t k = f.outputs.size();
    for (std::size_t o = 0; o < f.outputs.size(); ++o) {
      if (!is_floating(f.type(f.outputs[o]).dtype)) continue;
      const Array& dy = viaInterp.at(k);
      for (int64_t i = 0; i < dy.size(); ++i) {
        const double fd = (yp[o].at(i) - ym[o].at(i)) / (2 * h);
        INFO(name << ": output " << o << "[" << i << "] jvp " << dy.at(i) << " vs finite difference " << fd);
        CHECK(std::fabs(dy.at(i) - fd) <= fdTolerance * std::max(1.0, std::fabs(fd)));
        INFO(name << ": compiled " << viaJit.at(k).at(i) << " vs interpreter " << dy.at(i));
        CHECK(std::fabs(viaJit.at(k).at(i) - dy.at(i)) <= kJitTolerance * std::max(1.0, std::fabs(dy.at(i))));
      }
      ++k;
    }
  }
}

} // namespace

TEST_CASE("every differentiable op's JVP matches finite differences") {
  unsigned seed = 101;
  forEachDifferentiableOp([&](ir::OpKind k, const ir::OpInfo& info, const std::string& text) {
    if (autodiff::rules(k).has(autodiff::kGradientIsError)) {
      CHECK_THROWS_WITH_AS(checkJvp(std::string(info.name), text, seed++), doctest::Contains("No gradient defined"), Error);
      return;
    }
    checkJvp(std::string(info.name), text, seed++);
  });
}

TEST_CASE("ops the table marks linear are linear: op(a + 2b) = op(a) + 2 op(b)") {
  // Forward mode trusts these traits to accept a custom gradient's grad_fn
  // (autodiff/Linearity.cpp): a wrong one would let a nonlinear grad_fn be
  // transposed into a silently wrong tangent. Each marked op, alone, on
  // random inputs; integer operands (indices, predicates) held at zero.
  std::mt19937 rng(4242);
  std::uniform_real_distribution<double> d(-2, 2);
  int checked = 0;
  forEachDifferentiableOp([&](ir::OpKind k, const ir::OpInfo& info, const std::string& text) {
    const bool joint = autodiff::rules(k).has(autodiff::kLinear), each = autodiff::rules(k).has(autodiff::kLinearInEach), first = autodiff::rules(k).has(autodiff::kLinearInFirst);
    const bool last = autodiff::rules(k).has(autodiff::kLinearInLast);
    if (!joint && !each && !first && !last) return;
    Module m = Module::parse(text);
    const ir::Function& f = *m.impl().lookup("f");
    auto site = std::find_if(f.ops.begin(), f.ops.end(), [&](const ir::Op& op) { return op.kind == k; });
    REQUIRE(site != f.ops.end());
    ir::Op op = *site;
    ir::Function& alone = m.impl().add("alone");
    for (ir::ValueId& o : op.operands) {
      const Type t = f.type(o);
      o = alone.newValue(t);
      alone.params.push_back(o);
    }
    for (ir::ValueId& r : op.results) {
      const Type t = f.type(r);
      r = alone.newValue(t);
      alone.outputs.push_back(r);
    }
    alone.ops.push_back(op);
    std::vector<Array> a, b;
    for (ir::ValueId p : alone.params) {
      Array x(alone.type(p)), y(alone.type(p));
      if (is_floating(x.dtype()))
        for (int64_t i = 0; i < x.size(); ++i) x.set(i, d(rng)), y.set(i, d(rng));
      a.push_back(x);
      b.push_back(y);
    }
    // The operand sets the op is linear in: all floating operands together,
    // each alone, the first or the last.
    std::vector<std::vector<std::size_t>> sets;
    std::vector<std::size_t> all;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (is_floating(a[i].dtype())) {
        all.push_back(i);
        if (each) sets.push_back({i});
      }
    if (joint) sets.push_back(all);
    if (first) sets.push_back({0});
    if (last) sets.push_back({a.size() - 1});
    for (const std::vector<std::size_t>& set : sets) {
      std::vector<Array> onlyB = a, mixed = a;
      for (std::size_t i : set) {
        onlyB[i] = b[i];
        for (int64_t j = 0; j < a[i].size(); ++j) mixed[i].set(j, a[i].at(j) + 2 * b[i].at(j));
      }
      const std::vector<Array> fa = ir::interpret(m.impl(), "alone", a), fb = ir::interpret(m.impl(), "alone", onlyB),
                               fm = ir::interpret(m.impl(), "alone", mixed);
      for (std::size_t r = 0; r < fm.size(); ++r) {
        if (!is_floating(fm[r].dtype())) continue;
        for (int64_t j = 0; j < fm[r].size(); ++j) {
          const double want = fa[r].at(j) + 2 * fb[r].at(j);
          if (std::isnan(want) && std::isnan(fm[r].at(j))) continue; // outside the domain (xlogy's y < 0): nothing to check
          INFO("op " << info.name << ", operands " << set.size() << ", result " << r << "[" << j << "]");
          CHECK(fm[r].at(j) == doctest::Approx(want).epsilon(1e-6).scale(1));
        }
      }
      ++checked;
    }
  });
  CHECK(checked >= 20);
}
