// autodiff/CustomGradient.cpp — custom_gradient: the forward body becomes a
// function called through a custom_vjp op; the user's grad_fn becomes the VJP
// function, traced on first use. Tensors of the forward that grad_fn reads
// become residuals: extra outputs of the forward, parameters of the VJP.
#include "autodiff/CustomGradient.h"
#include "autodiff/JvpCtx.h"
#include "autodiff/Reverse.h"

#include "ir/Builder.h"
#include "ir/OpInfo.h"
#include "support/Assert.h"

#include <adjit/autodiff.h>
#include <adjit/custom_gradient.h>

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace adjit {
namespace {

/// Tensors of the forward trace used by grad_fn become residuals: parameters
/// of the VJP function, returned by the forward.
struct ResidualCaptures : detail::CaptureHook {
  const ir::LazyVjp& lazy;
  const ir::Function& fwd;
  detail::TraceState* self = nullptr;
  std::vector<ir::ValueId> residuals; ///< values of fwd, in order of first use
  std::map<ir::ValueId, ir::ValueId> mapped;
  ResidualCaptures(const ir::LazyVjp& l, const ir::Function& f) : lazy(l), fwd(f) {}
  /// The forward value `t` stands for: its own, or (for an outer tensor the
  /// forward captured) the forward's parameter holding it.
  std::optional<ir::ValueId> fwdValue(const Tensor& t) const {
    if (t.trace() == lazy.fwdTrace) return t.id();
    std::optional<ir::ValueId> outerValue;
    if (t.trace() == lazy.outerTrace) outerValue = t.id();
    else if (lazy.outerHook) outerValue = lazy.outerHook->find(t);
    if (outerValue) {
      auto it = lazy.outerToFwd.find(*outerValue);
      if (it != lazy.outerToFwd.end()) return it->second;
    }
    return std::nullopt;
  }
  std::optional<Type> typeOf(const Tensor& t) override {
    if (auto v = fwdValue(t)) return fwd.type(*v);
    return std::nullopt;
  }
  std::optional<ir::ValueId> find(const Tensor& t) const override {
    std::optional<ir::ValueId> v = fwdValue(t);
    if (!v) return std::nullopt;
    auto it = mapped.find(*v);
    if (it == mapped.end()) return std::nullopt;
    return it->second;
  }
  ir::ValueId capture(const Tensor& t) override {
    const ir::ValueId v = *fwdValue(t);
    auto it = mapped.find(v);
    if (it != mapped.end()) return it->second;
    ir::ValueId p = self->builder.param(fwd.type(v));
    residuals.push_back(v);
    return mapped[v] = p;
  }
};

/// Traces the user's grad_fn into `<fwd>.vjp` and builds `<fwd>.res`, the
/// forward returning its residuals too.
void materialize(const std::shared_ptr<ir::Module>& m, ir::LazyVjp& lazy) {
  const ir::Function& fwd = *m->lookup(lazy.fwd);
  auto hook = std::make_shared<ResidualCaptures>(lazy, fwd);
  std::vector<Type> inputTypes = fwd.paramTypes();
  std::string vjpName;
  {
    detail::TraceScope scope(m, lazy.fwd + ".vjp");
    vjpName = scope.state().fn->name;
    hook->self = &scope.state();
    scope.state().captures = hook;
    // Cotangents of the outputs (zeros are passed for integer outputs' slots so
    // grad_fn sees one per output; they are not parameters).
    std::vector<Tensor> dys;
    for (std::size_t i = 0; i < lazy.outputs; ++i) {
      const Type& t = fwd.type(fwd.outputs[i]);
      dys.push_back(is_floating(t.dtype) ? scope.param(t) : full(t.shape, 0, t.dtype));
    }
    // Residual parameters are appended as grad_fn reads them; the cotangent
    // parameters must come first, which they do.
    std::vector<Variable> vars;
    for (const auto& v : lazy.variables) vars.emplace_back(v);
    detail::GradResult result = lazy.gradFn(dys, vars);
    std::vector<std::optional<Tensor>>& dxs = result.inputs;
    if (dxs.size() != lazy.inputs)
      throw Error(fmt::format("custom_gradient function expected to return {} gradient{}, but returned {} instead",
                              lazy.inputs, lazy.inputs == 1 ? "" : "s", dxs.size()), lazy.loc);
    // std::nullopt (TF's None) is "no gradient": zeros, since the VJP
    // function returns a value for every floating input.
    std::vector<Tensor> outs;
    lazy.noGradient.assign(inputTypes.size(), false);
    for (std::size_t i = 0; i < lazy.inputs; ++i) {
      const Type want = inputTypes[i];
      lazy.noGradient[i] = !dxs[i];
      if (!dxs[i]) {
        if (is_floating(want.dtype)) outs.push_back(full(want.shape, 0, want.dtype));
        continue;
      }
      const Type got = dxs[i]->type();
      if (got != want)
        throw Error(fmt::format("custom_gradient: gradient {} has type {}, but input {} has type {}", i, got.str(), i,
                                want.str()), lazy.loc);
      if (is_floating(want.dtype)) outs.push_back(*dxs[i]);
    }
    if (!lazy.variableOperands.empty()) {
      if (result.variables.size() != lazy.variables.size())
        throw Error("Must return gradient for each variable from custom_gradient grad_fn.", lazy.loc);
      for (std::size_t i = 0; i < lazy.variables.size(); ++i) {
        const Type& want = lazy.variables[i]->value.type();
        const std::optional<Tensor>& g = result.variables[i];
        lazy.noGradient[static_cast<std::size_t>(lazy.variableOperands[i])] = !g;
        if (g && g->type() != want)
          throw Error(fmt::format("custom_gradient: the gradient of variable '{}' has type {}, but the variable has type {}",
                                  lazy.variables[i]->name, g->type().str(), want.str()), lazy.loc);
        outs.push_back(g ? *g : full(want.shape, 0, want.dtype));
      }
    }
    scope.finish(outs);
  }
  // <fwd>.res: the forward, also returning the residuals.
  ir::Function& res = m->add(lazy.fwd + ".res");
  const ir::Function& fwdAgain = *m->lookup(lazy.fwd);
  std::string resName = res.name;
  res.types = fwdAgain.types;
  res.params = fwdAgain.params;
  res.ops = fwdAgain.ops;
  res.outputs = fwdAgain.outputs;
  res.loc = fwdAgain.loc;
  // A residual that is one of the forward's inputs is read from the call
  // site's operand; the others become extra outputs.
  for (ir::ValueId r : hook->residuals) {
    auto p = std::find(fwdAgain.params.begin(), fwdAgain.params.end(), r);
    if (p != fwdAgain.params.end()) {
      lazy.residualSources.push_back(p - fwdAgain.params.begin());
    } else {
      lazy.residualSources.push_back(-1);
      res.outputs.push_back(r);
    }
  }
  lazy.vjp = vjpName;
  lazy.fwdWithResiduals = resName;
  lazy.residuals = hook->residuals;
}

} // namespace

namespace autodiff {

/// Makes call site `f.ops[opIndex]` name its VJP function (tracing it first if
/// needed) and return the residuals that VJP reads.
static void bindVjp(const std::shared_ptr<ir::Module>& m, ir::Function& f, std::size_t opIndex) {
  if (f.ops[opIndex].callees.size() != 1) return;
  const ir::Op site = f.ops[opIndex];
  auto it = m->lazyVjps.find(site.callees[0]);
  if (it == m->lazyVjps.end())
    throw Error("custom_vjp: no VJP is known for @" + site.callees[0] +
                    " (save modules after tracing them in the same process: saving traces pending VJPs)", site.loc);
  ir::LazyVjp& lazy = *it->second;
  if (lazy.vjp.empty()) materialize(m, lazy);
  const ir::Function& res = *m->lookup(lazy.fwdWithResiduals);
  ir::Op& live = f.ops[opIndex]; // (materialize added functions, not ops of f)
  live.callees = {lazy.fwdWithResiduals, lazy.vjp};
  live.attrs.set("residuals", lazy.residualSources);
  for (std::size_t i = live.results.size(); i < res.outputs.size(); ++i)
    live.results.push_back(f.newValue(res.type(res.outputs[i])));
}

BoundVjp boundVjp(const std::shared_ptr<ir::Module>& m, const ir::Op& site) {
  if (site.callees.size() == 2)
    return {site.callees[0], site.callees[1], site.attrs.has("residuals") ? site.attrs.ints("residuals") : std::vector<int64_t>{}};
  auto it = m->lazyVjps.find(site.callees.at(0));
  if (it == m->lazyVjps.end())
    throw Error("custom_vjp: no VJP is known for @" + site.callees[0] +
                    " (save modules after tracing them in the same process: saving traces pending VJPs)", site.loc);
  ir::LazyVjp& lazy = *it->second;
  if (lazy.vjp.empty()) materialize(m, lazy);
  return {lazy.fwdWithResiduals, lazy.vjp, lazy.residualSources};
}

void materializeAll(const std::shared_ptr<ir::Module>& m) {
  for (std::size_t fi = 0; fi < m->functions.size(); ++fi) // (materializing adds functions)
    for (std::size_t i = 0; i < m->functions[fi]->ops.size(); ++i) {
      const ir::Op& op = m->functions[fi]->ops[i];
      if (op.callees.size() == 1 && m->lazyVjps.count(op.callees[0])) bindVjp(m, *m->functions[fi], i);
    }
}

/// The lazy VJP behind a call site, bound or not (null for one parsed from text).
static const ir::LazyVjp* lazyOf(const ir::Module& m, const ir::Op& site) {
  if (site.callees.size() == 1) {
    auto it = m.lazyVjps.find(site.callees[0]);
    return it == m.lazyVjps.end() ? nullptr : it->second.get();
  }
  for (const auto& [name, lazy] : m.lazyVjps) // a site differentiated before: rare
    if (lazy->fwdWithResiduals == site.callees[0]) return lazy.get();
  return nullptr;
}

void customVjpJvp(const JvpCtx& c) {
  // recompute_grad: the VJP function is the forward's own derivative, so
  // forward mode differentiates the forward once, as a call (nothing to
  // recompute, no transpose, no linearity check of the loops inside).
  if (recomputes(c.op)) return calleeJvp(c);
  detail::TraceState& s = *detail::currentTrace();
  ir::Function& f = *s.fn;
  const ir::LazyVjp* lazy = lazyOf(*s.module, f.ops[c.opIndex]);
  bindVjp(s.module, f, c.opIndex);
  const ir::Op& site = f.ops[c.opIndex];
  // The VJP function takes (dy for each floating output..., residuals...).
  const ir::Function& vjp = *s.module->lookup(site.callees.at(1));
  const std::size_t n = static_cast<std::size_t>(site.attrs.integer("outputs"));
  std::vector<char> dependent(vjp.params.size(), 0);
  for (std::size_t i = 0, p = 0; i < n; ++i)
    if (is_floating(f.type(site.results[i]).dtype)) dependent.at(p++) = 1;
  checkLinear(*s.module, vjp, dependent, "custom_gradient",
              "forward mode (jvp, linearize, jacfwd, hessian) transposes the gradient function, which must be linear in "
              "its output gradients", lazy ? lazy->loc : site.loc);
  // The call of the VJP function recomputes its forward part when it is
  // differentiated: under linearize that keeps it out of the primal half, so
  // recompute_grad's linear function recomputes the region instead of
  // keeping its values.
  transposeRule(c, [&](const std::vector<std::optional<Tensor>>& cts, const std::vector<char>&) {
    return customVjp(c.opIndex, cts, /*recompute=*/true);
  });
}

std::vector<std::optional<Tensor>> customVjp(std::size_t opIndex, const std::vector<std::optional<Tensor>>& cts,
                                             bool recompute) {
  detail::TraceState& s = *detail::currentTrace();
  ir::Function& f = *s.fn;
  const ir::LazyVjp* lazy = lazyOf(*s.module, f.ops[opIndex]);
  bindVjp(s.module, f, opIndex);
  const ir::Op site2 = f.ops[opIndex]; // a copy: building the call below appends to f.ops
  const std::size_t k = static_cast<std::size_t>(site2.attrs.integer("inputs"));
  const std::size_t n = static_cast<std::size_t>(site2.attrs.integer("outputs"));
  const std::size_t a = site2.attrs.has("assigns") ? static_cast<std::size_t>(site2.attrs.integer("assigns")) : 0;
  std::vector<ir::ValueId> args;
  for (std::size_t i = 0; i < n; ++i) {
    const Type& t = f.type(site2.results[i]);
    if (!is_floating(t.dtype)) continue;
    args.push_back(i < cts.size() && cts[i] ? detail::valueOf(*cts[i], "custom_vjp", site2.loc)
                                            : zeros_like(detail::wrap(s, site2.results[i])).id());
  }
  std::size_t nextResult = n + a;
  for (int64_t r : site2.attrs.has("residuals") ? site2.attrs.ints("residuals") : std::vector<int64_t>{})
    args.push_back(r >= 0 ? site2.operands[static_cast<std::size_t>(r)] : site2.results[nextResult++]);
  ir::Attrs callAttrs;
  if (recompute) callAttrs.set("recompute", true);
  std::vector<ir::ValueId> dx = s.builder.create(ir::OpKind::Call, args, callAttrs, {site2.callees[1]}, site2.loc);
  std::vector<std::optional<Tensor>> out(site2.operands.size());
  std::size_t j = 0;
  for (std::size_t i = 0; i < k; ++i)
    if (is_floating(f.type(site2.operands[i]).dtype)) out[i] = detail::wrap(s, dx.at(j++));
  for (int64_t v : site2.attrs.has("variables") ? site2.attrs.ints("variables") : std::vector<int64_t>{})
    out[static_cast<std::size_t>(v)] = detail::wrap(s, dx.at(j++));
  if (lazy)
    for (std::size_t i = 0; i < out.size() && i < lazy->noGradient.size(); ++i)
      if (lazy->noGradient[i]) out[i] = std::nullopt;
  if (checkingCustomVjps()) {
    std::vector<Tensor> operands;
    std::vector<std::string> names;
    for (std::size_t i = 0; i < site2.operands.size(); ++i) {
      operands.push_back(detail::wrap(s, site2.operands[i]));
      names.push_back(i < k ? fmt::format("input {}", i) : fmt::format("captured operand {}", i - k));
    }
    if (lazy)
      for (std::size_t v = 0; v < lazy->variableOperands.size(); ++v)
        names[static_cast<std::size_t>(lazy->variableOperands[v])] = "variable '" + lazy->variables[v]->name + "'";
    checkCustomVjp(lazy ? lazy->fwd : site2.callees[0], operands, n, cts, out, names, lazy ? lazy->loc : site2.loc);
  }
  // Residuals are ordinary values of the forward body: a cotangent reaching
  // one (in higher-order derivatives, through the VJP that read it) flows back
  // through the forward's own derivative.
  bool residualCotangent = false;
  for (std::size_t i = n + a; i < site2.results.size() && i < cts.size(); ++i) residualCotangent = residualCotangent || cts[i];
  if (residualCotangent) {
    const std::string fwdVjp = combinedVjp(s.module, site2.callees[0]);
    const ir::Function& fwd = *s.module->lookup(site2.callees[0]);
    std::vector<ir::ValueId> vargs(site2.operands.begin(), site2.operands.end());
    for (std::size_t i = 0; i < site2.results.size(); ++i) {
      if (!is_floating(fwd.type(fwd.outputs[i]).dtype)) continue;
      const bool residual = i >= n + a;
      vargs.push_back(residual && i < cts.size() && cts[i] ? detail::valueOf(*cts[i], "custom_vjp", site2.loc)
                                                           : zeros_like(detail::wrap(s, site2.results[i])).id());
    }
    std::vector<ir::ValueId> r = s.builder.create(ir::OpKind::Call, vargs, {}, {fwdVjp}, site2.loc);
    std::size_t m = fwd.outputs.size(); // results are (y..., dx per floating parameter...)
    for (std::size_t i = 0; i < site2.operands.size(); ++i) {
      if (!is_floating(f.type(site2.operands[i]).dtype)) continue;
      Tensor g = detail::wrap(s, r.at(m++));
      if (i < k) out[i] = out[i] ? add(*out[i], g) : g;
    }
  }
  return out;
}

} // namespace autodiff

namespace detail {

std::vector<Tensor> customGradientCall(const std::vector<Tensor>& xs, const ForwardBody& body, std::source_location l,
                                       bool variablesAreConstants, bool exactGradient) {
  Location loc = Location::from(l);
  TraceState* outer = currentTrace();
  if (!outer)
    throw Error(xs.empty() ? "custom_gradient: a function of no arguments was called outside of a trace (call it in a "
                             "function given to jit, grad or trace)"
                           : "custom_gradient: called with Tensors outside of a trace", loc);
  std::vector<ir::ValueId> operands;
  std::vector<Type> types;
  for (const Tensor& x : xs) {
    operands.push_back(valueOf(x, "custom_gradient", loc));
    types.push_back(x.type());
  }
  auto hook = std::make_shared<detail::OuterCaptures>(outer);
  auto lazy = std::make_shared<ir::LazyVjp>();
  std::vector<std::shared_ptr<VariableState>> assigned;
  std::string fwdName;
  {
    TraceScope scope(outer->module, "custom_gradient");
    fwdName = scope.state().fn->name;
    hook->self = &scope.state();
    scope.state().captures = hook;
    lazy->fwdTrace = scope.state().id;
    lazy->outerTrace = outer->id;
    lazy->outerHook = outer->captures;
    scope.state().exportsAssigns = true;
    std::vector<Tensor> params;
    for (const Type& t : types) params.push_back(scope.param(t));
    for (std::size_t i = 0; i < params.size(); ++i) lazy->outerToFwd.emplace(operands[i], params[i].id());
    std::vector<Tensor> ys = body(params, lazy->gradFn, lazy->takesVariables);
    lazy->outputs = ys.size();
    for (const auto& [var, value] : scope.state().pendingAssigns) {
      ys.push_back(wrap(scope.state(), value));
      assigned.push_back(var);
    }
    lazy->assigns = assigned.size();
    scope.finish(ys);
  }
  // Variables the forward read reach it as captured operands; their gradients
  // come from grad_fn (unless they are constants, as in grad_pass_through).
  std::vector<std::string> varNames;
  if (!variablesAreConstants && !outer->parent)
    for (std::size_t j = 0; j < hook->outerValues.size(); ++j)
      for (const VariableBinding& b : outer->variables)
        if (std::find(b.reads.begin(), b.reads.end(), hook->outerValues[j]) != b.reads.end()) {
          lazy->variables.push_back(b.var);
          lazy->variableOperands.push_back(static_cast<int64_t>(xs.size() + j));
          varNames.push_back(b.var->name);
        }
  if (!lazy->variables.empty() && !lazy->takesVariables) {
    std::string names;
    for (const std::string& n : varNames) names += (names.empty() ? "" : ", ") + n;
    throw Error("custom_gradient grad_fn must accept argument 'variables', since function uses variables: " + names, loc);
  }
  lazy->fwd = fwdName;
  lazy->outerToFwd.insert(hook->mapped.begin(), hook->mapped.end());
  lazy->inputs = xs.size();
  lazy->loc = loc;
  outer->module->lazyVjps[fwdName] = lazy;
  operands.insert(operands.end(), hook->outerValues.begin(), hook->outerValues.end());
  ir::Attrs attrs;
  attrs.set("inputs", static_cast<int64_t>(xs.size()));
  attrs.set("outputs", static_cast<int64_t>(lazy->outputs));
  if (lazy->assigns) attrs.set("assigns", static_cast<int64_t>(lazy->assigns));
  if (!lazy->variableOperands.empty()) attrs.set("variables", lazy->variableOperands);
  if (exactGradient) attrs.set("recompute", true);
  std::vector<ir::ValueId> results = outer->builder.create(ir::OpKind::CustomVjp, operands, std::move(attrs), {fwdName}, loc);
  // Assignments in the forward take effect in the enclosing (outermost) trace.
  for (std::size_t i = 0; i < assigned.size(); ++i) {
    VariableBinding& b = bindVariable(*outer, assigned[i]);
    b.current = results[lazy->outputs + i];
    b.assigned = true;
  }
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < lazy->outputs; ++i) out.push_back(wrap(*outer, results[i]));
  return out;
}

} // namespace detail
} // namespace adjit

std::shared_ptr<adjit::ir::LazyVjp> adjit::ir::copyLazyVjp(const LazyVjp& lazy) { return std::make_shared<LazyVjp>(lazy); }
