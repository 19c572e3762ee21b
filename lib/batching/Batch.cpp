// batching/Batch.cpp — the batching transform (vmap): the table of rules,
// the driver that copies a function op by op and calls an op's rule only
// where an operand is batched, the batched twin of a function, and the rules
// shared by families of ops.
#include "autodiff/Reverse.h"
#include "batching/Rules.h"
#include "ir/OpInfo.h"
#include "support/Assert.h"
#include "trace/Tracer.h"

#include <adjit/control_flow.h>

#include <fmt/format.h>

#include <array>

namespace adjit::batching {
namespace {

std::array<Rules, ir::kNumOps>& table() {
  static std::array<Rules, ir::kNumOps> t{};
  return t;
}

detail::TraceState& currentState() {
  detail::TraceState* s = detail::currentTrace();
  ADJIT_ASSERT(s, "batching outside of a trace");
  return *s;
}

Shape withLeading(int64_t size, const Shape& s) {
  Shape r{size};
  r.insert(r.end(), s.begin(), s.end());
  return r;
}

} // namespace

const Rules& rules(ir::OpKind k) { return table()[static_cast<std::size_t>(k)]; }
void define(ir::OpKind k, const Rules& r) { table()[static_cast<std::size_t>(k)] = r; }

Tensor withBatch(const Tensor& t, bool batched, int64_t size) {
  if (batched) return t;
  return broadcast_to(t, withLeading(size, t.shape()));
}

Tensor moveAxis(const Tensor& t, int64_t from, int64_t to) {
  const int64_t r = t.rank();
  if (from < 0) from += r;
  if (to < 0) to += r;
  if (from == to) return t;
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < r; ++d)
    if (d != from) perm.push_back(d);
  perm.insert(perm.begin() + to, from);
  return transpose(t, perm);
}

Tensor BatchCtx::bx(std::size_t i) const {
  if (batched(i) || !spread) return withBatch(x(i), batched(i), size);
  const Tensor t = x(i);
  // Only a broadcast made in the driver's own trace may serve later ops (a
  // rule may trace a body of its own, whose values end with it).
  if (t.trace() != currentState().id) return withBatch(t, false, size);
  auto it = spread->find(t.id());
  if (it == spread->end()) it = spread->emplace(t.id(), withBatch(t, false, size)).first;
  return it->second;
}

std::vector<Tensor> BatchCtx::reapply(const std::vector<Tensor>& operands, const ir::Attrs& attrs) const {
  detail::TraceState& s = currentState();
  std::vector<ir::ValueId> ids;
  for (const Tensor& t : operands) ids.push_back(detail::valueOf(t, ir::info(op.kind).name, op.loc));
  std::vector<Tensor> out;
  for (ir::ValueId r : s.builder.create(op.kind, ids, attrs, op.callees, op.loc)) out.push_back(detail::wrap(s, r));
  return out;
}

ir::Attrs shiftAxes(const ir::Attrs& attrs, std::string_view name) {
  ir::Attrs out;
  for (const auto& [key, value] : attrs.entries()) {
    if (key != name) {
      out.set(key, value);
      continue;
    }
    if (const int64_t* i = std::get_if<int64_t>(&value)) {
      out.set(key, *i >= 0 ? *i + 1 : *i);
    } else {
      std::vector<int64_t> axes = std::get<std::vector<int64_t>>(value);
      for (int64_t& a : axes)
        if (a >= 0) ++a;
      out.set(key, axes);
    }
  }
  return out;
}

ir::Attrs prependDim(const ir::Attrs& attrs, std::string_view name, int64_t size) {
  ir::Attrs out;
  for (const auto& [key, value] : attrs.entries()) {
    if (key != name) {
      out.set(key, value);
      continue;
    }
    std::vector<int64_t> dims = std::get<std::vector<int64_t>>(value);
    dims.insert(dims.begin(), size);
    out.set(key, dims);
  }
  return out;
}

