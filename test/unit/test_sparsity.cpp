// test/unit/test_sparsity.cpp — Jacobian and Hessian sparsity patterns from
// the IR: hand-made programs with known patterns, and every op's dependency
// rule against the pattern of its Jacobian and Hessian computed by forward
// mode (once and twice) at a random point, driven by the op table.
#include "autodiff/Reverse.h"
#include "autodiff/Rules.h"
#include "ir/Interpreter.h"
#include "ir/OpInfo.h"
#include "ir/Text.h"
#include "ir/Verifier.h"
#include "sparsity/Rules.h"
#include "Check.h"

#include <doctest/doctest.h>

#include <random>
#include <set>

using namespace adjit;

namespace {

/// A pattern from (row, column) pairs.
SparsityPattern patternOf(int64_t rows, int64_t cols, std::set<std::pair<int64_t, int64_t>> nz) {
  SparsityPattern p;
  p.rows = rows;
  p.cols = cols;
  for (int64_t r = 0; r < rows; ++r) {
    for (const auto& [i, j] : nz)
      if (i == r) p.col_idx.push_back(j);
    p.row_ptr.push_back(static_cast<int64_t>(p.col_idx.size()));
  }
  return p;
}

const Type f64_4{DType::f64, {4}};

} // namespace

TEST_CASE("sparsity: an elementwise program's Jacobian is diagonal blocks, its Hessian pairs only what multiplies") {
  auto f = [](const Tensor& x, const Tensor& y) { return sin(x) * y + y; };
  const SparsityPattern j = jacobian_sparsity(f, f64_4, f64_4);
  std::set<std::pair<int64_t, int64_t>> nz;
  for (int64_t e = 0; e < 4; ++e) nz.insert({e, e}), nz.insert({e, 4 + e});
  CHECK(j == patternOf(4, 8, nz));
  CHECK(j.nnz() == 8);
  CHECK(j.contains(2, 6));
  CHECK(!j.contains(2, 5));

  // sum(sin(x) * y + y): x_e with itself (sin), x_e with y_e (the product); y_e with nothing.
  const SparsityPattern h = hessian_sparsity([&](const Tensor& x, const Tensor& y) { return sum(f(x, y)); }, f64_4, f64_4);
  std::set<std::pair<int64_t, int64_t>> hz;
  for (int64_t e = 0; e < 4; ++e) hz.insert({e, e}), hz.insert({e, 4 + e}), hz.insert({4 + e, e});
  CHECK(h == patternOf(8, 8, hz));
}

TEST_CASE("sparsity: x+y couples nothing, x*y couples x and y, x*x couples x with itself") {
  const Type s{DType::f64, {}};
  CHECK(hessian_sparsity([](const Tensor& x, const Tensor& y) { return x + y; }, s, s).nnz() == 0);
  CHECK(hessian_sparsity([](const Tensor& x, const Tensor& y) { return x * y; }, s, s) ==
        patternOf(2, 2, {{0, 1}, {1, 0}}));
  CHECK(hessian_sparsity([](const Tensor& x, const Tensor& y) { return x * x + y; }, s, s) == patternOf(2, 2, {{0, 0}}));
  // x / y: linear in x, so (x, x) stays zero; (x, y) and (y, y) do not.
  CHECK(hessian_sparsity([](const Tensor& x, const Tensor& y) { return x / y; }, s, s) ==
        patternOf(2, 2, {{0, 1}, {1, 0}, {1, 1}}));
}

TEST_CASE("sparsity: pairs reach the Hessian only through elements the output reads") {
  // exp couples every x_e with itself, but the output reads element 1 only.
  const SparsityPattern h =
      hessian_sparsity([](const Tensor& x) { return reshape(slice(exp(x), {1}, {2}), Shape{}); }, f64_4);
  CHECK(h == patternOf(4, 4, {{1, 1}}));
}

TEST_CASE("sparsity: integer arguments and outputs take no rows or columns; constants depend on nothing") {
  const Type i4{DType::i32, {4}};
  const SparsityPattern j = jacobian_sparsity(
      [](const Tensor& x, const Tensor& k) { return std::make_pair(x * 2.0 + 1.0, k + 1); }, f64_4, i4);
  CHECK(j.rows == 4);
  CHECK(j.cols == 4);
  CHECK(j == patternOf(4, 4, {{0, 0}, {1, 1}, {2, 2}, {3, 3}}));
}

