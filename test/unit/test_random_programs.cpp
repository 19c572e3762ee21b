// test/unit/test_random_programs.cpp — 1,000 random compositions of ops and
// control flow (cond, switch_case, fori_loop, scan, while_loop, products with
// transposed operands, structured carries, recompute_grad; fixed seeds),
// compiled at -O0 to -O3 in turn (CTest runs them for each CPU level): each is
// differentiated, checked against central finite differences, its compiled
// gradient checked against the interpreter running the differentiated IR,
// and its JVP checked against its VJP (<u, J v> = <J^T u, v>). The same
// programs' jacobian_sparsity and hessian_sparsity against the nonzeros of
// jacfwd and of the Hessian at a random point.
#include "Check.h"
#include "RandomPrograms.h"
#include "autodiff/Reverse.h"
#include "batching/Rules.h"
#include "ir/Interpreter.h"
#include "ir/Verifier.h"
#include "jit/Engine.h"

#include <adjit/adjit.h>
#include <adjit/sparse.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

using namespace adjit;
using namespace adjit::test;

namespace {

/// How many programs: ADJIT_RANDOM_PROGRAMS, else 1,000 (what CI runs).
const int kPrograms = [] {
  const char* v = std::getenv("ADJIT_RANDOM_PROGRAMS");
  return v && std::atoi(v) > 0 ? std::atoi(v) : 1000;
}();
/// The first program: ADJIT_RANDOM_FIRST (to rerun one that failed, with
/// ADJIT_RANDOM_PROGRAMS = it + 1), else 0. ADJIT_RANDOM_PRINT prints each program's IR.
const int kFirstProgram = [] {
  const char* v = std::getenv("ADJIT_RANDOM_FIRST");
  return v && std::atoi(v) > 0 ? std::atoi(v) : 0;
}();

double eval(const ir::Module& m, const std::vector<Array>& args) { return ir::interpret(m, "f", args)[0].at(0); }

/// The elements of parts[from...], flattened in order.
std::vector<double> flat(const std::vector<Array>& parts, std::size_t from) {
  std::vector<double> v;
  for (std::size_t k = from; k < parts.size(); ++k)
    for (int64_t i = 0; i < parts[k].size(); ++i) v.push_back(parts[k].at(i));
  return v;
}

/// `args` followed by one tangent per argument: the unit vector of element
/// j, counting through the arguments' elements in order.
std::vector<Array> withUnitTangent(const std::vector<Array>& args, int j) {
  std::vector<Array> in = args;
  int at = 0;
  for (const Array& a : args) {
    Array e(a.type());
    for (int64_t i = 0; i < e.size(); ++i, ++at) e.set(i, at == j ? 1.0 : 0.0);
    in.push_back(std::move(e));
  }
  return in;
}

} // namespace

