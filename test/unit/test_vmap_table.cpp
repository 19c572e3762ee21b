// test/unit/test_vmap_table.cpp — vmap checked against loops, driven by the
// op table: every op's example (op_examples.inc, synthesised ones for plain
// elementwise ops, and a few below) batched with `batching::vmapFunction`,
// the batch axis first, in the middle and last, with every subset of the
// parameters batched (the rest shared), must equal @f run once per example,
// in the interpreter and compiled; so must each example's VJP and JVP. Then
// the vmap errors the frame's tests do not already cover. (Random programs
// under vmap: the end of test_random_programs.cpp, which has the generator.)
#include "Check.h"

#include "autodiff/Reverse.h"
#include "autodiff/Rules.h"
#include "batching/Rules.h"
#include "codegen/Lowering.h"
#include "ir/Builder.h"
#include "ir/Interpreter.h"
#include "ir/OpInfo.h"
#include "ir/Verifier.h"
#include "jit/Engine.h"
#include "transforms/Passes.h"

#include <adjit/adjit.h>
#include <adjit/vmap.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>

using namespace adjit;

namespace {

constexpr int64_t kBatch = 7; // unlike every extent of the examples, so a misplaced axis shows

// ----------------------------------------------------------------------------
// Moving examples along an axis.

/// Example b of `a` along `axis`.
Array takeAlong(const Array& a, int64_t axis, int64_t b) {
  const Shape& s = a.shape();
  Shape rs = s;
  rs.erase(rs.begin() + axis);
  Array r(Type{a.dtype(), rs});
  if (r.size() == 0) return r;
  const std::size_t elem = a.bytes() / static_cast<std::size_t>(a.size());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= s[static_cast<std::size_t>(i)];
  for (std::size_t i = static_cast<std::size_t>(axis) + 1; i < s.size(); ++i) inner *= s[i];
  const int64_t n = s[static_cast<std::size_t>(axis)];
  const char* src = static_cast<const char*>(a.raw());
  char* dst = static_cast<char*>(r.raw());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + static_cast<std::size_t>(o * inner) * elem,
                src + static_cast<std::size_t>((o * n + b) * inner) * elem, static_cast<std::size_t>(inner) * elem);
  return r;
}

/// Stacks arrays of type `t` along a new axis `axis`.
Array stackAlong(const std::vector<Array>& rows, int64_t axis, const Type& t) {
  const Shape& s = t.shape;
  Shape rs = s;
  rs.insert(rs.begin() + axis, static_cast<int64_t>(rows.size()));
  Array r(Type{t.dtype, rs});
  if (rows.empty() || rows[0].size() == 0) return r;
  const std::size_t elem = rows[0].bytes() / static_cast<std::size_t>(rows[0].size());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= s[static_cast<std::size_t>(i)];
  for (std::size_t i = static_cast<std::size_t>(axis); i < s.size(); ++i) inner *= s[i];
  const int64_t n = static_cast<int64_t>(rows.size());
  char* dst = static_cast<char*>(r.raw());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + static_cast<std::size_t>((o * n + b) * inner) * elem,
                  static_cast<const char*>(rows[static_cast<std::size_t>(b)].raw()) +
                      static_cast<std::size_t>(o * inner) * elem,
                  static_cast<std::size_t>(inner) * elem);
  return r;
}

/// Random values: floats in [0.3, 1.7] (inside every op's domain, as
/// test_grad_fd.cpp), integers in [0, 3], booleans.
Array randomArray(const Type& t, std::mt19937& rng) {
  Array a(t);
  std::uniform_real_distribution<double> d(0.3, 1.7);
  for (int64_t i = 0; i < a.size(); ++i)
    a.set(i, t.dtype == DType::i1 ? double(rng() % 2) : is_floating(t.dtype) ? d(rng) : double(rng() % 4));
  return a;
}

std::vector<Array> runJit(const engine::Kernel& k, const std::vector<Array>& args) {
  std::vector<detail::Leaf> leaves;
  for (const Array& a : args) leaves.push_back({a.raw(), &a.type()});
  std::vector<Array> out;
  engine::run(k, leaves, out);
  return out;
}