TEST_CASE("sparsity: hessian_sparsity of a non-scalar function is an adjit::Error at the user's line") {
  const int line = __LINE__ + 1;
  const Error e = test::errorOf([] { (void)hessian_sparsity([](const Tensor& x) { return exp(x); }, f64_4); });
  CHECK(std::string(e.what()).find("hessian_sparsity: the function must return one floating scalar, got (f64[4])") !=
        std::string::npos);
  CHECK(e.location().line == static_cast<uint32_t>(line));
}

TEST_CASE("sparsity: a 100,000-op chain is analysed in one pass, without deep recursion") {
  const Type v{DType::f64, {8}};
  const SparsityPattern j = jacobian_sparsity(
      [](Tensor x) {
        for (int i = 0; i < 100000; ++i) x = i % 2 ? sin(x) : x * 1.0001;
        return x;
      },
      v);
  CHECK(j == patternOf(8, 8, {{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6}, {7, 7}}));
}

// ---- the op table ----

namespace {

/// The analysis's patterns of @f: per floating output element (rows, in
/// order) its inputs; and the union of every output element's Hessian pairs.
struct RulePatterns {
  std::set<std::pair<int64_t, int64_t>> jacobian, hessian;
  int64_t rows = 0, cols = 0;
};

RulePatterns rulePatterns(const ir::Module& m) {
  const ir::Function& f = *m.lookup("f");
  sparsity::Inputs in = sparsity::numberParams(f);
  std::vector<const sparsity::Deps*> params;
  for (const auto& d : in.params) params.push_back(&d);
  sparsity::Analysis a(m, true);
  const std::vector<sparsity::Deps> outs = a.run(f, params);
  RulePatterns r;
  r.cols = in.count;
  for (std::size_t k = 0; k < outs.size(); ++k) {
    if (!is_floating(f.type(f.outputs[k]).dtype)) continue;
    for (int64_t e = 0; e < outs[k].elements(); ++e) {
      for (int64_t c : outs[k].of(e)) r.jacobian.insert({r.rows + e, c});
      for (const auto& [i, j] : outs[k].pairsOf(e)) r.hessian.insert({i, j});
    }
    r.rows += outs[k].elements();
  }
  return r;
}

/// Examples with more inputs than this get their Hessian pattern checked by
/// the hand-made cases only (the table checks their Jacobians).
constexpr int64_t kHessianInputs = 24;

/// The same patterns from forward mode at `args` (entries of magnitude at
/// most `zero` taken as zeros): column j of the Jacobian is
/// f.jvp with tangent e_j; (i, j) of some output's Hessian is nonzero when
/// f.jvp.jvp with inner tangent e_j and outer e_i gives a nonzero.
RulePatterns adPatterns(ir::Module& m, const std::vector<Array>& args, double zero = 0) {
  auto shared = std::shared_ptr<ir::Module>(m.clone());
  const std::string jvp = autodiff::jvpFunction(shared, "f");
  const std::string jvp2 = autodiff::jvpFunction(shared, jvp);
  const ir::Function& f = *shared->lookup("f");
  // Where each floating input element lives: (parameter, element).
  std::vector<std::pair<std::size_t, int64_t>> where;
  for (std::size_t p = 0; p < args.size(); ++p)
    if (is_floating(args[p].dtype()))
      for (int64_t i = 0; i < args[p].size(); ++i) where.push_back({p, i});
  std::vector<std::size_t> floatParams;
  for (std::size_t p = 0; p < args.size(); ++p)
    if (is_floating(args[p].dtype())) floatParams.push_back(p);
  auto basis = [&](int64_t col) {
    std::vector<Array> t;
    for (std::size_t p : floatParams) {
      Array a(args[p].type());
      for (int64_t i = 0; i < a.size(); ++i) a.set(i, 0.0);
      if (col >= 0 && where[static_cast<std::size_t>(col)].first == p) a.set(where[static_cast<std::size_t>(col)].second, 1.0);
      t.push_back(std::move(a));
    }
    return t;
  };
  std::size_t nOut = f.outputs.size(), nFloatOut = 0;
  for (ir::ValueId o : f.outputs) nFloatOut += is_floating(f.type(o).dtype);
  RulePatterns r;
  r.cols = static_cast<int64_t>(where.size());
  for (int64_t j = 0; j < r.cols; ++j) {
    std::vector<Array> in = args;
    for (Array& t : basis(j)) in.push_back(std::move(t));
    const std::vector<Array> out = ir::interpret(*shared, jvp, in);
    int64_t row = 0;
    for (std::size_t k = 0; k < nFloatOut; ++k) {
      const Array& dy = out.at(nOut + k);
      for (int64_t e = 0; e < dy.size(); ++e)
        if (std::fabs(dy.at(e)) > zero) r.jacobian.insert({row + e, j});
      row += dy.size();
    }
    r.rows = row;
    // f.jvp's parameters: args, tangents (both floating where args are); its
    // jvp's: those, then tangents of its floating ones (args' and the tangents').
    // The Hessian is symmetric: (i, j) for i <= j only; and only for examples
    // of a few inputs (n^2 interpreter runs: the sanitizer builds run this too).
    for (int64_t i = 0; i <= j && r.cols <= kHessianInputs; ++i) {
      std::vector<Array> in2 = in;
      for (Array& t : basis(i)) in2.push_back(std::move(t));
      for (Array& t : basis(-1)) in2.push_back(std::move(t));
      const std::vector<Array> out2 = ir::interpret(*shared, jvp2, in2);
      // f.jvp's outputs: ys, then dys; jvp2's: those, then their tangents.
      const std::size_t jvpOuts = nOut + nFloatOut;
      for (std::size_t k = 0; k < nFloatOut; ++k) {
        const Array& ddy = out2.at(jvpOuts + nFloatOut + k);
        for (int64_t e = 0; e < ddy.size(); ++e)
          if (std::fabs(ddy.at(e)) > zero) r.hessian.insert({std::min(i, j), std::max(i, j)});
      }
    }
  }
  return r;
}

std::string describe(const std::set<std::pair<int64_t, int64_t>>& s) {
  std::string out;
  for (const auto& [i, j] : s) out += "(" + std::to_string(i) + "," + std::to_string(j) + ") ";
  return out;
}

} // namespace