TEST_CASE("random programs: gradients match finite differences, compiled code the interpreter, jvp the vjp, "
          "jacfwd the jacrev of the gradient (a symmetric Hessian matching differences of the gradient)") {
  int checked = 0;
  for (int seed = kFirstProgram; seed < kPrograms; ++seed) {
    Program p = randomProgram(static_cast<unsigned>(seed));
    Module traced = traceProgram(p);
    if (std::getenv("ADJIT_RANDOM_PRINT")) MESSAGE("program " << seed << ":\n" << traced.str());
    auto m = std::shared_ptr<ir::Module>(traced.impl().clone());
    std::string vjp = autodiff::combinedVjp(m, "f");
    ir::verify(*m);
    std::mt19937 rng(static_cast<unsigned>(seed) + 7919);
    std::uniform_real_distribution<double> d(-1.5, 1.5);
    std::vector<Array> args = {Array(Type{DType::f64, {4}}), Array(Type{DType::f64, {4}}), Array(Type{DType::f64, {}})};
    for (Array& a : args)
      for (int64_t i = 0; i < a.size(); ++i) a.set(i, d(rng));
    std::vector<Array> inputs = args;
    inputs.push_back(Array(1.0)); // dy
    std::vector<Array> g = ir::interpret(*m, vjp, inputs);
    // Compiled gradient against the interpreter, at each optimisation level
    // in turn (CTest runs this for each ADJIT_CPU level the host can run).
    auto kernel = engine::compile({.module = *m, .function = vjp, .options = {.optLevel = static_cast<int>(seed % 4)}});
    std::vector<detail::Leaf> leaves;
    for (const Array& a : inputs) leaves.push_back({a.raw(), &a.type()});
    std::vector<Array> compiled;
    engine::run(*kernel, leaves, compiled);
    for (std::size_t k = 0; k < g.size(); ++k)
      for (int64_t i = 0; i < g[k].size(); ++i) {
        double want = g[k].at(i), got = compiled[k].at(i);
        INFO("program " << seed << " output " << k << "[" << i << "]: compiled " << got << " vs interpreted " << want
                        << "\n" << m->functions[0]->name);
        CHECK(std::fabs(got - want) <= 1e-9 * std::max(1.0, std::fabs(want)));
      }
    // Forward mode against reverse mode: <u, J v> from the JVP equals
    // <J^T u, v> from the VJP (u = 1: f is a scalar), along a random v.
    {
      const std::string jvp = autodiff::jvpFunction(m, "f");
      std::vector<Array> primalsAndTangents = args;
      double dual = 0;
      for (std::size_t k = 0; k < args.size(); ++k) {
        Array v(args[k].type());
        for (int64_t i = 0; i < v.size(); ++i) {
          v.set(i, d(rng));
          dual += g[1 + k].at(i) * v.at(i);
        }
        primalsAndTangents.push_back(std::move(v));
      }
      const std::vector<Array> out = ir::interpret(*m, jvp, primalsAndTangents);
      INFO("program " << seed << ": <u, J v> by jvp " << out.at(1).at(0) << " vs <J^T u, v> by vjp " << dual);
      CHECK(out.at(0).at(0) == g.at(0).at(0));
      CHECK(std::fabs(out.at(1).at(0) - dual) <= 1e-10 * std::max(1.0, std::fabs(dual)));
    }
    // Second order: the Hessian as jacfwd of the gradient (forward over
    // reverse, one JVP per basis vector) equals jacrev of it (reverse over
    // reverse, one VJP per basis vector), is symmetric, and matches central
    // differences of the gradient. Through an unbounded loop, both
    // differentiate its while_vjp op.
    {
      const std::string gname = autodiff::gradFunction(m, "f");
      const std::string fwd = autodiff::jvpFunction(m, gname), rev = autodiff::combinedVjp(m, gname);
      constexpr int n = 9; // 4 + 4 + 1 input elements
      auto withUnit = [&](int j) { return withUnitTangent(args, j); };
      std::vector<double> hf(n * n), hr(n * n);
      for (int j = 0; j < n; ++j) {
        const std::vector<double> col = flat(ir::interpret(*m, fwd, withUnit(j)), args.size());
        const std::vector<double> row = flat(ir::interpret(*m, rev, withUnit(j)), args.size());
        REQUIRE(col.size() == n);
        REQUIRE(row.size() == n);
        for (int i = 0; i < n; ++i) {
          hf[i * n + j] = col[static_cast<std::size_t>(i)];
          hr[j * n + i] = row[static_cast<std::size_t>(i)];
        }
      }
      auto close = [](double a, double b, double tol) { return std::fabs(a - b) <= tol * std::max(1.0, std::fabs(b)); };
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
          INFO("program " << seed << " H[" << i << "][" << j << "]: jacfwd " << hf[i * n + j] << ", jacrev "
                          << hr[i * n + j] << ", transposed " << hf[j * n + i]);
          CHECK(close(hf[i * n + j], hr[i * n + j], 1e-9));
          CHECK(close(hf[i * n + j], hf[j * n + i], 1e-9));
        }
      // Column j against central differences of the gradient (skipping kinks, as below).
      for (int j = 0; j < n; ++j) {
        auto gradAt = [&](double h) {
          std::vector<Array> moved = args;
          int at = 0;
          for (Array& a : moved)
            for (int64_t i = 0; i < a.size(); ++i, ++at)
              if (at == j) a.set(i, a.at(i) + h);
          return flat(ir::interpret(*m, gname, moved), 0);
        };
        const double h = 1e-5;
        const std::vector<double> gp = gradAt(h), gm = gradAt(-h), gp2 = gradAt(h / 10), gm2 = gradAt(-h / 10);
        for (int i = 0; i < n; ++i) {
          const double fd = (gp[static_cast<std::size_t>(i)] - gm[static_cast<std::size_t>(i)]) / (2 * h);
          const double fd2 = (gp2[static_cast<std::size_t>(i)] - gm2[static_cast<std::size_t>(i)]) / (h / 5);
          if (!close(fd2, fd, 1e-3)) continue; // a kink: the difference is not a derivative here
          // Where the third derivative is large, fd's truncation error shows
          // as its distance from fd2 (a tenth of the step: a hundredth of
          // that error); the Hessian must then be as close to fd2.
          INFO("program " << seed << " H[" << i << "][" << j << "]: " << hf[i * n + j] << " vs finite differences " << fd
                          << " (step h) and " << fd2 << " (step h/10)");
          CHECK((close(hf[i * n + j], fd, 1e-4) || std::fabs(hf[i * n + j] - fd2) <= std::fabs(fd - fd2)));
        }
      }
    }
    // Gradient against central differences.
    for (std::size_t p2 = 0; p2 < args.size(); ++p2)
      for (int64_t i = 0; i < args[p2].size(); ++i) {
        const double x = args[p2].at(i), h = 1e-6;
        std::vector<Array> plus = args, minus = args;
        plus[p2].set(i, x + h);
        minus[p2].set(i, x - h);
        const double fp = eval(*m, plus), fm = eval(*m, minus), fd = (fp - fm) / (2 * h);
        const double ad = g[1 + p2].at(i);
        // The difference of two large values loses their last bits: a loss of
        // 1e6 leaves the quotient uncertain by about 1e6 * eps / h = 2e-4.
        const double tolerance = 1e-4 * std::max(1.0, std::fabs(fd)) + 16 * 2.3e-16 * std::max(std::fabs(fp), std::fabs(fm)) / h;
        // maximum and where have kinks: skip points within h of one (the FD straddles it).
        if (std::fabs(fd - ad) > tolerance) {
          const double h2 = 1e-7;
          plus[p2].set(i, x + h2);
          minus[p2].set(i, x - h2);
          const double fd2 = (eval(*m, plus) - eval(*m, minus)) / (2 * h2);
          if (std::fabs(fd2 - fd) > 1e-3 * std::max(1.0, std::fabs(fd))) continue; // a kink: FD is not a derivative here
        }
        INFO("program " << seed << " d/dx" << p2 << "[" << i << "]: vjp " << ad << " vs finite difference " << fd
                        << " (loss " << fp << ")");
        CHECK(std::fabs(fd - ad) <= tolerance);
        ++checked;
      }
  }
  CHECK(checked > (kPrograms - kFirstProgram) * 8);
}