std::string axesText(const std::vector<std::optional<int64_t>>& v) {
  std::string t = "[";
  for (std::size_t i = 0; i < v.size(); ++i) t += (i ? "," : "") + (v[i] ? std::to_string(*v[i]) : std::string("-"));
  return t + "]";
}

// ----------------------------------------------------------------------------
// The examples.

/// Examples of ops that op_examples.inc has none for (ops without
/// gradients), and second examples where the first reads an operand only
/// as a constant (indices, starts, a branch index, a loop predicate), so
/// that operand is batched too. Traced from the public API.
struct Extra {
  const char* op;
  std::function<Module()> make;
};

/// Indices from values in [0.3, 1.7]: 0 to 3.
Tensor indexFrom(const Tensor& x, double scale = 2.0) { return cast(floor(x * scale), DType::i32); }

const std::vector<Extra>& extras() {
  static const std::vector<Extra> v = {
      {"one_hot",
       [] {
         return trace([](Tensor x) { return one_hot(indexFrom(x), 4, DType::f64); }, Type{DType::f64, {3}});
       }},
      {"argmax",
       [] {
         return trace([](Tensor x) { return std::make_tuple(argmax(x, 1, DType::i32), argmax(x, 0)); },
                      Type{DType::f64, {3, 4}});
       }},
      {"argmin",
       [] {
         return trace([](Tensor x) { return std::make_tuple(argmin(x, 1, DType::i32), argmin(x, 0)); },
                      Type{DType::f64, {3, 4}});
       }},
      {"searchsorted",
       [] {
         return trace(
             [](Tensor s, Tensor v) {
               return std::make_tuple(searchsorted(sort(s), v), searchsorted(sort(s), v, "right"));
             },
             Type{DType::f64, {5}}, Type{DType::f64, {3}});
       }},
      // Batched indices, starts, branch indices and predicates.
      {"gather",
       [] {
         return trace([](Tensor x, Tensor i) { return take(x, indexFrom(i), 0); }, Type{DType::f64, {4, 2}},
                      Type{DType::f64, {3}});
       }},
      {"gather",
       [] {
         return trace([](Tensor x, Tensor i) { return take(x, indexFrom(i), 1); }, Type{DType::f64, {2, 4}},
                      Type{DType::f64, {2, 3}});
       }},
      {"scatter_add",
       [] {
         return trace([](Tensor x, Tensor i, Tensor u) { return scatter_add(x, indexFrom(i), u, 0); },
                      Type{DType::f64, {4, 2}}, Type{DType::f64, {3}}, Type{DType::f64, {3, 2}});
       }},
      {"dynamic_slice",
       [] {
         return trace(
             [](Tensor x, Tensor s) {
               return dynamic_slice(x, {indexFrom(s), 1}, {2, 2});
             },
             Type{DType::f64, {5, 4}}, Type{DType::f64, {}});
       }},
      {"dynamic_update_slice",
       [] {
         return trace(
             [](Tensor x, Tensor u, Tensor s) {
               return dynamic_update_slice(x, u, {1, indexFrom(s)});
             },
             Type{DType::f64, {3, 5}}, Type{DType::f64, {2, 2}}, Type{DType::f64, {}});
       }},
      {"switch",
       [] {
         return trace(
             [](Tensor x, Tensor s) {
               return cond(
                   gt(sum(x), s * 3.0), [&](Tensor y) { return y * s; }, [&](Tensor y) { return sin(y) - s; }, x);
             },
             Type{DType::f64, {3}}, Type{DType::f64, {}});
       }},
      {"while",
       [] {
         // A predicate that reads the batch: lanes end after different trip counts.
         return trace(
             [](Tensor x, Tensor s) {
               return while_loop([&](Tensor c) { return gt(sum(c * c), s); },
                                 [&](Tensor c) { return c * 0.5 + s * 0.01; }, x * 2.0, {.max_iterations = 40});
             },
             Type{DType::f64, {3}}, Type{DType::f64, {}});
       }},
  };
  return v;
}

