// trace/ControlFlow.cpp — recording cond, switch_case, scan, fori_loop and
// while_loop: each branch or body is traced into a function of the module
// (tensors it captures from the enclosing trace become extra operands), and
// one switch, scan or while op calls it.
#include "ir/OpInfo.h"
#include "trace/Tracer.h"

#include <adjit/control_flow.h>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace adjit::detail {
namespace {

TraceState& enclosing(const char* api, const Location& loc) {
  TraceState* s = currentTrace();
  if (!s) throw Error(std::string(api) + ": called outside of a trace (call it in a function given to jit, grad or trace)", loc);
  return *s;
}

/// A branch or body traced into a function of the module.
struct Region {
  std::string name;
  std::vector<ir::ValueId> captured; ///< values of the enclosing trace it reads, in order of first use
  std::vector<Type> outputs;
};

Region traceRegion(TraceState& outer, const std::string& base, const std::vector<Type>& params, const FlatFn& fn) {
  auto hook = std::make_shared<OuterCaptures>(&outer);
  Region r;
  std::shared_ptr<ir::Module> m = outer.module;
  try {
    TraceScope scope(m, base);
    r.name = scope.state().fn->name;
    hook->self = &scope.state();
    scope.state().captures = hook;
    std::vector<Tensor> ps;
    for (const Type& t : params) ps.push_back(scope.param(t));
    std::vector<Tensor> outs = fn(ps);
    for (const Tensor& t : outs) r.outputs.push_back(t.type());
    scope.finish(outs);
  } catch (...) {
    // Leave no half-traced function behind (nor the ones it created).
    if (!r.name.empty()) std::erase_if(m->functions, [&](const auto& f) { return f->name == r.name; });
    throw;
  }
  r.captured = hook->outerValues;
  return r;
}

/// Makes the function of `r` take the values `all` (a superset of its
/// captures) as parameters: before its own with `first`, else after them.
void bindCaptures(TraceState& outer, const Region& r, std::size_t own, const std::vector<ir::ValueId>& all, bool first) {
  ir::Function& f = *outer.module->lookup(r.name);
  std::vector<ir::ValueId> explicitParams(f.params.begin(), f.params.begin() + static_cast<std::ptrdiff_t>(own));
  std::vector<ir::ValueId> captures;
  for (ir::ValueId v : all) {
    auto it = std::find(r.captured.begin(), r.captured.end(), v);
    captures.push_back(it != r.captured.end() ? f.params[own + static_cast<std::size_t>(it - r.captured.begin())]
                                              : f.newValue(outer.fn->type(v)));
  }
  f.params = first ? captures : explicitParams;
  f.params.insert(f.params.end(), (first ? explicitParams : captures).begin(), (first ? explicitParams : captures).end());
}

/// Moves the ops of a loop body that depend only on what it captures (a slice
/// of a captured weight, say) out of the loop, into the enclosing trace: they
/// run once instead of every step, and the gradient of the loop adds each
/// step's cotangent to the slice instead of padding it into the whole
/// captured tensor. Their values become further captures of the body.
void hoistInvariants(TraceState& outer, Region& r, std::size_t own) {
  ir::Function& f = *outer.module->lookup(r.name);
  std::map<ir::ValueId, ir::ValueId> outerOf; // invariant body value -> its value in `outer`
  for (std::size_t j = 0; j < r.captured.size(); ++j) outerOf[f.params[own + j]] = r.captured[j];
  std::vector<char> hoisted(f.ops.size());
  std::set<ir::ValueId> moved; // results of the ops that move out
  for (std::size_t i = 0; i < f.ops.size(); ++i) {
    const ir::Op& op = f.ops[i];
    const ir::OpInfo& info = ir::info(op.kind);
    if (!info.has(ir::kPure) || info.has(ir::kHasCallee)) continue;
    if (!std::all_of(op.operands.begin(), op.operands.end(), [&](ir::ValueId v) { return outerOf.count(v) != 0; })) continue;
    std::vector<ir::ValueId> operands;
    for (ir::ValueId v : op.operands) operands.push_back(outerOf.at(v));
    std::vector<ir::ValueId> results = outer.builder.create(op.kind, operands, op.attrs, op.callees, op.loc);
    for (std::size_t k = 0; k < results.size(); ++k) outerOf[op.results[k]] = results[k];
    // A constant stays in the body too (an immediate there); its copy outside
    // serves the ops that move out, and is dropped if none does. So does a
    // broadcast: fused into the body's loops it costs nothing, while hoisted
    // it would be a tensor the body reads from memory every step (a step size
    // `h * k` read as an [n] array of h's: RK4's step loaded four of them).
    hoisted[i] = !op.operands.empty() && op.kind != ir::OpKind::BroadcastTo;
    if (hoisted[i]) moved.insert(op.results.begin(), op.results.end());
  }
  // Hoisted values still read in the body (or returned) become parameters.
  std::map<ir::ValueId, ir::ValueId> param;
  auto use = [&](ir::ValueId& v) {
    if (param.count(v)) {
      v = param[v];
      return;
    }
    if (!moved.count(v)) return;
    const ir::ValueId p = f.newValue(f.type(v));
    f.params.push_back(p);
    r.captured.push_back(outerOf.at(v));
    v = param[v] = p;
  };
  std::vector<ir::Op> kept;
  for (std::size_t i = 0; i < f.ops.size(); ++i) {
    if (hoisted[i]) continue;
    ir::Op op = std::move(f.ops[i]);
    for (ir::ValueId& v : op.operands) use(v);
    kept.push_back(std::move(op));
  }
  for (ir::ValueId& v : f.outputs) use(v);
  f.ops = std::move(kept);
}

} // namespace