namespace {

/// A random program with PyTorch's float64 value, gradient and Hessian
/// (test/unit/torch_reference.py wrote them; it builds the same step kinds).
struct TorchCase {
  std::vector<std::array<int, 3>> steps;
  std::array<double, 9> inputs;
  std::vector<double> expected; ///< value, gradient[9], Hessian[81] row-major
};

const std::vector<TorchCase>& torchCases() {
  static const std::vector<TorchCase> cases = {
#include "torch_expected.inc"
  };
  return cases;
}

} // namespace

TEST_CASE("random programs agree with PyTorch's float64 autograd: values and gradients compiled, Hessians") {
  const auto close = [](double got, double want) { return std::fabs(got - want) <= 1e-7 * std::max(1.0, std::fabs(want)); };
  int index = 0;
  for (const TorchCase& c : torchCases()) {
    Program p;
    p.steps = c.steps;
    Module traced = traceProgram(p);
    auto m = std::shared_ptr<ir::Module>(traced.impl().clone());
    const std::string vjp = autodiff::combinedVjp(m, "f");
    std::vector<Array> args = {Array(std::vector<double>(c.inputs.begin(), c.inputs.begin() + 4)),
                               Array(std::vector<double>(c.inputs.begin() + 4, c.inputs.begin() + 8)), Array(c.inputs[8])};
    std::vector<Array> inputs = args;
    inputs.push_back(Array(1.0));
    // Value and gradient, compiled at each level in turn.
    auto kernel = engine::compile({.module = *m, .function = vjp, .options = {.optLevel = static_cast<int>(index % 4)}});
    std::vector<detail::Leaf> leaves;
    for (const Array& a : inputs) leaves.push_back({a.raw(), &a.type()});
    std::vector<Array> compiled;
    engine::run(*kernel, leaves, compiled);
    std::vector<double> got = {compiled[0].at(0)};
    for (std::size_t k = 1; k < compiled.size(); ++k)
      for (int64_t i = 0; i < compiled[k].size(); ++i) got.push_back(compiled[k].at(i));
    REQUIRE(got.size() == 10);
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("torch case " << index << (i ? " gradient " : " value ") << (i ? i - 1 : 0) << ": adjit " << got[i] << ", PyTorch "
                         << c.expected[i]);
      CHECK(close(got[i], c.expected[i]));
    }
    // The Hessian, forward over reverse, one column per input element.
    const std::string gname = autodiff::gradFunction(m, "f");
    const std::string fwd = autodiff::jvpFunction(m, gname);
    for (int j = 0; j < 9; ++j) {
      const std::vector<double> column = flat(ir::interpret(*m, fwd, withUnitTangent(args, j)), args.size());
      REQUIRE(column.size() == 9);
      for (std::size_t row = 0; row < 9; ++row) {
        const double want = c.expected[10 + row * 9 + static_cast<std::size_t>(j)];
        INFO("torch case " << index << " H[" << row << "][" << j << "]: adjit " << column[row] << ", PyTorch " << want);
        CHECK(close(column[row], want));
      }
    }
    ++index;
  }
  CHECK(index >= 300);
}