TEST_CASE("sparsity: every op's dependency rule against forward-mode Jacobians and Hessians at a random point") {
  // Ops whose structural pattern is wider than forward mode's at a point, by
  // design: they pick one of their reads there (select, maximum, minimum,
  // clip, reduce_max, reduce_min), or their derivative in an operand is a
  // piecewise constant that is zero at some points (fmod and mod in y:
  // -trunc(x / y)). And examples whose function is exactly linear though
  // their op is not (atanh(tanh(x)) = x).
  // sort and top_k too: each result element picks one of its row's elements.
  // reduce_window_max, select_and_scatter_add and select_and_gather_add
  // likewise pick each window's maximum (their rules are exact when the
  // selecting operand is known: tested below).
  const std::set<std::string_view> pointwiseSubset = {"select", "maximum", "minimum", "clip", "reduce_max",
                                                      "reduce_min", "fmod", "mod", "sort", "top_k", "reduce_window_max",
                                                      "select_and_scatter_add", "select_and_gather_add"};
  const std::set<std::string_view> linearExample = {"atanh"};
  // lu's rule is each matrix of the batch as a whole
  // (sparsity::matrixBatchDeps): it pivots by value, so which elements each
  // entry reads depends on the point (like sort). (eigh and svd share that
  // rule, exact for them: every entry reads the whole matrix.)
  const std::set<std::string_view> perMatrix = {"lu"};
  // Ops whose forward mode leaves rounding where an entry is exactly zero
  // (entries below 1e-12 taken as zeros): cholesky's JVP, L Φ(L⁻¹ dA L⁻ᵀ),
  // mixes entries whose contributions cancel (L[2, 0] = a[2, 0] /
  // sqrt(a[0, 0]) reads nothing of a[1, 1]); qr's likewise (r[0, 2] =
  // q[:, 0]ᵀ a[:, 2] reads nothing of column 1).
  const std::set<std::string_view> roundingZeros = {"cholesky", "qr"};
  // Rules whose Hessian pattern is a superset by design, their Jacobian
  // exact: one term per entry pairs every two of its reads, where qr's r[i,
  // j] = q[:, i]ᵀ a[:, j] and triangular_solve's x are linear in some of them.
  const std::set<std::string_view> hessianSuperset = {"qr", "triangular_solve"};
  // cumprod's and reduce_prod's derivatives divide the product by x_i, so
  // forward mode's second derivative in x_i alone, exactly zero, rounds to a
  // few ulps (div's pullback shares its one quotient: q / x against
  // (1 / x) q).
  const std::set<std::string_view> quotientNoise = {"cumprod", "reduce_prod"};
  unsigned seed = 7;
  int checked = 0;
  for (ir::OpKind k : ir::allOps()) {
    const ir::OpInfo& info = ir::info(k);
    INFO("op " << info.name);
    // kNonDifferentiable ops (comparisons, integer ops, constants, argmax,
    // host callbacks) need no rule: the analysis gives their results no
    // dependencies, as forward and reverse mode give them no derivative.
    if (autodiff::rules(k).has(autodiff::kNonDifferentiable)) continue;
    // Every other op has a rule of its own: none is left to the dense fallback.
    CHECK_MESSAGE(static_cast<bool>(sparsity::rules(k).deps), "no dependency rule");
    // prevent_gradient's derivative is an error by design: forward mode
    // cannot give a pattern to compare with (its rule is elementwise).
    if (autodiff::rules(k).has(autodiff::kGradientIsError)) continue;
    std::string text;
    if (const char* example = test::opExample(info.name)) text = example;
    else if (info.has(ir::kElementwise) && info.arity >= 1) text = test::elementwiseExample(info.name, info.arity);
    REQUIRE_MESSAGE(!text.empty(), "no example to check the rule on (op_examples.inc)");
    ++checked;
    INFO(text);
    auto m = ir::parse(text, std::string(info.name) + ".example");
    std::mt19937 rng(seed++);
    const std::vector<Array> args = test::randomArgs(*m->lookup("f"), rng);
    const RulePatterns rule = rulePatterns(*m);
    const RulePatterns ad = adPatterns(*m, args, roundingZeros.count(info.name) ? 1e-12 : 0);
    CHECK(rule.rows == ad.rows);
    CHECK(rule.cols == ad.cols);
    // Never wrong: every nonzero forward mode finds is in the rule's pattern.
    for (const auto& nz : ad.jacobian) {
      INFO("Jacobian nonzero (" << nz.first << "," << nz.second << ") missing from the rule's pattern "
                                << describe(rule.jacobian));
      CHECK(rule.jacobian.count(nz));
    }
    const bool hessianChecked = ad.cols <= kHessianInputs;
    for (const auto& nz : ad.hessian) {
      if (quotientNoise.count(info.name) && nz.first == nz.second) continue;
      INFO("Hessian nonzero (" << nz.first << "," << nz.second << ") missing from the rule's pattern "
                               << describe(rule.hessian));
      CHECK(rule.hessian.count(nz));
    }
    // Exact, but for the conservative rules listed above.
    if (!perMatrix.count(info.name)) {
      INFO("rule " << describe(rule.jacobian) << "\nforward mode " << describe(ad.jacobian));
      if (!pointwiseSubset.count(info.name)) CHECK(rule.jacobian == ad.jacobian);
      INFO("Hessian: rule " << describe(rule.hessian) << "\nforward mode " << describe(ad.hessian));
      if (hessianChecked && !linearExample.count(info.name) && !quotientNoise.count(info.name) &&
          !hessianSuperset.count(info.name))
        CHECK(rule.hessian == ad.hessian);
    }
  }
  CHECK(checked >= 90);
}

