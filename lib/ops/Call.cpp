// ops/Call.cpp — call @f(args): runs another function of the module. With
// {recompute = true} (a checkpointed region) its VJP keeps no residuals and
// runs @f's forward again in the backward. Calls,
// custom-gradient call sites, conditionals and loops all reference functions
// this way.
#include "codegen/Emitter.h"
#include "autodiff/JvpCtx.h"
#include "autodiff/Reverse.h"
#include "autodiff/VjpCtx.h"
#include "batching/Rules.h"
#include "ops/Common.h"

namespace adjit::ops {

using codegen::LowerCtx;
using ir::EvalCtx;
using ir::InferCtx;

namespace {

/// `call @g.fwd, @g.bwd(xs...) {residuals = R}` under vmap: @g.fwd batched
/// with every result batched (the residuals too), and @g.bwd batched on
/// batched residuals and cotangents, a shared operand's gradient summed over
/// the examples, so that differentiating the batched pair again (through
/// @g.bwd) gives gradients of the operands' own layout.
void batchSplitCall(const batching::BatchCtx& c) {
  const auto m = batching::currentModule();
  const std::vector<char> in = batching::operandsBatched(c);
  const int64_t size = c.size;
  const ir::Function& fwd = *m->lookup(c.op.callees[0]);
  const std::string fwdTwin = batching::batchFunction(m, c.op.callees[0], in, std::vector<char>(fwd.outputs.size(), 1), size);
  std::string layout;
  for (char b : in) layout += b ? 'b' : '-';
  const std::string bwdTwin = autodiff::derive(m, "vmap", c.op.callees[1], [&](detail::TraceScope& scope, const ir::Function& g) {
    std::vector<batching::Batched> args;
    for (ir::ValueId p : g.params) args.push_back({scope.param(batching::batchedType(g.type(p), size)), true});
    const std::vector<batching::Batched> dxs = batching::batchInline(g, args, size);
    std::vector<Tensor> outs;
    std::size_t j = 0;
    for (std::size_t i = 0; i < c.arity(); ++i) {
      if (!is_floating(c.type(i).dtype)) continue;
      const batching::Batched& d = dxs.at(j++);
      outs.push_back(in[i] ? batching::withBatch(d.t, d.batched, size) : d.batched ? sum(d.t, {0}) : d.t);
    }
    ADJIT_ASSERT(j == dxs.size(), "call: a backward with another number of results than floating operands");
    return outs;
  }, fmt::format(":split:{}:{}", layout, size));
  std::vector<Tensor> xs;
  for (std::size_t i = 0; i < c.arity(); ++i) xs.push_back(c.x(i));
  const std::vector<Tensor> ys = batching::emitOp(c, OpKind::Call, xs, c.op.attrs, {fwdTwin, bwdTwin});
  for (std::size_t k = 0; k < c.op.results.size(); ++k) c.result(k, ys[k]);
}

} // namespace

void defineCallOps(Table& t) {
  // call @f(xs...) = f(xs...). A differentiated call is rebound to the
  // callee's split pair, `call @g.fwd, @g.bwd(xs...) {residuals = R}`: it runs
  // @g.fwd, whose last R results are the residuals @g.bwd takes first.
  set(t, OpKind::Call, {
      .infer = [](const InferCtx& c) {
        if (c.callees.size() != 1 && c.callees.size() != 2) c.fail("expected one or two callees, got {}", c.callees.size());
        if (c.boolean("recompute", false) && c.callees.size() != 1) c.fail("a call that recomputes its forward has one callee");
        const ir::Function& f = *c.callees[0];
        if (c.callees.size() == 2) {
          const ir::Function& bwd = *c.callees[1];
          const int64_t r = c.integer("residuals");
          if (r < 0 || static_cast<std::size_t>(r) > f.outputs.size() || static_cast<std::size_t>(r) > bwd.params.size())
            c.fail("residuals = {} does not fit @{} ({} results) and @{} ({} parameters)", r, f.name, f.outputs.size(), bwd.name,
                   bwd.params.size());
          for (std::size_t i = 0; i < static_cast<std::size_t>(r); ++i) {
            const Type& have = f.type(f.outputs[f.outputs.size() - static_cast<std::size_t>(r) + i]);
            if (have != bwd.type(bwd.params[i]))
              c.fail("residual {} of @{} is {}, but @{} takes {}", i, f.name, have.str(), bwd.name, bwd.type(bwd.params[i]).str());
          }
        }
        expectParams(c, f, c.operands, "call");
        return f.resultTypes();
      },
      .eval = [](const EvalCtx& c) { return c.call(c.op.callees[0], c.args); },
      .fold = noFold,
      .lower = [](LowerCtx& c) { c.callFirstCallee(); },
      // the callee's JVP under recompute, else its split VJP transposed (Forward.cpp)
      .jvp = autodiff::callJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        std::vector<Tensor> xs;
        std::vector<std::optional<Tensor>> cts;
        for (std::size_t i = 0; i < c.op.operands.size(); ++i) xs.push_back(c.x(i));
        for (std::size_t i = 0; i < c.op.results.size(); ++i) cts.push_back(c.ct(i));
        std::vector<std::optional<Tensor>> dxs = c.callVjp(xs, cts);
        for (std::size_t i = 0; i < xs.size(); ++i)
          if (dxs[i]) c.grad(i, [&] { return *dxs[i]; });
      },
      // call @g.vmap: the callee's batched twin for this layout of batched
      // operands (built once per module and layout, so every call site with
      // the layout shares it), its outputs batched where they read a batched
      // operand; attributes (recompute) kept. A split pair (two callees,
      // made by reverse mode) is batchSplitCall.
      .batch = [](const batching::BatchCtx& c) {
        if (c.op.callees.size() != 1) return batchSplitCall(c);
        const auto m = batching::currentModule();
        const std::vector<char> in = batching::operandsBatched(c);
        const std::vector<char> out = batching::batchReach(*m->lookup(c.op.callees[0]), in);
        const std::string twin = batching::batchFunction(m, c.op.callees[0], in, out, c.size);
        std::vector<Tensor> xs;
        for (std::size_t i = 0; i < c.arity(); ++i) xs.push_back(c.x(i));
        const std::vector<Tensor> ys = batching::emitOp(c, OpKind::Call, xs, c.op.attrs, {twin});
        for (std::size_t k = 0; k < ys.size(); ++k)
          if (out[k]) c.result(k, ys[k]);
          else c.unbatchedResult(k, ys[k]);
      },
      .deps = sparsity::calleeDeps,
  });
}

} // namespace adjit::ops