// vmap of random programs (issue 53): @f.vmap (f batched as batching::vmapFunction
// builds it, in the layouts below) equals the stack of @f run on each example,
// and vmap of the gradient equals the loop of gradients; interpreted,
// compiled for every tenth program, and batched again (vmap of vmap) for every
// fifth. 1,000 programs (ADJIT_RANDOM_PROGRAMS fewer) take about 10 s of one core.
#include "batching/Rules.h"
#include "ir/OpInfo.h"

#include <map>
#include <set>

namespace {

/// Ops whose batching rules are still being written: a program using one is
/// skipped (and counted). Empty, and meant to stay so. An op listed here must
/// still lack its rule, so an entry cannot outlive its reason; an op missing
/// its rule and not listed fails the test.
const std::set<std::string_view> kVmapPending = {};

} // namespace

TEST_CASE("random programs under vmap: vmap(f) is the stack of f, vmap(grad f) the stack of gradients") {
  constexpr int64_t kBatch = 5;
  // Which parameters (x0: f64[4], x1: f64[4], s: f64[]) are batched, and where.
  const std::vector<std::vector<std::optional<int64_t>>> layouts = {
      {0, 0, 0}, {1, std::nullopt, 0}, {std::nullopt, 0, std::nullopt}, {-1, 1, std::nullopt},
      {0, std::nullopt, std::nullopt}};
  int checked = 0, compiled = 0, nested = 0;
  std::map<std::string, int> skipped; // program counts by the ops without a rule that they use
  const int programs = std::min(kPrograms, 1000);
  for (int seed = kFirstProgram; seed < programs; ++seed) {
    Program p = randomProgram(static_cast<unsigned>(seed));
    Module traced = traceProgram(p);
    auto m = std::shared_ptr<ir::Module>(traced.impl().clone());
    const std::string gname = autodiff::gradFunction(m, "f");
    std::set<std::string_view> missing;
    for (const auto& fn : m->functions)
      for (const ir::Op& op : fn->ops)
        if (!batching::rules(op.kind).batch) missing.insert(ir::info(op.kind).name);
    if (!missing.empty()) {
      std::string names;
      for (std::string_view s : missing) {
        names += (names.empty() ? "" : " ") + std::string(s);
        INFO("program " << seed << " uses " << s << ", which has no batching rule");
        CHECK(kVmapPending.count(s));
      }
      ++skipped[names];
      continue;
    }
    const auto& in = layouts[static_cast<std::size_t>(seed) % layouts.size()];
    std::mt19937 rng(static_cast<unsigned>(seed) + 104729);
    std::uniform_real_distribution<double> d(-1.5, 1.5);
    const std::vector<Type> types = {Type{DType::f64, {4}}, Type{DType::f64, {4}}, Type{DType::f64, {}}};
    std::vector<Array> args;
    std::vector<std::vector<Array>> per(kBatch);
    for (std::size_t i = 0; i < 3; ++i) {
      Shape s = types[i].shape;
      int64_t axis = 0;
      if (in[i]) {
        axis = *in[i] < 0 ? *in[i] + static_cast<int64_t>(s.size()) + 1 : *in[i];
        s.insert(s.begin() + axis, kBatch);
      }
      Array a(Type{DType::f64, s});
      for (int64_t e = 0; e < a.size(); ++e) a.set(e, d(rng));
      for (int64_t b = 0; b < kBatch; ++b)
        per[static_cast<std::size_t>(b)].push_back(in[i] ? test::exampleOf(a, axis, b) : a);
      args.push_back(std::move(a));
    }
    for (const std::string& fn : {std::string("f"), gname}) {
      const ir::Function& g = *m->lookup(fn);
      batching::AxisSpec spec{in, std::vector<std::optional<int64_t>>(g.outputs.size(), 0), kBatch};
      auto axisText = [](const std::optional<int64_t>& a) { return a ? std::to_string(*a) : std::string("-"); };
      INFO("program " << seed << ": vmap of @" << fn << " with in_axes " << axisText(in[0]) << "," << axisText(in[1]) << ","
                      << axisText(in[2]) << "\n"
                      << traced.str());
      std::string vname;
      std::vector<Array> got;
      std::vector<std::vector<Array>> want;
      try {
        vname = batching::vmapFunction(m, fn, spec);
        ir::verify(*m);
        for (const auto& e : per) want.push_back(ir::interpret(*m, fn, e));
      } catch (const std::exception& e) {
        FAIL_CHECK("threw " << e.what());
        continue;
      }
      auto check = [&](const std::vector<Array>& got, const char* how) {
        REQUIRE(got.size() == g.outputs.size());
        for (std::size_t k = 0; k < got.size(); ++k) {
          const int64_t per1 = want[0][k].size();
          REQUIRE(got[k].size() == per1 * kBatch);
          for (int64_t b = 0; b < kBatch; ++b)
            for (int64_t i = 0; i < per1; ++i) {
              const double w = want[static_cast<std::size_t>(b)][k].at(i), v = got[k].at(b * per1 + i);
              INFO(how << " result " << k << " example " << b << " [" << i << "]: vmap " << v << ", loop " << w);
              CHECK(std::fabs(v - w) <= 1e-9 * std::max(1.0, std::fabs(w)));
            }
        }
      };
      try {
        check(ir::interpret(*m, vname, args), "interpreted");
        if (seed % 10 == 0) {
          const int level = static_cast<int>(seed / 10 % 4);
          auto kernel = engine::compile({.module = *m, .function = vname, .options = {.optLevel = level}});
          std::vector<detail::Leaf> leaves;
          for (const Array& a : args) leaves.push_back({a.raw(), &a.type()});
          std::vector<Array> out;
          engine::run(*kernel, leaves, out);
          check(out, "compiled");
          ++compiled;
        }
        // vmap of vmap (every fifth program): the batched function batched
        // again over 3 outer examples, its last parameter shared, equals it
        // run on each outer example.
        if (seed % 5 == 0) {
          const ir::Function& v = *m->lookup(vname);
          batching::AxisSpec outer{std::vector<std::optional<int64_t>>(v.params.size(), 0),
                                   std::vector<std::optional<int64_t>>(v.outputs.size(), 0), 3};
          outer.in.back() = std::nullopt;
          const std::string vv = batching::vmapFunction(m, vname, outer);
          ir::verify(*m);
          std::vector<Array> stacked;
          std::vector<std::vector<Array>> each(3);
          for (std::size_t i = 0; i < args.size(); ++i) {
            if (i + 1 == args.size()) {
              stacked.push_back(args[i]);
              for (auto& e : each) e.push_back(args[i]);
              continue;
            }
            Shape sh = args[i].shape();
            sh.insert(sh.begin(), 3);
            Array a(Type{DType::f64, sh});
            for (int64_t e = 0; e < a.size(); ++e) a.set(e, d(rng));
            for (int64_t o = 0; o < 3; ++o) each[static_cast<std::size_t>(o)].push_back(test::exampleOf(a, 0, o));
            stacked.push_back(std::move(a));
          }
          const std::vector<Array> got2 = ir::interpret(*m, vv, stacked);
          REQUIRE(got2.size() == v.outputs.size());
          for (int64_t o = 0; o < 3; ++o) {
            const std::vector<Array> want2 = ir::interpret(*m, vname, each[static_cast<std::size_t>(o)]);
            for (std::size_t k = 0; k < want2.size(); ++k)
              for (int64_t i = 0; i < want2[k].size(); ++i) {
                const double w = want2[k].at(i), g2 = got2[k].at(o * want2[k].size() + i);
                INFO("vmap of vmap: result " << k << " outer example " << o << " [" << i << "]: " << g2 << ", loop "
                                             << w);
                CHECK(std::fabs(g2 - w) <= 1e-9 * std::max(1.0, std::fabs(w)));
              }
          }
          ++nested;
        }
      } catch (const std::exception& e) {
        FAIL_CHECK("threw " << e.what());
      }
      ++checked;
    }
  }
  for (std::string_view name : kVmapPending) {
    INFO("op " << name << " has its batching rule now: remove it from kVmapPending");
    CHECK(!batching::rules(*ir::lookup(name)).batch);
  }
  std::string skips;
  int nSkipped = 0;
  for (const auto& [names, count] : skipped) {
    skips += "\n  " + std::to_string(count) + " using " + names;
    nSkipped += count;
  }
  MESSAGE((checked / 2) << " programs checked under vmap (" << (compiled / 2) << " compiled too, " << (nested / 2)
                        << " under vmap of vmap too), " << nSkipped
                      << " skipped until their ops' batching rules land:" << skips);
  CHECK(checked / 2 + nSkipped == programs - kFirstProgram);
}

