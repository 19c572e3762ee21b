// ops/ControlFlow.cpp — conditionals and loops. Like `call`, they reference
// functions of the module: the branches of a switch, the body of a scan, the
// condition and body of a while. They are compiled to real branches and loops
// that call those functions (never unrolled), and differentiated by rules in
// autodiff/ControlFlow.cpp (reverse) and ControlFlowJvp.cpp (forward).
//
//   %r...          = switch @b0, @b1, ...(%index, %x...)            {residuals = R}
//   %c..., %ys...  = scan @body(%const..., %init..., %xs...)        {consts = K, carries = C, length = N, reverse = b}
//   %c...          = while @cond, @body(%const..., %init...)        {consts = K, max_iterations = M}
//
// switch runs branch clamp(index, 0, n-1) on the x's (lax.switch). scan runs
// body(const..., carry..., x[t]...) -> (carry..., y...) for t = 0..N-1 (N-1..0
// with reverse) and stacks the y's along a new leading axis, ys[t] from step t.
// while runs body while cond(const..., carry...) holds; with max_iterations M,
// an (M+1)-th iteration is an error. `residuals` counts trailing results that
// only the reverse pass reads (set when the op is differentiated).
#include "autodiff/ControlFlow.h"
#include "autodiff/JvpCtx.h"
#include "autodiff/Reverse.h"
#include "batching/Rules.h"
#include "codegen/Emitter.h"
#include "ops/Common.h"
#include "runtime/Callbacks.h"

#include <llvm/IR/Module.h>

#include <set>

