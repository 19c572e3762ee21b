// autodiff/ControlFlowJvp.cpp — JVP rules of switch, scan and while, and both
// derivatives of while_vjp (second order through a loop's reverse); the VJP
// rules are in ControlFlow.cpp.
#include "autodiff/ControlFlow.h"
#include "autodiff/ControlFlowTrace.h"

#include "autodiff/JvpCtx.h"
#include "autodiff/Reverse.h"
#include "trace/Tracer.h"

#include <adjit/control_flow.h>

#include <fmt/format.h>

#include <algorithm>

namespace adjit::autodiff {

using namespace controlflow;
using detail::TraceState;

// ---- forward mode ---------------------------------------------------------------
//
// The JVP of a conditional or loop is the same construct over JVP functions
// of its branches or body (jvpFunction with a layout): a switch on the same
// index, a scan or while that carries tangents next to the carries. No
// residual is kept per iteration, so a while loop needs no max_iterations.
// The construct computes its primal again next to the tangents; the original
// op stays for the values downstream.

namespace {

/// `op`'s attributes without `residuals`: a JVP op returns no residuals.
ir::Attrs withoutResiduals(const ir::Attrs& a) {
  ir::Attrs out;
  for (const auto& [name, value] : a.entries())
    if (name != "residuals") out.set(name, value);
  return out;
}

/// Per operand in [from, from + n): whether it has a tangent.
std::vector<char> tangentsOf(const JvpCtx& c, std::size_t from, std::size_t n) {
  std::vector<char> m;
  for (std::size_t i = from; i < from + n; ++i) m.push_back(c.dx(i).has_value());
  return m;
}

/// The values x(i) for i in [from, from + n) followed by the tangents t(i)
/// of those marked in `mask` (zeros for a marked one without a tangent).
template <class X, class T>
void appendWithTangents(std::vector<Tensor>& out, std::size_t from, std::size_t n, const std::vector<char>& mask, X x, T t) {
  for (std::size_t i = from; i < from + n; ++i) out.push_back(x(i));
  for (std::size_t i = from; i < from + n; ++i)
    if (mask[i - from]) {
      const std::optional<Tensor> ti = t(i);
      out.push_back(ti ? *ti : zeros_like(x(i)));
    }
}

/// The same for an op's operands and their tangents.
void appendWithTangents(const JvpCtx& c, std::vector<Tensor>& out, std::size_t from, std::size_t n, const std::vector<char>& mask) {
  appendWithTangents(out, from, n, mask, [&](std::size_t i) { return c.x(i); }, [&](std::size_t i) { return c.dx(i); });
}

template <class T> std::vector<T> concat(std::vector<T> a, const std::vector<T>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// Per output of `g` in [from, from + n): marked when floating. Residuals
/// that reverse mode added to a rebound switch or scan are marked too: the
/// backward reads them, so forward over reverse (a Hessian) needs their
/// tangents.
std::vector<char> floatingOutputs(const ir::Function& g, std::size_t from, std::size_t n) {
  std::vector<char> m;
  for (std::size_t i = from; i < from + n; ++i) m.push_back(floating(g.type(g.outputs[i])));
  return m;
}

/// The carries that may have a tangent: those whose initial value has one,
/// and, to a fixed point, those the body gives one from the consts', the
/// slices' and the other carries' tangents. Each round walks the body once;
/// a chain of carries each reaching the next could take a round per carry,
/// so past a few rounds every floating carry takes a tangent (zeros where
/// none reaches: more work in the loop, the same values).
std::vector<char> carryTangents(const ir::Function& body, const std::vector<char>& consts, std::vector<char> carries,
                                const std::vector<char>& slices) {
  constexpr int kMaxRounds = 4;
  for (int round = 0;; ++round) {
    const std::vector<char> reach = tangentReach(body, concat(concat(consts, carries), slices));
    bool changed = false;
    for (std::size_t i = 0; i < carries.size(); ++i)
      if (reach[i] && !carries[i]) carries[i] = changed = true;
    if (!changed) return carries;
    if (round == kMaxRounds) {
      for (std::size_t i = 0; i < carries.size(); ++i) carries[i] = floating(body.type(body.params[consts.size() + i]));
      return carries;
    }
  }
}

} // namespace

void switchJvp(const JvpCtx& c) {
  TraceState& s = current();
  const ir::Op& site = c.op;
  const std::size_t n = site.operands.size() - 1;
  const std::vector<char> in = tangentsOf(c, 1, n);
  const ir::Function& b0 = fn(site.callees[0]);
  const JvpLayout layout{{n}, {b0.outputs.size()}, in, floatingOutputs(b0, 0, b0.outputs.size())};
  std::vector<std::string> branches;
  for (const std::string& b : site.callees) branches.push_back(jvpFunction(s.module, b, layout));
  std::vector<Tensor> operands{c.x(0)};
  appendWithTangents(c, operands, 1, n, in);
  const std::vector<Tensor> r = create(ir::OpKind::Switch, operands, withoutResiduals(site.attrs), branches, site.loc);
  std::size_t at = site.results.size();
  for (std::size_t i = 0; i < site.results.size(); ++i)
    if (layout.tangentOut[i]) c.tangent(i, r[at++]);
}

void scanJvp(const JvpCtx& c) {
  TraceState& s = current();
  const ir::Op& site = c.op;
  const auto k = static_cast<std::size_t>(site.attrs.integer("consts")), nc = static_cast<std::size_t>(site.attrs.integer("carries"));
  const std::size_t nx = site.operands.size() - k - nc;
  const ir::Function& body = fn(site.callees[0]);
  const std::size_t ny = body.outputs.size() - nc;
  const std::vector<char> dk = tangentsOf(c, 0, k), dx = tangentsOf(c, k + nc, nx);
  const std::vector<char> dc = carryTangents(body, dk, tangentsOf(c, k, nc), dx);
  const JvpLayout layout{{k, nc, nx}, {nc, ny}, concat(concat(dk, dc), dx), concat(dc, floatingOutputs(body, nc, ny)), nc};
  const std::string jbody = jvpFunction(s.module, site.callees[0], layout);
  std::vector<Tensor> operands;
  appendWithTangents(c, operands, 0, k, dk);
  appendWithTangents(c, operands, k, nc, dc);
  appendWithTangents(c, operands, k + nc, nx, dx);
  ir::Attrs attrs = withoutResiduals(site.attrs);
  attrs.set("consts", static_cast<int64_t>(k + static_cast<std::size_t>(std::count(dk.begin(), dk.end(), 1))));
  const auto tc = static_cast<std::size_t>(std::count(dc.begin(), dc.end(), 1));
  attrs.set("carries", static_cast<int64_t>(nc + tc));
  const std::vector<Tensor> r = create(ir::OpKind::Scan, operands, std::move(attrs), {jbody}, site.loc);
  // r: (carry..., dcarry..., y..., dy...)
  std::size_t at = nc;
  for (std::size_t i = 0; i < nc; ++i)
    if (dc[i]) c.tangent(i, r[at++]);
  at = nc + tc + ny;
  for (std::size_t i = 0; i < ny; ++i)
    if (layout.tangentOut[nc + i]) c.tangent(nc + i, r[at++]);
}

namespace {

/// The JVP of a while loop (cond, body) with k consts and nc carries: a
/// loop over (const..., tconst..., carry..., tcarry...), the tangents for
/// the consts marked in dk and the carries marked in dc (closed over what
/// the body reaches, see carryTangents).
struct JvpLoop {
  std::string cond, body;
  std::vector<char> dk, dc;
  std::size_t consts() const { return dk.size() + static_cast<std::size_t>(std::count(dk.begin(), dk.end(), 1)); }
};

JvpLoop jvpLoop(const std::string& condName, const std::string& bodyName, std::size_t k, std::size_t nc, std::vector<char> dk,
                const std::vector<char>& dcIn) {
  TraceState& s = current();
  JvpLoop L;
  L.dc = carryTangents(fn(bodyName), dk, dcIn, {});
  L.dk = std::move(dk);
  const JvpLayout layout{{k, nc}, {nc}, concat(L.dk, L.dc), L.dc, nc};
  L.body = jvpFunction(s.module, bodyName, layout);
  // The condition reads the primals only.
  const std::vector<Type> condParams = fn(condName).paramTypes();
  std::vector<Type> types;
  std::vector<std::size_t> primal; // where each primal is among the parameters
  auto group = [&](std::size_t from, std::size_t n, const std::vector<char>& mask) {
    for (std::size_t i = from; i < from + n; ++i) {
      primal.push_back(types.size());
      types.push_back(condParams[i]);
    }
    for (std::size_t i = from; i < from + n; ++i)
      if (mask[i - from]) types.push_back(condParams[i]);
  };
  group(0, k, L.dk);
  group(k, nc, L.dc);
  L.cond = derive(s.module, "jvp", condName, [&](detail::TraceScope& scope, const ir::Function& g) {
    std::vector<Tensor> ps;
    for (const Type& t : types) ps.push_back(scope.param(t));
    std::vector<ir::ValueId> args;
    for (std::size_t p : primal) args.push_back(ps[p].id());
    std::vector<Tensor> out;
    for (ir::ValueId v : inlineFunction(scope.state().builder, g, args)) out.push_back(detail::wrap(scope.state(), v));
    return out;
  }, L.body);
  return L;
}

} // namespace

void whileJvp(const JvpCtx& c) {
  const ir::Op& site = c.op;
  const auto k = static_cast<std::size_t>(site.attrs.integer("consts"));
  const std::size_t nc = site.operands.size() - k;
  const JvpLoop L = jvpLoop(site.callees[0], site.callees[1], k, nc, tangentsOf(c, 0, k), tangentsOf(c, k, nc));
  std::vector<Tensor> operands;
  appendWithTangents(c, operands, 0, k, L.dk);
  appendWithTangents(c, operands, k, nc, L.dc);
  ir::Attrs attrs = site.attrs;
  attrs.set("consts", static_cast<int64_t>(L.consts()));
  const std::vector<Tensor> r = create(ir::OpKind::While, operands, std::move(attrs), {L.cond, L.body}, site.loc);
  std::size_t at = nc;
  for (std::size_t i = 0; i < nc; ++i)
    if (L.dc[i]) c.tangent(i, r[at++]);
}

// ---- second order through while_vjp ---------------------------------------------
//
// A while_vjp computes g(x, d) = J(x)^T d, with x its consts and the carries'
// initial values, J the Jacobian of the final carries in x and d their
// cotangent. Both of g's derivatives come from the reverse of the loop's JVP
// (carries (c, tc), consts (x, tx)), itself a while_vjp. With final-value
// cotangents (a, b) for (c, tc), that reverse gives
//   for (c0, consts): J^T a + (d(J tx)/dx)^T b = J^T a + (d(J^T b)/dx) tx
// (second derivatives are symmetric), and for (tc0, tconsts): J^T b.
// - Forward (a tangent (tx, td) of the operands): a = td, b = d gives the
//   tangent of g, J^T td + (dg/dx) tx, in the (c0, consts) slots.
// - Reverse (a cotangent u of g's results): the cotangent of x is
//   (dg/dx)^T u = d/dx <J u, d>: a = 0, b = d, tx = u; that of d is J u,
//   the final tangent carries of the JVP loop run forward.

namespace {

/// A while_vjp site's layout: k consts, nc carries, and which carries and
/// consts are floating (they have cotangents, in this order, among its
/// results; the carries' final-value cotangents are its last operands).
struct WhileVjpSite {
  ir::Op op; ///< a copy: creating ops may move the live one
  std::size_t k, nc;
  std::vector<std::size_t> fc, fk;
};

WhileVjpSite whileVjpSite(const ir::Op& op) {
  TraceState& s = current();
  WhileVjpSite w{op, static_cast<std::size_t>(op.attrs.integer("consts")), static_cast<std::size_t>(op.attrs.integer("carries")), {}, {}};
  for (std::size_t i = 0; i < w.nc; ++i)
    if (floating(s.fn->type(op.operands[w.k + i]))) w.fc.push_back(i);
  for (std::size_t i = 0; i < w.k; ++i)
    if (floating(s.fn->type(op.operands[i]))) w.fk.push_back(i);
  return w;
}

/// The loop's body: the original of the site's split forward when this
/// module made the split, else the split forward without its residuals
/// (a while_vjp parsed from text).
std::string loopBody(const WhileVjpSite& w) {
  const std::string& fwd = w.op.callees[1];
  if (std::string b = derived("scanbase @" + fwd); !b.empty()) return b;
  return derive(current().module, "loop_body", fwd, [&](detail::TraceScope& scope, const ir::Function& g) {
    std::vector<ir::ValueId> args;
    for (const Type& t : g.paramTypes()) args.push_back(scope.param(t).id());
    const std::vector<ir::ValueId> r = inlineFunction(scope.state().builder, g, args);
    std::vector<Tensor> out;
    for (std::size_t i = 0; i < w.nc; ++i) out.push_back(detail::wrap(scope.state(), r[i]));
    return out;
  });
}

/// The reverse of the site's JVP loop with tangents `t` (per const and
/// carry; nullopt: none) and final-value cotangents a (per floating carry;
/// nullopt: zeros) and b = the site's d. Returns the loop, its operands, and
/// the while_vjp's results: per floating carry of the JVP loop (the site's,
/// then the tangent carries), then per floating const (the site's, then the
/// tangent consts).
struct JvpLoopReverse {
  JvpLoop loop;
  std::vector<Tensor> operands, r;
};

JvpLoopReverse reverseOfJvpLoop(const WhileVjpSite& w, const std::vector<std::optional<Tensor>>& t,
                                const std::vector<std::optional<Tensor>>& a) {
  TraceState& s = current();
  auto x = [&](std::size_t i) { return detail::wrap(s, w.op.operands[i]); };
  std::vector<char> dk, dc;
  for (std::size_t i = 0; i < w.k + w.nc; ++i)
    (i < w.k ? dk : dc).push_back(t[i].has_value() && floating(s.fn->type(w.op.operands[i])));
  JvpLoopReverse out{jvpLoop(w.op.callees[0], loopBody(w), w.k, w.nc, dk, dc), {}, {}};
  const JvpLoop& L = out.loop;
  auto tangent = [&](std::size_t i) { return t[i]; };
  appendWithTangents(out.operands, 0, w.k, L.dk, x, tangent);
  appendWithTangents(out.operands, w.k, w.nc, L.dc, x, tangent);
  std::vector<Tensor> dfinal;
  for (std::size_t j = 0; j < w.fc.size(); ++j) dfinal.push_back(a[j] ? *a[j] : zeros_like(x(w.k + w.fc[j])));
  for (std::size_t j = 0; j < w.fc.size(); ++j)
    if (L.dc[w.fc[j]]) dfinal.push_back(x(w.k + w.nc + j)); // a tangent carry is floating: its carry is
  out.r = whileVjpOf(L.cond, L.body, out.operands, L.consts(), dfinal, w.op.loc);
  return out;
}

/// The number of floating carries of a JVP loop: the site's and the tangent ones.
std::size_t jvpLoopFloatingCarries(const WhileVjpSite& w, const JvpLoop& L) {
  return w.fc.size() + static_cast<std::size_t>(std::count(L.dc.begin(), L.dc.end(), 1));
}

} // namespace

void whileVjpJvp(const JvpCtx& c) {
  const WhileVjpSite w = whileVjpSite(c.op);
  std::vector<std::optional<Tensor>> t, td;
  for (std::size_t i = 0; i < w.k + w.nc; ++i) t.push_back(c.dx(i));
  for (std::size_t j = 0; j < w.fc.size(); ++j) td.push_back(c.dx(w.k + w.nc + j));
  const JvpLoopReverse rev = reverseOfJvpLoop(w, t, td);
  const std::size_t fcl = jvpLoopFloatingCarries(w, rev.loop);
  for (std::size_t j = 0; j < w.fc.size(); ++j) c.tangent(j, rev.r[j]);
  for (std::size_t j = 0; j < w.fk.size(); ++j) c.tangent(w.fc.size() + j, rev.r[fcl + j]);
}

void whileVjpVjp(const VjpCtx& c) {
  const WhileVjpSite w = whileVjpSite(current().fn->ops[c.opIndex]);
  const std::vector<std::optional<Tensor>> u = resultCts(c);
  std::vector<std::optional<Tensor>> t(w.k + w.nc);
  bool any = false;
  for (std::size_t j = 0; j < w.fc.size(); ++j) any |= (t[w.k + w.fc[j]] = u[j]).has_value();
  for (std::size_t j = 0; j < w.fk.size(); ++j) any |= (t[w.fk[j]] = u[w.fc.size() + j]).has_value();
  if (!any) return;
  const JvpLoopReverse rev = reverseOfJvpLoop(w, t, std::vector<std::optional<Tensor>>(w.fc.size()));
  const JvpLoop& L = rev.loop;
  const std::size_t fcl = jvpLoopFloatingCarries(w, L);
  std::vector<std::optional<Tensor>> out(w.op.operands.size());
  for (std::size_t j = 0; j < w.fc.size(); ++j) out[w.k + w.fc[j]] = rev.r[j];
  for (std::size_t j = 0; j < w.fk.size(); ++j) out[w.fk[j]] = rev.r[fcl + j];
  // J u: the tangent carries' final values.
  ir::Attrs attrs;
  attrs.set("consts", static_cast<int64_t>(L.consts()));
  const std::vector<Tensor> final = create(ir::OpKind::While, rev.operands, std::move(attrs), {L.cond, L.body}, w.op.loc);
  std::size_t at = w.nc; // tangent carries follow the carries, in carry order (only floating ones have them)
  for (std::size_t j = 0; j < w.fc.size(); ++j)
    if (L.dc[w.fc[j]]) out[w.k + w.nc + j] = final[at++];
  addGrads(c, out);
}

} // namespace adjit::autodiff
