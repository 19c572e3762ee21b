// autodiff/ControlFlow.cpp — VJP rules of switch, scan and while (see the
// header); their JVPs are in ControlFlowJvp.cpp.
//
// Semantics follow TensorFlow's gradients of conditionals and loops: only
// floating results carry cotangents; every floating operand of a branch or a
// loop gets a cotangent, zeros where the taken branch or the body does not
// read it (never "no gradient"); integer and boolean operands get none.
#include "autodiff/ControlFlow.h"
#include "autodiff/ControlFlowTrace.h"

#include "autodiff/Reverse.h"
#include "autodiff/Revolve.h"
#include "support/Log.h"
#include "trace/Tracer.h"

#include <adjit/control_flow.h>

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace adjit::autodiff {

namespace controlflow {

using detail::TraceState;

detail::TraceState& current() { return *detail::currentTrace(); }

/// Creates op `kind` in the current trace; returns its results as Tensors.
std::vector<Tensor> create(ir::OpKind kind, const std::vector<Tensor>& operands, ir::Attrs attrs, std::vector<std::string> callees,
                           const Location& loc) {
  TraceState& s = current();
  std::vector<ir::ValueId> ids;
  for (const Tensor& t : operands) ids.push_back(detail::valueOf(t, "control flow", loc));
  std::vector<Tensor> out;
  for (ir::ValueId v : s.builder.create(kind, ids, std::move(attrs), std::move(callees), loc)) out.push_back(detail::wrap(s, v));
  return out;
}

const ir::Function& fn(const std::string& name) { return *current().module->lookup(name); }

std::string derived(const std::string& key) {
  const auto& d = current().module->derived;
  auto it = d.find(key);
  return it == d.end() ? std::string() : it->second;
}

void addGrads(const VjpCtx& c, const std::vector<std::optional<Tensor>>& dxs) {
  for (std::size_t i = 0; i < dxs.size(); ++i)
    if (dxs[i]) c.grad(i, [&] { return *dxs[i]; });
}

std::vector<std::optional<Tensor>> resultCts(const VjpCtx& c) {
  std::vector<std::optional<Tensor>> cts;
  for (std::size_t i = 0; i < c.op.results.size(); ++i) cts.push_back(c.ct(i));
  return cts;
}

} // namespace controlflow

using namespace controlflow;

namespace {

using detail::TraceState;


/// A new function of the module traced from `body` on parameters of `types`;
/// its ops carry `loc`. Returns its name.
std::string traceFunction(const std::string& base, const std::vector<Type>& types, const Location& loc,
                          const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& body) {
  detail::TraceScope scope(current().module, base);
  scope.state().locOverride = loc;
  std::vector<Tensor> ps;
  for (const Type& t : types) ps.push_back(scope.param(t));
  scope.finish(body(ps));
  return scope.state().fn->name;
}


std::vector<Tensor> call(const std::string& fn, const std::vector<Tensor>& args, const Location& loc) {
  return create(ir::OpKind::Call, args, {}, {fn}, loc);
}




/// How many trailing results of a switch or scan only the reverse pass reads.
std::size_t residualCount(const ir::Op& op) {
  return op.attrs.has("residuals") ? static_cast<std::size_t>(op.attrs.integer("residuals")) : 0;
}

/// Elements [from, from + n) of a vector or an op's value list, as a vector.
template <class List> auto slice(const List& v, std::size_t from, std::size_t n) {
  return std::vector<typename List::value_type>(v.begin() + static_cast<std::ptrdiff_t>(from),
                                                v.begin() + static_cast<std::ptrdiff_t>(from + n));
}

// ---- scan ----------------------------------------------------------------------

/// The floating entries of `types` among [from, to), as indices from `from`.
std::vector<std::size_t> floatingAmong(const std::vector<Type>& types, std::size_t from, std::size_t to) {
  std::vector<std::size_t> out;
  for (std::size_t i = from; i < to; ++i)
    if (floating(types[i])) out.push_back(i - from);
  return out;
}

/// `len` values of type t stacked along a new leading axis.
Type stacked(int64_t len, const Type& t) {
  Shape sh{len};
  sh.insert(sh.end(), t.shape.begin(), t.shape.end());
  return Type{t.dtype, sh};
}

/// A scan op's layout: consts, carries and scanned operands, trip count, direction.
struct ScanSite {
  ir::Op op; ///< a copy: rebinding the live op must not change it
  std::size_t k, c, x;
  int64_t n;
  bool reverse;
};
ScanSite scanSite(std::size_t opIndex) {
  const ir::Op& op = current().fn->ops[opIndex];
  const auto k = static_cast<std::size_t>(op.attrs.integer("consts")), c = static_cast<std::size_t>(op.attrs.integer("carries"));
  return {op, k, c, op.operands.size() - k - c, op.attrs.integer("length"), op.attrs.has("reverse") && op.attrs.boolean("reverse")};
}

/// The split of a scan body @B (consts K, carries C):
///   fwd (const..., carry..., x...) -> (carry'..., y..., stacked...)
///   bwd (const..., dcarry..., dconst..., x..., stacked..., dy...) -> (dcarry_in..., dconst'..., dx...)
/// Residuals that are consts or x's are read from the loop's operands, not
/// stacked; dcarry/dconst/dx are for the floating carries, consts and x's;
/// dconst accumulates the consts' cotangents over the steps; dy is for each
/// floating y of @B.
struct ScanSplit {
  std::string fwd, bwd;
  std::vector<Type> stacked; ///< per-step types of the stacked residuals
};

/// Which of a scan's operands want a cotangent: all, or those the reverse
/// driver asks for. A const or slice nobody asks for gets no accumulator in
/// the backward loop: its cotangent is not computed at all (a constant
/// exponent's `dy * log(x) * y` would be NaN for x < 0, and a second
/// derivative multiplying it by zero would be NaN too). Carries always get
/// one: the cotangent of each step's carry feeds the step before.
using Wanted = std::vector<char>;
bool wants(const Wanted& w, std::size_t i) { return w.empty() || w[i]; }
std::string maskKey(const Wanted& w) {
  std::string key;
  for (char c : w) key += c ? '1' : '0';
  return key;
}

/// The ops of function `f` traced again into the current trace on `args`
/// (a step's split halves inlined into the loop's body: what the loop does
/// not read of them is then dead code, and their ops fuse with the loop's).
std::vector<Tensor> inlined(const std::string& f, const std::vector<Tensor>& args, const Location& loc) {
  TraceState& s = current();
  std::vector<ir::ValueId> ids;
  for (const Tensor& t : args) ids.push_back(detail::valueOf(t, "scan", loc));
  std::vector<Tensor> out;
  for (ir::ValueId v : inlineFunction(s.builder, fn(f), ids)) out.push_back(detail::wrap(s, v));
  return out;
}

ScanSplit scanSplit(const std::string& body, std::size_t k, std::size_t c, const Location& loc, const Wanted& wanted = {}) {
  const std::string key = fmt::format("@{} {} {} {}", body, k, c, maskKey(wanted));
  if (std::string f = derived("scanfwd " + key); !f.empty()) {
    const ir::Function& F = fn(f);
    ScanSplit s{f, derived("scanbwd " + key), {}};
    for (std::size_t i = fn(body).outputs.size(); i < F.outputs.size(); ++i) s.stacked.push_back(F.type(F.outputs[i]));
    return s;
  }
  const ir::Function& B = fn(body);
  const std::vector<Type> params = B.paramTypes(), outs = B.resultTypes();
  const std::size_t x = params.size() - k - c, nOut = outs.size();
  // floating consts, carries, xs and ys (fy counts from 0, not from the carries)
  const std::vector<std::size_t> fk = floatingAmong(params, 0, k), fc = floatingAmong(params, k, k + c),
                                 fx = floatingAmong(params, k + c, k + c + x), fy = floatingAmong(outs, c, nOut);
  // The floating consts whose cotangents are accumulated, as indices into fk,
  // and the floating xs whose cotangents are stacked, as indices into fx.
  std::vector<std::size_t> wk, wx;
  for (std::size_t i = 0; i < fk.size(); ++i)
    if (wants(wanted, fk[i])) wk.push_back(i);
  for (std::size_t i = 0; i < fx.size(); ++i)
    if (wants(wanted, k + c + fx[i])) wx.push_back(i);
  // With a mask, the step's VJP is taken with respect to what the loop wants
  // only (in parameter order: wanted consts, carries, wanted xs), so residuals
  // only an unwanted cotangent reads (a constant step size's) are not stacked.
  // Without one (while_vjp, binomial checkpointing), the step's shared split:
  // a cotangent per floating parameter.
  std::vector<std::size_t> wrt;
  for (std::size_t i : wk) wrt.push_back(fk[i]);
  for (std::size_t i : fc) wrt.push_back(k + i);
  for (std::size_t i : wx) wrt.push_back(k + c + fx[i]);
  const bool masked = !wanted.empty();
  const SplitVjp split = masked ? splitVjp(current().module, body, wrt) : splitVjp(current().module, body);
  // Where the bwd's cotangents of the wanted consts, the carries and the wanted xs start.
  const std::size_t dk = 0, dc = masked ? wk.size() : fk.size(), dxAt = dc + fc.size();
  const std::vector<int64_t> rp = residualParams(fn(split.fwd), nOut);
  std::vector<std::size_t> stackedIdx; // residuals computed by the step, or carries
  ScanSplit s;
  for (std::size_t r = 0; r < rp.size(); ++r)
    if (rp[r] < 0 || (static_cast<std::size_t>(rp[r]) >= k && static_cast<std::size_t>(rp[r]) < k + c)) {
      stackedIdx.push_back(r);
      s.stacked.push_back(fn(split.fwd).type(fn(split.fwd).outputs[nOut + r]));
    }
  s.fwd = traceFunction(body + ".scan_fwd", params, loc, [&](const std::vector<Tensor>& ps) {
    std::vector<Tensor> o = inlined(split.fwd, ps, loc);
    std::vector<Tensor> r = slice(o, 0, nOut);
    for (std::size_t i : stackedIdx) r.push_back(o[nOut + i]);
    return r;
  });
  std::vector<Type> types = slice(params, 0, k);
  for (std::size_t i : fc) types.push_back(params[k + i]);
  for (std::size_t i : wk) types.push_back(params[fk[i]]);
  for (std::size_t i = 0; i < x; ++i) types.push_back(params[k + c + i]);
  types.insert(types.end(), s.stacked.begin(), s.stacked.end());
  for (std::size_t i : fy) types.push_back(outs[c + i]);
  s.bwd = traceFunction(body + ".scan_bwd", types, loc, [&](const std::vector<Tensor>& ps) {
    std::size_t at = 0;
    auto take = [&](std::size_t n) {
      std::vector<Tensor> v = slice(ps, at, n);
      at += n;
      return v;
    };
    const std::vector<Tensor> consts = take(k), dcarry = take(fc.size()), dconst = take(wk.size()), xs = take(x),
                              stacked = take(s.stacked.size()), dys = take(fy.size());
    std::vector<Tensor> args;
    std::size_t st = 0;
    for (int64_t p : rp) {
      if (p < 0 || (static_cast<std::size_t>(p) >= k && static_cast<std::size_t>(p) < k + c)) args.push_back(stacked[st++]);
      else if (static_cast<std::size_t>(p) < k) args.push_back(consts[static_cast<std::size_t>(p)]);
      else args.push_back(xs[static_cast<std::size_t>(p) - k - c]);
    }
    args.insert(args.end(), dcarry.begin(), dcarry.end()); // @B's floating outputs: carries, then y's
    args.insert(args.end(), dys.begin(), dys.end());
    std::vector<Tensor> dx = inlined(split.bwd, args, loc); // see dk, dc, dxAt
    std::vector<Tensor> r = slice(dx, dc, fc.size());
    for (std::size_t j = 0; j < wk.size(); ++j) r.push_back(add(dconst[j], dx[dk + (masked ? j : wk[j])]));
    for (std::size_t j = 0; j < wx.size(); ++j) r.push_back(dx[dxAt + (masked ? j : wx[j])]);
    return r;
  });
  current().module->derived["scanfwd " + key] = s.fwd;
  current().module->derived["scanbwd " + key] = s.bwd;
  current().module->derived["scanbase @" + s.fwd] = body;
  return s;
}

/// Operand cotangents of the scan op `opIndex` of the current trace.
std::vector<std::optional<Tensor>> scanAt(std::size_t opIndex, const std::vector<std::optional<Tensor>>& cts,
                                          const Wanted& wanted = {}) {
  TraceState& s = current();
  const auto [site, k, c, x, n, reverse] = scanSite(opIndex);
  const Location& loc = site.loc;
  const std::size_t r0 = residualCount(site);
  const std::size_t nRes = site.results.size();
  const bool residualCts = std::any_of(cts.begin() + static_cast<std::ptrdiff_t>(nRes - r0), cts.end(), [](const auto& t) { return t.has_value(); });
  const std::string base = r0 ? derived("scanbase @" + site.callees[0]) : std::string();
  std::string body;      // the function the backward differentiates
  std::size_t withDy;    // results of the op that are its outputs (cotangents flow from them)
  std::vector<ir::ValueId> stacks;
  ScanSplit split;
  if (!base.empty() && !residualCts) { // differentiated before: reuse its residuals
    body = base;
    split = scanSplit(body, k, c, loc, wanted);
    withDy = nRes - r0;
    stacks = slice(site.results, withDy, r0);
  } else { // rebind to the forward that also stacks its residuals
    body = site.callees[0];
    split = scanSplit(body, k, c, loc, wanted);
    withDy = nRes;
    ir::Op& live = s.fn->ops[opIndex];
    live.callees = {split.fwd};
    live.attrs.set("residuals", static_cast<int64_t>(split.stacked.size()));
    for (const Type& t : split.stacked) {
      ir::ValueId v = s.fn->newValue(stacked(n, t));
      live.results.push_back(v);
      stacks.push_back(v);
    }
  }
  auto T = [&](ir::ValueId v) { return detail::wrap(s, v); };
  auto ct = [&](std::size_t i) { return i < cts.size() && cts[i] ? *cts[i] : zeros_like(T(site.results[i])); };
  std::vector<Tensor> operands;
  for (std::size_t i = 0; i < k; ++i) operands.push_back(T(site.operands[i]));
  std::size_t carries = 0;
  for (std::size_t i = 0; i < c; ++i)
    if (floating(s.fn->type(site.operands[k + i]))) operands.push_back(ct(i)), ++carries;
  for (std::size_t i = 0; i < k; ++i)
    if (floating(s.fn->type(site.operands[i])) && wants(wanted, i)) operands.push_back(zeros_like(T(site.operands[i]))), ++carries;
  for (std::size_t i = 0; i < x; ++i) operands.push_back(T(site.operands[k + c + i]));
  for (ir::ValueId v : stacks) operands.push_back(T(v));
  for (std::size_t i = c; i < withDy; ++i)
    if (floating(s.fn->type(site.results[i]))) operands.push_back(ct(i));
  ir::Attrs attrs;
  attrs.set("consts", static_cast<int64_t>(k));
  attrs.set("carries", static_cast<int64_t>(carries));
  attrs.set("length", n);
  attrs.set("reverse", !reverse);
  std::vector<Tensor> r = create(ir::OpKind::Scan, operands, std::move(attrs), {split.bwd}, loc);
  // r: cotangents of the floating carries' initial values, of the floating consts, then stacked ones of the floating xs
  std::vector<std::optional<Tensor>> out(site.operands.size());
  std::size_t at = 0;
  for (std::size_t i = 0; i < c; ++i)
    if (floating(s.fn->type(site.operands[k + i]))) out[k + i] = r[at++];
  for (std::size_t i = 0; i < k; ++i)
    if (floating(s.fn->type(site.operands[i])) && wants(wanted, i)) out[i] = r[at++];
  for (std::size_t i = 0; i < x; ++i)
    if (floating(s.fn->type(site.operands[k + c + i])) && wants(wanted, k + c + i)) out[k + c + i] = r[at++];
  return out;
}

/// Operand cotangents of the scan op `opIndex` with {snapshots = S}:
/// binomial checkpointing. The op is rebound in place to a call of a
/// function that runs the loop in segments and also returns the carries where
/// the revolve schedule's first sweep stores its snapshots (at most S - 1;
/// the initial carry is the S-th). The backward is one scan over the rest of
/// the schedule's actions (advance a step, store or restore a snapshot,
/// reverse a step) whose body switches on the action, carrying the recomputed
/// state, the snapshots, and the carries' and consts' cotangents. Each step's
/// x cotangent is the y of the action that reverses it, gathered into place.
std::vector<std::optional<Tensor>> binomialAt(std::size_t opIndex, const std::vector<std::optional<Tensor>>& cts) {
  TraceState& s = current();
  const auto [site, k, c, x, n, reverse] = scanSite(opIndex);
  const Location& loc = site.loc;
  const std::string body = site.callees[0];
  const std::vector<Type> params = fn(body).paramTypes(), outs = fn(body).resultTypes();
  const ScanSplit split = scanSplit(body, k, c, loc);
  const std::vector<std::size_t> fk = floatingAmong(params, 0, k), fc = floatingAmong(params, k, k + c),
                                 fx = floatingAmong(params, k + c, params.size()), fy = floatingAmong(outs, c, outs.size());
  if (n > std::numeric_limits<int32_t>::max())
    throw Error(fmt::format("scan: binomial checkpointing of {} steps: at most {} are supported", n, std::numeric_limits<int32_t>::max()), loc);
  const int64_t snaps = std::min(site.attrs.integer("snapshots"), n);
  if (constexpr int64_t kMaxActions = int64_t{1} << 26; revolve::cost(n, snaps) > kMaxActions - 3 * n)
    throw Error(fmt::format("scan: binomial checkpointing of {} steps with {} snapshots recomputes {} steps, more than the {} "
                            "a schedule may hold: give it more snapshots",
                            n, snaps, revolve::cost(n, snaps), kMaxActions - 3 * n),
                loc);
  const revolve::Schedule plan = revolve::schedule(n, snaps, /*forwardKeeps=*/true);
  if (logEnabled("compile"))
    logLine("compile", fmt::format("scan @{}: binomial({}) over {} steps keeps {} carries; the backward recomputes {} steps in {} actions",
                                   body, snaps, n, plan.kept.size() + 1, plan.advances, plan.kind.size()));
  const auto slot = [&](int64_t t) { return reverse ? n - 1 - t : t; }; // the slice step t reads
  auto concat = [](std::vector<Tensor> a, const std::vector<Tensor>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  auto T = [&](ir::ValueId v) { return detail::wrap(s, v); };

  // The forward: the loop in segments [0, kept[0]), [kept[0], kept[1]), ..., returning the kept carries too.
  std::vector<Tensor> keptCarries;
  if (!plan.kept.empty()) {
    std::vector<Type> types;
    for (ir::ValueId v : site.operands) types.push_back(s.fn->type(v));
    const std::string fwd = traceFunction(body + ".binomial_fwd", types, loc, [&](const std::vector<Tensor>& ps) {
      const std::vector<Tensor> consts = slice(ps, 0, k), xs = slice(ps, k + c, x);
      std::vector<Tensor> carry = slice(ps, k, c), kept;
      std::vector<std::vector<Tensor>> ys; // per segment, in step order
      std::vector<int64_t> bounds = plan.kept;
      bounds.push_back(n);
      int64_t from = 0;
      for (int64_t to : bounds) {
        if (from > 0) kept.insert(kept.end(), carry.begin(), carry.end());
        std::vector<Tensor> part;
        for (const Tensor& t : xs) part.push_back(detail::leadingRows(t, reverse ? n - to : from, reverse ? n - from : to));
        ir::Attrs attrs;
        attrs.set("consts", static_cast<int64_t>(k));
        attrs.set("carries", static_cast<int64_t>(c));
        attrs.set("length", to - from);
        attrs.set("reverse", reverse);
        std::vector<Tensor> r = create(ir::OpKind::Scan, concat(concat(consts, carry), part), std::move(attrs), {body}, loc);
        carry = slice(r, 0, c);
        ys.push_back(slice(r, c, r.size() - c));
        from = to;
      }
      if (reverse) std::reverse(ys.begin(), ys.end()); // back to slice order
      std::vector<Tensor> out = carry;
      for (std::size_t i = 0; i < ys[0].size(); ++i) {
        std::vector<Tensor> parts;
        for (const auto& seg : ys) parts.push_back(seg[i]);
        out.push_back(concatenate(parts));
      }
      return concat(out, kept);
    });
    ir::Op& live = s.fn->ops[opIndex];
    live.kind = ir::OpKind::Call;
    live.callees = {fwd};
    live.attrs = {};
    for (std::size_t j = 0; j < plan.kept.size(); ++j)
      for (std::size_t i = 0; i < c; ++i) {
        ir::ValueId v = s.fn->newValue(params[k + i]);
        live.results.push_back(v);
        keptCarries.push_back(T(v));
      }
  }

  std::vector<int32_t> arg = plan.arg;
  for (std::size_t a = 0; a < arg.size(); ++a)
    if (plan.kind[a] == static_cast<int32_t>(revolve::Action::Advance) || plan.kind[a] == static_cast<int32_t>(revolve::Action::Reverse))
      arg[a] = static_cast<int32_t>(slot(arg[a]));
  const auto A = static_cast<int64_t>(plan.kind.size());
  // Branches take (arg, consts, xs, dys, state, snapshots, dstate, dconsts) and
  // return (state, snapshots, dstate, dconsts, dx).
  std::vector<Type> types{Type{DType::i32, {}}};
  for (std::size_t i = 0; i < k + c + x; ++i)
    if (i < k || i >= k + c) types.push_back(s.fn->type(site.operands[i]));
  for (std::size_t i : fy) types.push_back(stacked(n, outs[c + i]));
  for (std::size_t i = 0; i < c; ++i) types.push_back(params[k + i]);
  for (std::size_t i = 0; i < c; ++i) types.push_back(stacked(snaps, params[k + i]));
  for (std::size_t i : fc) types.push_back(params[k + i]);
  for (std::size_t i : fk) types.push_back(params[i]);
  struct Parts {
    Tensor arg;
    std::vector<Tensor> consts, xs, dys, state, snaps, dstate, dconsts;
  };
  auto parts = [&](const std::vector<Tensor>& ps) {
    std::size_t at = 1;
    auto take = [&](std::size_t m) {
      std::vector<Tensor> v = slice(ps, at, m);
      at += m;
      return v;
    };
    Parts p{ps[0], take(k), take(x), take(fy.size()), take(c), take(c), take(fc.size()), take(fk.size())};
    return p;
  };
  auto at = [](const std::vector<Tensor>& ts, const Tensor& i) {
    std::vector<Tensor> r;
    for (const Tensor& t : ts) r.push_back(adjit::take(t, i));
    return r;
  };
  auto result = [&](const Parts& p, std::vector<Tensor> dx) {
    if (dx.empty())
      for (std::size_t i : fx) dx.push_back(full(params[k + c + i].shape, 0, params[k + c + i].dtype));
    return concat(concat(concat(concat(p.state, p.snaps), p.dstate), p.dconsts), dx);
  };
  std::vector<std::string> branches;
  branches.push_back(traceFunction(body + ".advance", types, loc, [&](const std::vector<Tensor>& ps) {
    Parts p = parts(ps);
    p.state = slice(call(body, concat(concat(p.consts, p.state), at(p.xs, p.arg)), loc), 0, c);
    return result(p, {});
  }));
  branches.push_back(traceFunction(body + ".store", types, loc, [&](const std::vector<Tensor>& ps) {
    Parts p = parts(ps);
    const Tensor hit = eq(iota({snaps}), p.arg);
    for (std::size_t i = 0; i < c; ++i) {
      Shape column(p.state[i].shape().size() + 1, 1), row = p.state[i].shape();
      column[0] = snaps;
      row.insert(row.begin(), 1);
      p.snaps[i] = where(reshape(hit, column), reshape(p.state[i], row), p.snaps[i]);
    }
    return result(p, {});
  }));
  branches.push_back(traceFunction(body + ".restore", types, loc, [&](const std::vector<Tensor>& ps) {
    Parts p = parts(ps);
    p.state = at(p.snaps, p.arg);
    return result(p, {});
  }));
  branches.push_back(traceFunction(body + ".reverse", types, loc, [&](const std::vector<Tensor>& ps) {
    Parts p = parts(ps);
    const std::vector<Tensor> xt = at(p.xs, p.arg);
    const std::vector<Tensor> o = call(split.fwd, concat(concat(p.consts, p.state), xt), loc);
    std::vector<Tensor> args = concat(concat(concat(p.consts, p.dstate), p.dconsts), xt);
    args = concat(concat(args, slice(o, outs.size(), split.stacked.size())), at(p.dys, p.arg));
    const std::vector<Tensor> r = call(split.bwd, args, loc); // (dstate, dconsts, dx)
    p.dstate = slice(r, 0, fc.size());
    p.dconsts = slice(r, fc.size(), fk.size());
    return result(p, slice(r, fc.size() + fk.size(), fx.size()));
  }));
  // The action loop: consts (consts, xs, dys), carries (state, snapshots, dstate, dconsts), xs (kind, arg).
  std::vector<Type> loopTypes(types.begin() + 1, types.end());
  loopTypes.push_back(Type{DType::i32, {}});
  loopTypes.push_back(Type{DType::i32, {}});
  const std::size_t nConsts = k + x + fy.size(), nCarries = 2 * c + fc.size() + fk.size();
  const std::string step = traceFunction(body + ".revolve", loopTypes, loc, [&](const std::vector<Tensor>& ps) {
    std::vector<Tensor> operands{ps[ps.size() - 2], ps.back()};
    operands.insert(operands.end(), ps.begin(), ps.end() - 2);
    return create(ir::OpKind::Switch, operands, {}, branches, loc);
  });
  auto ct = [&](std::size_t i) { return i < cts.size() && cts[i] ? *cts[i] : zeros_like(T(site.results[i])); };
  std::vector<Tensor> operands;
  for (std::size_t i = 0; i < site.operands.size(); ++i)
    if (i < k || i >= k + c) operands.push_back(T(site.operands[i]));
  for (std::size_t i : fy) operands.push_back(ct(c + i));
  for (std::size_t i = 0; i < c; ++i) operands.push_back(T(site.operands[k + i]));
  for (std::size_t i = 0; i < c; ++i) { // slot 0: the initial carry; slot j: the j-th kept one; the rest unused
    std::vector<Tensor> rows{T(site.operands[k + i])};
    for (std::size_t j = 0; j < plan.kept.size(); ++j) rows.push_back(keptCarries[j * c + i]);
    while (static_cast<int64_t>(rows.size()) < snaps) rows.push_back(rows[0]);
    operands.push_back(stack(rows));
  }
  for (std::size_t i : fc) operands.push_back(ct(i));
  for (std::size_t i : fk) operands.push_back(zeros_like(T(site.operands[i])));
  operands.push_back(constant(Array(plan.kind, {A})));
  operands.push_back(constant(Array(arg, {A})));
  ir::Attrs attrs;
  attrs.set("consts", static_cast<int64_t>(nConsts));
  attrs.set("carries", static_cast<int64_t>(nCarries));
  attrs.set("length", A);
  attrs.set("reverse", false);
  const std::vector<Tensor> r = create(ir::OpKind::Scan, operands, std::move(attrs), {step}, loc);
  std::vector<std::optional<Tensor>> out(site.operands.size());
  for (std::size_t i = 0; i < fc.size(); ++i) out[k + fc[i]] = r[2 * c + i];
  for (std::size_t i = 0; i < fk.size(); ++i) out[fk[i]] = r[2 * c + fc.size() + i];
  if (!fx.empty()) {
    std::vector<int32_t> rows(static_cast<std::size_t>(n));
    for (int64_t j = 0; j < n; ++j) rows[static_cast<std::size_t>(j)] = plan.reverseAt[static_cast<std::size_t>(slot(j))];
    const Tensor gather = constant(Array(rows, {n}));
    for (std::size_t i = 0; i < fx.size(); ++i) out[k + c + fx[i]] = adjit::take(r[nCarries + i], gather);
  }
  return out;
}



// ---- switch --------------------------------------------------------------------

/// Per branch @B_k of a switch: fwd_k (x...) -> (y..., residuals of every
/// branch...) returning its own residuals and zeros for the others', and
/// bwd_k (residuals of every branch..., x..., dy...) -> (dx per floating x).
struct SwitchSplit {
  std::vector<std::string> fwd, bwd;
  std::vector<Type> residuals;
};

SwitchSplit switchSplit(const std::vector<std::string>& branches, const Location& loc) {
  std::string key = "switch";
  for (const std::string& b : branches) key += " @" + b;
  SwitchSplit s;
  if (!derived(fmt::format("fwd0 {}", key)).empty()) {
    for (std::size_t i = 0; i < branches.size(); ++i) {
      s.fwd.push_back(derived(fmt::format("fwd{} {}", i, key)));
      s.bwd.push_back(derived(fmt::format("bwd{} {}", i, key)));
    }
    const ir::Function& F = fn(s.fwd[0]);
    for (std::size_t i = fn(branches[0]).outputs.size(); i < F.outputs.size(); ++i) s.residuals.push_back(F.type(F.outputs[i]));
    return s;
  }
  std::vector<SplitVjp> splits;
  std::vector<std::vector<int64_t>> rps;
  std::vector<std::size_t> offsets;
  const ir::Function& B0 = fn(branches[0]);
  const std::vector<Type> params = B0.paramTypes(), outs = B0.resultTypes();
  for (const std::string& b : branches) {
    splits.push_back(splitVjp(current().module, b));
    const ir::Function& F = fn(splits.back().fwd);
    rps.push_back(residualParams(F, outs.size()));
    offsets.push_back(s.residuals.size());
    for (std::size_t r = 0; r < rps.back().size(); ++r)
      if (rps.back()[r] < 0) s.residuals.push_back(F.type(F.outputs[outs.size() + r]));
  }
  offsets.push_back(s.residuals.size());
  std::vector<Type> dyTypes;
  for (const Type& t : outs)
    if (floating(t)) dyTypes.push_back(t);
  for (std::size_t b = 0; b < branches.size(); ++b) {
    s.fwd.push_back(traceFunction(branches[b] + ".switch_fwd", params, loc, [&](const std::vector<Tensor>& ps) {
      std::vector<Tensor> o = call(splits[b].fwd, ps, loc);
      std::vector<Tensor> r = slice(o, 0, outs.size());
      for (std::size_t j = 0; j < s.residuals.size(); ++j)
        if (j < offsets[b] || j >= offsets[b + 1]) r.push_back(full(s.residuals[j].shape, 0, s.residuals[j].dtype));
        else r.push_back(Tensor()); // filled below, in order
      std::size_t at = offsets[b];
      for (std::size_t i = 0; i < rps[b].size(); ++i)
        if (rps[b][i] < 0) r[outs.size() + at++] = o[outs.size() + i];
      return r;
    }));
    std::vector<Type> types = s.residuals;
    types.insert(types.end(), params.begin(), params.end());
    types.insert(types.end(), dyTypes.begin(), dyTypes.end());
    s.bwd.push_back(traceFunction(branches[b] + ".switch_bwd", types, loc, [&](const std::vector<Tensor>& ps) {
      const std::size_t nr = s.residuals.size();
      std::vector<Tensor> args;
      std::size_t at = offsets[b];
      for (int64_t p : rps[b]) args.push_back(p < 0 ? ps[at++] : ps[nr + static_cast<std::size_t>(p)]);
      for (std::size_t i = 0; i < dyTypes.size(); ++i) args.push_back(ps[nr + params.size() + i]);
      return call(splits[b].bwd, args, loc);
    }));
  }
  auto& d = current().module->derived;
  for (std::size_t i = 0; i < branches.size(); ++i) {
    d[fmt::format("fwd{} {}", i, key)] = s.fwd[i];
    d[fmt::format("bwd{} {}", i, key)] = s.bwd[i];
    d["switchbase @" + s.fwd[i]] = branches[i];
  }
  return s;
}

} // namespace

void scanVjp(const VjpCtx& c) {
  const ir::Op& op = current().fn->ops[c.opIndex];
  const bool binomial = op.attrs.has("snapshots") && !op.attrs.has("residuals") && op.attrs.integer("length") > 0;
  if (binomial) return addGrads(c, binomialAt(c.opIndex, resultCts(c)));
  Wanted wanted(c.op.operands.size());
  for (std::size_t i = 0; i < wanted.size(); ++i) wanted[i] = c.wants(i);
  addGrads(c, scanAt(c.opIndex, resultCts(c), wanted));
}

void switchVjp(const VjpCtx& c) {
  TraceState& s = current();
  const ir::Op site = s.fn->ops[c.opIndex];
  const std::vector<std::optional<Tensor>> cts = resultCts(c);
  const std::size_t r0 = residualCount(site);
  const std::size_t nRes = site.results.size();
  const bool residualCts = std::any_of(cts.begin() + static_cast<std::ptrdiff_t>(nRes - r0), cts.end(), [](const auto& t) { return t.has_value(); });
  // Differentiated before: each branch's forward names the branch it came from.
  std::vector<std::string> base;
  for (const std::string& f : site.callees)
    if (std::string b = r0 ? derived("switchbase @" + f) : std::string(); !b.empty()) base.push_back(b);
  SwitchSplit split;
  std::size_t withDy;
  std::vector<ir::ValueId> residuals;
  if (base.size() == site.callees.size() && !residualCts) {
    split = switchSplit(base, site.loc);
    withDy = nRes - r0;
    residuals = slice(site.results, withDy, r0);
  } else {
    split = switchSplit(site.callees, site.loc);
    withDy = nRes;
    ir::Op& live = s.fn->ops[c.opIndex];
    live.callees = split.fwd;
    live.attrs.set("residuals", static_cast<int64_t>(split.residuals.size()));
    for (const Type& t : split.residuals) {
      ir::ValueId v = s.fn->newValue(t);
      live.results.push_back(v);
      residuals.push_back(v);
    }
  }
  auto T = [&](ir::ValueId v) { return detail::wrap(s, v); };
  std::vector<Tensor> operands{T(site.operands[0])};
  for (ir::ValueId v : residuals) operands.push_back(T(v));
  for (std::size_t i = 1; i < site.operands.size(); ++i) operands.push_back(T(site.operands[i]));
  for (std::size_t i = 0; i < withDy; ++i)
    if (floating(s.fn->type(site.results[i]))) operands.push_back(cts[i] ? *cts[i] : zeros_like(T(site.results[i])));
  std::vector<Tensor> dx = create(ir::OpKind::Switch, operands, {}, split.bwd, site.loc);
  std::vector<std::optional<Tensor>> out(site.operands.size());
  std::size_t at = 0;
  for (std::size_t i = 1; i < site.operands.size(); ++i)
    if (floating(s.fn->type(site.operands[i]))) out[i] = dx[at++];
  addGrads(c, out);
}

namespace {

} // namespace

std::vector<Tensor> controlflow::whileVjpOf(const std::string& cond, const std::string& body, std::vector<Tensor> operands, std::size_t k,
                               const std::vector<Tensor>& dfinal, const Location& loc) {
  const std::size_t carries = operands.size() - k;
  const ScanSplit split = scanSplit(body, k, carries, loc);
  if (logEnabled("compile")) {
    int64_t bytes = 0;
    for (const Type& t : split.stacked) bytes += t.bytes();
    logLine("compile", fmt::format("while @{} at {}: reverse mode keeps {} bytes per iteration on a stack that grows at run time",
                                   body, loc.str(), bytes));
  }
  operands.insert(operands.end(), dfinal.begin(), dfinal.end());
  ir::Attrs attrs;
  attrs.set("consts", static_cast<int64_t>(k));
  attrs.set("carries", static_cast<int64_t>(carries));
  return create(ir::OpKind::WhileVjp, operands, std::move(attrs), {cond, split.fwd, split.bwd}, loc);
}

namespace {


/// The reverse of a while loop without max_iterations: one while_vjp op
/// running the loop again with residuals on a stack sized at run time.
void unboundedWhileVjp(const VjpCtx& c) {
  TraceState& s = current();
  const ir::Op site = s.fn->ops[c.opIndex];
  const auto k = static_cast<std::size_t>(site.attrs.integer("consts"));
  auto T = [&](ir::ValueId v) { return detail::wrap(s, v); };
  const std::vector<std::optional<Tensor>> cts = resultCts(c);
  std::vector<Tensor> operands, dfinal;
  for (ir::ValueId v : site.operands) operands.push_back(T(v));
  for (std::size_t i = 0; i < site.results.size(); ++i)
    if (floating(s.fn->type(site.results[i]))) dfinal.push_back(cts[i] ? *cts[i] : zeros_like(T(site.results[i])));
  const std::vector<Tensor> r = whileVjpOf(site.callees[0], site.callees[1], operands, k, dfinal, site.loc);
  // r: cotangents of the floating carries' initial values, then of the floating consts
  std::vector<std::optional<Tensor>> out(site.operands.size());
  std::size_t at = 0;
  for (std::size_t i = k; i < site.operands.size(); ++i)
    if (floating(s.fn->type(site.operands[i]))) out[i] = r[at++];
  for (std::size_t i = 0; i < k; ++i)
    if (floating(s.fn->type(site.operands[i]))) out[i] = r[at++];
  addGrads(c, out);
}

} // namespace

void whileVjp(const VjpCtx& c) {
  TraceState& s = current();
  const ir::Op site = s.fn->ops[c.opIndex];
  const Location& loc = site.loc;
  if (!site.attrs.has("max_iterations")) return unboundedWhileVjp(c);
  const auto k = static_cast<std::size_t>(site.attrs.integer("consts"));
  const int64_t limit = site.attrs.integer("max_iterations");
  const ir::Function& body = fn(site.callees[1]);
  const std::vector<Type> params = body.paramTypes();
  const std::string condName = site.callees[0], bodyName = site.callees[1];
  const std::size_t carries = params.size() - k;
  // A step of `limit`: run the body while the loop still runs, else keep the carry.
  const std::string keep = traceFunction(bodyName + ".keep", params, loc, [&](const std::vector<Tensor>& ps) {
    return slice(ps, k, carries);
  });
  std::vector<Type> stepTypes = params;
  stepTypes.push_back(Type{DType::i1, {}});
  const std::string step = traceFunction(bodyName + ".step", stepTypes, loc, [&](const std::vector<Tensor>& ps) {
    const std::vector<Tensor> args = slice(ps, 0, params.size());
    Tensor p = logical_and(ps.back(), reshape(call(condName, args, loc)[0], {}));
    std::vector<Tensor> operands{cast(p, DType::i32)};
    operands.insert(operands.end(), args.begin(), args.end());
    std::vector<Tensor> r = create(ir::OpKind::Switch, operands, {}, {keep, bodyName}, loc);
    r.push_back(p);
    return r;
  });
  std::vector<Tensor> operands;
  for (ir::ValueId v : site.operands) operands.push_back(detail::wrap(s, v));
  operands.push_back(full({}, 1, DType::i1));
  ir::Attrs attrs;
  attrs.set("consts", static_cast<int64_t>(k));
  attrs.set("carries", static_cast<int64_t>(carries + 1));
  attrs.set("length", limit);
  attrs.set("reverse", false);
  const std::vector<Tensor> steps = create(ir::OpKind::Scan, operands, std::move(attrs), {step}, loc);
  const std::size_t scanIndex = s.fn->ops.size() - 1;
  // The loop went on past `limit` steps if it still ran at the last one and
  // its condition holds after it: while_loop's error, here too, since a
  // gradient alone never runs the original loop.
  std::vector<Tensor> finals = slice(operands, 0, k);
  for (std::size_t i = 0; i < carries; ++i) finals.push_back(steps[i]);
  const Tensor running = logical_and(steps[carries], reshape(call(condName, finals, loc)[0], {}));
  ir::Attrs check;
  check.set("max_iterations", limit);
  create(ir::OpKind::LoopLimit, {running}, std::move(check), {}, loc);
  std::vector<std::optional<Tensor>> cts = resultCts(c);
  cts.push_back(std::nullopt);
  std::vector<std::optional<Tensor>> dxs = scanAt(scanIndex, cts);
  dxs.pop_back();
  addGrads(c, dxs);
}

} // namespace adjit::autodiff