namespace adjit::ops {

using codegen::LowerCtx;
using ir::EvalCtx;
using ir::InferCtx;

namespace {

/// The value of an optional integer attribute.
int64_t optionalInteger(const InferCtx& c, std::string_view name, int64_t dflt) { return c.attrs.has(name) ? c.integer(name) : dflt; }

/// A one-element integer (switch index) or i1 (while condition) value as int64.
int64_t scalarOf(const Array& a) {
  return dispatch(a.dtype(), [&](auto t) -> int64_t {
    using T = decltype(t);
    if constexpr (std::is_floating_point_v<T>) return static_cast<int64_t>(elems<T>(a)[0]);
    else return static_cast<int64_t>(elems<T>(a)[0]);
  });
}

Type sliceType(const Type& t) { return Type{t.dtype, Shape(t.shape.begin() + 1, t.shape.end())}; }

struct ScanShape {
  std::size_t k, c, x, n;
  bool reverse;
};
ScanShape scanShape(const ir::Op& op) {
  const auto k = static_cast<std::size_t>(op.attrs.integer("consts")), c = static_cast<std::size_t>(op.attrs.integer("carries"));
  return {k, c, op.operands.size() - k - c, static_cast<std::size_t>(op.attrs.integer("length")),
          op.attrs.has("reverse") && op.attrs.boolean("reverse")};
}

/// Copies `bytes` between buffers (nothing for empty tensors).
void copyBuffer(LowerCtx& c, llvm::Value* dst, llvm::Value* src, uint64_t bytes) {
  if (bytes) c.b.CreateMemCpy(dst, llvm::MaybeAlign(1), src, llvm::MaybeAlign(1), bytes);
}

/// Workspace for one buffer per type, 64-byte aligned; returns the buffers and the bytes used.
std::pair<std::vector<llvm::Value*>, uint64_t> workspaceFor(LowerCtx& c, const std::vector<Type>& types) {
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  for (const Type& t : types) {
    offsets.push_back(total);
    total += (std::max<uint64_t>(t.bytes(), 1) + 63) / 64 * 64;
  }
  std::vector<llvm::Value*> bufs;
  if (total == 0) return {bufs, 0};
  llvm::Value* base = c.workspace(total);
  for (uint64_t o : offsets) bufs.push_back(c.b.CreateConstInBoundsGEP1_64(c.b.getInt8Ty(), base, o));
  return {bufs, total};
}

/// Checks that a while loop's condition returns one i1 with one element.
void expectCondition(const InferCtx& c, const ir::Function& cond) {
  const std::vector<Type> p = cond.resultTypes();
  if (p.size() != 1 || p[0].dtype != DType::i1 || p[0].size() != 1)
    c.fail("condition @{} must return one i1 with one element, but returns {}", cond.name, cond.signature());
}

/// The layout of a while_vjp op: k consts, then c carries' initial values,
/// then a cotangent per floating carry; `fc` and `fk` index the floating
/// carries and consts.
struct WhileVjpShape {
  std::size_t k, c;
  std::vector<std::size_t> fc, fk;
};
template <class TypeOf> WhileVjpShape whileVjpShape(std::size_t k, std::size_t c, TypeOf type) {
  WhileVjpShape s{k, c, {}, {}};
  for (std::size_t i = 0; i < c; ++i)
    if (is_floating(type(k + i).dtype)) s.fc.push_back(i);
  for (std::size_t i = 0; i < k; ++i)
    if (is_floating(type(i).dtype)) s.fk.push_back(i);
  return s;
}

/// The declaration of C function `name` (libc's, or the adjit runtime's) in the module being emitted.
llvm::FunctionCallee cFunction(LowerCtx& c, const char* name, llvm::Type* ret, std::initializer_list<llvm::Type*> params) {
  llvm::Module& m = *c.b.GetInsertBlock()->getModule();
  return m.getOrInsertFunction(name, llvm::FunctionType::get(ret, std::vector<llvm::Type*>(params), false));
}

/// Calls the run-time report `name`(value, file, line, column) with the op's
/// location (compiled code cannot throw: the runtime raises the Error, or an
/// AOT object calls its hook, once the call returns).
void reportAtOp(LowerCtx& c, const char* name, llvm::Value* value) {
  llvm::Type* i64 = c.b.getInt64Ty();
  c.b.CreateCall(cFunction(c, name, c.b.getVoidTy(), {i64, c.b.getPtrTy(), i64, i64}),
                 {value, c.b.CreateGlobalStringPtr(c.op.loc.file, "loop.file"), c.i64(c.op.loc.line), c.i64(c.op.loc.column)});
}

llvm::Value* byteOffset(LowerCtx& c, llvm::Value* buffer, llvm::Value* step, uint64_t bytes) {
  return c.b.CreateInBoundsGEP(c.b.getInt8Ty(), buffer, c.b.CreateMul(step, c.i64(static_cast<int64_t>(bytes))));
}

// Batching rules (vmap). Loops and branches reference functions: each
// rule batches its callees into twins (batching::batchFunction, built once
// per layout) or into functions of its own, and records the op again on them.

using batching::BatchCtx;

/// The layout `in` (one flag per parameter of a loop body) with the carries
/// [first, first + count) that the body makes batched marked too, to a fixed
/// point: a carry batched after one step is batched from the start (JAX's
/// rule). At most count + 1 passes over the body.
std::vector<char> carryFixedPoint(const ir::Function& body, std::vector<char> in, std::size_t first, std::size_t count) {
  for (;;) {
    const std::vector<char> out = batching::batchReach(body, in);
    bool changed = false;
    for (std::size_t i = 0; i < count; ++i)
      if (out[i] && !in[first + i]) in[first + i] = changed = true;
    if (!changed) return in;
  }
}

std::string layoutText(const std::vector<char>& in) {
  std::string t;
  for (char b : in) t += b ? 'b' : '-';
  return t;
}

/// Operand i as the layout wants it: broadcast along the batch if `batched` and it is not.
Tensor asLaidOut(const BatchCtx& c, std::size_t i, bool batched) { return batched ? c.bx(i) : c.x(i); }

/// Sets result k batched or not.
void setResult(const BatchCtx& c, std::size_t k, const Tensor& t, bool batched) {
  if (batched) c.result(k, t);
  else c.unbatchedResult(k, t);
}

/// A one-element-per-example value p ([size, 1...]) as a mask for a batched
/// value of rank r: [size, 1, ..., 1].
Tensor laneMask(const Tensor& p, int64_t size, int64_t r) {
  std::vector<int64_t> shape(static_cast<std::size_t>(r), 1);
  shape[0] = size;
  return reshape(p, shape);
}

using ParamsFn = std::function<std::vector<batching::Batched>(detail::TraceScope&, const ir::Function&)>;

/// Each example's predicate ([size] i1): `cond` inlined on `args`.
Tensor examplePredicates(const ir::Function& cond, const std::vector<batching::Batched>& args, int64_t size) {
  const batching::Batched p = batching::batchInline(cond, args, size).at(0);
  return reshape(batching::withBatch(p.t, p.batched, size), {size});
}

/// The twin of condition `condName` that holds while any example's does, on
/// the parameters `params` makes (a batched while, and its while_vjp).
std::string anyRunning(const std::shared_ptr<ir::Module>& m, const std::string& condName, const ParamsFn& params,
                       int64_t size, const std::string& variant) {
  return autodiff::derive(m, "vmap", condName, [&](detail::TraceScope& scope, const ir::Function& g) {
    const Tensor lanes = examplePredicates(g, params(scope, g), size);
    const Tensor running = gt(sum(cast(lanes, DType::i32)), full({}, 0, DType::i32));
    return std::vector<Tensor>{reshape(running, g.type(g.outputs[0]).shape)};
  }, variant + ":any");
}

/// `next` for the examples that run (`running`, [size] i1), `old` for
/// those that are done: a finished example keeps its value.
Tensor keepFinished(const Tensor& running, const Tensor& next, const Tensor& old, int64_t size) {
  return where(laneMask(running, size, old.rank()), next, old);
}

/// scan: the body batched, with the carries it makes batched batched from
/// the start; batched xs ([B, N, ...]) scanned along their axis 1 (moved
/// first: the body sees [B, ...] slices), batched ys stacked as [N, B, ...]
/// and moved back to batch-first. Attributes (length, reverse, snapshots) kept.
void batchScan(const BatchCtx& c) {
  const ScanShape s = scanShape(c.op);
  const auto m = batching::currentModule();
  const std::string bodyName = c.op.callees[0];
  const std::vector<char> in = carryFixedPoint(*m->lookup(bodyName), batching::operandsBatched(c), s.k, s.c);
  std::vector<char> out = batching::batchReach(*m->lookup(bodyName), in);
  for (std::size_t i = 0; i < s.c; ++i) out[i] = in[s.k + i];
  const std::string twin = batching::batchFunction(m, bodyName, in, out, c.size);
  std::vector<Tensor> operands;
  for (std::size_t i = 0; i < s.k + s.c; ++i) operands.push_back(asLaidOut(c, i, in[i]));
  for (std::size_t j = s.k + s.c; j < c.arity(); ++j) operands.push_back(c.batched(j) ? batching::moveAxis(c.x(j), 0, 1) : c.x(j));
  const std::vector<Tensor> ys = batching::emitOp(c, OpKind::Scan, operands, c.op.attrs, {twin});
  for (std::size_t k = 0; k < ys.size(); ++k)
    setResult(c, k, k < s.c || !out[k] ? ys[k] : batching::moveAxis(ys[k], 1, 0), out[k]);
}

/// while: with a predicate that reads nothing batched, the condition and
/// body batched (carries to a fixed point, as scan) and the loop runs as
/// before. With a batched predicate every carry is batched and the loop runs
/// while any example's predicate holds; each step runs the body on every
/// example and keeps the carry of finished ones (a select), so a finished
/// example's carry, and its gradient, pass through unchanged. max_iterations
/// holds per example: the loop runs as many steps as its longest example.
void batchWhile(const BatchCtx& c) {
  const auto k = static_cast<std::size_t>(c.op.attrs.integer("consts"));
  const std::size_t nc = c.arity() - k;
  const auto m = batching::currentModule();
  const std::string condName = c.op.callees[0], bodyName = c.op.callees[1];
  std::vector<char> in = carryFixedPoint(*m->lookup(bodyName), batching::operandsBatched(c), k, nc);
  if (!batching::batchReach(*m->lookup(condName), in)[0]) {
    const std::string cond = batching::batchFunction(m, condName, in, {0}, c.size);
    const std::string body = batching::batchFunction(m, bodyName, in, std::vector<char>(in.begin() + static_cast<std::ptrdiff_t>(k), in.end()), c.size);
    std::vector<Tensor> operands;
    for (std::size_t i = 0; i < c.arity(); ++i) operands.push_back(asLaidOut(c, i, in[i]));
    const std::vector<Tensor> ys = batching::emitOp(c, OpKind::While, operands, c.op.attrs, {cond, body});
    for (std::size_t j = 0; j < ys.size(); ++j) setResult(c, j, ys[j], in[k + j]);
    return;
  }
  for (std::size_t i = 0; i < nc; ++i) in[k + i] = 1;
  const int64_t size = c.size;
  const std::string variant = fmt::format(":while:{}:{}", layoutText(in), size);
  const ir::Function& condFn = *m->lookup(condName);
  // The arguments of a derived function: its parameters, batched as `in` says.
  auto params = [&](detail::TraceScope& scope, const ir::Function& g) {
    std::vector<batching::Batched> args;
    for (std::size_t i = 0; i < g.params.size(); ++i) {
      const Type& t = g.type(g.params[i]);
      args.push_back({scope.param(in[i] ? batching::batchedType(t, size) : t), bool(in[i])});
    }
    return args;
  };
  // cond: any example still running.
  const std::string cond = anyRunning(m, condName, params, size, variant);
  // body: a step of every example; finished examples keep their carry.
  const std::string body = autodiff::derive(m, "vmap", bodyName, [&](detail::TraceScope& scope, const ir::Function& g) {
    const std::vector<batching::Batched> args = params(scope, g);
    const Tensor running = examplePredicates(condFn, args, size);
    const std::vector<batching::Batched> next = batching::batchInline(g, args, size);
    std::vector<Tensor> outs;
    for (std::size_t i = 0; i < nc; ++i)
      outs.push_back(keepFinished(running, batching::withBatch(next[i].t, next[i].batched, size), args[k + i].t, size));
    return outs;
  }, variant + ":masked");
  std::vector<Tensor> operands;
  for (std::size_t i = 0; i < c.arity(); ++i) operands.push_back(asLaidOut(c, i, in[i]));
  const std::vector<Tensor> ys = batching::emitOp(c, OpKind::While, operands, c.op.attrs, {cond, body});
  for (std::size_t j = 0; j < ys.size(); ++j) c.result(j, ys[j]);
}

/// Whether function `name` of `m`, or a function it references, runs a
/// host callback; a walk over those functions only.
bool callsBack(const ir::Module& m, const std::string& name) {
  std::vector<std::string> work{name};
  std::set<std::string> seen{name};
  while (!work.empty()) {
    const ir::Function* f = m.lookup(work.back());
    work.pop_back();
    if (!f) continue;
    for (const ir::Op& op : f->ops) {
      if (ir::info(op.kind).has(ir::kHostOnly)) return true;
      for (const std::string& callee : op.callees)
        if (seen.insert(callee).second) work.push_back(callee);
    }
  }
  return false;
}

/// switch: with an unbatched index only the taken branch runs, every branch
/// batched to one layout of results (batched where any branch makes them
/// so). With a batched index every branch runs on the whole batch (inlined)
/// and each example takes its own branch's results (a select per branch,
/// the index clamped as switch clamps it); a branch with side effects (a
/// host callback) cannot run for examples that did not take it: an error.
/// (A loop's max_iterations inside a branch then holds for every example,
/// including those that did not take the branch.)
void batchSwitch(const BatchCtx& c) {
  const auto m = batching::currentModule();
  const std::vector<char> all = batching::operandsBatched(c);
  const std::vector<char> xsIn(all.begin() + 1, all.end());
  const std::size_t nr = c.op.results.size();
  if (!c.batched(0)) {
    std::vector<char> out(nr, 0);
    for (const std::string& b : c.op.callees) {
      const std::vector<char> r = batching::batchReach(*m->lookup(b), xsIn);
      for (std::size_t j = 0; j < nr; ++j) out[j] = out[j] || r[j];
    }
    std::vector<std::string> twins;
    for (const std::string& b : c.op.callees) twins.push_back(batching::batchFunction(m, b, xsIn, out, c.size));
    std::vector<Tensor> operands;
    for (std::size_t i = 0; i < c.arity(); ++i) operands.push_back(c.x(i));
    const std::vector<Tensor> ys = batching::emitOp(c, OpKind::Switch, operands, c.op.attrs, twins);
    for (std::size_t j = 0; j < nr; ++j) setResult(c, j, ys[j], out[j]);
    return;
  }
  for (std::size_t b = 0; b < c.op.callees.size(); ++b)
    if (callsBack(*m, c.op.callees[b]))
      throw Error(fmt::format("vmap: a cond or switch_case with a batched predicate or index runs every branch and "
                              "selects per example, but branch {} (@{}) has side effects (a host callback such as "
                              "debug_callback) that would run for examples that did not take it; make the predicate or "
                              "index unbatched, or move the callback out of the branch",
                              b, c.op.callees[b]),
                  c.op.loc);
  std::vector<batching::Batched> args;
  for (std::size_t i = 1; i < c.arity(); ++i) args.push_back({c.x(i), c.batched(i)});
  const Tensor index = reshape(c.x(0), {c.size});
  std::vector<Tensor> ys;
  for (std::size_t b = 0; b < c.op.callees.size(); ++b) {
    const std::vector<batching::Batched> r = batching::batchInline(*m->lookup(c.op.callees[b]), args, c.size);
    for (std::size_t j = 0; j < nr; ++j) {
      const Tensor y = batching::withBatch(r[j].t, r[j].batched, c.size);
      if (b == 0) ys.push_back(y);
      else ys[j] = where(laneMask(ge(index, full({}, static_cast<double>(b), index.dtype())), c.size, y.rank()), y, ys[j]);
    }
  }
  for (std::size_t j = 0; j < nr; ++j) c.result(j, ys[j]);
}

/// while_vjp under vmap: every operand batched (shared consts broadcast, so
/// each example accumulates its own gradient), the
/// forward run while any example runs, each step masked as batchWhile does
/// and each example's predicate kept with the step's residuals; the
/// backward then runs the same steps in reverse, and an example that did
/// not run a step keeps its cotangents through it (a select).
void batchWhileVjp(const BatchCtx& c) {
  const auto k = static_cast<std::size_t>(c.op.attrs.integer("consts"));
  const auto nc = static_cast<std::size_t>(c.op.attrs.integer("carries"));
  const auto m = batching::currentModule();
  const int64_t size = c.size;
  const std::string condName = c.op.callees[0], fwdName = c.op.callees[1], bwdName = c.op.callees[2];
  const ir::Function& condFn = *m->lookup(condName);
  const std::string variant = fmt::format(":while_vjp:{}", size);
  auto params = [&](detail::TraceScope& scope, const ir::Function& g) {
    std::vector<batching::Batched> args;
    for (ir::ValueId p : g.params) args.push_back({scope.param(batching::batchedType(g.type(p), size)), true});
    return args;
  };
  auto batchedOuts = [&](const std::vector<batching::Batched>& ys) {
    std::vector<Tensor> outs;
    for (const batching::Batched& y : ys) outs.push_back(batching::withBatch(y.t, y.batched, size));
    return outs;
  };
  const std::string cond = anyRunning(m, condName, params, size, variant);
  // fwd: (const..., carry...) -> (carry'..., residual..., running)
  const std::string fwd = autodiff::derive(m, "vmap", fwdName, [&](detail::TraceScope& scope, const ir::Function& g) {
    const std::vector<batching::Batched> state = params(scope, g);
    const Tensor running = examplePredicates(condFn, state, size);
    std::vector<Tensor> outs = batchedOuts(batching::batchInline(g, state, size));
    for (std::size_t i = 0; i < nc; ++i) outs[i] = keepFinished(running, outs[i], state[k + i].t, size);
    outs.push_back(running);
    return outs;
  }, variant + ":masked");
  // bwd: (const..., dcarry..., dconst..., residual..., running) -> (dcarry'..., dconst'...)
  const std::string bwd = autodiff::derive(m, "vmap", bwdName, [&](detail::TraceScope& scope, const ir::Function& g) {
    std::vector<batching::Batched> args = params(scope, g);
    const Tensor running = scope.param(Type{DType::i1, {size}});
    std::vector<Tensor> outs = batchedOuts(batching::batchInline(g, args, size));
    // A finished example keeps the incoming cotangent of the same value.
    for (std::size_t j = 0; j < outs.size(); ++j) outs[j] = keepFinished(running, outs[j], args[k + j].t, size);
    return outs;
  }, variant + ":masked");
  std::vector<Tensor> operands;
  for (std::size_t i = 0; i < c.arity(); ++i) operands.push_back(c.bx(i));
  const std::vector<Tensor> ys = batching::emitOp(c, OpKind::WhileVjp, operands, c.op.attrs, {cond, fwd, bwd});
  // Each example's cotangents, a shared const's too (the op's results are
  // per-example values, as the loop of while_vjp ops would give).
  for (std::size_t j = 0; j < ys.size(); ++j) c.result(j, ys[j]);
}

} // namespace

void defineControlFlowOps(Table& t) {
  set(t, OpKind::Switch, {
      .infer = [](const InferCtx& c) {
        if (c.callees.empty()) c.fail("expected at least one branch function");
        if (c.operands.empty() || c.operands[0].size() != 1 || (c.operands[0].dtype != DType::i32 && c.operands[0].dtype != DType::i64))
          c.fail("the index must be an i32 or i64 tensor with one element, got {}", c.operands.empty() ? "nothing" : c.operands[0].str());
        const auto xs = c.operands.subspan(1);
        const std::vector<Type> results = c.callees[0]->resultTypes();
        for (const ir::Function* f : c.callees) {
          expectParams(c, *f, xs, "switch");
          const std::vector<Type> r = f->resultTypes();
          if (r.size() != results.size())
            c.fail("branch @{} returns {} values, but branch @{} returns {}", f->name, r.size(), c.callees[0]->name, results.size());
          for (std::size_t i = 0; i < r.size(); ++i)
            if (r[i] != results[i])
              c.fail("result {} of branch @{} is {}, but branch @{} returns {}", i, f->name, r[i].str(), c.callees[0]->name, results[i].str());
        }
        if (optionalInteger(c, "residuals", 0) < 0 || static_cast<std::size_t>(optionalInteger(c, "residuals", 0)) > results.size())
          c.fail("residuals = {} is more than the {} results", optionalInteger(c, "residuals", 0), results.size());
        return results;
      },
      .eval = [](const EvalCtx& c) {
        const int64_t n = static_cast<int64_t>(c.op.callees.size());
        const int64_t k = std::clamp<int64_t>(scalarOf(c.args[0]), 0, n - 1);
        return c.call(c.op.callees[static_cast<std::size_t>(k)], c.args.subspan(1));
      },
      .fold = noFold,
      .lower = [](LowerCtx& c) {
        const auto n = static_cast<int64_t>(c.op.callees.size());
        llvm::Value* idx = c.b.CreateSExtOrTrunc(c.load(c.operandType(0).dtype, c.operandBuffer(0), c.i64(0)), c.b.getInt64Ty());
        idx = c.b.CreateSelect(c.b.CreateICmpSLT(idx, c.i64(0)), c.i64(0), idx);
        idx = c.b.CreateSelect(c.b.CreateICmpSGT(idx, c.i64(n - 1)), c.i64(n - 1), idx);
        llvm::Function* fn = c.b.GetInsertBlock()->getParent();
        auto* done = llvm::BasicBlock::Create(c.ctx(), "switch.done", fn);
        std::vector<llvm::BasicBlock*> blocks;
        for (int64_t k = 0; k < n; ++k) blocks.push_back(llvm::BasicBlock::Create(c.ctx(), "switch.case", fn, done));
        llvm::SwitchInst* sw = c.b.CreateSwitch(idx, blocks.back(), static_cast<unsigned>(n - 1));
        for (int64_t k = 0; k + 1 < n; ++k) sw->addCase(c.b.getInt64(static_cast<uint64_t>(k)), blocks[static_cast<std::size_t>(k)]);
        for (int64_t k = 0; k < n; ++k) {
          c.b.SetInsertPoint(blocks[static_cast<std::size_t>(k)]);
          std::vector<llvm::Value*> args;
          for (std::size_t i = 1; i < c.op.operands.size(); ++i) args.push_back(c.operandBuffer(i));
          args.insert(args.end(), c.results.begin(), c.results.end());
          c.call(c.op.callees[static_cast<std::size_t>(k)], std::move(args));
          c.b.CreateBr(done);
        }
        c.b.SetInsertPoint(done);
      },
      // Each branch's VJP on the taken branch's residuals, and a switch over
      // the branches' JVPs; see autodiff/ControlFlowJvp.cpp.
      .jvp = autodiff::switchJvp,
      .vjp = [](const autodiff::VjpCtx& c) { autodiff::switchVjp(c); },
      .batch = batchSwitch,
      // the branch a known index takes, else every branch's pattern
      .deps = sparsity::switchDeps,
  });

  set(t, OpKind::Scan, {
      .infer = [](const InferCtx& c) {
        if (c.callees.size() != 1) c.fail("expected one body function, got {}", c.callees.size());
        const ir::Function& body = *c.callees[0];
        const int64_t k = c.integer("consts"), carries = c.integer("carries"), n = c.integer("length");
        (void)c.boolean("reverse", false);
        if (k < 0 || carries < 0 || static_cast<std::size_t>(k + carries) > c.operands.size())
          c.fail("consts = {} and carries = {} do not fit {} operands", k, carries, c.operands.size());
        if (n < 0) c.fail("length must be at least 0, got {}", n);
        if (optionalInteger(c, "snapshots", 1) < 1) c.fail("snapshots must be at least 1, got {}", c.integer("snapshots"));
        const auto nk = static_cast<std::size_t>(k), nc = static_cast<std::size_t>(carries);
        std::vector<Type> params(c.operands.begin(), c.operands.begin() + static_cast<std::ptrdiff_t>(nk + nc));
        for (std::size_t i = nk + nc; i < c.operands.size(); ++i) {
          const Type& x = c.operands[i];
          if (x.rank() == 0 || x.shape[0] != n)
            c.fail("scanned operand {} is {}, but a loop of length {} needs a leading axis of {}", i - nk - nc, x.str(), n, n);
          params.push_back(sliceType(x));
        }
        expectParams(c, body, params, "scan");
        const std::vector<Type> outs = body.resultTypes();
        if (outs.size() < nc) c.fail("@{} returns {} values, but the loop carries {}", body.name, outs.size(), nc);
        std::vector<Type> results;
        for (std::size_t i = 0; i < nc; ++i) {
          if (outs[i] != c.operands[nk + i])
            c.fail("carry {} of @{} comes back as {}, but the loop carries {}", i, body.name, outs[i].str(), c.operands[nk + i].str());
          results.push_back(outs[i]);
        }
        for (std::size_t i = nc; i < outs.size(); ++i) {
          Shape s{n};
          s.insert(s.end(), outs[i].shape.begin(), outs[i].shape.end());
          results.push_back(Type{outs[i].dtype, s});
        }
        const int64_t r = optionalInteger(c, "residuals", 0);
        if (r < 0 || static_cast<std::size_t>(r) > outs.size() - nc) c.fail("residuals = {} is more than the {} stacked results", r, outs.size() - nc);
        return results;
      },
      .eval = [](const EvalCtx& c) {
        const ScanShape s = scanShape(c.op);
        std::vector<Array> args(c.args.begin(), c.args.begin() + static_cast<std::ptrdiff_t>(s.k + s.c));
        std::vector<Array> ys;
        for (std::size_t i = s.c; i < c.op.results.size(); ++i) ys.push_back(Array(c.resultType(i)));
        for (std::size_t step = 0; step < s.n; ++step) {
          const std::size_t t = s.reverse ? s.n - 1 - step : step;
          std::vector<Array> in = args;
          for (std::size_t j = 0; j < s.x; ++j) {
            const Array& xs = c.args[s.k + s.c + j];
            Array x = Array::uninitialized(sliceType(xs.type()));
            std::memcpy(x.raw(), static_cast<const char*>(xs.raw()) + t * x.bytes(), x.bytes());
            in.push_back(std::move(x));
          }
          std::vector<Array> out = c.call(c.op.callees[0], in);
          for (std::size_t i = 0; i < s.c; ++i) args[s.k + i] = std::move(out[i]);
          for (std::size_t j = 0; j < ys.size(); ++j)
            std::memcpy(static_cast<char*>(ys[j].raw()) + t * out[s.c + j].bytes(), out[s.c + j].raw(), out[s.c + j].bytes());
        }
        std::vector<Array> results(args.begin() + static_cast<std::ptrdiff_t>(s.k), args.end());
        for (Array& y : ys) results.push_back(std::move(y));
        return results;
      },
      .fold = noFold,
      // The carry lives in the result buffers; each step writes the next one
      // into the workspace (the body may read its carry after writing some
      // of its results, so they cannot share buffers) -- except a carry the
      // body updates in place as its last read of it (FusionPlan::
      // sharedOutputs: a ring buffer's dynamic_update_slice), which the body
      // reads and writes in the result buffer: a step then costs the
      // update's window, not the carry's size.
      // Carries of kAlternateBytes or more take turns in the two buffers
      // instead of being copied back after every step: the loop runs pairs
      // of steps through two call sites, the first reading the result buffer
      // and writing the workspace's, the second the other way (when the steps
      // are odd in number, the first pair skips its first step, the carry
      // starting in the workspace). Two sites, not one call on buffers chosen
      // by parity: the body's alias scopes say its carry and its next carry
      // never alias, which holds for every call at one site (each inlined
      // site gets scopes of its own) but not across two steps of one site
      // that swap the buffers, once LLVM unrolls the loop (wrong results at
      // -O3). Smaller carries are copied: a second inlined body costs LLVM
      // more than their copy costs the run.
      .lower = [](LowerCtx& c) {
        constexpr uint64_t kAlternateBytes = 4096;
        const ScanShape s = scanShape(c.op);
        const int64_t n = static_cast<int64_t>(s.n);
        std::vector<Type> carryTypes;
        std::vector<char> shared(s.c);
        uint64_t alternateBytes = 0;
        for (std::size_t i = 0; i < s.c; ++i) {
          carryTypes.push_back(c.resultType(i));
          shared[i] = c.calleeShares(0, i, s.k + i);
          if (!shared[i]) alternateBytes += carryTypes[i].bytes();
        }
        auto [other, reserved] = workspaceFor(c, carryTypes);
        const bool alternate = !other.empty() && alternateBytes >= kAlternateBytes && n > 1;
        const bool oddStart = alternate && n % 2 == 1; // the carry starts in the workspace
        for (std::size_t i = 0; i < s.c; ++i)
          copyBuffer(c, oddStart && !shared[i] ? other[i] : c.results[i], c.operandBuffer(s.k + i), carryTypes[i].bytes());
        // Step `step`, reading the carry from `from` and writing the next to `to` (per carry).
        auto call = [&](llvm::Value* step, const std::vector<llvm::Value*>& from, const std::vector<llvm::Value*>& to) {
          llvm::Value* t = s.reverse ? c.b.CreateSub(c.i64(n - 1), step) : step;
          std::vector<llvm::Value*> args;
          for (std::size_t i = 0; i < s.k; ++i) args.push_back(c.operandBuffer(i));
          args.insert(args.end(), from.begin(), from.end());
          for (std::size_t j = 0; j < s.x; ++j)
            args.push_back(byteOffset(c, c.operandBuffer(s.k + s.c + j), t, sliceType(c.operandType(s.k + s.c + j)).bytes()));
          args.insert(args.end(), to.begin(), to.end());
          for (std::size_t j = s.c; j < c.op.results.size(); ++j)
            args.push_back(byteOffset(c, c.results[j], t, sliceType(c.resultType(j)).bytes()));
          c.call(c.op.callees[0], std::move(args), reserved);
        };
        std::vector<llvm::Value*> results(c.results.begin(), c.results.begin() + static_cast<std::ptrdiff_t>(s.c)), work = results;
        for (std::size_t i = 0; i < s.c; ++i)
          if (!other.empty() && !shared[i]) work[i] = other[i];
        if (!alternate) {
          c.loop(n, [&](llvm::Value* iv) {
            call(iv, results, work);
            for (std::size_t i = 0; i < s.c && !other.empty(); ++i)
              if (!shared[i]) copyBuffer(c, c.results[i], other[i], carryTypes[i].bytes());
          });
          return;
        }
        c.loop((n + 1) / 2, [&](llvm::Value* pair) {
          llvm::Value* first = c.b.CreateSub(c.b.CreateMul(pair, c.i64(2)), c.i64(oddStart ? 1 : 0));
          if (oddStart) c.ifThen(c.b.CreateICmpNE(pair, c.i64(0)), [&] { call(first, results, work); });
          else call(first, results, work);
          call(c.b.CreateAdd(first, c.i64(1)), work, results);
        });
      },
      // A reverse scan of the body's VJP over stacked residuals, and a scan of
      // the body's JVP carrying tangents; see autodiff/ControlFlowJvp.cpp.
      .jvp = autodiff::scanJvp,
      .vjp = [](const autodiff::VjpCtx& c) { autodiff::scanVjp(c); },
      .batch = batchScan,
      // the body step by step: exact
      .deps = sparsity::scanDeps,
  });

  set(t, OpKind::While, {
      .infer = [](const InferCtx& c) {
        if (c.callees.size() != 2) c.fail("expected a condition and a body function, got {} functions", c.callees.size());
        const ir::Function& cond = *c.callees[0];
        const ir::Function& body = *c.callees[1];
        const int64_t k = c.integer("consts");
        if (k < 0 || static_cast<std::size_t>(k) > c.operands.size()) c.fail("consts = {} does not fit {} operands", k, c.operands.size());
        if (optionalInteger(c, "max_iterations", 0) < 0) c.fail("max_iterations must be at least 0, got {}", c.integer("max_iterations"));
        expectParams(c, cond, c.operands, "while");
        expectParams(c, body, c.operands, "while");
        expectCondition(c, cond);
        const auto carries = c.operands.subspan(static_cast<std::size_t>(k));
        const std::vector<Type> outs = body.resultTypes();
        if (outs.size() != carries.size()) c.fail("@{} returns {} values, but the loop carries {}", body.name, outs.size(), carries.size());
        for (std::size_t i = 0; i < outs.size(); ++i)
          if (outs[i] != carries[i])
            c.fail("carry {} of @{} comes back as {}, but the loop carries {}", i, body.name, outs[i].str(), carries[i].str());
        return outs;
      },
      .eval = [](const EvalCtx& c) {
        const auto k = static_cast<std::size_t>(c.op.attrs.integer("consts"));
        const int64_t limit = c.op.attrs.has("max_iterations") ? c.op.attrs.integer("max_iterations") : -1;
        std::vector<Array> args(c.args.begin(), c.args.end());
        for (int64_t i = 0;; ++i) {
          if (scalarOf(c.call(c.op.callees[0], args)[0]) == 0) break;
          if (i == limit) throw Error(runtime::loopLimitMessage(limit), c.op.loc);
          std::vector<Array> out = c.call(c.op.callees[1], args);
          for (std::size_t j = 0; j < out.size(); ++j) args[k + j] = std::move(out[j]);
        }
        return std::vector<Array>(args.begin() + static_cast<std::ptrdiff_t>(k), args.end());
      },
      .fold = noFold,
      .lower = [](LowerCtx& c) {
        const auto k = static_cast<std::size_t>(c.op.attrs.integer("consts"));
        const int64_t limit = c.op.attrs.has("max_iterations") ? c.op.attrs.integer("max_iterations") : -1;
        std::vector<Type> types;
        for (std::size_t i = 0; i < c.results.size(); ++i) {
          types.push_back(c.resultType(i));
          copyBuffer(c, c.results[i], c.operandBuffer(k + i), c.resultType(i).bytes());
        }
        types.push_back(Type{DType::i1, {}}); // the condition's result
        auto [ws, reserved] = workspaceFor(c, types);
        llvm::Value* pred = ws.back();
        llvm::Value* count = c.scalarSlot(DType::i64);
        c.b.CreateStore(c.i64(0), count);
        llvm::Function* fn = c.b.GetInsertBlock()->getParent();
        auto* header = llvm::BasicBlock::Create(c.ctx(), "while", fn);
        auto* body = llvm::BasicBlock::Create(c.ctx(), "while.body", fn);
        auto* exit = llvm::BasicBlock::Create(c.ctx(), "while.exit", fn);
        // (const..., carry..., outs...): the carry lives in the result buffers.
        auto args = [&](std::span<llvm::Value* const> outs) {
          std::vector<llvm::Value*> a;
          for (std::size_t i = 0; i < k; ++i) a.push_back(c.operandBuffer(i));
          a.insert(a.end(), c.results.begin(), c.results.end());
          a.insert(a.end(), outs.begin(), outs.end());
          return a;
        };
        c.b.CreateBr(header);
        c.b.SetInsertPoint(header);
        c.call(c.op.callees[0], args({&pred, 1}), reserved);
        c.b.CreateCondBr(c.load(DType::i1, pred, c.i64(0)), body, exit);
        c.b.SetInsertPoint(body);
        llvm::Value* i = c.b.CreateLoad(c.b.getInt64Ty(), count);
        if (limit >= 0) {
          // One iteration too many: report it (compiled code cannot throw) and stop.
          auto* over = llvm::BasicBlock::Create(c.ctx(), "while.limit", fn, exit);
          auto* run = llvm::BasicBlock::Create(c.ctx(), "while.run", fn, exit);
          c.b.CreateCondBr(c.b.CreateICmpEQ(i, c.i64(limit)), over, run);
          c.b.SetInsertPoint(over);
          reportAtOp(c, "adjit_loop_limit", c.i64(limit));
          c.b.CreateBr(exit);
          c.b.SetInsertPoint(run);
        }
        // A carry the body updates in place (see scan) is its own next carry.
        std::vector<llvm::Value*> outs(ws.begin(), ws.begin() + static_cast<std::ptrdiff_t>(c.results.size()));
        for (std::size_t j = 0; j < c.results.size(); ++j)
          if (c.calleeShares(1, j, k + j)) outs[j] = c.results[j];
        c.call(c.op.callees[1], args(outs), reserved);
        for (std::size_t j = 0; j < c.results.size(); ++j)
          if (outs[j] != c.results[j]) copyBuffer(c, c.results[j], ws[j], types[j].bytes());
        c.b.CreateStore(c.b.CreateAdd(i, c.i64(1)), count);
        c.b.CreateBr(header);
        c.b.SetInsertPoint(exit);
      },
      // Differentiated through a bounded reverse loop, and forward by a while
      // over the body's JVP (no bound needed); see autodiff/ControlFlowJvp.cpp.
      .jvp = autodiff::whileJvp,
      .vjp = [](const autodiff::VjpCtx& c) { autodiff::whileVjp(c); },
      .batch = batchWhile,
      // step by step while the condition is known, then a fixed point (conservative)
      .deps = sparsity::whileDeps,
  });

  // while_vjp @cond, @fwd, @bwd(%const..., %init..., %dfinal...) {consts = K, carries = C}
  //   -> (%dinit..., %dconst...): the reverse of `while @cond, @body` without a
  // bound on its trip count. It runs the loop forward again with @fwd =
  // (const..., carry...) -> (carry'..., residual...), pushing each step's
  // residuals onto a stack that grows at run time (amortised doubling), then
  // runs @bwd = (const..., dcarry..., dconst..., residual...) -> (dcarry'...,
  // dconst'...) once per step, last step first, popping them; the stack is
  // freed before the op ends. dcarry starts at %dfinal (one per floating
  // carry) and dconst at zeros (one per floating const). Keeping the stack
  // inside one op keeps every value of the IR statically shaped, and a split
  // VJP (vjp on Arrays, --vjp bundles) needs no state between its halves.
  // loop_limit(%running) {max_iterations}: while_loop's error at the op's
  // location when %running (i1, one element) is true. The reverse of a
  // bounded while loop runs max_iterations steps of it as a scan; the
  // original loop may be dropped as unused, so this op asks after the scan
  // whether the loop would have gone on. No results; not pure, so kept.
  set(t, OpKind::LoopLimit, {
      .infer = [](const InferCtx& c) {
        if (c.operands[0].dtype != DType::i1 || c.operands[0].size() != 1)
          c.fail("expected an i1 tensor with one element, got {}", c.operands[0].str());
        if (c.integer("max_iterations") < 0) c.fail("max_iterations must be at least 0, got {}", c.integer("max_iterations"));
        return std::vector<Type>{};
      },
      .eval = [](const EvalCtx& c) {
        if (scalarOf(c.args[0]) != 0) throw Error(runtime::loopLimitMessage(c.op.attrs.integer("max_iterations")), c.op.loc);
        return std::vector<Array>{};
      },
      .fold = noFold,
      .lower = [](LowerCtx& c) {
        llvm::Function* fn = c.b.GetInsertBlock()->getParent();
        auto* over = llvm::BasicBlock::Create(c.ctx(), "loop.limit", fn);
        auto* done = llvm::BasicBlock::Create(c.ctx(), "loop.limit.done", fn);
        c.b.CreateCondBr(c.load(DType::i1, c.operandBuffer(0), c.i64(0)), over, done);
        c.b.SetInsertPoint(over);
        reportAtOp(c, "adjit_loop_limit", c.i64(c.op.attrs.integer("max_iterations")));
        c.b.CreateBr(done);
        c.b.SetInsertPoint(done);
      },      // Batched, the loop went on for some example: any over the batch.
      .batch = [](const BatchCtx& c) {
        const Tensor any = gt(sum(cast(c.x(0), DType::i32)), full({}, 0, DType::i32));
        c.reapply({reshape(any, c.type(0).shape)});
      },
  });

  set(t, OpKind::WhileVjp, {
      .infer = [](const InferCtx& c) {
        if (c.callees.size() != 3) c.fail("expected a condition, a forward and a backward function, got {} functions", c.callees.size());
        const ir::Function &cond = *c.callees[0], &fwd = *c.callees[1], &bwd = *c.callees[2];
        const int64_t k = c.integer("consts"), nc = c.integer("carries");
        if (k < 0 || nc < 0 || static_cast<std::size_t>(k + nc) > c.operands.size())
          c.fail("consts = {} and carries = {} do not fit {} operands", k, nc, c.operands.size());
        const WhileVjpShape s = whileVjpShape(static_cast<std::size_t>(k), static_cast<std::size_t>(nc), [&](std::size_t i) { return c.operands[i]; });
        if (c.operands.size() != s.k + s.c + s.fc.size())
          c.fail("expected {} operands (consts, carries and a cotangent per floating carry), got {}", s.k + s.c + s.fc.size(), c.operands.size());
        const auto state = c.operands.first(s.k + s.c);
        std::vector<Type> dc, dk;
        for (std::size_t j = 0; j < s.fc.size(); ++j) {
          dc.push_back(c.operands[s.k + s.fc[j]]);
          if (c.operands[s.k + s.c + j] != dc.back())
            c.fail("the cotangent of carry {} is {}, but the carry is {}", s.fc[j], c.operands[s.k + s.c + j].str(), dc.back().str());
        }
        for (std::size_t i : s.fk) dk.push_back(c.operands[i]);
        expectParams(c, cond, state, "while_vjp");
        expectCondition(c, cond);
        expectParams(c, fwd, state, "while_vjp");
        const std::vector<Type> outs = fwd.resultTypes();
        if (outs.size() < s.c) c.fail("@{} returns {} values, but the loop carries {}", fwd.name, outs.size(), s.c);
        for (std::size_t i = 0; i < s.c; ++i)
          if (outs[i] != state[s.k + i])
            c.fail("carry {} of @{} comes back as {}, but the loop carries {}", i, fwd.name, outs[i].str(), state[s.k + i].str());
        std::vector<Type> params(state.begin(), state.begin() + static_cast<std::ptrdiff_t>(s.k));
        params.insert(params.end(), dc.begin(), dc.end());
        params.insert(params.end(), dk.begin(), dk.end());
        params.insert(params.end(), outs.begin() + static_cast<std::ptrdiff_t>(s.c), outs.end());
        expectParams(c, bwd, params, "while_vjp");
        std::vector<Type> results = dc;
        results.insert(results.end(), dk.begin(), dk.end());
        const std::vector<Type> got = bwd.resultTypes();
        if (got != results)
          c.fail("@{} must return the cotangents of the floating carries and consts, {} values, but returns {}", bwd.name, results.size(),
                 bwd.signature());
        return results;
      },
      .eval = [](const EvalCtx& c) {
        const WhileVjpShape s = whileVjpShape(static_cast<std::size_t>(c.op.attrs.integer("consts")),
                                              static_cast<std::size_t>(c.op.attrs.integer("carries")),
                                              [&](std::size_t i) { return c.args[i].type(); });
        std::vector<Array> state(c.args.begin(), c.args.begin() + static_cast<std::ptrdiff_t>(s.k + s.c));
        std::vector<std::vector<Array>> stack;
        while (scalarOf(c.call(c.op.callees[0], state)[0]) != 0) {
          std::vector<Array> out = c.call(c.op.callees[1], state);
          for (std::size_t i = 0; i < s.c; ++i) state[s.k + i] = std::move(out[i]);
          out.erase(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(s.c));
          stack.push_back(std::move(out));
        }
        std::vector<Array> args(c.args.begin(), c.args.begin() + static_cast<std::ptrdiff_t>(s.k));
        args.insert(args.end(), c.args.begin() + static_cast<std::ptrdiff_t>(s.k + s.c), c.args.end());
        for (std::size_t i : s.fk) args.push_back(Array(c.args[i].type()));
        const std::size_t grads = s.fc.size() + s.fk.size();
        for (; !stack.empty(); stack.pop_back()) {
          std::vector<Array> in = args;
          for (Array& r : stack.back()) in.push_back(std::move(r));
          std::vector<Array> out = c.call(c.op.callees[2], in);
          for (std::size_t j = 0; j < grads; ++j) args[s.k + j] = std::move(out[j]);
        }
        return std::vector<Array>(args.begin() + static_cast<std::ptrdiff_t>(s.k), args.end());
      },
      .fold = noFold,
      // The carry lives in the workspace, the cotangents in the result
      // buffers. Each step's residuals are written by @fwd straight into
      // their stack slot and read there by @bwd: no copies.
      .lower = [](LowerCtx& c) {
        const WhileVjpShape s = whileVjpShape(static_cast<std::size_t>(c.op.attrs.integer("consts")),
                                              static_cast<std::size_t>(c.op.attrs.integer("carries")),
                                              [&](std::size_t i) { return c.operandType(i); });
        const std::size_t grads = c.results.size();
        // workspace: carry, next carry, the condition, next cotangents
        std::vector<Type> types;
        for (std::size_t i = 0; i < s.c; ++i) types.push_back(c.operandType(s.k + i));
        for (std::size_t i = 0; i < s.c; ++i) types.push_back(c.operandType(s.k + i));
        types.push_back(Type{DType::i1, {}});
        for (std::size_t j = 0; j < grads; ++j) types.push_back(c.resultType(j));
        auto [ws, reserved] = workspaceFor(c, types);
        const std::span<llvm::Value* const> carry(ws.data(), s.c), next(ws.data() + s.c, s.c), dnext(ws.data() + 2 * s.c + 1, grads);
        llvm::Value* pred = ws[2 * s.c];
        // a step's residual slots, each 64-byte aligned within the step
        const ir::Function& fwd = c.callee(1);
        std::vector<uint64_t> offsets;
        uint64_t stepBytes = 0;
        for (std::size_t i = s.c; i < fwd.outputs.size(); ++i) {
          offsets.push_back(stepBytes);
          stepBytes += (fwd.type(fwd.outputs[i]).bytes() + 63) / 64 * 64;
        }
        for (std::size_t i = 0; i < s.c; ++i) copyBuffer(c, carry[i], c.operandBuffer(s.k + i), types[i].bytes());
        for (std::size_t j = 0; j < s.fc.size(); ++j) copyBuffer(c, c.results[j], c.operandBuffer(s.k + s.c + j), c.resultType(j).bytes());
        for (std::size_t j = s.fc.size(); j < grads; ++j)
          if (uint64_t n = c.resultType(j).bytes()) c.b.CreateMemSet(c.results[j], c.b.getInt8(0), n, llvm::MaybeAlign(1));
        llvm::Type* i64 = c.b.getInt64Ty();
        llvm::Type* ptr = c.b.getPtrTy();
        llvm::Value* count = c.scalarSlot(DType::i64);
        llvm::Value* cap = c.scalarSlot(DType::i64);
        llvm::Value* data = c.entryAlloca(ptr, 1);
        c.b.CreateStore(c.i64(0), count);
        c.b.CreateStore(c.i64(0), cap);
        c.b.CreateStore(llvm::ConstantPointerNull::get(c.b.getPtrTy()), data);
        llvm::Function* fn = c.b.GetInsertBlock()->getParent();
        auto block = [&](const char* name) { return llvm::BasicBlock::Create(c.ctx(), name, fn); };
        llvm::BasicBlock *header = block("while_vjp"), *body = block("while_vjp.body"), *back = block("while_vjp.back"),
                         *done = block("while_vjp.done");
        auto slot = [&](llvm::Value* step, std::size_t r) {
          return c.b.CreateConstInBoundsGEP1_64(c.b.getInt8Ty(), byteOffset(c, c.b.CreateLoad(ptr, data), step, stepBytes), offsets[r]);
        };
        auto consts = [&] {
          std::vector<llvm::Value*> a;
          for (std::size_t i = 0; i < s.k; ++i) a.push_back(c.operandBuffer(i));
          return a;
        };
        c.b.CreateBr(header);
        c.b.SetInsertPoint(header);
        std::vector<llvm::Value*> args = consts();
        args.insert(args.end(), carry.begin(), carry.end());
        args.push_back(pred);
        c.call(c.op.callees[0], args, reserved);
        c.b.CreateCondBr(c.load(DType::i1, pred, c.i64(0)), body, back);
        c.b.SetInsertPoint(body);
        llvm::Value* i = c.b.CreateLoad(i64, count);
        if (stepBytes) {
          // Grow to max(2 cap, need) when the step does not fit; on failure
          // report it (compiled code cannot throw), free the stack and stop.
          llvm::Value* need = c.b.CreateMul(c.b.CreateAdd(i, c.i64(1)), c.i64(static_cast<int64_t>(stepBytes)));
          llvm::Value* have = c.b.CreateLoad(i64, cap);
          llvm::BasicBlock *grow = block("while_vjp.grow"), *failed = block("while_vjp.oom"), *run = block("while_vjp.run");
          c.b.CreateCondBr(c.b.CreateICmpUGT(need, have), grow, run);
          c.b.SetInsertPoint(grow);
          llvm::Value* twice = c.b.CreateShl(have, 1);
          llvm::Value* bytes = c.b.CreateSelect(c.b.CreateICmpUGT(need, twice), need, twice);
          llvm::Value* old = c.b.CreateLoad(ptr, data);
          llvm::Value* grown = c.b.CreateCall(cFunction(c, "realloc", ptr, {ptr, i64}), {old, bytes});
          llvm::BasicBlock* ok = block("while_vjp.grown");
          c.b.CreateCondBr(c.b.CreateIsNull(grown), failed, ok);
          c.b.SetInsertPoint(ok);
          c.b.CreateStore(grown, data);
          c.b.CreateStore(bytes, cap);
          c.b.CreateBr(run);
          c.b.SetInsertPoint(failed);
          reportAtOp(c, "adjit_out_of_memory", bytes);
          c.b.CreateCall(cFunction(c, "free", c.b.getVoidTy(), {ptr}), {old});
          c.b.CreateStore(llvm::ConstantPointerNull::get(c.b.getPtrTy()), data);
          c.b.CreateBr(done);
          c.b.SetInsertPoint(run);
        }
        args = consts();
        args.insert(args.end(), carry.begin(), carry.end());
        args.insert(args.end(), next.begin(), next.end());
        for (std::size_t r = 0; r < offsets.size(); ++r) args.push_back(slot(i, r));
        c.call(c.op.callees[1], args, reserved);
        for (std::size_t j = 0; j < s.c; ++j) copyBuffer(c, carry[j], next[j], types[j].bytes());
        c.b.CreateStore(c.b.CreateAdd(i, c.i64(1)), count);
        c.b.CreateBr(header);
        // The backward: steps count-1 down to 0.
        c.b.SetInsertPoint(back);
        c.loopRange(c.i64(0), c.b.CreateLoad(i64, count), [&](llvm::Value* iv) {
          llvm::Value* step = c.b.CreateSub(c.b.CreateSub(c.b.CreateLoad(i64, count), c.i64(1)), iv);
          std::vector<llvm::Value*> a = consts();
          a.insert(a.end(), c.results.begin(), c.results.end());
          for (std::size_t r = 0; r < offsets.size(); ++r) a.push_back(slot(step, r));
          a.insert(a.end(), dnext.begin(), dnext.end());
          c.call(c.op.callees[2], a, reserved);
          for (std::size_t j = 0; j < grads; ++j) copyBuffer(c, c.results[j], dnext[j], c.resultType(j).bytes());
        });
        if (stepBytes)
          c.b.CreateCall(cFunction(c, "adjit_stack_pushed", c.b.getVoidTy(), {i64}),
                         {c.b.CreateMul(c.b.CreateLoad(i64, count), c.i64(static_cast<int64_t>(stepBytes)))});
        c.b.CreateCall(cFunction(c, "free", c.b.getVoidTy(), {ptr}), {c.b.CreateLoad(ptr, data)});
        c.b.CreateBr(done);
        c.b.SetInsertPoint(done);
      },
      // Second order: the reverse of the loop's JVP, another while_vjp (autodiff/ControlFlowJvp.cpp).
      .jvp = autodiff::whileVjpJvp,
      .vjp = [](const autodiff::VjpCtx& c) { autodiff::whileVjpVjp(c); },
      .batch = batchWhileVjp,
      // the forward loop as while's rule, then the backward one the same way
      .deps = sparsity::whileVjpDeps,
  });
}

} // namespace adjit::ops