/// Op kinds whose example is not checked here, and why.
/// - No operands: nothing batched reaches them, so vmap never calls their
///   rule (the driver copies them; every other example exercises that copy).
bool noOperands(ir::OpKind k) { return ir::info(k).arity == 0; }
/// - Effects: host_callback (debug_callback: called once per example, in
///   batch order, with its slices) and loop_limit (max_iterations: raises if
///   any lane exceeds it) are checked in test/unit/test_vmap_control.cpp
///   ("vmap of debug_callback: once per example...", "max_iterations
///   exceeded by one example raises"), which registers callbacks and expects
///   the errors; a one-op example here can do neither.
const std::set<std::string_view> kEffectful = {"host_callback", "loop_limit"};
/// - Not yet batched: ops whose rules are still being written. Empty, and
///   meant to stay so: every op has its rule. An op listed here must still
///   be unchecked (the test fails once its example passes, so an entry
///   cannot outlive its reason); an op not listed must be checked.
const std::set<std::string_view> kPendingRules = {};

/// Failures found in rules written on other branches, reported to their
/// authors and awaiting a fix: a failure whose text starts with one of
/// these is a warning, and each must still fail (the test fails once it is
/// fixed, so the list empties).
const std::vector<std::string> kKnownFailures = {
    // (conv at batch 0 was one until the driver answered empty batches itself.)
};

/// Ops whose results are elements of their operands (or exact functions of
/// them): batched and per-example runs must agree bit for bit.
bool exactOp(ir::OpKind k) {
  static const std::set<std::string_view> names = {
      "neg", "abs", "sign", "floor", "ceil", "round", "trunc", "rint", "maximum", "minimum", "clip", "copysign", "lt",
      "le", "gt", "ge", "eq", "ne", "and", "or", "xor", "not", "select", "cast", "shift_left", "shift_right_logical",
      "shift_right_arithmetic", "population_count", "bitcast", "stop_gradient", "prevent_gradient", "concatenate",
      "pad", "one_hot", "dynamic_update_slice", "reduce_max", "reduce_min", "argmax", "argmin", "sort", "top_k", "searchsorted",
      "tril", "triu", "reduce_window_max"};
  return ir::info(k).has(ir::kElementsFromOperand) || names.count(ir::info(k).name) > 0;
}

/// An elementwise op without an example applied to `dtype[3]` parameters,
/// for the first dtype its type rule accepts (floating first).
std::shared_ptr<ir::Module> elementwiseModule(ir::OpKind k) {
  for (DType dtype : {DType::f64, DType::i32, DType::i1}) {
    try {
      auto m = std::make_shared<ir::Module>();
      ir::Function& f = m->add("f");
      ir::Builder b(*m, f);
      ir::ValueList operands;
      for (int i = 0; i < ir::info(k).arity; ++i) operands.push_back(b.param(Type{dtype, {3}}));
      b.ret({b.create1(k, operands)});
      ir::verify(*m);
      return m;
    } catch (const Error&) {}
  }
  return nullptr;
}

struct Example {
  std::string label; ///< the op's name, and which example
  ir::OpKind kind;
  std::shared_ptr<ir::Module> module;
};

std::vector<Example> examples() {
  std::vector<Example> out;
  for (ir::OpKind k : ir::allOps()) {
    const ir::OpInfo& info = ir::info(k);
    std::string name(info.name);
    if (const char* text = test::opExample(info.name))
      out.push_back({name, k, std::shared_ptr<ir::Module>(ir::parse(text, name + ".example"))});
    else if (info.has(ir::kElementwise) && info.arity >= 1)
      if (auto m = elementwiseModule(k)) out.push_back({name, k, m});
  }
  for (std::size_t i = 0; i < extras().size(); ++i) {
    const Extra& e = extras()[i];
    const ir::OpKind k = *ir::lookup(e.op);
    out.push_back({std::string(e.op) + " (extra example " + std::to_string(i) + ")", k,
                   std::shared_ptr<ir::Module>(e.make().impl().clone())});
  }
  return out;
}