namespace {

/// The nonzero pattern of the Jacobian of function `fn` of m at `args`
/// (nine input elements): jacfwd, the JVP batched over the nine unit
/// tangents (one interpreter run), rows the floating outputs' elements.
SparsityPattern forwardPattern(const std::shared_ptr<ir::Module>& m, const std::string& fn, const std::vector<Array>& args) {
  constexpr int n = 9;
  const std::string jvp = autodiff::jvpFunction(m, fn);
  const std::size_t outs = m->lookup(fn)->outputs.size(); // all floating: their tangents follow them
  std::vector<char> in(2 * args.size(), 0);
  for (std::size_t k = 0; k < args.size(); ++k) in[args.size() + k] = 1;
  const std::string jacobian = batching::batchFunction(m, jvp, in, std::vector<char>(2 * outs, 1), n);
  std::vector<Array> inputs = args;
  int at = 0;
  for (const Array& a : args) {
    Shape s = a.shape();
    s.insert(s.begin(), n);
    Array t(Type{DType::f64, s}); // zeros, and a one at (column j, element j)
    for (int64_t i = 0; i < a.size(); ++i, ++at) t.set(at * a.size() + i, 1.0);
    inputs.push_back(std::move(t));
  }
  const std::vector<Array> out = ir::interpret(*m, jacobian, inputs);
  SparsityPattern p;
  p.cols = n;
  for (std::size_t k = outs; k < 2 * outs; ++k) {
    const int64_t size = out[k].size() / n;
    for (int64_t i = 0; i < size; ++i) {
      for (int j = 0; j < n; ++j)
        if (out[k].at(j * size + i) != 0) p.col_idx.push_back(j);
      p.row_ptr.push_back(static_cast<int64_t>(p.col_idx.size()));
    }
    p.rows += size;
  }
  return p;
}

/// Whether every entry of a is in b.
bool within(const SparsityPattern& a, const SparsityPattern& b) {
  if (a.rows != b.rows || a.cols != b.cols) return false;
  for (int64_t r = 0; r < a.rows; ++r)
    for (int64_t k = a.row_ptr[static_cast<std::size_t>(r)]; k < a.row_ptr[static_cast<std::size_t>(r) + 1]; ++k)
      if (!b.contains(r, a.col_idx[static_cast<std::size_t>(k)])) return false;
  return true;
}

/// Step kinds whose rules are conservative by design (docs/guide/sparsity.md):
/// maximum (9), where (13) and max/min (23) pick one operand at a point;
/// cond (16) and switch_case (21) on a run-time predicate take the union
/// of their branches; while loops whose condition reads data (19, 27, and
/// the default, 20) the union over trip counts. And steps whose value
/// cancels at every point, which no structural pattern can see:
/// sigmoid(a - b) (6) with b = a; logsumexp(a) - b (15) with a the
/// broadcast scalar (the logsumexp of equal values is that value + log 2,
/// which cancels the scalar in b) or with b = logsumexp(a) - c itself.
bool conservative(const Program& p) {
  for (const auto& st : p.steps) {
    const int k = st[0];
    if (k == 9 || k == 13 || k == 16 || k == 19 || k == 20 || k == 21 || k == 23 || k == 27) return true;
    if (k == 6 && st[1] == st[2]) return true;
    if (k == 15 && st[1] == 2) return true;
    if (k == 15 && st[2] >= 3 && p.steps[static_cast<std::size_t>(st[2] - 3)][0] == 15 &&
        p.steps[static_cast<std::size_t>(st[2] - 3)][1] == st[1])
      return true;
  }
  return false;
}

} // namespace

