// ops/GradientOps.cpp — ops that steer differentiation: stop_gradient, and
// custom_vjp, the call site of a custom gradient.
#include "autodiff/JvpCtx.h"
#include "autodiff/VjpCtx.h"
#include "autodiff/CustomGradient.h"
#include "autodiff/Reverse.h"
#include "batching/Rules.h"
#include "codegen/Emitter.h"
#include "ops/Common.h"

namespace adjit::ops {
namespace {

using ir::InferCtx;

/// custom_vjp @fwd[, @vjp](xs..., captured...) {inputs = K, outputs = N[, assigns = A][, residuals = [...]][, variables = [...]]}
/// Results: fwd's results: the N outputs, A values assigned to variables,
/// then the residuals it computes. The VJP also returns a gradient for each
/// operand listed in `variables` (variables the forward read).
/// @vjp (present once the gradient has been traced) takes (dy for each
/// floating output..., residuals...) and returns a dx for each floating
/// operand among the first K (the others are captured constants). Attribute
/// `residuals` says where each residual comes from: an operand index, or -1
/// for the next of fwd's extra results. `recompute = true` (recompute_grad)
/// says the VJP function is the forward's own derivative: forward mode
/// differentiates @fwd directly.
std::vector<Type> inferCustomVjp(const InferCtx& c) {
  if (c.callees.empty() || c.callees.size() > 2) c.fail("expected a forward and a VJP function, got {} callees", c.callees.size());
  const ir::Function& fwd = *c.callees[0];
  expectParams(c, fwd, c.operands, "custom_vjp");
  const int64_t k = c.integer("inputs"), n = c.integer("outputs");
  const int64_t a = c.attrs.has("assigns") ? c.integer("assigns") : 0;
  const std::vector<int64_t> residuals = c.attrs.has("residuals") ? c.ints("residuals") : std::vector<int64_t>{};
  const std::vector<int64_t> variables = c.attrs.has("variables") ? c.ints("variables") : std::vector<int64_t>{};
  c.boolean("recompute", false); // recompute_grad's sites: the VJP is the forward's derivative
  const std::vector<Type> results = fwd.resultTypes();
  if (k < 0 || static_cast<std::size_t>(k) > c.operands.size() || n < 0 || static_cast<std::size_t>(n) > results.size())
    c.fail("inputs = {} and outputs = {} do not fit @{} {}", k, n, fwd.name, fwd.signature());
  if (c.callees.size() == 2) {
    const ir::Function& vjp = *c.callees[1];
    std::vector<Type> params, outs;
    for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
      if (is_floating(results[i].dtype)) params.push_back(results[i]);
    std::size_t next = static_cast<std::size_t>(n + a);
    for (int64_t r : residuals) {
      if (r >= static_cast<int64_t>(c.operands.size())) c.fail("residual operand {} does not exist", r);
      if (r < 0 && next >= results.size()) c.fail("more residuals than @{} returns", fwd.name);
      params.push_back(r >= 0 ? c.operands[static_cast<std::size_t>(r)] : results[next++]);
    }
    if (next != results.size()) c.fail("@{} returns {} results that are not residuals of the VJP", fwd.name, results.size() - next);
    for (std::size_t i = 0; i < static_cast<std::size_t>(k); ++i)
      if (is_floating(c.operands[i].dtype)) outs.push_back(c.operands[i]);
    for (int64_t v : variables) {
      if (v < k || v >= static_cast<int64_t>(c.operands.size())) c.fail("variable operand {} is not a captured operand", v);
      outs.push_back(c.operands[static_cast<std::size_t>(v)]);
    }
    if (vjp.paramTypes() != params || vjp.resultTypes() != outs)
      c.fail("VJP function @{} has signature {}, but the call site needs one taking the output cotangents and residuals",
             vjp.name, vjp.signature());
  }
  return results;
}

/// custom_jvp @f, @f.jvp(xs..., captured...) {inputs = K}
/// Results: f's. @f.jvp, the user's forward rule, takes (xs..., captured...,
/// a dx for each floating operand among the first K) and returns (f's
/// results..., a dy for each floating result). Captured operands (tensors f
/// or its rule read from the enclosing trace) are constants for the rule.
std::vector<Type> inferCustomJvp(const InferCtx& c) {
  if (c.callees.size() != 2) c.fail("expected a function and its JVP rule, got {} callees", c.callees.size());
  const ir::Function& f = *c.callees[0];
  const ir::Function& rule = *c.callees[1];
  expectParams(c, f, c.operands, "custom_jvp");
  const int64_t k = c.integer("inputs");
  if (k < 0 || static_cast<std::size_t>(k) > c.operands.size())
    c.fail("inputs = {} does not fit the {} operands", k, c.operands.size());
  const std::vector<Type> results = f.resultTypes();
  std::vector<Type> params(c.operands.begin(), c.operands.end()), outs = results;
  for (std::size_t i = 0; i < static_cast<std::size_t>(k); ++i)
    if (is_floating(c.operands[i].dtype)) params.push_back(c.operands[i]);
  for (const Type& r : results)
    if (is_floating(r.dtype)) outs.push_back(r);
  if (rule.paramTypes() != params || rule.resultTypes() != outs) {
    auto list = [](const std::vector<Type>& ts) {
      std::string s;
      for (const Type& t : ts) s += (s.empty() ? "" : ", ") + t.str();
      return s;
    };
    c.fail("JVP rule @{} has signature {}, but the call site needs ({}) -> ({}): the primals, then a tangent per "
           "floating input; the results, then a tangent per floating result", rule.name, rule.signature(), list(params),
           list(outs));
  }
  return results;
}

using batching::BatchCtx;

std::string layoutText(const std::vector<char>& in) {
  std::string t;
  for (char b : in) t += b ? 'b' : '-';
  return t;
}

/// custom_vjp under vmap: the forward batched with every result batched
/// (so every output cotangent is per example), and the VJP function batched
/// on those cotangents and the residuals: the user's rule runs per example.
/// The gradient of an operand every example shares is the sum of the
/// examples' gradients. A pending VJP is traced first (boundVjp).
void batchCustomVjp(const BatchCtx& c) {
  if (c.op.attrs.has("assigns") && c.op.attrs.integer("assigns") > 0)
    throw Error("vmap: a custom gradient whose forward assigns variables cannot be batched (assign is not supported "
                "inside vmap)", c.op.loc);
  const auto m = batching::currentModule();
  const autodiff::BoundVjp bound = autodiff::boundVjp(m, c.op);
  const std::vector<char> in = batching::operandsBatched(c);
  const int64_t size = c.size;
  const std::size_t nOut = static_cast<std::size_t>(c.op.attrs.integer("outputs"));
  const std::size_t nIn = static_cast<std::size_t>(c.op.attrs.integer("inputs"));
  const ir::Function& fwd = *m->lookup(bound.fwd);
  const std::string fwdTwin = batching::batchFunction(m, bound.fwd, in, std::vector<char>(fwd.outputs.size(), 1), size);
  // The VJP's parameters: a cotangent per floating output (batched), then the residuals.
  std::vector<char> vjpIn;
  for (std::size_t i = 0; i < nOut; ++i)
    if (is_floating(fwd.type(fwd.outputs[i]).dtype)) vjpIn.push_back(1);
  for (int64_t r : bound.residuals) vjpIn.push_back(r >= 0 ? in.at(static_cast<std::size_t>(r)) : 1);
  // Its results: a gradient per floating input, then per variable operand.
  std::vector<std::size_t> target;
  for (std::size_t i = 0; i < nIn; ++i)
    if (is_floating(c.type(i).dtype)) target.push_back(i);
  for (int64_t v : c.op.attrs.has("variables") ? c.op.attrs.ints("variables") : std::vector<int64_t>{})
    target.push_back(static_cast<std::size_t>(v));
  const std::string variant = fmt::format(":custom_vjp:{}:{}:{}", layoutText(in), layoutText(vjpIn), size);
  const std::string vjpTwin = autodiff::derive(m, "vmap", bound.vjp, [&](detail::TraceScope& scope, const ir::Function& g) {
    std::vector<batching::Batched> args;
    for (std::size_t i = 0; i < g.params.size(); ++i) {
      const Type& t = g.type(g.params[i]);
      args.push_back({scope.param(vjpIn.at(i) ? batching::batchedType(t, size) : t), bool(vjpIn[i])});
    }
    const std::vector<batching::Batched> dxs = batching::batchInline(g, args, size);
    std::vector<Tensor> outs;
    for (std::size_t j = 0; j < dxs.size(); ++j) {
      const batching::Batched& d = dxs[j];
      if (in.at(target.at(j))) outs.push_back(batching::withBatch(d.t, d.batched, size));
      else outs.push_back(d.batched ? sum(d.t, {0}) : d.t); // a shared operand: the sum over the examples
    }
    return outs;
  }, variant);
  ir::Attrs attrs = c.op.attrs;
  attrs.set("residuals", bound.residuals);
  std::vector<Tensor> xs;
  for (std::size_t i = 0; i < c.arity(); ++i) xs.push_back(c.x(i));
  const std::vector<Tensor> ys = batching::emitOp(c, OpKind::CustomVjp, xs, attrs, {fwdTwin, vjpTwin});
  for (std::size_t k = 0; k < c.op.results.size(); ++k) c.result(k, ys.at(k));
}

/// custom_jvp under vmap: the function and its JVP rule both batched, every
/// result batched; a tangent is batched as its primal is, so the rule runs
/// per example and its transpose (reverse mode) sums a shared operand's
/// gradient over the examples.
void batchCustomJvp(const BatchCtx& c) {
  const auto m = batching::currentModule();
  const std::vector<char> in = batching::operandsBatched(c);
  const std::size_t nIn = static_cast<std::size_t>(c.op.attrs.integer("inputs"));
  std::vector<char> ruleIn = in;
  for (std::size_t i = 0; i < nIn; ++i)
    if (is_floating(c.type(i).dtype)) ruleIn.push_back(in[i]);
  const std::string f = batching::batchFunction(m, c.op.callees[0], in,
                                                std::vector<char>(m->lookup(c.op.callees[0])->outputs.size(), 1), c.size);
  const std::string rule = batching::batchFunction(m, c.op.callees[1], ruleIn,
                                                   std::vector<char>(m->lookup(c.op.callees[1])->outputs.size(), 1), c.size);
  std::vector<Tensor> xs;
  for (std::size_t i = 0; i < c.arity(); ++i) xs.push_back(c.x(i));
  const std::vector<Tensor> ys = batching::emitOp(c, OpKind::CustomJvp, xs, c.op.attrs, {f, rule});
  for (std::size_t k = 0; k < ys.size(); ++k) c.result(k, ys[k]);
}

} // namespace

void defineGradientOps(Table& t) {
  // stop_gradient(x) = x; its result carries no gradient (kNonDifferentiable).
  // Not folded away: passes may run before autodiff on IR text.
  set(t, OpKind::StopGradient, {
      .infer = [](const ir::InferCtx& c) { return std::vector<Type>{c.operands[0]}; },
      .eval = [](const ir::EvalCtx& c) { return std::vector<Array>{c.args[0]}; },
      .fold = noFold,
      .scalar = [](codegen::ScalarCtx& c) { return c.args[0]; },
  });

  // prevent_gradient(x) {message} = x; asking for a gradient through it is an
  // error at its source line (TensorFlow's PreventGradient). stop_gradient
  // before it makes the error go away: then no gradient is asked for.
  set(t, OpKind::PreventGradient, {
      .infer = [](const ir::InferCtx& c) {
        c.string("message");
        return std::vector<Type>{c.operands[0]};
      },
      .eval = [](const ir::EvalCtx& c) { return std::vector<Array>{c.args[0]}; },
      .fold = noFold,
      .scalar = [](codegen::ScalarCtx& c) { return c.args[0]; },
      // its VJP rule raises the error: so does forward mode
      .jvp = autodiff::transposedJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        const std::string& why = c.op.attrs.string("message");
        throw Error(fmt::format("No gradient defined for operation '%{}' (op type: prevent_gradient). Gradient explicitly "
                                "disabled.{}{}", c.op.results.at(0), why.empty() ? "" : " Reason: ", why), c.op.loc);
      },
  });