NestedFunction traceNested(TraceState& outer, const std::string& base, const std::vector<Type>& params, const FlatFn& fn) {
  Region r = traceRegion(outer, base, params, fn);
  bindCaptures(outer, r, params.size(), r.captured, /*first=*/false);
  return {r.name, r.captured};
}

namespace {

std::vector<ir::ValueId> unionOf(const std::vector<Region>& rs) {
  std::vector<ir::ValueId> all;
  for (const Region& r : rs)
    for (ir::ValueId v : r.captured)
      if (std::find(all.begin(), all.end(), v) == all.end()) all.push_back(v);
  return all;
}

std::vector<ir::ValueId> ids(const std::vector<Tensor>& ts, const char* api, const Location& loc) {
  std::vector<ir::ValueId> r;
  for (const Tensor& t : ts) r.push_back(valueOf(t, api, loc));
  return r;
}

std::vector<Type> types(const std::vector<Tensor>& ts) {
  std::vector<Type> r;
  for (const Tensor& t : ts) r.push_back(t.type());
  return r;
}

std::vector<Tensor> wrapAll(TraceState& s, const std::vector<ir::ValueId>& vs) {
  std::vector<Tensor> r;
  for (ir::ValueId v : vs) r.push_back(wrap(s, v));
  return r;
}

/// How the leaves `got` differ from `want`: "the result of true_fn has 3
/// leaves, but ..." or "leaf 2 of ... is f32[], but leaf 2 of ... is f64[]",
/// with the leaf that differs (the last one `got` has, for a count), or nothing.
std::optional<std::pair<std::string, std::size_t>> leafMismatch(const std::vector<Type>& got, const std::vector<Type>& want,
                                                                const std::string& what, const std::string& from, const char* api) {
  if (got.size() != want.size())
    return std::pair{fmt::format("{}: {} has {} leaves, but {} has {}", api, from, got.size(), what, want.size()), got.size() - 1};
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i])
      return std::pair{fmt::format("{}: leaf {} of {} is {}, but leaf {} of {} is {}", api, i, from, got[i].str(), i, what, want[i].str()), i};
  return std::nullopt;
}

/// An Error at `loc` unless the leaves `got` are those of `want` (see leafMismatch).
void expectLeaves(const std::vector<Type>& got, const std::vector<Type>& want, const std::string& what, const std::string& from,
                  const char* api, const Location& loc) {
  if (auto m = leafMismatch(got, want, what, from, api)) throw Error(m->first, loc);
}

/// "a, b, c".
std::string joined(const std::vector<std::string>& parts) {
  std::string r;
  for (const std::string& p : parts) r += (r.empty() ? "" : ", ") + p;
  return r;
}