TEST_CASE("sparsity: the guide's example, a chain of residuals, is bidiagonal") {
  auto residuals = [](const Tensor& x) { return slice(x, {1}, {8}) - square(slice(x, {0}, {7})); };
  const SparsityPattern p = jacobian_sparsity(residuals, Type{DType::f64, {8}});
  CHECK(p.rows == 7);
  CHECK(p.cols == 8);
  CHECK(p.nnz() == 14);
  for (int64_t r = 0; r < 7; ++r) CHECK((p.contains(r, r) && p.contains(r, r + 1)));
  CHECK(p.str().substr(0, 9) == "xx......\n");
}

// ---- loops, windows and scatters: where their rules are exact, and where conservative ----

namespace {

/// The rule's and forward mode's Jacobian patterns of a traced function at a random point.
std::pair<RulePatterns, RulePatterns> bothPatterns(const Module& traced, unsigned seed) {
  auto m = std::shared_ptr<ir::Module>(traced.impl().clone());
  std::mt19937 rng(seed);
  const std::vector<Array> args = test::randomArgs(*m->lookup("f"), rng);
  return {rulePatterns(*m), adPatterns(*m, args)};
}

} // namespace

TEST_CASE("sparsity: a scan's pattern is its body's, step by step (a shift register, exact)") {
  // c' = (x_t, c_0, c_1, c_2); y_t = c_3 · x_t: after step t the carry holds
  // x_t .. x_{t-3}, which a union over steps (a fixed point) would blur.
  const Module traced = trace(
      [](const Tensor& c0, const Tensor& xs) {
        auto [c, ys] = scan(
            [](const Tensor& c, const Tensor& x) {
              Tensor next = concatenate({reshape(x, {1}), slice(c, {0}, {3})});
              return std::pair{next, slice(c, {3}, {4}) * x};
            },
            c0, xs);
        return std::pair{c, ys};
      },
      Type{DType::f64, {4}}, Type{DType::f64, {6, 1}});
  const auto [rule, ad] = bothPatterns(traced, 3);
  CHECK(rule.jacobian == ad.jacobian);
  // The last carry is x_5, x_4, x_3, x_2: columns 4 + 5, 4 + 4, ...
  CHECK(rule.jacobian.count({0, 9}));
  CHECK(!rule.jacobian.count({0, 8}));
  CHECK(rule.hessian == ad.hessian);
}