  // custom_vjp: forward = call @fwd; gradient = the attached VJP function, never
  // the derivative of @fwd's body.
  set(t, OpKind::CustomVjp, {
      .infer = inferCustomVjp,
      .eval = [](const ir::EvalCtx& c) { return c.call(c.op.callees[0], c.args); },
      .fold = noFold,
      .lower = [](codegen::LowerCtx& c) { c.callFirstCallee(); },
      // the transpose of the user's VJP function, checked linear in dy (CustomGradient.cpp)
      .jvp = autodiff::customVjpJvp,
      // dx = the VJP function applied to the output cotangents and residuals
      .vjp = [](const autodiff::VjpCtx& c) {
        std::vector<std::optional<Tensor>> cts;
        for (std::size_t i = 0; i < c.op.results.size(); ++i) cts.push_back(c.ct(i));
        std::vector<std::optional<Tensor>> dxs = c.customVjp(cts);
        for (std::size_t i = 0; i < dxs.size(); ++i)
          if (dxs[i]) c.grad(i, [&] { return *dxs[i]; });
      },      // the forward and the VJP function batched: the user's rule per example
      .batch = batchCustomVjp,
      // the forward's pattern
      .deps = sparsity::calleeDeps,
  });

  // custom_jvp (JAX's): forward = call @f; forward mode = the user's rule
  // @f.jvp; reverse mode = the transpose of that rule, checked linear in its
  // tangents (autodiff/CustomJvp.cpp). @f's body is never differentiated.
  set(t, OpKind::CustomJvp, {
      .infer = inferCustomJvp,
      .eval = [](const ir::EvalCtx& c) { return c.call(c.op.callees[0], c.args); },
      .fold = noFold,
      .lower = [](codegen::LowerCtx& c) { c.callFirstCallee(); },
      // dy = the rule's tangent outputs at (x, dx)
      .jvp = autodiff::customJvpJvp,
      // dx = the rule's tangent map transposed: reverse mode over the rule
      // with respect to its tangent inputs, seeded with dy
      .vjp = autodiff::customJvpVjp,      // the function and its rule batched
      .batch = batchCustomJvp,
      // the function's pattern
      .deps = sparsity::calleeDeps,
  });
}

} // namespace adjit::ops