/// Op kinds in `m` (every function) without a batching rule.
std::set<std::string_view> missingRules(const ir::Module& m) {
  std::set<std::string_view> missing;
  for (const auto& fn : m.functions)
    for (const ir::Op& op : fn->ops)
      if (!batching::rules(op.kind).batch) missing.insert(ir::info(op.kind).name);
  return missing;
}

/// Marks in `seen` each op kind of @f with a batched operand when the
/// parameters marked in `in` are batched.
void markBatchedOps(const ir::Function& f, const std::vector<char>& in, std::set<ir::OpKind>& seen) {
  std::vector<char> has(f.types.size(), 0);
  for (std::size_t i = 0; i < f.params.size(); ++i) has[static_cast<std::size_t>(f.params[i])] = in[i];
  for (const ir::Op& op : f.ops)
    if (std::any_of(op.operands.begin(), op.operands.end(),
                    [&](ir::ValueId o) { return has[static_cast<std::size_t>(o)]; })) {
      seen.insert(op.kind);
      for (ir::ValueId r : op.results) has[static_cast<std::size_t>(r)] = 1;
    }
}

/// The axis of a batched value of per-example rank r: first, middle, last.
int64_t axisAt(int placement, int64_t r) { return placement == 0 ? 0 : placement == 1 ? (r + 1) / 2 : r; }

/// What checking one example found.
struct Outcome {
  int cases = 0, compiled = 0;
  std::vector<std::string> failures;
};