/// "vector of 3 f64[4]", "pair of (vector of 2 f64[4], f64[])", "Params of
/// (f32[3], f32[])" (a registered struct): a Structure
/// for error messages; `next` walks its leaves.
std::string render(const Tree& t, const std::vector<Type>& leaves, std::size_t& next) {
  if (t.kind == Tree::Kind::leaf) return next < leaves.size() ? leaves[next++].str() : "?";
  std::vector<std::string> parts;
  for (const Tree& c : t.children) parts.push_back(render(c, leaves, next));
  const std::string kind = t.kind == Tree::Kind::record ? std::string(t.name)
                          : t.kind == Tree::Kind::vector ? "vector"
                          : t.kind == Tree::Kind::array  ? "array"
                          : t.kind == Tree::Kind::tuple  ? "tuple"
                                                         : "pair";
  const bool same = std::all_of(parts.begin(), parts.end(), [&](const std::string& p) { return p == parts[0]; });
  if ((t.kind == Tree::Kind::vector || t.kind == Tree::Kind::array) && (parts.empty() || same))
    return fmt::format("{} of {}{}", kind, parts.size(), parts.empty() ? "" : " " + parts[0]);
  return fmt::format("{} of ({})", kind, joined(parts));
}
std::string render(const Structure& s) {
  std::size_t next = 0;
  return render(s.tree, s.leaves, next);
}

/// Where the op that made leaf `i` of `r`'s result was called (unknown for a
/// leaf the region did not make: an operand or a captured tensor returned as is).
Location resultMadeAt(const TraceState& s, const Region& r, std::size_t i) {
  const ir::Function* f = s.module->lookup(r.name);
  return f && i < f->outputs.size() ? madeAt(*f, f->outputs[i]) : Location{};
}

} // namespace

void expectCarry(const Structure& got, const Structure& want, const char* api, const Location& loc) {
  if (got == want) return;
  const std::string g = render(got), w = render(want);
  if (got.leaves.size() != want.leaves.size())
    throw Error(fmt::format("{}: the body returned a carry of {} leaves ({}), but the initial carry has {} ({})", api,
                            got.leaves.size(), g, want.leaves.size(), w),
                loc);
  if (got.tree != want.tree) throw Error(fmt::format("{}: the body returned the carry {}, but the initial carry is {}", api, g, w), loc);
  auto m = leafMismatch(got.leaves, want.leaves, "the initial carry", "the carry the body returns", api);
  throw Error(got.tree.kind == Tree::Kind::leaf ? m->first : fmt::format("{} (the body returned {}; the initial carry is {})", m->first, g, w), loc);
}

Tensor predicateIndex(const Tensor& pred, const Location& loc) {
  enclosing("cond", loc);
  const Type p = pred.type();
  if (p.dtype != DType::i1 || p.size() != 1)
    throw Error(fmt::format("cond: the predicate must be an i1 tensor with exactly one element, got {}", p.str()), loc);
  return cast(reshape(pred, {}), DType::i32);
}

std::vector<Tensor> switchCall(const Tensor& index, const std::vector<FlatFn>& branches, const std::vector<std::string>& names,
                               const std::vector<Structure>& results, const std::vector<Tensor>& operands, const char* api,
                               const Location& loc) {
  TraceState& s = enclosing(api, loc);
  Tensor idx = index;
  const Type it = idx.type();
  if ((it.dtype != DType::i32 && it.dtype != DType::i64) || it.size() != 1)
    throw Error(fmt::format("{}: the index must be an i32 or i64 scalar, got {}", api, it.str()), loc);
  if (it.rank() != 0) idx = reshape(idx, {});
  if (branches.empty()) throw Error(fmt::format("{}: no branches", api), loc);
  const std::vector<Type> params = types(operands);
  std::vector<Region> rs;
  for (std::size_t b = 0; b < branches.size(); ++b) {
    rs.push_back(traceRegion(s, std::string(api) + "." + std::to_string(b), params, branches[b]));
    if (!b) continue;
    auto m = leafMismatch(rs[b].outputs, rs[0].outputs, "the result of " + names[0], "the result of " + names[b], api);
    if (!m) { // the same leaves may still be nested otherwise (vectors of other lengths)
      if (b < results.size() && results[b].tree != results[0].tree)
        throw Error(fmt::format("{}: {} returned {}, but {} returned {}", api, names[b], render(results[b]), names[0], render(results[0])), loc);
      continue;
    }
    // Name the line in each branch that made the leaf, so the user sees which lambda to fix.
    const std::size_t leaf = m->second;
    std::vector<std::string> made;
    for (std::size_t k : {b, std::size_t{0}})
      if (const Location at = resultMadeAt(s, rs[k], std::min(leaf, rs[k].outputs.size() - 1)); at.known())
        made.push_back(fmt::format("{}'s{} at {}", names[k], made.empty() ? " result made" : "", at.str()));
    throw Error(made.empty() ? m->first : fmt::format("{} ({})", m->first, joined(made)), loc);
  }
  const std::vector<ir::ValueId> captured = unionOf(rs);
  std::vector<std::string> callees;
  for (const Region& r : rs) {
    bindCaptures(s, r, params.size(), captured, /*first=*/false);
    callees.push_back(r.name);
  }
  std::vector<ir::ValueId> args{valueOf(idx, api, loc)};
  for (ir::ValueId v : ids(operands, api, loc)) args.push_back(v);
  args.insert(args.end(), captured.begin(), captured.end());
  return wrapAll(s, s.builder.create(ir::OpKind::Switch, args, {}, callees, loc));
}