TEST_CASE("sparsity: a fori_loop's counter is known, so its dynamic slices and its trip count are exact") {
  // acc = acc · x[i] + x[i + 1] for i in [1, 4): reads x[1..4] only, x[0] and x[5] never.
  const Module traced = trace(
      [](const Tensor& x) {
        return fori_loop(1, 4,
                         [&](const Tensor& i, const Tensor& acc) {
                           return acc * dynamic_slice(x, {i}, {1}) + dynamic_slice(x, {i + 1}, {1});
                         },
                         full({1}, 1.0, DType::f64));
      },
      Type{DType::f64, {6}});
  const auto [rule, ad] = bothPatterns(traced, 4);
  INFO(traced.str() << "\nrule " << describe(rule.jacobian) << "\nforward mode " << describe(ad.jacobian));
  CHECK(rule.jacobian == ad.jacobian);
  CHECK(rule.jacobian == std::set<std::pair<int64_t, int64_t>>{{0, 1}, {0, 2}, {0, 3}, {0, 4}});
  CHECK(rule.hessian == ad.hessian);
}

TEST_CASE("sparsity: a while loop of data-dependent trip count gets the union over trip counts (conservative)") {
  // Rotate c until it is small: after T steps c_e reads c_{(e + T) mod 4}.
  // The trip count is a run-time value, so every c_e may read every c_j.
  const Module traced = trace(
      [](const Tensor& c0) {
        return while_loop([](const Tensor& c) { return gt(sum(c * c), 0.5); },
                          [](const Tensor& c) { return concatenate({slice(c, {1}, {4}), slice(c, {0}, {1})}) * 0.5; }, c0,
                          {.max_iterations = 50});
      },
      Type{DType::f64, {4}});
  const auto [rule, ad] = bothPatterns(traced, 5);
  for (const auto& nz : ad.jacobian) CHECK(rule.jacobian.count(nz));
  CHECK(ad.jacobian.size() == 4); // a permutation at any one point
  CHECK(rule.jacobian.size() == 16);
  CHECK(rule.hessian.empty()); // linear in c whatever the trip count
}