TEST_CASE("random programs: jacobian_sparsity and hessian_sparsity equal the patterns of jacfwd and of the Hessian "
          "at a random point (a superset where a rule is conservative by design)") {
  int exact = 0;
  for (int seed = kFirstProgram; seed < kPrograms; ++seed) {
    const Program p = randomProgram(static_cast<unsigned>(seed));
    const Type v{DType::f64, {4}}, s{DType::f64, {}};
    auto vectorFn = [&](const Tensor& x0, const Tensor& x1, const Tensor& sc) { return runProgram(p, x0, x1, sc).back(); };
    const SparsityPattern rule = jacobian_sparsity(vectorFn, v, v, s);
    Module traced = traceProgram(p, true);
    auto m = std::shared_ptr<ir::Module>(traced.impl().clone());
    std::mt19937 rng(static_cast<unsigned>(seed) + 104729);
    std::uniform_real_distribution<double> d(-1.5, 1.5);
    std::vector<Array> args = {Array(v), Array(v), Array(s)};
    for (Array& a : args)
      for (int64_t i = 0; i < a.size(); ++i) a.set(i, d(rng));
    const SparsityPattern ad = forwardPattern(m, "f", args);
    {
      INFO("program " << seed << ":\n" << traced.str() << "\nrule:\n" << rule.str() << "\nforward mode:\n" << ad.str());
      CHECK(within(ad, rule));
      if (!conservative(p)) CHECK(rule == ad);
    }
    // The Hessian of the scalar program: jacfwd of its gradient. Not for
    // programs with a while loop: its reverse runs max_iterations steps
    // (slow in the interpreter), and its rule is conservative anyway.
    bool whileLoop = false;
    for (const auto& st : p.steps) whileLoop = whileLoop || st[0] == 19 || st[0] == 20 || st[0] == 27;
    if (whileLoop) continue;
    Module scalar = traceProgram(p);
    auto ms = std::shared_ptr<ir::Module>(scalar.impl().clone());
    const SparsityPattern hRule = hessian_sparsity(
        [&](const Tensor& x0, const Tensor& x1, const Tensor& sc) {
          const std::vector<Tensor> pool = runProgram(p, x0, x1, sc);
          return sum(pool.back() * pool.back()) + sum(pool[3]) * 0.1;
        },
        v, v, s);
    const SparsityPattern hAd = forwardPattern(ms, autodiff::gradFunction(ms, "f"), args);
    INFO("program " << seed << ":\n" << scalar.str() << "\nHessian rule:\n" << hRule.str() << "\nforward over reverse:\n" << hAd.str());
    CHECK(within(hAd, hRule));
    if (conservative(p)) continue;
    CHECK(hRule == hAd);
    ++exact;
  }
  MESSAGE(exact << " of " << kPrograms - kFirstProgram << " programs without a conservative rule: patterns equal");
  CHECK(exact >= (kPrograms - kFirstProgram) / 5);
}