/// Checks `@fn.vmap` (fn: @f, or a derivative of it) of example `e` against
/// per-example runs of @fn, in the interpreter and compiled. For @f: every
/// layout at batch size kBatch (each subset of parameters batched, first, in
/// the middle and last), then every parameter batched, first and last, at the
/// edge sizes 1 and 0. For a derivative (`firstOnly` parameters are @f's, the
/// rest cotangents): all batched in the three places, and @f's parameters
/// only, and the cotangents only, in the middle.
Outcome checkExample(const Example& e, unsigned seed, std::set<ir::OpKind>& seen, const std::string& fn = "f",
                     std::size_t firstOnly = 0) {
  Outcome o;
  const std::shared_ptr<ir::Module>& m = e.module;
  ir::verify(*m);
  const ir::Function& f = *m->lookup(fn);
  const std::size_t n = f.params.size();
  const bool exact = fn == "f" && exactOp(e.kind);
  std::shared_ptr<engine::Kernel> fKernel;
  std::set<std::pair<std::string, std::string>> done;
  std::mt19937 rng(seed);
  int layout = 0;
  struct Layout {
    int64_t batch;
    unsigned mask;
    int placement;
  };
  const unsigned all = (1u << n) - 1;
  std::vector<Layout> layouts;
  if (fn == "f") {
    for (unsigned mask = 1; mask <= all; ++mask)
      for (int placement = 0; placement < 3; ++placement) layouts.push_back({kBatch, mask, placement});
    for (const int64_t batch : {int64_t{1}, int64_t{0}})
      for (int placement : {0, 2}) layouts.push_back({batch, all, placement});
  } else {
    for (int placement = 0; placement < 3; ++placement) layouts.push_back({kBatch, all, placement});
    const unsigned primals = (1u << firstOnly) - 1;
    if (primals != 0 && primals != all) layouts.push_back({kBatch, primals, 1});
    if (primals != all) layouts.push_back({kBatch, all & ~primals, 1});
  }
  for (const auto& [batch, mask, placement] : layouts) {
    batching::AxisSpec spec;
    spec.size = batch;
    std::vector<char> in;
    for (std::size_t i = 0; i < n; ++i) {
      const bool b = (mask >> i) & 1u;
      in.push_back(b);
      spec.in.push_back(b ? std::optional<int64_t>(axisAt(placement, f.type(f.params[i]).rank())) : std::nullopt);
    }
    for (ir::ValueId r : f.outputs) spec.out.push_back(axisAt(placement, f.type(r).rank()));
    if (!done.insert({axesText(spec.in) + std::to_string(batch), axesText(spec.out)}).second) continue;
    const std::string where = e.label + (fn == "f" ? "" : " @" + fn) + " in_axes=" + axesText(spec.in) +
                              " out_axes=" + axesText(spec.out) + " batch " + std::to_string(batch);
    ++o.cases;
    try {
      const std::string name = batching::vmapFunction(m, fn, spec);
      ir::verify(*m);
      markBatchedOps(f, in, seen);
      // Batched arguments, and each example's.
      std::vector<Array> args;
      std::vector<std::vector<Array>> per(static_cast<std::size_t>(batch));
      for (std::size_t i = 0; i < n; ++i) {
        const Type& t = f.type(f.params[i]);
        if (!spec.in[i]) {
          args.push_back(randomArray(t, rng));
          for (auto& p : per) p.push_back(args.back());
          continue;
        }
        Shape s = t.shape;
        s.insert(s.begin() + *spec.in[i], batch);
        args.push_back(randomArray(Type{t.dtype, s}, rng));
        for (int64_t b = 0; b < batch; ++b)
          per[static_cast<std::size_t>(b)].push_back(takeAlong(args.back(), *spec.in[i], b));
      }
      auto compare = [&](const std::vector<Array>& got,
                         const std::function<std::vector<Array>(const std::vector<Array>&)>& one, const char* how) {
        std::vector<std::vector<Array>> ys;
        for (const auto& p : per) ys.push_back(one(p));
        if (got.size() != f.outputs.size()) {
          o.failures.push_back(where + " (" + how + "): " + std::to_string(got.size()) + " results, expected " +
                               std::to_string(f.outputs.size()));
          return;
        }
        for (std::size_t k = 0; k < got.size(); ++k) {
          std::vector<Array> rows;
          for (const auto& y : ys) rows.push_back(y.at(k));
          const Array want = stackAlong(rows, *spec.out[k], f.type(f.outputs[k]));
          std::string why;
          const bool ok = exact ? got[k].type() == want.type() && test::bytesOf(got[k]) == test::bytesOf(want)
                                : test::close(got[k], want, 1e-9, &why);
          if (!ok) {
            if (exact && why.empty()) test::close(got[k], want, 0, &why);
            if (why.empty()) why = "equal values, other bits (e.g. -0 and 0, or NaN payloads)";
            o.failures.push_back(where + " (" + how + ") result " + std::to_string(k) + ": " + why);
          }
        }
      };
      compare(
          ir::interpret(*m, name, args), [&](const std::vector<Array>& p) { return ir::interpret(*m, fn, p); },
          "interpreter");
      // Compiled: every layout where the example is small (one function
      // of a few ops); the layouts of all parameters batched otherwise.
      if (fn == "f" ? n <= 2 || mask == all || placement == 1 : mask == all && placement == 1) {
        if (!fKernel) fKernel = engine::compile({.module = *m, .function = fn, .options = {.optLevel = 1}});
        auto kernel =
            engine::compile({.module = *m, .function = name, .options = {.optLevel = (layout++ % 2) ? 2 : 0}});
        compare(
            runJit(*kernel, args), [&](const std::vector<Array>& p) { return runJit(*fKernel, p); }, "compiled");
        ++o.compiled;
      }
    } catch (const std::exception& ex) { o.failures.push_back(where + ": threw " + ex.what()); }
  }
  // Every batched twin prints and parses back to the same text.
  try {
    const std::string text = ir::print(*m);
    if (ir::print(*ir::parse(text, e.label + ".vmap")) != text)
      o.failures.push_back(e.label + ": the batched module does not print back");
  } catch (const std::exception& ex) {
    o.failures.push_back(e.label + ": the batched module does not parse back: " + ex.what());
  }
  return o;
}

} // namespace

