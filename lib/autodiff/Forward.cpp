// autodiff/Forward.cpp — the forward-mode driver and the JVP rules shared by
// families of ops. The driver walks a range of ops of the function being
// traced in order, calls each op's JVP rule where an operand has a tangent,
// and keeps "no tangent" symbolic: a path without a tangent builds nothing.
// Its output is ordinary IR appended to the same function.
#include "autodiff/JvpCtx.h"
#include "autodiff/Reverse.h"
#include "ir/OpInfo.h"
#include "autodiff/Rules.h"
#include "support/Assert.h"
#include "trace/Tracer.h"

#include <adjit/autodiff.h>

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace adjit::autodiff {
namespace {

detail::TraceState& currentState() {
  detail::TraceState* s = detail::currentTrace();
  ADJIT_ASSERT(s, "forward mode outside of a trace");
  return *s;
}

/// The op re-created on other operands (same kind, attributes and callees).
std::vector<Tensor> reapply(const JvpCtx& c, const std::vector<ir::ValueId>& operands) {
  detail::TraceState& s = currentState();
  std::vector<Tensor> out;
  for (ir::ValueId r : s.builder.create(c.op.kind, operands, c.op.attrs, c.op.callees, c.op.loc))
    out.push_back(detail::wrap(s, r));
  return out;
}

bool floatingValue(ir::ValueId v) { return is_floating(currentState().fn->type(v).dtype); }

} // namespace

void diagonalJvp(const JvpCtx& c) {
  std::optional<Tensor> sum;
  for (std::size_t i = 0; i < c.op.operands.size(); ++i) {
    const std::optional<Tensor> d = c.dx(i);
    if (!d) continue;
    std::vector<char> wanted(c.op.operands.size(), 0);
    wanted[i] = 1;
    const std::optional<Tensor> g = applyVjpRule(c.opIndex, {*d}, wanted)[i];
    if (g) sum = sum ? add(*sum, *g) : *g;
  }
  if (sum) c.tangent(0, *sum);
}

void linearJvp(const JvpCtx& c) {
  std::vector<ir::ValueId> operands;
  for (std::size_t i = 0; i < c.op.operands.size(); ++i) {
    if (!floatingValue(c.op.operands[i])) {
      operands.push_back(c.op.operands[i]); // an index or a predicate: kept
      continue;
    }
    const std::optional<Tensor> d = c.dx(i);
    operands.push_back(d ? d->id() : zeros_like(c.x(i)).id());
  }
  const std::vector<Tensor> ts = reapply(c, operands);
  for (std::size_t k = 0; k < ts.size(); ++k)
    if (floatingValue(c.op.results[k])) c.tangent(k, ts[k]);
}

void bilinearJvp(const JvpCtx& c) {
  std::optional<Tensor> sum;
  for (std::size_t i = 0; i < 2; ++i)
    if (const std::optional<Tensor> d = c.dx(i)) {
      std::vector<ir::ValueId> operands = c.op.operands.vec();
      operands[i] = d->id();
      const Tensor t = reapply(c, operands).at(0);
      sum = sum ? add(*sum, t) : t;
    }
  if (sum) c.tangent(0, *sum);
}

void transposedJvp(const JvpCtx& c) {
  transposeRule(c, [&](const std::vector<std::optional<Tensor>>& cts, const std::vector<char>& wanted) {
    return applyVjpRule(c.opIndex, cts, wanted);
  });
}

void transposeRule(const JvpCtx& c, const VjpRule& rule) {
  // u: a fresh value per floating result, standing for its cotangent. The
  // rule is linear in u, so its value (zeros) does not matter, only that u is
  // a value of its own that reverse mode can differentiate with respect to.
  std::vector<std::optional<Tensor>> cts;
  std::vector<Tensor> us;
  std::vector<std::size_t> ofU; // the result each u stands for
  for (std::size_t k = 0; k < c.op.results.size(); ++k) {
    if (!floatingValue(c.op.results[k])) {
      cts.push_back(std::nullopt);
      continue;
    }
    us.push_back(detail::alias(zeros_like(c.y(k))));
    cts.push_back(us.back());
    ofU.push_back(k);
  }
  std::vector<char> wanted;
  for (std::size_t i = 0; i < c.op.operands.size(); ++i) wanted.push_back(c.dx(i).has_value());
  detail::TraceState& s = currentState();
  Request r;
  r.begin = s.fn->ops.size();
  const std::vector<std::optional<Tensor>> g = rule(cts, wanted);
  r.end = s.fn->ops.size();
  for (std::size_t i = 0; i < g.size(); ++i)
    if (g[i] && wanted[i]) {
      r.targets.push_back(g[i]->id());
      r.seeds.push_back(*c.dx(i));
    }
  if (r.targets.empty()) return;
  for (const Tensor& u : us) r.sources.push_back(u.id());
  const std::vector<std::optional<Tensor>> t = reverse(r);
  for (std::size_t j = 0; j < t.size(); ++j)
    if (t[j]) c.tangent(ofU[j], *t[j]);
}

void callJvp(const JvpCtx& c) {
  if (!recomputes(c.op) || c.op.callees.size() != 1) return transposedJvp(c);
  calleeJvp(c);
}

namespace {

/// `name` without its host callbacks: the same function where it has none,
/// else a derived copy `@name.quiet` that drops them, through the calls,
/// branches and loop bodies it runs (each such callee quieted first, once).
/// A JVP that computes a primal again next to its tangents runs it quietly:
/// the primal op it differentiates ran the callbacks already. (A custom
/// gradient's forward inside keeps its own: its rules are bound to its name.)
/// Whether `name`, or a function it references, has an op that is not pure:
/// a walk over the functions reachable from it only (not the whole module,
/// which a program of many regions would walk once per region).
bool reachesEffect(const ir::Module& m, const std::string& name) {
  std::vector<const std::string*> work{&name};
  std::unordered_set<std::string_view> seen{name};
  while (!work.empty()) {
    const ir::Function* f = m.lookup(*work.back());
    work.pop_back();
    if (!f) continue;
    for (const ir::Op& op : f->ops) {
      if (!ir::info(op.kind).has(ir::kPure)) return true;
      for (const std::string& c : op.callees)
        if (seen.insert(c).second) work.push_back(&c);
    }
  }
  return false;
}

std::string quietFunction(const std::shared_ptr<ir::Module>& m, const std::string& name) {
  if (!reachesEffect(*m, name)) return name;
  std::unordered_map<std::string, std::string> quiet;
  for (const ir::Op& op : m->lookup(name)->ops)
    if (op.kind != ir::OpKind::CustomVjp && op.kind != ir::OpKind::CustomJvp)
      for (const std::string& c : op.callees)
        if (!quiet.count(c)) quiet[c] = quietFunction(m, c);
  return derive(m, "quiet", name, [&](detail::TraceScope& scope, const ir::Function& g) {
    std::unordered_map<ir::ValueId, ir::ValueId> map;
    for (ir::ValueId p : g.params) map[p] = scope.param(g.type(p)).id();
    for (const ir::Op& op : g.ops) {
      if (op.kind == ir::OpKind::HostCallback) continue;
      std::vector<ir::ValueId> operands;
      for (ir::ValueId o : op.operands) operands.push_back(map.at(o));
      std::vector<std::string> callees = op.callees;
      for (std::string& c : callees)
        if (auto it = quiet.find(c); it != quiet.end()) c = it->second;
      const auto results = scope.state().builder.create(op.kind, operands, op.attrs, callees, op.loc);
      for (std::size_t i = 0; i < results.size(); ++i) map[op.results[i]] = results[i];
    }
    std::vector<Tensor> outs;
    for (ir::ValueId o : g.outputs) outs.push_back(detail::wrap(scope.state(), map.at(o)));
    return outs;
  });
}

} // namespace

void calleeJvp(const JvpCtx& c) {
  detail::TraceState& s = currentState();
  const std::string jname = jvpFunction(s.module, quietFunction(s.module, c.op.callees[0]));
  std::vector<ir::ValueId> args = c.op.operands.vec();
  for (std::size_t i = 0; i < c.op.operands.size(); ++i)
    if (floatingValue(c.op.operands[i])) {
      const std::optional<Tensor> d = c.dx(i);
      args.push_back(d ? d->id() : zeros_like(c.x(i)).id());
    }
  ir::Attrs attrs;
  attrs.set("recompute", true);
  const std::vector<ir::ValueId> res = s.builder.create(ir::OpKind::Call, args, attrs, {jname}, c.op.loc);
  std::size_t k = c.op.results.size(); // results: (y..., dy...) with a dy per floating y
  for (std::size_t i = 0; i < c.op.results.size(); ++i)
    if (floatingValue(c.op.results[i])) c.tangent(i, detail::wrap(s, res.at(k++)));
}

std::vector<std::optional<Tensor>> forward(const ForwardRequest& r) {
  detail::TraceState& s = currentState();
  ir::Function& f = *s.fn;
  std::unordered_map<ir::ValueId, Tensor> local;
  std::unordered_map<ir::ValueId, Tensor>& tan = r.carried ? *r.carried : local;
  std::unordered_map<ir::ValueId, char> stopped;
  for (ir::ValueId v : r.stops) stopped[v] = 1;
  for (std::size_t k = 0; k < r.sources.size(); ++k) {
    ADJIT_ASSERT(r.tangents[k].type() == f.type(r.sources[k]), "forward: a tangent's type differs from its primal's");
    if (is_floating(f.type(r.sources[k]).dtype)) tan.insert_or_assign(r.sources[k], r.tangents[k]);
  }
  // Only ops on a path to a target get tangents: others would build dead
  // code. With carried tangents every op does (see ForwardRequest::carried).
  std::vector<char> opNeeded(r.end - r.begin, 1);
  if (!r.carried) {
    std::fill(opNeeded.begin(), opNeeded.end(), 0);
    std::vector<char> needed(f.types.size());
    for (ir::ValueId v : r.targets) needed[static_cast<std::size_t>(v)] = 1;
    for (std::size_t i = r.end; i-- > r.begin;) {
      const ir::Op& op = f.ops[i];
      if (std::none_of(op.results.begin(), op.results.end(), [&](ir::ValueId v) { return needed[static_cast<std::size_t>(v)]; }))
        continue;
      opNeeded[i - r.begin] = 1;
      for (ir::ValueId o : op.operands) needed[static_cast<std::size_t>(o)] = 1;
    }
  }
  for (std::size_t i = r.begin; i < r.end; ++i) {
    if (!opNeeded[i - r.begin]) continue;
    const ir::Op op = f.ops[i]; // a copy: rules append to f.ops
    const ir::OpInfo& info = ir::info(op.kind);
    if (autodiff::rules(op.kind).has(autodiff::kNonDifferentiable)) continue;
    const bool any = std::any_of(op.operands.begin(), op.operands.end(), [&](ir::ValueId o) { return tan.count(o) > 0; });
    if (!any) continue;
    if (!autodiff::rules(op.kind).jvp)
      throw Error(fmt::format("No forward-mode derivative defined for operation '%{}' (op type: {})", op.results.at(0),
                              info.name), op.loc);
    LocScope loc(s, op.loc);
    JvpCtx ctx{
        op,
        i,
        [&](ir::ValueId v) { return detail::wrap(s, v); },
        [&](ir::ValueId v) -> std::optional<Tensor> {
          auto it = tan.find(v);
          if (it == tan.end()) return std::nullopt;
          return it->second;
        },
        [&](std::size_t k, const Tensor& t) {
          const ir::ValueId res = op.results.at(k);
          ADJIT_ASSERT(t.type() == f.type(res), fmt::format("JVP of {} gave a tangent of type {} for result {} of type {}",
                                                            info.name, t.type().str(), k, f.type(res).str()));
          if (is_floating(f.type(res).dtype) && !stopped.count(res)) tan.insert_or_assign(res, t);
        },
    };
    autodiff::rules(op.kind).jvp(ctx);
  }
  std::vector<std::optional<Tensor>> out;
  for (ir::ValueId v : r.targets) {
    auto it = tan.find(v);
    out.push_back(it == tan.end() ? std::nullopt : std::optional<Tensor>(it->second));
  }
  return out;
}

std::vector<char> tangentReach(const ir::Function& g, const std::vector<char>& in) {
  std::vector<char> has(g.types.size(), 0);
  for (std::size_t i = 0; i < g.params.size(); ++i)
    has[static_cast<std::size_t>(g.params[i])] = in.at(i) && is_floating(g.type(g.params[i]).dtype);
  for (const ir::Op& op : g.ops) {
    if (autodiff::rules(op.kind).has(autodiff::kNonDifferentiable)) continue;
    if (std::none_of(op.operands.begin(), op.operands.end(), [&](ir::ValueId o) { return has[static_cast<std::size_t>(o)]; }))
      continue;
    for (ir::ValueId r : op.results) has[static_cast<std::size_t>(r)] = is_floating(g.type(r).dtype);
  }
  std::vector<char> out;
  for (ir::ValueId o : g.outputs) out.push_back(has[static_cast<std::size_t>(o)]);
  return out;
}

std::string jvpFunction(const std::shared_ptr<ir::Module>& m, const std::string& name, const JvpLayout& layout) {
  // The cache key spells the layout: groups, then the marks.
  std::string variant;
  for (std::size_t n : layout.paramGroups) variant += fmt::format(".{}", n);
  variant += ":";
  for (std::size_t n : layout.outputGroups) variant += fmt::format(".{}", n);
  variant += ":";
  for (char c : layout.tangentIn) variant += c ? '1' : '0';
  variant += ":";
  for (char c : layout.tangentOut) variant += c ? '1' : '0';
  variant += fmt::format(":{}", layout.carries);
  return derive(m, "jvp", name, [&](detail::TraceScope& scope, const ir::Function& g) {
    ADJIT_ASSERT(layout.tangentIn.size() == g.params.size() && layout.tangentOut.size() == g.outputs.size(),
                 "jvpFunction: a layout that does not fit the function");
    ForwardRequest r;
    std::vector<ir::ValueId> xs(g.params.size());
    std::size_t i = 0;
    for (std::size_t n : layout.paramGroups) {
      const std::size_t from = i;
      for (; i < from + n; ++i) xs[i] = scope.param(g.type(g.params[i])).id();
      for (std::size_t j = from; j < i; ++j)
        if (layout.tangentIn[j] && is_floating(g.type(g.params[j]).dtype)) {
          r.sources.push_back(xs[j]);
          r.tangents.push_back(scope.param(g.type(g.params[j])));
        }
    }
    ADJIT_ASSERT(i == g.params.size(), "jvpFunction: parameter groups that do not cover the parameters");
    detail::TraceState& s = scope.state();
    r.begin = s.fn->ops.size();
    const std::vector<ir::ValueId> ys = inlineFunction(s.builder, g, xs);
    r.end = s.fn->ops.size();
    r.targets = ys;
    const std::vector<std::optional<Tensor>> dys = forward(r);
    std::vector<Tensor> outs;
    std::size_t k = 0;
    for (std::size_t n : layout.outputGroups) {
      const std::size_t from = k;
      for (; k < from + n; ++k) outs.push_back(detail::wrap(s, ys[k]));
      for (std::size_t j = from; j < k; ++j) {
        ADJIT_ASSERT(j >= layout.carries || layout.tangentOut[j] || !dys[j],
                     fmt::format("jvpFunction: carry {} of @{} has a tangent, but the layout has none", j, g.name));
        if (layout.tangentOut[j]) outs.push_back(dys[j] ? *dys[j] : zeros_like(detail::wrap(s, ys[j])));
      }
    }
    ADJIT_ASSERT(k == ys.size(), "jvpFunction: output groups that do not cover the outputs");
    return outs;
  }, variant);
}

std::string jvpFunction(const std::shared_ptr<ir::Module>& m, const std::string& name) {
  const ir::Function* g = m->lookup(name);
  if (!g) throw Error("jvp: no function named @" + name + " in the module");
  JvpLayout all{{g->params.size()}, {g->outputs.size()}, {}, {}};
  for (ir::ValueId p : g->params) all.tangentIn.push_back(is_floating(g->type(p).dtype));
  for (ir::ValueId o : g->outputs) all.tangentOut.push_back(is_floating(g->type(o).dtype));
  return jvpFunction(m, name, all);
}

} // namespace adjit::autodiff
