// autodiff/CustomJvp.cpp — JAX's custom_jvp: a function whose derivative is a
// user-supplied forward rule. Both are traced when the function is called:
// f into `@custom_jvp`, the rule into `@custom_jvp.jvp`, and the call site is
// one custom_jvp op naming both. Forward mode runs the rule; reverse mode
// transposes it (it must be linear in its tangents, which is checked); f's
// body is never differentiated.
#include "autodiff/JvpCtx.h"
#include "autodiff/Reverse.h"
#include "autodiff/VjpCtx.h"
#include "trace/Tracer.h"

#include <adjit/custom_gradient.h>

#include <fmt/format.h>

namespace adjit {
namespace {

bool floating(const Type& t) { return is_floating(t.dtype); }

/// The error for a captured operand `i` of a custom_jvp site that needs a
/// derivative (`how`: "a tangent" or "a gradient").
Error capturedError(const ir::Function& f, const ir::Op& site, std::size_t i, const char* how) {
  const auto k = static_cast<std::size_t>(site.attrs.integer("inputs"));
  return Error(fmt::format("custom_jvp: a tensor the function captures from the enclosing trace (captured operand {}, {}) "
                           "needs {}, but the JVP rule gives derivatives for the function's arguments only: pass it as "
                           "an argument", i - k, f.type(site.operands[i]).str(), how), site.loc);
}

} // namespace

namespace autodiff {

void customJvpJvp(const JvpCtx& c) {
  detail::TraceState& s = *detail::currentTrace();
  const ir::Op& site = c.op;
  const auto k = static_cast<std::size_t>(site.attrs.integer("inputs"));
  for (std::size_t i = k; i < site.operands.size(); ++i)
    if (c.dx(i)) throw capturedError(*s.fn, site, i, "a tangent");
  std::vector<ir::ValueId> args = site.operands.vec();
  for (std::size_t i = 0; i < k; ++i)
    if (floating(s.fn->type(site.operands[i]))) {
      const std::optional<Tensor> d = c.dx(i);
      args.push_back(d ? d->id() : zeros_like(c.x(i)).id());
    }
  // Inlined, not called: the rule's primal outputs (the op's results again)
  // are dead here, and so are the parts of it that only they read.
  const std::vector<ir::ValueId> outs = inlineFunction(s.builder, *s.module->lookup(site.callees.at(1)), args);
  for (std::size_t r = 0, j = site.results.size(); r < site.results.size(); ++r)
    if (floating(s.fn->type(site.results[r]))) c.tangent(r, detail::wrap(s, outs.at(j++)));
}

void customJvpVjp(const VjpCtx& c) {
  detail::TraceState& s = *detail::currentTrace();
  const ir::Op& site = c.op;
  const auto k = static_cast<std::size_t>(site.attrs.integer("inputs"));
  const std::size_t n = site.results.size();
  for (std::size_t i = k; i < site.operands.size(); ++i)
    if (floating(s.fn->type(site.operands[i])) && c.wants(i)) throw capturedError(*s.fn, site, i, "a gradient");
  const ir::Function& rule = *s.module->lookup(site.callees.at(1));
  // The rule's parameters past the operands are the tangents.
  std::vector<char> tangents(rule.params.size(), 0);
  for (std::size_t p = site.operands.size(); p < rule.params.size(); ++p) tangents[p] = 1;
  const std::vector<char> dep = checkLinear(*s.module, rule, tangents, "custom_jvp",
                                            "reverse mode (grad, vjp, jacrev) transposes the JVP rule, which must be "
                                            "linear in its tangent inputs", site.loc);
  for (std::size_t r = 0; r < n; ++r)
    if (dep[r])
      throw Error(fmt::format("custom_jvp: output {} of the JVP rule (a primal output) depends on the tangent inputs", r),
                  site.loc);
  // u: a stand-in per floating input for its tangent. The rule is linear in
  // u, so its value (zeros) does not matter; reverse mode over the inlined
  // rule from its tangent outputs, seeded with dy, gives J^T dy at u.
  std::vector<ir::ValueId> args = site.operands.vec();
  Request req;
  std::vector<std::size_t> inputOf;
  for (std::size_t i = 0; i < k; ++i)
    if (floating(s.fn->type(site.operands[i]))) {
      const Tensor u = detail::alias(zeros_like(c.x(i)));
      args.push_back(u.id());
      req.sources.push_back(u.id());
      inputOf.push_back(i);
    }
  req.begin = s.fn->ops.size();
  const std::vector<ir::ValueId> outs = inlineFunction(s.builder, rule, args);
  req.end = s.fn->ops.size();
  for (std::size_t r = 0, j = n; r < n; ++r) {
    if (!floating(s.fn->type(site.results[r]))) continue;
    if (const std::optional<Tensor> ct = c.ct(r)) {
      req.targets.push_back(outs.at(j));
      req.seeds.push_back(*ct);
    }
    ++j;
  }
  if (req.targets.empty()) return;
  const std::vector<std::optional<Tensor>> g = reverse(req);
  for (std::size_t j = 0; j < g.size(); ++j)
    if (g[j]) c.grad(inputOf[j], [&] { return *g[j]; });
}

} // namespace autodiff

namespace detail {

std::vector<Tensor> customJvpCall(const std::vector<Tensor>& xs, const CustomJvpBodies& bodies, std::source_location l) {
  const Location loc = Location::from(l);
  TraceState* outer = currentTrace();
  if (!outer) throw Error("custom_jvp: called with Tensors outside of a trace", loc);
  std::vector<ir::ValueId> operands;
  std::vector<Type> types;
  for (const Tensor& x : xs) {
    operands.push_back(valueOf(x, "custom_jvp", loc));
    types.push_back(x.type());
  }
  // @custom_jvp (x..., captured...): f.
  auto fHook = std::make_shared<OuterCaptures>(outer);
  std::string fName;
  std::vector<Type> outTypes;
  {
    TraceScope scope(outer->module, "custom_jvp");
    fHook->self = &scope.state();
    scope.state().captures = fHook;
    std::vector<Tensor> ps;
    for (const Type& t : types) ps.push_back(scope.param(t));
    const std::vector<Tensor> ys = bodies.primal(ps);
    for (const Tensor& y : ys) outTypes.push_back(y.type());
    scope.finish(ys);
    fName = scope.state().fn->name;
  }
  // @custom_jvp.jvp (x..., captured..., dx per floating x) -> (y..., dy per
  // floating y): the rule. It shares f's captures and may add its own, which
  // f then takes too (unused), so both take every operand of the call site.
  const std::size_t fCaptures = fHook->outerValues.size();
  auto rHook = std::make_shared<OuterCaptures>(outer);
  std::string ruleName;
  std::size_t nTangents = 0;
  {
    TraceScope scope(outer->module, fName + ".jvp");
    TraceState& st = scope.state();
    rHook->self = &st;
    st.captures = rHook;
    std::vector<Tensor> ps, ts;
    for (const Type& t : types) ps.push_back(scope.param(t));
    for (ir::ValueId v : fHook->outerValues) {
      rHook->outerValues.push_back(v);
      rHook->mapped[v] = scope.param(outer->fn->type(v)).id();
    }
    for (const Type& t : types) {
      if (floating(t)) {
        ts.push_back(scope.param(t));
        ++nTangents;
      } else {
        ts.push_back(full(t.shape, 0, t.dtype)); // integer and boolean inputs take no tangent: zeros
      }
    }
    auto [outs, touts] = bodies.rule(ps, ts);
    auto check = [&](const std::vector<Tensor>& got, const char* what) {
      if (got.size() != outTypes.size())
        throw Error(fmt::format("custom_jvp: the JVP rule returned {} {} leaves, but the function returns {}", got.size(),
                                what, outTypes.size()), loc);
      for (std::size_t i = 0; i < got.size(); ++i)
        if (got[i].type() != outTypes[i])
          throw Error(fmt::format("custom_jvp: {} leaf {} of the JVP rule is {}, but output leaf {} of the function is {}",
                                  what, i, got[i].type().str(), i, outTypes[i].str()), loc);
    };
    check(outs, "output");
    check(touts, "tangent");
    std::vector<Tensor> results = outs;
    for (std::size_t i = 0; i < touts.size(); ++i)
      if (floating(outTypes[i])) results.push_back(touts[i]); // an integer output's tangent is ignored
    scope.finish(results);
    ruleName = st.fn->name;
  }
  ir::Module& m = *outer->module;
  ir::Function& rule = *m.lookup(ruleName);
  // Its parameters were made in the order (x, f's captures, dx, its own
  // captures); the call site passes (x, captures..., dx).
  const std::size_t head = types.size() + fCaptures;
  std::vector<ir::ValueId> params(rule.params.begin(), rule.params.begin() + static_cast<std::ptrdiff_t>(head));
  params.insert(params.end(), rule.params.begin() + static_cast<std::ptrdiff_t>(head + nTangents), rule.params.end());
  params.insert(params.end(), rule.params.begin() + static_cast<std::ptrdiff_t>(head),
                rule.params.begin() + static_cast<std::ptrdiff_t>(head + nTangents));
  rule.params = std::move(params);
  ir::Function& f = *m.lookup(fName);
  for (std::size_t j = fCaptures; j < rHook->outerValues.size(); ++j)
    f.params.push_back(f.newValue(outer->fn->type(rHook->outerValues[j])));
  operands.insert(operands.end(), rHook->outerValues.begin(), rHook->outerValues.end());
  ir::Attrs attrs;
  attrs.set("inputs", static_cast<int64_t>(xs.size()));
  std::vector<Tensor> out;
  for (ir::ValueId v : outer->builder.create(ir::OpKind::CustomJvp, operands, std::move(attrs), {fName, ruleName}, loc))
    out.push_back(wrap(*outer, v));
  return out;
}

} // namespace detail
} // namespace adjit