void elementwiseBatch(const BatchCtx& c) {
  std::vector<Tensor> xs;
  for (std::size_t i = 0; i < c.arity(); ++i) xs.push_back(c.bx(i));
  const std::vector<Tensor> ys = c.reapply(xs);
  for (std::size_t k = 0; k < ys.size(); ++k) c.result(k, ys[k]);
}

void neverBatched(const BatchCtx& c) {
  ADJIT_UNREACHABLE(fmt::format("op '{}' has no operands, so none can be batched", ir::info(c.op.kind).name));
}

void shiftedBatch(const BatchCtx& c, std::initializer_list<std::string_view> axes) {
  std::vector<Tensor> xs;
  for (std::size_t i = 0; i < c.arity(); ++i) xs.push_back(c.bx(i));
  ir::Attrs attrs = c.op.attrs;
  for (std::string_view a : axes) attrs = shiftAxes(attrs, a);
  const std::vector<Tensor> ys = c.reapply(xs, attrs);
  for (std::size_t k = 0; k < ys.size(); ++k) c.result(k, ys[k]);
}

void leadingAxesBatch(const BatchCtx& c) { elementwiseBatch(c); }

void loopBatch(const BatchCtx& c) {
  // One scan step per example: batched operands are scanned over (their
  // axis 0), unbatched ones read whole (captured by the body).
  std::vector<Tensor> xs;
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < c.arity(); ++i)
    if (c.batched(i)) {
      xs.push_back(c.x(i));
      which.push_back(i);
    }
  auto body = [&](const std::vector<Tensor>& slices) {
    std::vector<Tensor> operands;
    std::size_t j = 0;
    for (std::size_t i = 0; i < c.arity(); ++i) operands.push_back(c.batched(i) ? slices.at(j++) : c.x(i));
    return c.reapply(operands);
  };
  const auto [carry, ys] = detail::scanCall(body, {}, xs, c.size, /*reverse=*/false, 0, "vmap", c.op.loc);
  (void)carry;
  ADJIT_ASSERT(ys.size() == c.op.results.size(), "loopBatch: a scan with another number of results than its op");
  for (std::size_t k = 0; k < ys.size(); ++k) c.result(k, ys[k]);
}

std::vector<char> batchReach(const ir::Function& g, const std::vector<char>& in) {
  std::vector<char> has(g.types.size(), 0);
  for (std::size_t i = 0; i < g.params.size(); ++i) has[static_cast<std::size_t>(g.params[i])] = in.at(i);
  for (const ir::Op& op : g.ops)
    if (std::any_of(op.operands.begin(), op.operands.end(), [&](ir::ValueId o) { return has[static_cast<std::size_t>(o)]; }))
      for (ir::ValueId r : op.results) has[static_cast<std::size_t>(r)] = 1;
  std::vector<char> out;
  for (ir::ValueId o : g.outputs) out.push_back(has[static_cast<std::size_t>(o)]);
  return out;
}