TEST_CASE("vmap of every op equals a loop of it: batch axis first, middle and last, every subset of operands batched, "
          "interpreted and compiled") {
  std::set<ir::OpKind> seen;             // op kinds that met a batched operand in a checked example
  std::set<std::string> skippedExamples; // examples some op of which has no rule yet
  int cases = 0, compiled = 0;
  std::set<std::string> knownSeen; // kKnownFailures that failed as expected
  unsigned seed = 1;
  for (const Example& e : examples()) {
    INFO("example " << e.label << ":\n" << ir::print(*e.module));
    if (kEffectful.count(ir::info(e.kind).name)) continue;
    const std::set<std::string_view> missing = missingRules(*e.module);
    if (!missing.empty()) {
      std::string list;
      for (std::string_view s : missing) list += " " + std::string(s);
      skippedExamples.insert(e.label + " (no rule for" + list + ")");
      continue;
    }
    const Outcome o = checkExample(e, seed++, seen);
    cases += o.cases;
    compiled += o.compiled;
    for (const std::string& why : o.failures) {
      const auto known = std::find_if(kKnownFailures.begin(), kKnownFailures.end(),
                                      [&](const std::string& k) { return why.starts_with(k); });
      if (known == kKnownFailures.end()) {
        FAIL_CHECK(why);
        continue;
      }
      knownSeen.insert(*known);
      MESSAGE("known failure (kKnownFailures): " << why);
    }
  }
  if (!skippedExamples.empty()) {
    std::string list;
    for (const std::string& s : skippedExamples) list += "\n  " + s;
    MESSAGE("examples skipped until their ops' batching rules land:" << list);
  }
  for (const std::string& k : kKnownFailures)
    CHECK_MESSAGE(knownSeen.count(k), "a known failure passes now: remove it from kKnownFailures: " << k);
  // Every op was checked, or says why not.
  for (ir::OpKind k : ir::allOps()) {
    const std::string_view name = ir::info(k).name;
    if (noOperands(k) || kEffectful.count(name)) continue;
    if (kPendingRules.count(name))
      CHECK_MESSAGE(!seen.count(k), "op " << name << " is checked now: remove it from kPendingRules");
    else
      CHECK_MESSAGE(seen.count(k),
                    "op " << name << " was not checked under vmap: give it a batching rule and an example");
  }
  MESSAGE(cases << " layouts checked, " << compiled << " of them compiled too");
  CHECK(cases > 300);
  CHECK(compiled > 200);
}

// ----------------------------------------------------------------------------
// Errors test_vmap.cpp does not check: each with its message and, for the
// API, the user's line (docs/guide/errors.md lists them all, under Batching).

namespace {

/// Runs `run`, which must raise an adjit::Error containing `text` at line `line` of this file.
void expectError(const std::function<void()>& run, const std::string& text, int line) {
  try {
    run();
    FAIL_CHECK("no error; expected one containing: " << text);
  } catch (const Error& e) {
    INFO("error: " << e.what());
    CHECK(e.message().find(text) != std::string::npos);
    CHECK(e.location().line == static_cast<uint32_t>(line));
    CHECK(e.location().file.find("test_vmap_table.cpp") != std::string::npos);
  }
}

} // namespace