std::pair<std::vector<Tensor>, std::vector<Tensor>> scanCall(const FlatFn& body, const std::vector<Tensor>& init,
                                                             const std::vector<Tensor>& xs, std::optional<int64_t> length,
                                                             bool reverse, int64_t snapshots, const char* api, const Location& loc) {
  TraceState& s = enclosing(api, loc);
  std::vector<Type> params = types(init);
  std::optional<int64_t> n = length;
  if (n && *n < 0) throw Error(fmt::format("{}: length must be at least 0, got {}", api, *n), loc);
  for (std::size_t j = 0; j < xs.size(); ++j) {
    const Type t = xs[j].type();
    if (t.rank() == 0) throw Error(fmt::format("{}: leaf {} of xs is the scalar {}: it has no leading axis to scan over", api, j, t.str()), loc);
    if (!n) n = t.shape[0];
    else if (t.shape[0] != *n)
      throw Error(length ? fmt::format("{}: length = {} disagrees with leaf {} of xs, {}", api, *n, j, t.str())
                         : fmt::format("{}: the leaves of xs differ in length: leaf {} is {}, but leaf 0 has {} slices", api, j, t.str(), *n),
                  loc);
    params.push_back(Type{t.dtype, Shape(t.shape.begin() + 1, t.shape.end())});
  }
  if (!n) throw Error(fmt::format("{}: xs has no leaves: give the number of steps as .length", api), loc);
  Region r = traceRegion(s, "scan.body", params, body);
  if (r.outputs.size() < init.size())
    throw Error(fmt::format("{}: the body returns {} leaves, fewer than the {} of the carry", api, r.outputs.size(), init.size()), loc);
  expectLeaves(std::vector<Type>(r.outputs.begin(), r.outputs.begin() + static_cast<std::ptrdiff_t>(init.size())), types(init),
               "the initial carry", "the carry the body returns", api, loc);
  hoistInvariants(s, r, params.size());
  bindCaptures(s, r, params.size(), r.captured, /*first=*/true);
  std::vector<ir::ValueId> args = r.captured;
  for (ir::ValueId v : ids(init, api, loc)) args.push_back(v);
  for (ir::ValueId v : ids(xs, api, loc)) args.push_back(v);
  ir::Attrs attrs;
  attrs.set("consts", static_cast<int64_t>(r.captured.size()));
  attrs.set("carries", static_cast<int64_t>(init.size()));
  attrs.set("length", *n);
  attrs.set("reverse", reverse);
  if (snapshots > 0) attrs.set("snapshots", snapshots);
  std::vector<Tensor> out = wrapAll(s, s.builder.create(ir::OpKind::Scan, args, std::move(attrs), {r.name}, loc));
  return {std::vector<Tensor>(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(init.size())),
          std::vector<Tensor>(out.begin() + static_cast<std::ptrdiff_t>(init.size()), out.end())};
}

void checkPolicy(const Checkpoint& c, const char* api, const Location& loc) {
  if (c.policy != Checkpoint::Policy::all && c.n < 1)
    throw Error(fmt::format("{}: checkpoint {} needs a parameter of at least 1", api, c.str()), loc);
}

std::vector<Tensor> whileCall(const FlatFn& cond, const FlatFn& body, const std::vector<Tensor>& init,
                              std::optional<int64_t> maxIterations, const char* api, const Location& loc) {
  TraceState& s = enclosing(api, loc);
  if (maxIterations && *maxIterations < 0) throw Error(fmt::format("{}: max_iterations must be at least 0, got {}", api, *maxIterations), loc);
  const std::vector<Type> params = types(init);
  std::vector<Region> rs{traceRegion(s, "while.cond", params, cond)};
  const std::vector<Type>& p = rs[0].outputs;
  if (p.size() != 1 || p[0].dtype != DType::i1 || p[0].size() != 1)
    throw Error(fmt::format("{}: the condition must return one i1 tensor with exactly one element, got {}", api, describeArgs(p)), loc);
  rs.push_back(traceRegion(s, "while.body", params, body));
  expectLeaves(rs[1].outputs, params, "the initial carry", "the carry the body returns", api, loc);
  const std::vector<ir::ValueId> captured = unionOf(rs);
  for (const Region& r : rs) bindCaptures(s, r, params.size(), captured, /*first=*/true);
  std::vector<ir::ValueId> args = captured;
  for (ir::ValueId v : ids(init, api, loc)) args.push_back(v);
  ir::Attrs attrs;
  attrs.set("consts", static_cast<int64_t>(captured.size()));
  if (maxIterations) attrs.set("max_iterations", *maxIterations);
  return wrapAll(s, s.builder.create(ir::OpKind::While, args, std::move(attrs), {rs[0].name, rs[1].name}, loc));
}