std::vector<Batched> batchInline(const ir::Function& g, const std::vector<Batched>& args, int64_t size) {
  ADJIT_ASSERT(args.size() == g.params.size(), "batchInline: one argument per parameter");
  detail::TraceState& s = currentState();
  std::vector<std::optional<Batched>> map(g.types.size());
  auto at = [&](ir::ValueId v) -> const Batched& {
    const std::optional<Batched>& b = map[static_cast<std::size_t>(v)];
    ADJIT_ASSERT(b.has_value(), "batchInline: a value used before it is defined");
    return *b;
  };
  for (std::size_t i = 0; i < args.size(); ++i) map[static_cast<std::size_t>(g.params[i])] = args[i];
  std::unordered_map<ir::ValueId, Tensor> spread;
  for (const ir::Op& op : g.ops) {
    const bool any = std::any_of(op.operands.begin(), op.operands.end(), [&](ir::ValueId o) { return at(o).batched; });
    if (!any) {
      // Nothing batched reaches it: copied as it is, run once for the whole batch.
      std::vector<ir::ValueId> operands;
      for (ir::ValueId o : op.operands) operands.push_back(at(o).t.id());
      const std::vector<ir::ValueId> rs = s.builder.create(op.kind, operands, op.attrs, op.callees, op.loc);
      for (std::size_t k = 0; k < rs.size(); ++k) map[static_cast<std::size_t>(op.results[k])] = Batched{detail::wrap(s, rs[k]), false};
      continue;
    }
    const ir::OpInfo& info = ir::info(op.kind);
    const Rules& r = rules(op.kind);
    ADJIT_ASSERT(r.batch, fmt::format("op '{}' has no batching rule (the table test checks every op has one)", info.name));
    autodiff::LocScope loc(s, op.loc);
    if (size == 0) {
      // No examples: every batched result is empty, whatever the op (a rule
      // that folds the batch into another axis, or into conv's groups, need
      // not handle a size of 0), and an effect runs for none.
      for (ir::ValueId r : op.results) {
        const Type& t = g.type(r);
        map[static_cast<std::size_t>(r)] = Batched{full(withLeading(0, t.shape), 0, t.dtype), true};
      }
      continue;
    }
    std::vector<char> set(op.results.size(), 0);
    BatchCtx ctx{
        op,
        g,
        size,
        [&](ir::ValueId v) { return at(v).t; },
        [&](ir::ValueId v) { return at(v).batched; },
        [&](std::size_t k, const Tensor& t, bool batched) {
          const Type want = batched ? Type{g.type(op.results.at(k)).dtype, withLeading(size, g.type(op.results.at(k)).shape)}
                                    : g.type(op.results.at(k));
          ADJIT_ASSERT(t.type() == want, fmt::format("the batching rule of {} gave {} for result {}, expected {}", info.name,
                                                     t.type().str(), k, want.str()));
          map[static_cast<std::size_t>(op.results[k])] = Batched{t, batched};
          set[k] = 1;
        },
        &spread,
    };
    r.batch(ctx);
    for (std::size_t k = 0; k < set.size(); ++k)
      ADJIT_ASSERT(set[k], fmt::format("the batching rule of {} set no value for result {}", info.name, k));
  }
  std::vector<Batched> outs;
  for (ir::ValueId o : g.outputs) outs.push_back(at(o));
  return outs;
}