TEST_CASE("sparsity: an unbounded while loop's reverse (while_vjp) follows its forward steps when they are counted") {
  // Reverse mode of a loop with no bound keeps a run-time stack (while_vjp).
  // With a counter the analysis knows the trip count: exact.
  const Module traced = trace(
      [](const Tensor& x) {
        using S = std::pair<Tensor, Tensor>;
        auto loss = [](const Tensor& x) {
          auto [c, k] = while_loop([](const S& s) { return lt(s.second, full({}, 2, DType::i32)); },
                                   [](const S& s) { return S{concatenate({slice(s.first, {1}, {4}) * 2.0, sin(slice(s.first, {0}, {1}))}), s.second + full({}, 1, DType::i32)}; },
                                   S{x, full({}, 0, DType::i32)});
          return sum(c * c);
        };
        return grad(loss)(x);
      },
      Type{DType::f64, {4}});
  bool hasWhileVjp = false;
  for (const auto& fn : traced.impl().functions)
    for (const ir::Op& op : fn->ops) hasWhileVjp = hasWhileVjp || op.kind == ir::OpKind::WhileVjp;
  CHECK(hasWhileVjp);
  const auto [rule, ad] = bothPatterns(traced, 6);
  INFO(traced.str() << "\nrule " << describe(rule.jacobian) << "\nforward mode " << describe(ad.jacobian));
  CHECK(rule.jacobian == ad.jacobian);
}

TEST_CASE("sparsity: windows picked by a known operand, and scatters at run-time indices") {
  // select_and_scatter_add and select_and_gather_add with a constant selecting operand: exact.
  const char* known = R"(func @f(%0: f64[1,2,2], %1: f64[1,5,4]) -> (f64[1,5,4], f64[1,2,2]) {
  %2 = constant() {value = dense<f64[1,5,4], [1, 9, 2, 3, 4, 5, 6, 7, 8, 0, 1, 2, 3, 4, 5, 9, 1, 1, 2, 2]>} : f64[1,5,4]
  %3 = select_and_scatter_add(%0, %2) {window = [1, 3, 2], strides = [1, 2, 2], padding = [0, 0, 0, 0, 0, 0]} : f64[1,5,4]
  %4 = select_and_gather_add(%1, %2) {window = [1, 3, 2], strides = [1, 2, 2], padding = [0, 0, 0, 0, 0, 0]} : f64[1,2,2]
  return %3, %4
})";
  auto m = ir::parse(known, "known-window");
  std::mt19937 rng(8);
  const RulePatterns rule = rulePatterns(*m), ad = adPatterns(*m, test::randomArgs(*m->lookup("f"), rng));
  CHECK(rule.jacobian == ad.jacobian);
  CHECK(rule.jacobian.size() == 8); // four windows, one pick each, both ways
  // scatter_add at indices read from a parameter: each update may land anywhere along the axis.
  const char* runtime = R"(func @f(%0: f64[3], %1: f64[2], %2: i32[2]) -> (f64[3]) {
  %3 = scatter_add(%0, %2, %1) {axis = 0} : f64[3]
  return %3
})";
  auto s = ir::parse(runtime, "runtime-scatter");
  const RulePatterns r = rulePatterns(*s);
  CHECK(r.jacobian == std::set<std::pair<int64_t, int64_t>>{{0, 0}, {1, 1}, {2, 2}, {0, 3}, {1, 3}, {2, 3}, {0, 4}, {1, 4}, {2, 4}});
}

TEST_CASE("sparsity: a scan of 1,000 steps is walked step by step, its stacked results exact") {
  // ys[t] = c_t · x_t with c_{t+1} = c_t + x_t: ys[t] reads x_0 .. x_t (a lower triangle).
  const int64_t n = 1000;
  const SparsityPattern p = jacobian_sparsity(
      [](const Tensor& xs) {
        auto [c, ys] = scan([](const Tensor& c, const Tensor& x) { return std::pair{c + x, c * x}; },
                            full({}, 1.0, DType::f64), xs);
        return ys;
      },
      Type{DType::f64, {n}});
  CHECK(p.rows == n);
  CHECK(p.nnz() == n * (n + 1) / 2);
  CHECK(p.contains(n - 1, 0));
  CHECK(!p.contains(0, 1));
}