TEST_CASE("vmap errors: axis_size, out_axes and axes inside a trace, each at the user's line") {
  const Array two(std::vector<float>{1, 2}), three(std::vector<float>{1, 2, 3});
  auto twice = [](const Tensor& a) { return a * 2.0f; };
  int line = __LINE__ + 1;
  expectError([&] { (void)vmap(twice, {.axis_size = 2})(three); },
              "vmap: axis_size is 2, but argument leaf 0 (f32[3]) has 3 examples along axis 0", line);
  line = __LINE__ + 1;
  expectError([&] { (void)vmap(twice, {.in_axes = {std::nullopt}, .axis_size = -1})(two); },
              "vmap: axis_size must be at least 0, got -1", line);
  line = __LINE__ + 1;
  expectError([&] { (void)vmap(twice, {.out_axes = {2}})(two); },
              "vmap: out_axes gives axis 2 for result leaf 0, which is f32[] per example: expected an axis in [-1, 0]",
              line);
  line = __LINE__ + 3; // the line of the vmap call below
  expectError(
      [&] {
        (void)vmap([](const Tensor& a) { return std::make_tuple(a, a); }, {.out_axes = {0, 0, 0}})(two);
      },
      "vmap: out_axes has 3 entries, but the function returns 2 results", line);
  // A nested argument (a pair): every leaf of it takes the argument's axis; the
  // sizes of leaves of one argument must agree too.
  line = __LINE__ + 3; // the line of the vmap call below
  expectError(
      [&] {
        (void)vmap([](const std::pair<Tensor, Tensor>& p) { return p.first + p.second; })(std::pair{two, three});
      },
      "vmap: batch sizes disagree: argument leaf 0 (f32[2]) has 2 examples along axis 0, but argument leaf 1 (f32[3]) "
      "has 3",
      line);
  // Inside a trace, with Tensors: the same checks, at the line that called vmap.
  auto sumAll = [](const Tensor& x) { return sum(x); };
  line = __LINE__ + 3; // the line of the vmap call below
  expectError(
      [&] {
        (void)trace([&](Tensor a) { return vmap(sumAll, {.in_axes = {-3}})(a); }, Type{DType::f32, {2, 3}});
      },
      "vmap: in_axes gives axis -3 for argument leaf 0, which is f32[2,3]: expected an axis in [-2, 1]", line);
  line = __LINE__ + 3; // the line of the vmap call below
  expectError(
      [&] {
        (void)trace([&](Tensor a, Tensor b) { return vmap([](Tensor x, Tensor y) { return x * y; })(a, b); },
                    Type{DType::f32, {2, 3}}, Type{DType::f32, {3, 3}});
      },
      "vmap: batch sizes disagree: argument leaf 0 (f32[2,3]) has 2 examples along axis 0, but argument leaf 1 "
      "(f32[3,3]) has 3",
      line);
  line = __LINE__ + 3; // the line of the vmap call below
  expectError(
      [&] {
        (void)trace([&](Tensor a) { return vmap(sumAll, {.out_axes = {std::nullopt}})(a); }, Type{DType::f32, {2, 3}});
      },
      "vmap: result leaf 0 (f32[] per example) depends on a batched argument, but out_axes gives it std::nullopt",
      line);
  // A failed vmap leaves the trace usable: the per-example function it traced is gone.
  Module m = trace(
      [&](Tensor a) {
        try {
          (void)vmap(sumAll, {.out_axes = {std::nullopt}})(a);
        } catch (const Error&) {}
        return vmap(sumAll)(a);
      },
      Type{DType::f32, {2, 3}});
  CHECK(m.impl().functions.size() == 1);
  m.verify();
}

TEST_CASE("vmap pass and vmapFunction errors: malformed arguments, axes and results that do not fit") {
  const char* text = R"(
func @f(%x: f32[3], %y: f32[3]) -> (f32[3]) {
  %z = mul(%x, %y) : f32[3]
  return %z
}
)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"vmap(f, axis_size=n)", "vmap pass: axis_size must be an integer, got 'n'"},
      {"vmap(f, axis_size=4x)", "vmap pass: axis_size must be an integer, got '4x'"},
      {"vmap(f, in_axes=0, axis_size=4)", "vmap pass: in_axes must be a list like [0,-,1] (- for none), got '0'"},
      {"vmap(f, out_axes=[0, x], axis_size=4)", "vmap pass: an entry of out_axes must be an integer, got 'x'"},
      {"vmap(f, in_axis=[0,0], axis_size=4)",
       "vmap pass: unknown option 'in_axis=[0,0]' (known: in_axes, out_axes, axis_size)"},
      {"vmap(axis_size=4)",
       "vmap pass: expected vmap(F, in_axes=[...], out_axes=[...], axis_size=N), got vmap(axis_size=4)"},
      {"vmap(g, axis_size=4)", "vmap pass: no function named @g in the module"},
      {"vmap(f, out_axes=[0,0], axis_size=4)", "vmap: out_axes has 2 entries, but @f has 1 results"},
      {"vmap(f, in_axes=[2,0], axis_size=4)",
       "vmap: parameter 0 of @f is f32[3] per example, so its batch axis must be in [-2, 1], got 2"},
      {"vmap(f, in_axes=[0,-3], axis_size=4)",
       "vmap: parameter 1 of @f is f32[3] per example, so its batch axis must be in [-2, 1], got -3"},
      {"vmap(f, out_axes=[2], axis_size=4)",
       "vmap: result 0 of @f is f32[3] per example, so its batch axis must be in [-2, 1], got 2"},
      {"vmap(f, in_axes=[-,0], out_axes=[-], axis_size=4)",
       "vmap: result 0 of @f depends on a batched parameter, but out_axes gives it none"},
      {"vmap(f, axis_size=-1)", "vmap: the batch size must be at least 0, got -1"},
  };
  for (const auto& [pass, message] : cases) {
    INFO("pass " << pass);
    Module m = Module::parse(text);
    CHECK_THROWS_WITH_AS(transforms::runPipeline(m.impl(), {pass}), doctest::Contains(message.c_str()), Error);
    // Nothing half-made is left behind.
    CHECK(m.impl().functions.size() == 1);
  }
  // Shared everywhere with axis_size is fine (the result is broadcast), and a
  // result that reads no batched parameter may keep out_axes none.
  Module m = Module::parse(text);
  transforms::runPipeline(m.impl(), {"vmap(f, in_axes=[-,-], out_axes=[-], axis_size=4)"});
  m.verify();
  CHECK(m.impl().lookup("f.vmap")->type(m.impl().lookup("f.vmap")->outputs[0]) == Type{DType::f32, {3}});
  // vmapFunction directly: in_axes of the wrong length.
  auto mod = std::shared_ptr<ir::Module>(Module::parse(text).impl().clone());
  CHECK_THROWS_WITH_AS(batching::vmapFunction(mod, "f", {{0}, {0}, 4}),
                       doctest::Contains("vmap: in_axes has 1 entries, but @f has 2 parameters"), Error);
}

