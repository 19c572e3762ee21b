// autodiff/Reverse.cpp — the reverse-mode driver and the function-level VJP transforms.
#include "autodiff/Reverse.h"

#include "autodiff/CustomGradient.h"
#include "autodiff/VjpCtx.h"
#include "ir/Builder.h"
#include "ir/OpInfo.h"
#include "autodiff/Rules.h"
#include "support/Assert.h"
#include "trace/Tracer.h"
#include "transforms/Passes.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <unordered_map>

namespace adjit::autodiff {
namespace {

} // namespace

std::vector<ir::ValueId> inlineFunction(ir::Builder& b, const ir::Function& src, const std::vector<ir::ValueId>& args) {
  std::unordered_map<ir::ValueId, ir::ValueId> map;
  for (std::size_t i = 0; i < args.size(); ++i) map[src.params[i]] = args[i];
  for (const ir::Op& op : src.ops) {
    std::vector<ir::ValueId> operands;
    for (ir::ValueId o : op.operands) operands.push_back(map.at(o));
    auto results = b.create(op.kind, operands, op.attrs, op.callees, op.loc);
    for (std::size_t i = 0; i < results.size(); ++i) map[op.results[i]] = results[i];
  }
  std::vector<ir::ValueId> outs;
  for (ir::ValueId o : src.outputs) outs.push_back(map.at(o));
  return outs;
}

namespace {

/// In a fresh function of `m` named `name`: parameters like g's (then, with
/// `withDy`, a cotangent per floating result), g's ops inlined, and the
/// reverse pass from g's floating results to its floating parameters (or,
/// with `wrt`, to the parameters it lists, in its order).
struct Differentiated {
  std::vector<Tensor> ys;
  std::vector<Tensor> dxs; ///< per floating parameter (or per `wrt`); zeros where unconnected
};
Differentiated differentiateInto(detail::TraceScope& scope, const ir::Function& g, bool withDy,
                                 const std::vector<std::size_t>* wrt = nullptr) {
  std::vector<ir::ValueId> xs, dys;
  for (ir::ValueId p : g.params) xs.push_back(scope.param(g.type(p)).id());
  if (withDy)
    for (ir::ValueId o : g.outputs)
      if (is_floating(g.type(o).dtype)) dys.push_back(scope.param(g.type(o)).id());
  std::vector<ir::ValueId> ys = inlineFunction(scope.state().builder, g, xs);
  Request req;
  req.end = scope.state().fn->ops.size();
  std::size_t k = 0;
  for (std::size_t i = 0; i < ys.size(); ++i)
    if (is_floating(g.type(g.outputs[i]).dtype)) {
      req.targets.push_back(ys[i]);
      req.seeds.push_back(withDy ? std::optional<Tensor>(detail::wrap(scope.state(), dys[k++])) : std::nullopt);
    }
  if (wrt)
    for (std::size_t i : *wrt) req.sources.push_back(xs.at(i));
  else
    for (std::size_t i = 0; i < xs.size(); ++i)
      if (is_floating(g.type(g.params[i]).dtype)) req.sources.push_back(xs[i]);
  std::vector<std::optional<Tensor>> dx = reverse(req);
  Differentiated d;
  for (ir::ValueId y : ys) d.ys.push_back(detail::wrap(scope.state(), y));
  for (std::size_t i = 0; i < dx.size(); ++i)
    d.dxs.push_back(dx[i] ? *dx[i] : zeros_like(detail::wrap(scope.state(), req.sources[i])));
  return d;
}

} // namespace

bool recomputes(const ir::Op& call) { return call.attrs.has("recompute") && call.attrs.boolean("recompute"); }

/// The cotangents of call op `opIndex`'s operands. The first time, the
/// forward call is rebound in place to the callee's split pair: it calls
/// @g.fwd, which also returns the residuals @g.bwd needs, and the backward
/// calls @g.bwd on them, so the callee's forward does not run twice. A call
/// whose residual results receive cotangents themselves (a higher derivative
/// through the backward) is differentiated as a whole, through @g.fwd's
/// combined VJP.
static std::vector<std::optional<Tensor>> callVjp(detail::TraceState& s, std::size_t opIndex, const std::vector<Tensor>& xs,
                                                  const std::vector<std::optional<Tensor>>& cts) {
  ir::Function& f = *s.fn;
  const std::shared_ptr<ir::Module>& m = s.module;
  // {recompute = true} (checkpointing): keep nothing; the backward runs the callee's forward again.
  const bool recompute = recomputes(f.ops[opIndex]);
  if (f.ops[opIndex].callees.size() == 1 && !recompute) {
    const std::string name = f.ops[opIndex].callees[0];
    const SplitVjp split = splitVjp(m, name);
    const ir::Function& fwd = *m->lookup(split.fwd);
    ir::Op& live = f.ops[opIndex]; // (splitting added functions, not ops of f)
    const std::size_t residuals = fwd.outputs.size() - live.results.size();
    live.callees = {split.fwd, split.bwd};
    live.attrs.set("residuals", static_cast<int64_t>(residuals));
    for (std::size_t k = live.results.size(); k < fwd.outputs.size(); ++k)
      live.results.push_back(f.newValue(fwd.type(fwd.outputs[k])));
  }
  const ir::Op site = f.ops[opIndex]; // a copy: building calls below appends to f.ops
  const std::size_t nR = site.attrs.has("residuals") ? static_cast<std::size_t>(site.attrs.integer("residuals")) : 0;
  const std::size_t nY = site.results.size() - nR;
  const ir::Function& fwd = *m->lookup(site.callees[0]);
  const bool throughResiduals = recompute ||
      std::any_of(cts.begin() + static_cast<std::ptrdiff_t>(std::min(nY, cts.size())), cts.end(), [](const auto& c) { return c.has_value(); });
  std::vector<ir::ValueId> args;
  std::string callee;
  std::size_t first = 0; // where the cotangents start among the call's results
  if (!throughResiduals) {
    callee = site.callees[1];
    for (std::size_t k = nY; k < site.results.size(); ++k) args.push_back(site.results[k]);
  } else {
    callee = combinedVjp(m, site.callees[0]);
    for (const Tensor& x : xs) args.push_back(x.id());
    first = fwd.outputs.size(); // results are (y..., residuals..., dx...)
  }
  const std::size_t withCotangents = throughResiduals ? site.results.size() : nY;
  for (std::size_t k = 0; k < withCotangents; ++k)
    if (is_floating(fwd.type(fwd.outputs[k]).dtype))
      args.push_back(k < cts.size() && cts[k] ? cts[k]->id() : zeros_like(detail::wrap(s, site.results[k])).id());
  auto res = s.builder.create(ir::OpKind::Call, args, {}, {callee}, site.loc);
  std::vector<std::optional<Tensor>> dxs;
  std::size_t k = first;
  for (const Tensor& x : xs) {
    if (is_floating(x.dtype())) dxs.push_back(detail::wrap(s, res.at(k++)));
    else dxs.push_back(std::nullopt);
  }
  return dxs;
}

std::vector<std::optional<Tensor>> applyVjpRule(std::size_t opIndex, const std::vector<std::optional<Tensor>>& cts,
                                                const std::vector<char>& wanted) {
  detail::TraceState* sp = detail::currentTrace();
  ADJIT_ASSERT(sp, "applyVjpRule() outside of a trace");
  detail::TraceState& s = *sp;
  ir::Function& f = *s.fn;
  const ir::Op op = f.ops[opIndex]; // a copy: the rule appends to f.ops
  const ir::OpInfo& info = ir::info(op.kind);
  if (!autodiff::rules(op.kind).vjp)
    throw Error(fmt::format("No gradient defined for operation '%{}' (op type: {})", op.results.at(0), info.name), op.loc);
  LocScope loc(s, op.loc);
  std::vector<std::optional<Tensor>> g(op.operands.size());
  VjpCtx ctx{
      op,
      [&](ir::ValueId v) { return detail::wrap(s, v); },
      [&](ir::ValueId v) -> std::optional<Tensor> {
        for (std::size_t k = 0; k < op.results.size() && k < cts.size(); ++k)
          if (op.results[k] == v) return cts[k];
        return std::nullopt;
      },
      [&](std::size_t k) { return k < wanted.size() && wanted[k]; },
      [&](std::size_t k, const Tensor& t) {
        ADJIT_ASSERT(t.type() == f.type(op.operands.at(k)),
                     fmt::format("VJP of {} gave a cotangent of type {} for operand {} of type {}", info.name,
                                 t.type().str(), k, f.type(op.operands.at(k)).str()));
        g[k] = g[k] ? add(*g[k], t) : t;
      },
      [&, opIndex](const std::vector<Tensor>& xs, const std::vector<std::optional<Tensor>>& c) {
        return callVjp(s, opIndex, xs, c);
      },
      [opIndex](const std::vector<std::optional<Tensor>>& c) { return customVjp(opIndex, c); },
      opIndex,
  };
  autodiff::rules(op.kind).vjp(ctx);
  return g;
}

/// Value numbering of the differentiated ops: for each value of [r.begin,
/// r.end) computed by an op identical to an earlier one (same kind and
/// attributes, operands identical in turn; a pure op without callees, one
/// result on the differentiable path), that earlier value; every other value
/// maps to itself. A trace repeats such ops wherever a program re-slices its
/// parameters at every step (an unrolled LSTM's gates: 32,000 slices and
/// reshapes of 16 distinct ones). Each use of a repeat then adds its
/// cotangent into the first value's, whose rule runs once, instead of each
/// repeat's rule padding its cotangent to the parameter's shape. VJP rules
/// are linear in the cotangent, so the sum is the same. Not merged: sources
/// (each keeps the gradient of its own uses: tf.gradients gives d(a + b)/da
/// = 1 for b computed as a is), and ops with callees (a custom gradient's
/// rule need not be linear in its cotangent). Stopped values are not on the
/// path (dep).
static std::vector<ir::ValueId> identicalValues(const ir::Function& f, const Request& r, const std::vector<char>& dep) {
  std::vector<ir::ValueId> rep(f.types.size());
  for (std::size_t v = 0; v < rep.size(); ++v) rep[v] = static_cast<ir::ValueId>(v);
  std::vector<char> source(f.types.size());
  for (ir::ValueId v : r.sources) source[v] = 1;
  ADJIT_ASSERT(r.end < UINT32_MAX, "reverse: too many ops");
  ir::IdentityTable table(r.end - r.begin);
  for (std::size_t i = r.begin; i < r.end; ++i) {
    const ir::Op& op = f.ops[i];
    if (op.results.size() != 1) continue;
    const ir::ValueId v = op.results[0];
    const ir::OpInfo& info = ir::info(op.kind);
    if (!dep[v] || source[v] || !info.has(ir::kPure) || info.has(ir::kHasCallee)) continue;
    auto added = [&](uint32_t k) -> const ir::Op& { return f.ops[k]; };
    if (auto first = table.findOrAdd(op, static_cast<uint32_t>(i), rep, added)) rep[v] = f.ops[*first].results[0];
  }
  return rep;
}

std::vector<std::optional<Tensor>> reverse(const Request& r) {
  detail::TraceState* sp = detail::currentTrace();
  ADJIT_ASSERT(sp, "reverse() outside of a trace");
  detail::TraceState& s = *sp;
  ir::Function& f = *s.fn;
  const std::size_t n = f.types.size();
  auto floating = [&](ir::ValueId v) { return is_floating(f.type(v).dtype); };

  // Which values depend on a source (forward), and which feed a target (backward).
  // A stopped value is a constant for what it is computed from, but a source
  // that is also stopped still gets its own cotangent (tf.gradients:
  // stop_gradients=[a, b] with b = 2a gives d(a+b)/da = d(a+b)/db = 1).
  std::vector<char> stopped(n), dep(n), needed(n);
  for (ir::ValueId v : r.stops) stopped[v] = 1;
  for (ir::ValueId v : r.sources)
    if (floating(v)) dep[v] = 1;
  for (std::size_t i = r.begin; i < r.end; ++i) {
    const ir::Op& op = f.ops[i];
    if (autodiff::rules(op.kind).has(autodiff::kNonDifferentiable)) continue;
    bool any = std::any_of(op.operands.begin(), op.operands.end(), [&](ir::ValueId o) { return dep[o] != 0; });
    if (any)
      for (ir::ValueId res : op.results)
        if (floating(res) && !stopped[res]) dep[res] = 1;
  }
  const std::vector<ir::ValueId> rep = identicalValues(f, r, dep);
  // A repeat's uses count as uses of the value it repeats (their cotangents
  // go there): its users come after it, so this sweep has seen them.
  auto repeats = [&](const ir::Op& op) { return op.results.size() == 1 && rep[op.results[0]] != op.results[0]; };
  for (ir::ValueId t : r.targets) needed[t] = 1;
  std::size_t rules = 0; // ops whose VJP rule may run
  for (std::size_t i = r.end; i-- > r.begin;) {
    const ir::Op& op = f.ops[i];
    if (repeats(op)) {
      if (needed[op.results[0]]) needed[rep[op.results[0]]] = 1;
      continue;
    }
    bool any = std::any_of(op.results.begin(), op.results.end(),
                           [&](ir::ValueId v) { return needed[v] && dep[v] && !stopped[v]; });
    if (any) {
      ++rules;
      for (ir::ValueId o : op.operands)
        if (dep[o]) needed[o] = 1;
    }
  }
  // Room for what the rules append (a few ops each), reserved once: growing
  // by doubling copied the op list and faulted in fresh pages at every step
  // (a tenth of the sweep on a 200,000-op gradient). Pages past what is used
  // are never touched.
  constexpr std::size_t kOpsPerRule = 6;
  f.ops.reserve(f.ops.size() + kOpsPerRule * rules);
  f.types.reserve(f.types.size() + kOpsPerRule * rules);

  // Cotangents by value (the reverse pass appends values past these; it
  // never asks for theirs).
  std::vector<std::optional<Tensor>> ct(f.types.size());
  auto accumulate = [&](ir::ValueId v, const Tensor& t) {
    std::optional<Tensor>& c = ct[static_cast<std::size_t>(rep[v])];
    c = c ? add(*c, t) : t;
  };
  // The ops reverse mode adds itself (a target's seed of ones, the sums of a
  // value's cotangents) take the location of the op they serve: the target's,
  // the use's whose rule gave the cotangent. IR dumps then point at the
  // user's lines, not at this file.
  std::unordered_map<ir::ValueId, Location> targetLoc;
  for (ir::ValueId t : r.targets) targetLoc.emplace(t, Location{});
  for (std::size_t i = r.begin; i < r.end && !targetLoc.empty(); ++i)
    for (ir::ValueId v : f.ops[i].results)
      if (auto it = targetLoc.find(v); it != targetLoc.end()) it->second = f.ops[i].loc;
  for (std::size_t k = 0; k < r.targets.size(); ++k) {
    ir::ValueId t = r.targets[k];
    if (!dep[t]) continue;
    LocScope at(s, targetLoc[t]);
    Tensor y = detail::wrap(s, t);
    accumulate(t, k < r.seeds.size() && r.seeds[k] ? *r.seeds[k] : ones_like(y));
  }

  for (std::size_t i = r.end; i-- > r.begin;) {
    // Read in place until the rule runs: it appends to f.ops, and copying
    // every op (most are dead or constant) cost more than the rules.
    const ir::Op& op = f.ops[i];
    if (repeats(op)) continue; // its cotangent is the first value's
    bool live = std::any_of(op.results.begin(), op.results.end(),
                            [&](ir::ValueId v) { return dep[v] && needed[v] && !stopped[v] && ct[static_cast<std::size_t>(v)]; });
    bool wantsAny = std::any_of(op.operands.begin(), op.operands.end(), [&](ir::ValueId o) { return dep[o] && needed[o]; });
    if (!live || !wantsAny || autodiff::rules(op.kind).has(autodiff::kNonDifferentiable)) continue;
    std::vector<std::optional<Tensor>> cts;
    for (ir::ValueId v : op.results) // a stopped value's cotangent does not flow through it
      cts.push_back(stopped[v] ? std::nullopt : ct[static_cast<std::size_t>(v)]);
    std::vector<char> wanted;
    for (ir::ValueId o : op.operands) wanted.push_back(dep[o] && needed[o]);
    const ir::ValueList operands = op.operands;
    const Location loc = op.loc;
    const std::vector<std::optional<Tensor>> g = applyVjpRule(i, cts, wanted);
    LocScope at(s, loc);
    for (std::size_t k = 0; k < g.size(); ++k)
      if (g[k]) accumulate(operands[k], *g[k]);
  }

  std::vector<std::optional<Tensor>> out;
  for (ir::ValueId v : r.sources) out.push_back(dep[v] ? ct[static_cast<std::size_t>(v)] : std::nullopt);
  return out;
}

/// The function generated as `kind` of @name earlier, if it is still there.
static const ir::Function* derivedFunction(const ir::Module& m, const std::string& kind, const std::string& name,
                                           const std::string& variant = {}) {
  auto it = m.derived.find(kind + variant + " @" + name);
  return it == m.derived.end() ? nullptr : m.lookup(it->second);
}

std::string derive(const std::shared_ptr<ir::Module>& m, const std::string& kind, const std::string& name,
                   const std::function<std::vector<Tensor>(detail::TraceScope&, const ir::Function&)>& body,
                   const std::string& variant) {
  if (const ir::Function* done = derivedFunction(*m, kind, name, variant)) return done->name;
  const ir::Function* g = m->lookup(name);
  if (!g) throw Error(kind + ": no function named @" + name + " in the module");
  std::string made;
  try {
    detail::TraceScope scope(m, name + "." + kind); // @name.kind, or @name.kind.1 if that is taken
    made = scope.state().fn->name;
    scope.finish(body(scope, *g));
  } catch (...) {
    // (No derivative rule for an op of @name, say.) Leave no half-built function behind.
    std::erase_if(m->functions, [&](const auto& f) { return f->name == made; });
    throw;
  }
  m->derived[kind + variant + " @" + name] = made;
  return made;
}

std::string combinedVjp(const std::shared_ptr<ir::Module>& m, const std::string& name) {
  return derive(m, "vjp", name, [](detail::TraceScope& scope, const ir::Function& g) {
    Differentiated d = differentiateInto(scope, g, /*withDy=*/true);
    std::vector<Tensor> outs = d.ys;
    outs.insert(outs.end(), d.dxs.begin(), d.dxs.end());
    return outs;
  });
}

/// " wrt 1 4 ...": the variant of a derivative taken with respect to `wrt` only.
static std::string wrtVariant(const std::vector<std::size_t>& wrt) {
  std::string v = " wrt";
  for (std::size_t i : wrt) v += " " + std::to_string(i);
  return v;
}

/// combinedVjp with cotangents of the parameters `wrt` only, in that order.
static std::string combinedVjp(const std::shared_ptr<ir::Module>& m, const std::string& name, const std::vector<std::size_t>& wrt) {
  return derive(m, "vjp", name, [&](detail::TraceScope& scope, const ir::Function& g) {
    Differentiated d = differentiateInto(scope, g, /*withDy=*/true, &wrt);
    std::vector<Tensor> outs = d.ys;
    outs.insert(outs.end(), d.dxs.begin(), d.dxs.end());
    return outs;
  }, wrtVariant(wrt));
}

std::string gradFunction(const std::shared_ptr<ir::Module>& m, const std::string& name,
                         const std::optional<std::vector<std::size_t>>& argnums) {
  const ir::Function* g = m->lookup(name);
  if (!g) throw Error("grad: no function named @" + name + " in the module");
  if (g->outputs.size() != 1 || g->type(g->outputs[0]).rank() != 0 || !is_floating(g->type(g->outputs[0]).dtype))
    throw Error("grad: @" + name + " must return one floating-point scalar, but returns " + g->signature());
  std::string variant;
  if (argnums)
    for (std::size_t i : *argnums) {
      ADJIT_ASSERT(i < g->params.size() && is_floating(g->type(g->params[i]).dtype), "gradFunction: argnums checked by the caller");
      variant += " " + std::to_string(i);
    }
  return derive(m, "grad", name, [&](detail::TraceScope& scope, const ir::Function& f) {
    return differentiateInto(scope, f, /*withDy=*/false, argnums ? &*argnums : nullptr).dxs;
  }, variant.empty() ? variant : " argnums" + variant);
}

std::vector<int64_t> residualParams(const ir::Function& fwd, std::size_t nY) {
  std::vector<int64_t> r;
  for (std::size_t i = nY; i < fwd.outputs.size(); ++i) {
    auto p = std::find(fwd.params.begin(), fwd.params.end(), fwd.outputs[i]);
    r.push_back(p == fwd.params.end() ? -1 : p - fwd.params.begin());
  }
  return r;
}

/// Per residual of a split forward, whether it is one of its parameters.
static std::vector<bool> residualsAreParams(const ir::Function& fwd, std::size_t nY) {
  std::vector<bool> isParam;
  for (int64_t p : residualParams(fwd, nY)) isParam.push_back(p >= 0);
  return isParam;
}

/// Splits function `vname` (a derivative of @name) in two: ops with `late[i]`
/// set go to `<name>.<lateKind>` (residuals..., the params of `vname` past
/// nX) -> (the outputs past nY), the others to `<name>.<earlyKind>` (the first
/// nX params) -> (the first nY outputs, residuals...). Residuals are the early
/// values (parameters included) that late ops or late outputs read, in value
/// order. The first nY outputs must not be late.
static SplitVjp splitInTwo(const std::shared_ptr<ir::Module>& m, const std::string& name, const std::string& vname,
                           std::size_t nX, std::size_t nY, const std::vector<char>& late, const std::string& earlyKind,
                           const std::string& lateKind, const std::string& variant = {}) {
  const ir::Function& v = *m->lookup(vname);
  // Pure ops that read no parameter, even through other ops (constants and
  // what is computed from them alone), are made again in the late half
  // rather than kept: no residual memory for them.
  std::vector<char> both(v.ops.size()), constant(v.types.size());
  for (std::size_t i = 0; i < v.ops.size(); ++i) {
    const ir::Op& op = v.ops[i];
    both[i] = !late[i] && ir::info(op.kind).has(ir::kPure) &&
              std::all_of(op.operands.begin(), op.operands.end(), [&](ir::ValueId o) { return constant[o]; });
    for (ir::ValueId r : op.results) constant[r] = both[i];
  }
  std::vector<char> early(v.types.size());
  for (std::size_t i = 0; i < nX; ++i) early[v.params[i]] = 1;
  for (std::size_t i = 0; i < v.ops.size(); ++i)
    if (!late[i] && !both[i])
      for (ir::ValueId r : v.ops[i].results) early[r] = 1;
  std::set<ir::ValueId> residualSet;
  for (std::size_t i = 0; i < v.ops.size(); ++i)
    if (late[i])
      for (ir::ValueId o : v.ops[i].operands)
        if (early[o]) residualSet.insert(o);
  for (std::size_t i = nY; i < v.outputs.size(); ++i)
    if (early[v.outputs[i]]) residualSet.insert(v.outputs[i]);
  const std::vector<ir::ValueId> residuals(residualSet.begin(), residualSet.end());
  // (Functions are held by pointer: adding the halves leaves `v` in place.)
  auto addParam = [&](ir::Function& dst, std::unordered_map<ir::ValueId, ir::ValueId>& map, ir::ValueId param) {
    map[param] = dst.newValue(v.type(param));
    dst.params.push_back(map[param]);
  };
  auto copyOps = [&](ir::Function& dst, std::unordered_map<ir::ValueId, ir::ValueId>& map, bool wantLate) {
    for (std::size_t i = 0; i < v.ops.size(); ++i) {
      if (static_cast<bool>(late[i]) != wantLate && !both[i]) continue;
      ir::Op op = v.ops[i];
      for (ir::ValueId& o : op.operands) o = map.at(o);
      for (ir::ValueId& r : op.results) {
        const ir::ValueId nr = dst.newValue(v.type(r));
        map[r] = nr;
        r = nr;
      }
      dst.ops.push_back(std::move(op));
    }
  };
  {
    ir::Function& e = m->add(name + "." + earlyKind);
    m->derived[earlyKind + variant + " @" + name] = e.name;
    std::unordered_map<ir::ValueId, ir::ValueId> map;
    for (std::size_t i = 0; i < nX; ++i) addParam(e, map, v.params[i]);
    copyOps(e, map, false);
    for (std::size_t i = 0; i < nY; ++i) e.outputs.push_back(map.at(v.outputs[i]));
    for (ir::ValueId r : residuals) e.outputs.push_back(map.at(r));
  }
  {
    ir::Function& l = m->add(name + "." + lateKind);
    m->derived[lateKind + variant + " @" + name] = l.name;
    std::unordered_map<ir::ValueId, ir::ValueId> map;
    for (ir::ValueId r : residuals) addParam(l, map, r);
    for (std::size_t i = nX; i < v.params.size(); ++i) addParam(l, map, v.params[i]);
    copyOps(l, map, true);
    for (std::size_t i = nY; i < v.outputs.size(); ++i) l.outputs.push_back(map.at(v.outputs[i]));
  }
  const ir::Function& e = *derivedFunction(*m, earlyKind, name, variant);
  return {e.name, derivedFunction(*m, lateKind, name, variant)->name, residualsAreParams(e, nY)};
}

/// The halves splitInTwo made of @name earlier, if both are still there.
static std::optional<SplitVjp> splitBefore(const ir::Module& m, const std::string& name, const std::string& earlyKind,
                                           const std::string& lateKind, const std::string& variant = {}) {
  const ir::Function* early = derivedFunction(m, earlyKind, name, variant);
  const ir::Function* late = derivedFunction(m, lateKind, name, variant);
  if (!early || !late) return std::nullopt;
  return SplitVjp{early->name, late->name, residualsAreParams(*early, m.lookup(name)->outputs.size())};
}

SplitVjp splitVjp(const std::shared_ptr<ir::Module>& m, const std::string& name) {
  if (auto done = splitBefore(*m, name, "fwd", "bwd")) return *done;
  const std::string vname = combinedVjp(m, name);
  const ir::Function& g = *m->lookup(name);
  const ir::Function& v = *m->lookup(vname);
  // The combined VJP inlines @name's ops first: those are the forward.
  std::vector<char> late(v.ops.size(), 1);
  std::fill(late.begin(), late.begin() + static_cast<std::ptrdiff_t>(g.ops.size()), 0);
  return splitInTwo(m, name, vname, g.params.size(), g.outputs.size(), late, "fwd", "bwd");
}

SplitVjp splitVjp(const std::shared_ptr<ir::Module>& m, const std::string& name, const std::vector<std::size_t>& wrt) {
  const std::string variant = wrtVariant(wrt);
  if (auto done = splitBefore(*m, name, "fwd", "bwd", variant)) return *done;
  const std::string vname = combinedVjp(m, name, wrt);
  const ir::Function& g = *m->lookup(name);
  const ir::Function& v = *m->lookup(vname);
  std::vector<char> late(v.ops.size(), 1);
  std::fill(late.begin(), late.begin() + static_cast<std::ptrdiff_t>(g.ops.size()), 0);
  return splitInTwo(m, name, vname, g.params.size(), g.outputs.size(), late, "fwd", "bwd", variant);
}

SplitVjp splitJvp(const std::shared_ptr<ir::Module>& m, const std::string& name) {
  if (auto done = splitBefore(*m, name, "primal", "linear")) return *done;
  const std::string jname = jvpFunction(m, name);
  const ir::Function& g = *m->lookup(name);
  const ir::Function& j = *m->lookup(jname);
  // Late: the ops that read a tangent, directly or through other ops.
  std::vector<char> tangent(j.types.size()), late(j.ops.size());
  for (std::size_t i = g.params.size(); i < j.params.size(); ++i) tangent[j.params[i]] = 1;
  for (std::size_t i = 0; i < j.ops.size(); ++i) {
    for (ir::ValueId o : j.ops[i].operands) late[i] = late[i] || tangent[o];
    for (ir::ValueId r : j.ops[i].results) tangent[r] = late[i];
  }
  for (std::size_t i = 0; i < g.outputs.size(); ++i)
    ADJIT_ASSERT(!tangent[j.outputs[i]], "linearize: a primal output depends on a tangent");
  return splitInTwo(m, name, jname, g.params.size(), g.outputs.size(), late, "primal", "linear");
}

} // namespace adjit::autodiff