std::string vmapFunction(const std::shared_ptr<ir::Module>& m, const std::string& name, const AxisSpec& spec) {
  const ir::Function* g = m->lookup(name);
  if (!g) throw Error("vmap: no function named @" + name + " in the module");
  auto axisText = [](const std::vector<std::optional<int64_t>>& v) {
    std::string t;
    for (const auto& a : v) t += a ? fmt::format("{},", *a) : std::string("-,");
    return t;
  };
  if (spec.in.size() != g->params.size())
    throw Error(fmt::format("vmap: in_axes has {} entries, but @{} has {} parameters", spec.in.size(), name, g->params.size()));
  if (spec.out.size() != g->outputs.size())
    throw Error(fmt::format("vmap: out_axes has {} entries, but @{} has {} results", spec.out.size(), name, g->outputs.size()));
  if (spec.size < 0) throw Error(fmt::format("vmap: the batch size must be at least 0, got {}", spec.size));
  auto checkAxis = [&](const std::optional<int64_t>& a, const Type& t, const char* what, std::size_t i) {
    if (!a) return;
    const int64_t r = t.rank() + 1;
    if (*a < -r || *a >= r)
      throw Error(fmt::format("vmap: {} {} of @{} is {} per example, so its batch axis must be in [{}, {}], got {}", what, i,
                              name, t.str(), -r, r - 1, *a));
  };
  for (std::size_t i = 0; i < spec.in.size(); ++i) checkAxis(spec.in[i], g->type(g->params[i]), "parameter", i);
  for (std::size_t i = 0; i < spec.out.size(); ++i) checkAxis(spec.out[i], g->type(g->outputs[i]), "result", i);
  const std::string variant = fmt::format(":{}:{}:{}", axisText(spec.in), axisText(spec.out), spec.size);
  return autodiff::derive(m, "vmap", name, [&](detail::TraceScope& scope, const ir::Function& f) {
    std::vector<Batched> args;
    for (std::size_t i = 0; i < f.params.size(); ++i) {
      const Type& t = f.type(f.params[i]);
      if (!spec.in[i]) {
        args.push_back({scope.param(t), false});
        continue;
      }
      const int64_t r = t.rank() + 1, axis = *spec.in[i] < 0 ? *spec.in[i] + r : *spec.in[i];
      Shape shape = t.shape;
      shape.insert(shape.begin() + axis, spec.size);
      args.push_back({moveAxis(scope.param(Type{t.dtype, shape}), axis, 0), true});
    }
    const std::vector<Batched> ys = batchInline(f, args, spec.size);
    std::vector<Tensor> outs;
    for (std::size_t k = 0; k < ys.size(); ++k) {
      if (!spec.out[k]) {
        if (ys[k].batched)
          throw Error(fmt::format("vmap: result {} of @{} depends on a batched parameter, but out_axes gives it none", k, name));
        outs.push_back(ys[k].t);
        continue;
      }
      outs.push_back(moveAxis(withBatch(ys[k].t, ys[k].batched, spec.size), 0, *spec.out[k]));
    }
    return outs;
  }, variant);
}

std::string batchFunction(const std::shared_ptr<ir::Module>& m, const std::string& name, const std::vector<char>& in,
                          const std::vector<char>& out, int64_t size) {
  AxisSpec spec{{}, {}, size};
  for (char b : in) spec.in.push_back(b ? std::optional<int64_t>(0) : std::nullopt);
  for (char b : out) spec.out.push_back(b ? std::optional<int64_t>(0) : std::nullopt);
  return vmapFunction(m, name, spec);
}

Type batchedType(const Type& t, int64_t size) { return Type{t.dtype, withLeading(size, t.shape)}; }

std::shared_ptr<ir::Module> currentModule() { return currentState().module; }

std::vector<char> operandsBatched(const BatchCtx& c) {
  std::vector<char> b;
  for (std::size_t i = 0; i < c.arity(); ++i) b.push_back(c.batched(i));
  return b;
}

std::vector<Tensor> emitOp(const BatchCtx& c, ir::OpKind kind, const std::vector<Tensor>& operands, const ir::Attrs& attrs,
                           const std::vector<std::string>& callees) {
  detail::TraceState& s = currentState();
  std::vector<ir::ValueId> ids;
  for (const Tensor& t : operands) ids.push_back(detail::valueOf(t, ir::info(kind).name, c.op.loc));
  std::vector<Tensor> out;
  for (ir::ValueId r : s.builder.create(kind, ids, attrs, callees, c.op.loc)) out.push_back(detail::wrap(s, r));
  return out;
}

} // namespace adjit::batching

namespace adjit::batching {

bool permutationMoves(const Shape& s, const std::vector<int64_t>& perm) {
  int64_t last = -1;
  for (int64_t p : perm) {
    if (s.at(static_cast<std::size_t>(p)) == 1) continue;
    if (p < last) return true;
    last = p;
  }
  return false;
}

Tensor permuteAxes(const Tensor& t, const std::vector<int64_t>& perm) {
  const Shape s = t.shape();
  if (permutationMoves(s, perm)) return transpose(t, perm);
  std::vector<int64_t> to;
  for (int64_t p : perm) to.push_back(s.at(static_cast<std::size_t>(p)));
  return to == std::vector<int64_t>(s.begin(), s.end()) ? t : reshape(t, to);
}

} // namespace adjit::batching