namespace {

/// vmap of each differentiable example's derivative function (`reverse`:
/// the combined VJP, else the JVP) against a loop of it, every layout
/// checkExample tries. Returns {layouts, compiled}.
std::pair<int, int> checkDerivatives(bool reverse, unsigned seed) {
  const char* what = reverse ? "VJP" : "JVP";
  int cases = 0, compiled = 0;
  std::set<ir::OpKind> seen;
  for (const Example& e : examples()) {
    const autodiff::Rules& ad = autodiff::rules(e.kind);
    if (ad.has(autodiff::kNonDifferentiable) || ad.has(autodiff::kGradientIsError) ||
        kEffectful.count(ir::info(e.kind).name))
      continue;
    INFO("example " << e.label << ":\n" << ir::print(*e.module));
    const std::size_t primals = e.module->lookup("f")->params.size();
    std::string derived;
    try {
      derived = reverse ? autodiff::combinedVjp(e.module, "f") : autodiff::jvpFunction(e.module, "f");
    } catch (const Error&) {
      continue; // an example with no floating output or input: nothing to differentiate
    }
    if (!missingRules(*e.module).empty()) {
      FAIL_CHECK(e.label << ": its " << what << " uses an op without a batching rule");
      continue;
    }
    const Outcome o = checkExample(e, seed++, seen, derived, primals);
    cases += o.cases;
    compiled += o.compiled;
    for (const std::string& why : o.failures) FAIL_CHECK(why);
  }
  MESSAGE(cases << " layouts of " << std::string(what) << "s checked, " << compiled << " of them compiled too");
  return {cases, compiled};
}

} // namespace

TEST_CASE("vmap of every differentiable op's VJP equals a loop of it (per-example gradients, op by op)") {
  // The combined VJP of each example (reverse mode's @f.vjp: the outputs and
  // the gradients from the arguments and the cotangents) batched: all
  // arguments, the primals only (a batch of cotangents is a Jacobian's rows),
  // the cotangents only. Its ops are the VJP rules' (pad_sum,
  // select_and_scatter_add, while_vjp, ...), each batched by its own rule.
  CHECK(checkDerivatives(true, 1000).first > 300);
}

TEST_CASE("vmap of every differentiable op's JVP equals a loop of it (Jacobian columns, op by op)") {
  // The JVP of each example (forward mode's @f.jvp: the outputs and their
  // tangents from the arguments and theirs) batched: all arguments, the
  // primals only, the tangents only (a batch of tangents is jacfwd's columns).
  // Its ops are the JVP rules', each batched by its own rule.
  CHECK(checkDerivatives(false, 2000).first > 300);
}