std::vector<Tensor> rematCall(const FlatFn& fn, const std::vector<Tensor>& args, const char* api, const Location& loc) {
  TraceState& s = enclosing(api, loc);
  const std::vector<Type> params = types(args);
  Region r = traceRegion(s, "checkpoint", params, fn);
  std::vector<ir::ValueId> operands = ids(args, api, loc);
  operands.insert(operands.end(), r.captured.begin(), r.captured.end());
  ir::Attrs attrs;
  attrs.set("recompute", true);
  return wrapAll(s, s.builder.create(ir::OpKind::Call, operands, std::move(attrs), {r.name}, loc));
}

std::pair<int64_t, int64_t> staticBounds(const Bound& lower, const Bound& upper, std::optional<int64_t> maxIterations, const Location& loc) {
  const auto* lo = std::get_if<int64_t>(&lower.v);
  const auto* hi = std::get_if<int64_t>(&upper.v);
  if (!lo || !hi) throw Error("fori_loop: .checkpoint needs C++ integer bounds (a trip count known when tracing); a Tensor bound makes a while loop", loc);
  const int64_t n = std::max<int64_t>(0, *hi - *lo);
  if (maxIterations && n > *maxIterations)
    throw Error(fmt::format("fori_loop: the loop runs {} iterations, more than max_iterations = {}", n, *maxIterations), loc);
  return {*lo, *lo + n};
}

std::vector<Tensor> foriCall(const Bound& lower, const Bound& upper,
                             const std::function<std::vector<Tensor>(const Tensor&, const std::vector<Tensor>&)>& body,
                             const std::vector<Tensor>& init, std::optional<int64_t> maxIterations, const Location& loc) {
  enclosing("fori_loop", loc);
  const auto* lo = std::get_if<int64_t>(&lower.v);
  const auto* hi = std::get_if<int64_t>(&upper.v);
  DType dt = DType::i32;
  for (const Bound* b : {&lower, &upper})
    if (const auto* t = std::get_if<Tensor>(&b->v)) {
      const Type ty = t->type();
      if ((ty.dtype != DType::i32 && ty.dtype != DType::i64) || ty.size() != 1)
        throw Error(fmt::format("fori_loop: a bound must be a C++ integer or an i32 or i64 scalar tensor, got {}", ty.str()), loc);
      if (ty.dtype == DType::i64) dt = DType::i64;
    }
  auto asTensor = [&](const Bound& b) {
    if (const auto* i = std::get_if<int64_t>(&b.v)) return full({}, static_cast<double>(*i), dt);
    const Tensor& t = std::get<Tensor>(b.v);
    return cast(reshape(t, {}), dt);
  };
  // carry' = (i + 1, body(i, carry))
  auto step = [&](const std::vector<Tensor>& ps) {
    std::vector<Tensor> r{add(ps[0], full({}, 1, dt))};
    std::vector<Tensor> out = body(ps[0], std::vector<Tensor>(ps.begin() + 1, ps.begin() + 1 + static_cast<std::ptrdiff_t>(init.size())));
    r.insert(r.end(), out.begin(), out.end());
    return r;
  };
  std::vector<Tensor> carry{asTensor(lower)};
  carry.insert(carry.end(), init.begin(), init.end());
  std::vector<Tensor> out;
  if (lo && hi) { // a static trip count: a scan
    const auto [from, to] = staticBounds(lower, upper, maxIterations, loc);
    out = scanCall(step, carry, {}, to - from, false, 0, "fori_loop", loc).first;
  } else {
    Tensor ub = asTensor(upper);
    FlatFn cond = [&](const std::vector<Tensor>& ps) { return std::vector<Tensor>{lt(ps[0], ub)}; };
    out = whileCall(cond, step, carry, maxIterations, "fori_loop", loc);
  }
  return std::vector<Tensor>(out.begin() + 1, out.end());
}

} // namespace adjit::detail
