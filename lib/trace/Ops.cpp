// trace/Ops.cpp — the user-facing op functions. Each records IR ops in the
// current trace; numpy broadcasting is made explicit with broadcast_to ops
// here, so IR ops are shape-exact. Composite ops (mean, logsumexp, stack,
// indexing) are written in terms of IR ops. Contractions (einsum, matmul,
// dot) are in Contractions.cpp; what both share is in OpsShared.h.
#include "ir/OpInfo.h"
#include "trace/OpsShared.h"
#include "trace/Tracer.h"

#include <adjit/tensor.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <cctype>
#include <numeric>

namespace adjit {

namespace detail {

TraceState& stateOf(std::initializer_list<const Tensor*> ts, const char* op, const Location& loc) {
  TraceState* s = nullptr;
  for (const Tensor* t : ts) s = &detail::traceOf(*t, op, loc);
  if (!s) {
    s = detail::currentTrace();
    if (!s) throw Error(std::string(op) + ": called outside of a trace", loc);
  }
  return *s;
}

Tensor emit(TraceState& s, OpKind k, const std::vector<Tensor>& in, ir::Attrs attrs, const Location& loc,
            std::string_view api) {
  std::vector<ir::ValueId> ids;
  for (const Tensor& t : in) ids.push_back(detail::valueOf(t, "op", loc));
  try {
    return detail::wrap(s, s.builder.create1(k, std::move(ids), std::move(attrs), s.locOverride ? *s.locOverride : loc));
  } catch (const Error& e) {
    const std::string prefix = std::string(ir::info(k).name) + ": ";
    if (api.empty() || e.message().rfind(prefix, 0) != 0) throw;
    throw Error(std::string(api) + ": " + e.message().substr(prefix.size()), e.location());
  }
}

} // namespace detail

namespace {

Tensor unary(const char* op, OpKind k, const Tensor& x, const Location& loc) {
  return emit(stateOf({&x}, op, loc), k, {x}, {}, loc);
}

/// numpy's rule: align on the right, each pair of dimensions equal or one of them 1.
Shape broadcastShape(const char* op, const std::vector<const Tensor*>& xs, const Location& loc) {
  std::size_t rank = 0;
  for (const Tensor* x : xs) rank = std::max(rank, x->shape().size());
  Shape out(rank, 1);
  for (const Tensor* x : xs) {
    const Shape s = x->shape();
    for (std::size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      if (s[i] == o || s[i] == 1) continue;
      if (o == 1) {
        o = s[i];
        continue;
      }
      std::string types;
      for (const Tensor* y : xs) types += (types.empty() ? "" : " and ") + y->type().str();
      throw Error(fmt::format("{}: incompatible shapes {}", op, types), loc);
    }
  }
  return out;
}

} // namespace

Tensor detail::broadcastTo(TraceState& s, const Tensor& x, const Shape& shape, const Location& loc) {
  if (x.shape() == shape) return x;
  auto shared = x.trace() == s.id ? s.broadcasts.find(x.id()) : s.broadcasts.end(); // a scalar operand's constant
  if (shared != s.broadcasts.end())
    if (auto it = shared->second.find(shape); it != shared->second.end()) return detail::wrap(s, it->second);
  ir::Attrs a;
  a.set("shape", shape);
  Tensor b = emit(s, OpKind::BroadcastTo, {x}, std::move(a), loc);
  if (shared != s.broadcasts.end()) shared->second.emplace(shape, b.id());
  return b;
}

namespace {

/// A constant scalar of dtype `t`; `shared`: one per value in the trace (TraceState::scalars).
Tensor scalarConstant(TraceState& s, DType t, double v, const Location& loc, bool shared);

/// The weakly typed full() value x holds, if x is one (of this trace).
std::optional<double> weakValue(TraceState& s, const Tensor& x) {
  if (x.trace() != s.id) return std::nullopt;
  auto it = s.weak.find(x.id());
  if (it == s.weak.end()) return std::nullopt;
  return it->second;
}

} // namespace

void detail::meetDtypes(TraceState& s, const char* op, std::vector<Tensor*> xs, const Location& loc) {
  const Tensor* strong = nullptr;
  for (const Tensor* x : xs)
    if (!weakValue(s, *x)) {
      strong = x;
      break;
    }
  if (!strong) return;
  const DType to = strong->dtype();
  for (Tensor* x : xs) {
    const std::optional<double> v = weakValue(s, *x);
    if (!v || x->dtype() == to) continue;
    if (is_integer(to) && *v != std::trunc(*v))
      throw Error(fmt::format("{}: full(..., {}) without a dtype (a weak f32) meets the integer tensor {}; give full a dtype or cast",
                              op, *v, strong->type().str()), loc);
    *x = broadcastTo(s, scalarConstant(s, to, *v, loc, true), x->shape(), loc);
  }
}

std::vector<Tensor> detail::metDtypes(const char* op, std::vector<Tensor> xs, const Location& loc) {
  if (xs.empty()) return xs;
  std::vector<Tensor*> ptrs;
  for (Tensor& x : xs) ptrs.push_back(&x);
  meetDtypes(stateOf({&xs[0]}, op, loc), op, std::move(ptrs), loc);
  return xs;
}

namespace {

Tensor binary(const char* op, OpKind k, const Tensor& a0, const Tensor& b0, const Location& loc) {
  TraceState& s = stateOf({&a0, &b0}, op, loc);
  Tensor a = a0, b = b0;
  meetDtypes(s, op, {&a, &b}, loc);
  Shape shape = broadcastShape(op, {&a, &b}, loc);
  return emit(s, k, {broadcastTo(s, a, shape, loc), broadcastTo(s, b, shape, loc)}, {}, loc, op);
}

Tensor scalarConstant(TraceState& s, DType t, double v, const Location& loc, bool shared) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  const std::pair<DType, uint64_t> key{t, bits};
  if (shared)
    if (auto it = s.scalars.find(key); it != s.scalars.end()) return detail::wrap(s, it->second);
  Array a(Type{t, {}});
  a.set(0, v);
  ir::Attrs attrs;
  attrs.set("value", std::move(a));
  Tensor c = emit(s, OpKind::Constant, {}, std::move(attrs), loc);
  if (shared) {
    s.scalars.emplace(key, c.id());
    s.broadcasts[c.id()];
  }
  return c;
}

std::vector<int64_t> allAxes(int64_t rank) {
  std::vector<int64_t> a(static_cast<std::size_t>(rank));
  std::iota(a.begin(), a.end(), 0);
  return a;
}

Tensor reduce(const char* op, OpKind k, const Tensor& x, std::vector<int64_t> axes, bool keepdims, const Location& loc) {
  TraceState& s = stateOf({&x}, op, loc);
  if (axes.empty()) axes = allAxes(x.rank());
  ir::Attrs a;
  a.set("axes", std::move(axes));
  a.set("keepdims", keepdims);
  return emit(s, k, {x}, std::move(a), loc);
}

int64_t normalizeAxis(const char* op, int64_t axis, int64_t rank, const Location& loc) {
  if (axis < -rank || axis >= rank)
    throw Error(fmt::format("{}: axis {} is out of range for rank {}", op, axis, rank), loc);
  return axis < 0 ? axis + rank : axis;
}

} // namespace

Tensor scalar_like(const Tensor& like, AtScalar sc, const char* op) {
  Location loc = Location::from(sc.loc);
  TraceState& s = stateOf({&like}, op, loc);
  DType t = like.dtype();
  if (is_integer(t) && !sc.integral)
    throw Error(fmt::format("{}: cannot combine the floating-point scalar {} with the integer tensor {}; cast one of them",
                            op, sc.v, like.type().str()), loc);
  return scalarConstant(s, t, sc.v, loc, true);
}

Tensor add(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("add", OpKind::Add, a, b, Location::from(l)); }
Tensor sub(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("sub", OpKind::Sub, a, b, Location::from(l)); }
Tensor mul(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("mul", OpKind::Mul, a, b, Location::from(l)); }
Tensor div(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("div", OpKind::Div, a, b, Location::from(l)); }
Tensor pow(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("pow", OpKind::Pow, a, b, Location::from(l)); }
Tensor atan2(const Tensor& y, const Tensor& x, SrcLoc l) { return binary("atan2", OpKind::Atan2, y, x, Location::from(l)); }
Tensor maximum(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("maximum", OpKind::Maximum, a, b, Location::from(l)); }
Tensor minimum(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("minimum", OpKind::Minimum, a, b, Location::from(l)); }
Tensor fmod(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("fmod", OpKind::Fmod, a, b, Location::from(l)); }
Tensor mod(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("mod", OpKind::Mod, a, b, Location::from(l)); }
Tensor remainder(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("remainder", OpKind::Mod, a, b, Location::from(l)); }
Tensor floor_divide(const Tensor& a, const Tensor& b, SrcLoc l) {
  return binary("floor_divide", OpKind::FloorDivide, a, b, Location::from(l));
}
Tensor hypot(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("hypot", OpKind::Hypot, a, b, Location::from(l)); }
Tensor copysign(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("copysign", OpKind::Copysign, a, b, Location::from(l)); }
Tensor nextafter(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("nextafter", OpKind::Nextafter, a, b, Location::from(l)); }
Tensor xlogy(const Tensor& x, const Tensor& y, SrcLoc l) { return binary("xlogy", OpKind::Xlogy, x, y, Location::from(l)); }
Tensor xlog1py(const Tensor& x, const Tensor& y, SrcLoc l) { return binary("xlog1py", OpKind::Xlog1py, x, y, Location::from(l)); }
Tensor lt(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("lt", OpKind::Lt, a, b, Location::from(l)); }
Tensor le(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("le", OpKind::Le, a, b, Location::from(l)); }
Tensor gt(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("gt", OpKind::Gt, a, b, Location::from(l)); }
Tensor ge(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("ge", OpKind::Ge, a, b, Location::from(l)); }
Tensor eq(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("eq", OpKind::Eq, a, b, Location::from(l)); }
Tensor ne(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("ne", OpKind::Ne, a, b, Location::from(l)); }
namespace {
/// The logical functions take i1 only (the ops they record are also bitwise on integers).
void expectI1(const char* op, std::initializer_list<const Tensor*> xs, const Location& loc) {
  for (const Tensor* x : xs)
    if (x->valid() && x->dtype() != DType::i1)
      throw Error(fmt::format("{}: expected {}, got {}", op, xs.size() == 1 ? "an i1 operand" : "i1 operands", x->type().str()),
                  loc);
}
} // namespace
Tensor logical_and(const Tensor& a, const Tensor& b, SrcLoc l) {
  expectI1("and", {&a, &b}, Location::from(l));
  return binary("and", OpKind::And, a, b, Location::from(l));
}
Tensor logical_or(const Tensor& a, const Tensor& b, SrcLoc l) {
  expectI1("or", {&a, &b}, Location::from(l));
  return binary("or", OpKind::Or, a, b, Location::from(l));
}
Tensor bitwise_and(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("and", OpKind::And, a, b, Location::from(l)); }
Tensor bitwise_or(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("or", OpKind::Or, a, b, Location::from(l)); }
Tensor bitwise_xor(const Tensor& a, const Tensor& b, SrcLoc l) { return binary("xor", OpKind::Xor, a, b, Location::from(l)); }
Tensor bitwise_not(const Tensor& x, SrcLoc l) { return unary("not", OpKind::Not, x, Location::from(l)); }
Tensor shift_left(const Tensor& x, const Tensor& s, SrcLoc l) {
  return binary("shift_left", OpKind::ShiftLeft, x, s, Location::from(l));
}
Tensor shift_right_logical(const Tensor& x, const Tensor& s, SrcLoc l) {
  return binary("shift_right_logical", OpKind::ShiftRightLogical, x, s, Location::from(l));
}
Tensor shift_right_arithmetic(const Tensor& x, const Tensor& s, SrcLoc l) {
  return binary("shift_right_arithmetic", OpKind::ShiftRightArithmetic, x, s, Location::from(l));
}
Tensor population_count(const Tensor& x, SrcLoc l) {
  return unary("population_count", OpKind::PopulationCount, x, Location::from(l));
}
Tensor bitcast(const Tensor& x, DType to, SrcLoc l) {
  Location loc = Location::from(l);
  if (x.dtype() == to) return x;
  ir::Attrs a;
  a.set("dtype", to);
  return emit(stateOf({&x}, "bitcast", loc), OpKind::Bitcast, {x}, std::move(a), loc);
}

Tensor neg(const Tensor& x, SrcLoc l) { return unary("neg", OpKind::Neg, x, Location::from(l)); }
Tensor exp(const Tensor& x, SrcLoc l) { return unary("exp", OpKind::Exp, x, Location::from(l)); }
Tensor log(const Tensor& x, SrcLoc l) { return unary("log", OpKind::Log, x, Location::from(l)); }
Tensor log1p(const Tensor& x, SrcLoc l) { return unary("log1p", OpKind::Log1p, x, Location::from(l)); }
Tensor expm1(const Tensor& x, SrcLoc l) { return unary("expm1", OpKind::Expm1, x, Location::from(l)); }
Tensor sqrt(const Tensor& x, SrcLoc l) { return unary("sqrt", OpKind::Sqrt, x, Location::from(l)); }
Tensor rsqrt(const Tensor& x, SrcLoc l) { return unary("rsqrt", OpKind::Rsqrt, x, Location::from(l)); }
Tensor sin(const Tensor& x, SrcLoc l) { return unary("sin", OpKind::Sin, x, Location::from(l)); }
Tensor cos(const Tensor& x, SrcLoc l) { return unary("cos", OpKind::Cos, x, Location::from(l)); }
Tensor tanh(const Tensor& x, SrcLoc l) { return unary("tanh", OpKind::Tanh, x, Location::from(l)); }
Tensor sigmoid(const Tensor& x, SrcLoc l) { return unary("sigmoid", OpKind::Sigmoid, x, Location::from(l)); }
Tensor erf(const Tensor& x, SrcLoc l) { return unary("erf", OpKind::Erf, x, Location::from(l)); }
Tensor erf_inv(const Tensor& x, SrcLoc l) { return unary("erf_inv", OpKind::ErfInv, x, Location::from(l)); }
Tensor lgamma(const Tensor& x, SrcLoc l) { return unary("lgamma", OpKind::Lgamma, x, Location::from(l)); }
Tensor digamma(const Tensor& x, SrcLoc l) { return unary("digamma", OpKind::Digamma, x, Location::from(l)); }
Tensor abs(const Tensor& x, SrcLoc l) { return unary("abs", OpKind::Abs, x, Location::from(l)); }
Tensor sign(const Tensor& x, SrcLoc l) { return unary("sign", OpKind::Sign, x, Location::from(l)); }
Tensor floor(const Tensor& x, SrcLoc l) { return unary("floor", OpKind::Floor, x, Location::from(l)); }
Tensor ceil(const Tensor& x, SrcLoc l) { return unary("ceil", OpKind::Ceil, x, Location::from(l)); }
Tensor trunc(const Tensor& x, SrcLoc l) { return unary("trunc", OpKind::Trunc, x, Location::from(l)); }
Tensor round(const Tensor& x, SrcLoc l) { return unary("round", OpKind::Round, x, Location::from(l)); }
Tensor rint(const Tensor& x, SrcLoc l) { return unary("rint", OpKind::Rint, x, Location::from(l)); }
Tensor tan(const Tensor& x, SrcLoc l) { return unary("tan", OpKind::Tan, x, Location::from(l)); }
Tensor asin(const Tensor& x, SrcLoc l) { return unary("asin", OpKind::Asin, x, Location::from(l)); }
Tensor acos(const Tensor& x, SrcLoc l) { return unary("acos", OpKind::Acos, x, Location::from(l)); }
Tensor atan(const Tensor& x, SrcLoc l) { return unary("atan", OpKind::Atan, x, Location::from(l)); }
Tensor sinh(const Tensor& x, SrcLoc l) { return unary("sinh", OpKind::Sinh, x, Location::from(l)); }
Tensor cosh(const Tensor& x, SrcLoc l) { return unary("cosh", OpKind::Cosh, x, Location::from(l)); }
Tensor asinh(const Tensor& x, SrcLoc l) { return unary("asinh", OpKind::Asinh, x, Location::from(l)); }
Tensor acosh(const Tensor& x, SrcLoc l) { return unary("acosh", OpKind::Acosh, x, Location::from(l)); }
Tensor atanh(const Tensor& x, SrcLoc l) { return unary("atanh", OpKind::Atanh, x, Location::from(l)); }
Tensor log2(const Tensor& x, SrcLoc l) { return unary("log2", OpKind::Log2, x, Location::from(l)); }
Tensor log10(const Tensor& x, SrcLoc l) { return unary("log10", OpKind::Log10, x, Location::from(l)); }
Tensor exp2(const Tensor& x, SrcLoc l) { return unary("exp2", OpKind::Exp2, x, Location::from(l)); }
Tensor cbrt(const Tensor& x, SrcLoc l) { return unary("cbrt", OpKind::Cbrt, x, Location::from(l)); }

Tensor integer_pow(const Tensor& x, int64_t n, SrcLoc l) {
  Location loc = Location::from(l);
  ir::Attrs a;
  a.set("y", n);
  return emit(stateOf({&x}, "integer_pow", loc), OpKind::IntegerPow, {x}, std::move(a), loc);
}

Tensor logical_not(const Tensor& x, SrcLoc l) {
  expectI1("not", {&x}, Location::from(l));
  return unary("not", OpKind::Not, x, Location::from(l));
}
Tensor operator!(const Tensor& x) {
  try {
    expectI1("not", {&x}, {});
    return unary("not", OpKind::Not, x, {});
  } catch (const Error& e) { // `!` cannot know its line (tensor.h): the line that made x is the nearest known
    const TraceState* s = detail::currentTrace();
    throw Error(e.message(), s && x.valid() && x.trace() == s->id ? detail::madeAt(*s->fn, x.id()) : Location{});
  }
}

Tensor where(const Tensor& c, const Tensor& a0, const Tensor& b0, SrcLoc l) {
  Location loc = Location::from(l);
  TraceState& s = stateOf({&c, &a0, &b0}, "where", loc);
  Tensor a = a0, b = b0;
  meetDtypes(s, "where", {&a, &b}, loc);
  Shape shape = broadcastShape("where", {&c, &a, &b}, loc);
  return emit(s, OpKind::Select,
              {broadcastTo(s, c, shape, loc), broadcastTo(s, a, shape, loc), broadcastTo(s, b, shape, loc)}, {}, loc,
              "where");
}

Tensor clip(const Tensor& x0, const Tensor& lo0, const Tensor& hi0, SrcLoc l) {
  Location loc = Location::from(l);
  TraceState& s = stateOf({&x0, &lo0, &hi0}, "clip", loc);
  Tensor x = x0, lo = lo0, hi = hi0;
  meetDtypes(s, "clip", {&x, &lo, &hi}, loc);
  Shape shape = broadcastShape("clip", {&x, &lo, &hi}, loc);
  return emit(s, OpKind::Clip, {broadcastTo(s, x, shape, loc), broadcastTo(s, lo, shape, loc), broadcastTo(s, hi, shape, loc)},
              {}, loc);
}

Tensor clip(const Tensor& x, AtScalar lo, AtScalar hi) {
  return clip(x, scalar_like(x, lo, "clip"), scalar_like(x, hi, "clip"), lo.loc);
}

Tensor cast(const Tensor& x, DType to, SrcLoc l) {
  Location loc = Location::from(l);
  if (x.dtype() == to) return x;
  ir::Attrs a;
  a.set("dtype", to);
  return emit(stateOf({&x}, "cast", loc), OpKind::Cast, {x}, std::move(a), loc);
}

Tensor stop_gradient(const Tensor& x, SrcLoc l) { return unary("stop_gradient", OpKind::StopGradient, x, Location::from(l)); }
static Tensor triangle(const char* api, OpKind kind, const Tensor& x, int64_t k, SrcLoc l) {
  Location loc = Location::from(l);
  ir::Attrs a;
  a.set("k", k);
  return emit(stateOf({&x}, api, loc), kind, {x}, std::move(a), loc);
}
Tensor tril(const Tensor& x, int64_t k, SrcLoc l) { return triangle("tril", OpKind::Tril, x, k, l); }
Tensor triu(const Tensor& x, int64_t k, SrcLoc l) { return triangle("triu", OpKind::Triu, x, k, l); }

Tensor prevent_gradient(const Tensor& x, std::string message, SrcLoc l) {
  Location loc = Location::from(l);
  ir::Attrs a;
  a.set("message", std::move(message));
  return emit(stateOf({&x}, "prevent_gradient", loc), OpKind::PreventGradient, {x}, std::move(a), loc);
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& low, const std::vector<int64_t>& high,
           std::vector<int64_t> interior, SrcLoc l) {
  Location loc = Location::from(l);
  TraceState& s = stateOf({&x}, "pad", loc);
  if (interior.empty()) interior.assign(low.size(), 0);
  ir::Attrs a;
  a.set("low", low);
  a.set("high", high);
  a.set("interior", std::move(interior));
  return emit(s, OpKind::Pad, {x}, std::move(a), loc);
}

Tensor pad_sum(const std::vector<Tensor>& xs0, const Shape& shape, const std::vector<std::vector<int64_t>>& low,
               const std::vector<std::vector<int64_t>>& interior, SrcLoc l) {
  Location loc = Location::from(l);
  if (xs0.empty()) throw Error("pad_sum: expected at least one tensor", loc);
  TraceState& s = stateOf({&xs0[0]}, "pad_sum", loc);
  for (const Tensor& x : xs0) detail::traceOf(x, "pad_sum", loc);
  const std::vector<Tensor> xs = metDtypes("pad_sum", xs0, loc);
  if (low.size() != xs.size() || (!interior.empty() && interior.size() != xs.size()))
    throw Error(fmt::format("pad_sum: expected one row of low{} per tensor ({}), got {}{}",
                            interior.empty() ? "" : " and of interior", xs.size(), low.size(),
                            interior.empty() ? "" : fmt::format(" and {}", interior.size())),
                loc);
  std::vector<int64_t> lo, it;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    const std::size_t r = shape.size();
    if (low[k].size() != r || (!interior.empty() && interior[k].size() != r))
      throw Error(fmt::format("pad_sum: tensor {} is placed by {} low and {} interior entries; expected {} (the rank of {})",
                              k, low[k].size(), interior.empty() ? r : interior[k].size(), r, shape_str(shape)),
                  loc);
    lo.insert(lo.end(), low[k].begin(), low[k].end());
    if (interior.empty()) it.insert(it.end(), r, 0);
    else it.insert(it.end(), interior[k].begin(), interior[k].end());
  }
  ir::Attrs a;
  a.set("shape", shape);
  a.set("low", std::move(lo));
  a.set("interior", std::move(it));
  return emit(s, OpKind::PadSum, xs, std::move(a), loc);
}

Tensor constant(const Array& value, SrcLoc l) {
  Location loc = Location::from(l);
  ir::Attrs a;
  a.set("value", value);
  return emit(stateOf({}, "constant", loc), OpKind::Constant, {}, std::move(a), loc);
}

Tensor full(const Shape& shape, double value, DType dtype, SrcLoc l) {
  Location loc = Location::from(l);
  TraceState& s = stateOf({}, "full", loc);
  for (int64_t d : shape)
    if (d < 0) throw Error("full: negative dimension in shape " + shape_str(shape), loc);
  return broadcastTo(s, scalarConstant(s, dtype, value, loc, false), shape, loc);
}

Tensor full(const Shape& shape, double value, SrcLoc l) {
  Tensor t = full(shape, value, DType::f32, l);
  TraceState& s = stateOf({&t}, "full", Location::from(l));
  s.weak[t.id()] = value;
  return t;
}

Tensor zeros_like(const Tensor& x, SrcLoc l) { return full(x.shape(), 0, x.dtype(), l); }
Tensor ones_like(const Tensor& x, SrcLoc l) { return full(x.shape(), 1, x.dtype(), l); }

Tensor iota(const Shape& shape, int64_t axis, DType dtype, SrcLoc l) {
  Location loc = Location::from(l);
  ir::Attrs a;
  a.set("shape", shape);
  a.set("axis", normalizeAxis("iota", axis, static_cast<int64_t>(shape.size()), loc));
  a.set("dtype", dtype);
  return emit(stateOf({}, "iota", loc), OpKind::Iota, {}, std::move(a), loc);
}

Tensor reshape(const Tensor& x, const std::vector<int64_t>& shape, SrcLoc l) {
  Location loc = Location::from(l);
  TraceState& s = stateOf({&x}, "reshape", loc);
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) throw Error("reshape: only one dimension may be -1, got " + shape_str(shape), loc);
      infer = static_cast<int64_t>(i);
    } else if (out[i] < 0) {
      throw Error("reshape: invalid dimension " + std::to_string(out[i]) + " in " + shape_str(shape), loc);
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.size() % known != 0)
      throw Error(fmt::format("reshape: cannot reshape {} ({} elements) to {}", x.type().str(), x.size(), shape_str(shape)), loc);
    out[infer] = x.size() / known;
  }
  if (out == x.shape()) return x;
  ir::Attrs a;
  a.set("shape", out);
  return emit(s, OpKind::Reshape, {x}, std::move(a), loc);
}

Tensor broadcast_to(const Tensor& x, const Shape& shape, SrcLoc l) {
  Location loc = Location::from(l);
  TraceState& s = stateOf({&x}, "broadcast_to", loc);
  if (x.shape() == shape) return x;
  ir::Attrs a;
  a.set("shape", shape);
  return emit(s, OpKind::BroadcastTo, {x}, std::move(a), loc);
}

Tensor transpose(const Tensor& x, std::vector<int64_t> perm, SrcLoc l) {
  Location loc = Location::from(l);
  TraceState& s = stateOf({&x}, "transpose", loc);
  if (perm.empty()) {
    perm = allAxes(x.rank());
    std::reverse(perm.begin(), perm.end());
  }
  for (int64_t& p : perm) p = normalizeAxis("transpose", p, x.rank(), loc);
  ir::Attrs a;
  a.set("perm", std::move(perm));
  return emit(s, OpKind::Transpose, {x}, std::move(a), loc);
}

Tensor slice(const Tensor& x, const std::vector<int64_t>& start, const std::vector<int64_t>& limit,
             std::vector<int64_t> stride, SrcLoc l) {
  Location loc = Location::from(l);
  TraceState& s = stateOf({&x}, "slice", loc);
  if (stride.empty()) stride.assign(start.size(), 1);
  ir::Attrs a;
  a.set("start", start);
  a.set("limit", limit);
  a.set("stride", std::move(stride));
  return emit(s, OpKind::Slice, {x}, std::move(a), loc);
}

Tensor concatenate(const std::vector<Tensor>& xs0, int64_t axis, SrcLoc l) {
  Location loc = Location::from(l);
  if (xs0.empty()) throw Error("concatenate: expected at least one tensor", loc);
  TraceState& s = stateOf({&xs0[0]}, "concatenate", loc);
  for (const Tensor& x : xs0) detail::traceOf(x, "concatenate", loc);
  const std::vector<Tensor> xs = metDtypes("concatenate", xs0, loc);
  if (xs.size() == 1) return xs[0];
  ir::Attrs a;
  a.set("axis", normalizeAxis("concatenate", axis, xs[0].rank(), loc));
  return emit(s, OpKind::Concatenate, xs, std::move(a), loc);
}

Tensor stack(const std::vector<Tensor>& xs0, int64_t axis, SrcLoc l) {
  Location loc = Location::from(l);
  if (xs0.empty()) throw Error("stack: expected at least one tensor", loc);
  const std::vector<Tensor> xs = metDtypes("stack", xs0, loc);
  int64_t ax = normalizeAxis("stack", axis, xs[0].rank() + 1, loc);
  std::vector<Tensor> parts;
  for (const Tensor& x : xs) {
    if (x.type() != xs[0].type())
      throw Error(fmt::format("stack: all tensors must have one type, got {} and {}", xs[0].type().str(), x.type().str()), loc);
    Shape s = x.shape();
    s.insert(s.begin() + ax, 1);
    parts.push_back(reshape(x, s, l));
  }
  return concatenate(parts, ax, l);
}

Tensor Tensor::at(int64_t i, std::source_location l) const {
  Location loc = Location::from(l);
  if (rank() == 0) throw Error("index: cannot index the scalar " + type().str(), loc);
  const int64_t n = shape()[0];
  if (i < -n || i >= n)
    throw Error(fmt::format("index: index {} is out of range for axis 0 of size {} ({})", i, n, type().str()), loc);
  if (i < 0) i += n;
  std::vector<int64_t> start(shape().size(), 0), limit = shape();
  start[0] = i;
  limit[0] = i + 1;
  const Shape full = shape();
  Shape rest(full.begin() + 1, full.end());
  return reshape(slice(*this, start, limit, {}, l), rest, l);
}

Tensor Tensor::operator()(const IndexItem& a) const { return index({a}); }
Tensor Tensor::operator()(const IndexItem& a, const IndexItem& b) const { return index({a, b}); }
Tensor Tensor::operator()(const IndexItem& a, const IndexItem& b, const IndexItem& c) const { return index({a, b, c}); }
Tensor Tensor::operator()(const IndexItem& a, const IndexItem& b, const IndexItem& c, const IndexItem& d) const {
  return index({a, b, c, d});
}
Tensor Tensor::operator()(const IndexItem& a, const IndexItem& b, const IndexItem& c, const IndexItem& d,
                          const IndexItem& e) const {
  return index({a, b, c, d, e});
}
Tensor Tensor::operator()(const IndexItem& a, const IndexItem& b, const IndexItem& c, const IndexItem& d,
                          const IndexItem& e, const IndexItem& f) const {
  return index({a, b, c, d, e, f});
}

Tensor Tensor::index(const std::vector<IndexItem>& items) const {
  const SrcLoc l = items.empty() ? std::source_location::current() : items[0].loc;
  const Location loc = Location::from(l);
  const Shape in = shape();
  const int64_t rank = static_cast<int64_t>(in.size());
  auto fail = [&](const std::string& why) { return Error("index: " + why + " (indexing " + type().str() + ")", loc); };
  // Items that name an axis; an ellipsis stands for the rest.
  int64_t named = 0, ellipses = 0, tensors = 0;
  for (const IndexItem& it : items) {
    if (std::holds_alternative<Ellipsis>(it.what)) ++ellipses;
    else if (!std::holds_alternative<NewAxis>(it.what)) ++named;
    if (const Tensor* t = std::get_if<Tensor>(&it.what); t && (!t->valid() || t->rank() > 0)) ++tensors;
  }
  if (ellipses > 1) throw fail("more than one ellipsis");
  if (tensors > 1) throw fail("more than one Tensor index of rank >= 1 (index one axis at a time)");
  if (named > rank) throw fail(fmt::format("{} axes named, but the tensor has {}", named, rank));
  std::vector<IndexItem> full;
  for (const IndexItem& it : items) {
    if (!std::holds_alternative<Ellipsis>(it.what)) {
      full.push_back(it);
      continue;
    }
    for (int64_t k = 0; k < rank - named; ++k) full.push_back(IndexItem(all, it.loc));
  }
  if (!ellipses)
    for (int64_t k = named; k < rank; ++k) full.push_back(IndexItem(all, l));
  // One strided slice for integers and positive steps; one dynamic_slice for
  // run-time integers and dslices; reversed ranges and a Tensor index are
  // takes along their axis; then a reshape drops the integer axes and
  // inserts the new ones.
  std::vector<int64_t> start(in.size(), 0), limit = in, stride(in.size(), 1);
  std::vector<std::pair<int64_t, std::vector<int32_t>>> reversed; // axis, indices
  std::optional<std::pair<int64_t, Tensor>> picked;
  std::vector<std::optional<Tensor>> dynStart(in.size());
  std::vector<int64_t> dynSize = in;
  Shape out;
  int64_t d = 0;
  for (const IndexItem& it : full) {
    if (std::holds_alternative<NewAxis>(it.what)) {
      out.push_back(1);
      continue;
    }
    const int64_t n = in[static_cast<std::size_t>(d)];
    if (const int64_t* i = std::get_if<int64_t>(&it.what)) {
      if (*i < -n || *i >= n) throw fail(fmt::format("index {} is out of range for axis {} of size {}", *i, d, n));
      start[static_cast<std::size_t>(d)] = *i < 0 ? *i + n : *i;
      limit[static_cast<std::size_t>(d)] = start[static_cast<std::size_t>(d)] + 1;
    } else if (const Range* r = std::get_if<Range>(&it.what)) {
      if (r->step == 0) throw fail(fmt::format("a range step of 0 along axis {}", d));
      // numpy's slice.indices: normalise, then clip to the axis.
      auto bound = [&](std::optional<int64_t> v, int64_t dflt) {
        if (!v) return dflt;
        int64_t b = *v < 0 ? *v + n : *v;
        return r->step > 0 ? std::clamp<int64_t>(b, 0, n) : std::clamp<int64_t>(b, -1, n - 1);
      };
      const int64_t b = bound(r->start, r->step > 0 ? 0 : n - 1), e = bound(r->stop, r->step > 0 ? n : -1);
      int64_t count = r->step > 0 ? (e - b + r->step - 1) / r->step : (b - e - r->step - 1) / -r->step;
      count = std::max<int64_t>(count, 0);
      if (r->step > 0) {
        start[static_cast<std::size_t>(d)] = count ? b : 0;
        limit[static_cast<std::size_t>(d)] = count ? std::min(n, b + (count - 1) * r->step + 1) : 0;
        stride[static_cast<std::size_t>(d)] = r->step;
      } else {
        std::vector<int32_t> idx;
        for (int64_t k = 0; k < count; ++k) idx.push_back(static_cast<int32_t>(b + k * r->step));
        reversed.push_back({d, std::move(idx)});
      }
      out.push_back(count);
    } else if (const Tensor* t = std::get_if<Tensor>(&it.what)) {
      if (!is_integer(t->dtype())) throw fail("a Tensor index must be i32 or i64, got " + t->type().str());
      if (t->rank() == 0) {
        // a run-time integer: negative counts from the end, then clamped
        dynStart[static_cast<std::size_t>(d)] = where(lt(*t, scalar_like(*t, 0, "index"), it.loc),
                                                      add(*t, scalar_like(*t, n, "index"), it.loc), *t, it.loc);
        dynSize[static_cast<std::size_t>(d)] = 1;
      } else {
        picked = {d, *t};
        for (int64_t e : t->shape()) out.push_back(e);
      }
    } else if (const DynamicRange* r = std::get_if<DynamicRange>(&it.what)) {
      if (!r->start.valid() || !is_integer(r->start.dtype()) || r->start.rank() != 0)
        throw fail("a dslice start must be an i32 or i64 scalar Tensor, got " +
                   (r->start.valid() ? r->start.type().str() : std::string("an empty Tensor")));
      if (r->size < 0 || r->size > n)
        throw fail(fmt::format("dslice of size {} along axis {} of size {}", r->size, d, n));
      dynStart[static_cast<std::size_t>(d)] = r->start;
      dynSize[static_cast<std::size_t>(d)] = r->size;
      out.push_back(r->size);
    } else {
      out.push_back(n);
    }
    ++d;
  }
  Tensor r = slice(*this, start, limit, stride, l);
  if (std::any_of(dynStart.begin(), dynStart.end(), [](const std::optional<Tensor>& t) { return t.has_value(); })) {
    std::vector<StartIndex> starts;
    const Shape sliced = r.shape();
    for (std::size_t a = 0; a < dynStart.size(); ++a) {
      starts.push_back(dynStart[a] ? StartIndex(*dynStart[a]) : StartIndex(0));
      if (!dynStart[a]) dynSize[a] = sliced[a]; // the static slice's extent
    }
    r = dynamic_slice(r, starts, dynSize, l);
  }
  for (auto& [axis, idx] : reversed) {
    const int64_t count = static_cast<int64_t>(idx.size());
    r = take(r, constant(Array(std::move(idx), {count}), l), axis, l);
  }
  if (picked) r = take(r, picked->second, picked->first, l);
  return reshape(r, out, l);
}

namespace {
/// An integer scalar start index as a Tensor of the trace (a C++ integer as an i64 constant).
Tensor startTensor(const char* op, const StartIndex& s, std::size_t axis, const SrcLoc& l) {
  if (const int64_t* i = std::get_if<int64_t>(&s.what)) return full({}, static_cast<double>(*i), DType::i64, l);
  const Tensor& t = std::get<Tensor>(s.what);
  if (!t.valid()) throw Error(fmt::format("{}: start index {} is an empty Tensor", op, axis), Location::from(l));
  if (!is_integer(t.dtype()) || t.rank() != 0)
    throw Error(fmt::format("{}: start index {} must be an i32 or i64 scalar, got {}", op, axis, t.type().str()),
                Location::from(l));
  return t;
}
} // namespace

Tensor dynamic_slice(const Tensor& x, const std::vector<StartIndex>& starts, const std::vector<int64_t>& sizes, SrcLoc l) {
  Location loc = Location::from(l);
  if (static_cast<int64_t>(starts.size()) != x.rank())
    throw Error(fmt::format("dynamic_slice: expected {} start indices (one per axis of {}), got {}", x.rank(),
                            x.type().str(), starts.size()), loc);
  std::vector<Tensor> in{x};
  for (std::size_t d = 0; d < starts.size(); ++d) in.push_back(startTensor("dynamic_slice", starts[d], d, l));
  ir::Attrs a;
  a.set("sizes", sizes);
  return emit(stateOf({&x}, "dynamic_slice", loc), OpKind::DynamicSlice, in, std::move(a), loc);
}

Tensor dynamic_update_slice(const Tensor& x, const Tensor& update, const std::vector<StartIndex>& starts, SrcLoc l) {
  Location loc = Location::from(l);
  if (static_cast<int64_t>(starts.size()) != x.rank())
    throw Error(fmt::format("dynamic_update_slice: expected {} start indices (one per axis of {}), got {}", x.rank(),
                            x.type().str(), starts.size()), loc);
  TraceState& s = stateOf({&x, &update}, "dynamic_update_slice", loc);
  Tensor xx = x, u = update;
  meetDtypes(s, "dynamic_update_slice", {&xx, &u}, loc);
  std::vector<Tensor> in{xx, u};
  for (std::size_t d = 0; d < starts.size(); ++d) in.push_back(startTensor("dynamic_update_slice", starts[d], d, l));
  return emit(s, OpKind::DynamicUpdateSlice, in, {}, loc);
}

std::vector<Tensor> sort(const std::vector<Tensor>& operands, int64_t axis, bool descending, SrcLoc l) {
  Location loc = Location::from(l);
  if (operands.empty()) throw Error("sort: expected at least one operand (the keys), got none", loc);
  const Tensor& k = operands[0];
  TraceState& s = stateOf({&k}, "sort", loc);
  if (k.rank() == 0) throw Error("sort: expected keys of rank >= 1, got " + k.type().str(), loc);
  ir::Attrs a;
  a.set("axis", normalizeAxis("sort", axis, k.rank(), loc));
  a.set("descending", descending);
  std::vector<ir::ValueId> ids;
  for (const Tensor& t : operands) ids.push_back(detail::valueOf(t, "sort", loc));
  std::vector<Tensor> out;
  for (ir::ValueId v : s.builder.create(OpKind::Sort, ids, std::move(a), {}, s.locOverride ? *s.locOverride : loc))
    out.push_back(detail::wrap(s, v));
  return out;
}

Tensor sort(const Tensor& x, int64_t axis, bool descending, SrcLoc l) {
  return sort(std::vector<Tensor>{x}, axis, descending, l)[0];
}

Tensor argsort(const Tensor& x, int64_t axis, bool descending, DType dtype, SrcLoc l) {
  Location loc = Location::from(l);
  if (dtype != DType::i32 && dtype != DType::i64)
    throw Error(fmt::format("argsort: dtype must be i32 or i64, got {}", name_of(dtype)), loc);
  if (x.valid() && x.rank() == 0) throw Error("argsort: expected a tensor of rank >= 1, got " + x.type().str(), loc);
  const int64_t ax = normalizeAxis("argsort", axis, x.rank(), loc);
  return sort({x, iota(x.shape(), ax, dtype, l)}, ax, descending, l)[1];
}

std::pair<Tensor, Tensor> sort_key_val(const Tensor& keys, const Tensor& values, int64_t axis, bool descending, SrcLoc l) {
  std::vector<Tensor> r = sort({keys, values}, axis, descending, l);
  return {r[0], r[1]};
}

TopK top_k(const Tensor& x, int64_t k, DType dtype, SrcLoc l) {
  Location loc = Location::from(l);
  if (x.valid() && x.rank() == 0) throw Error("top_k: expected a tensor of rank >= 1, got " + x.type().str(), loc);
  const int64_t n = x.valid() ? x.shape().back() : 0;
  if (k < 0 || k > n)
    throw Error(fmt::format("top_k: k must be in [0, {}] (the last axis of {}), got {}", n, x.type().str(), k), loc);
  if (dtype != DType::i32 && dtype != DType::i64)
    throw Error(fmt::format("top_k: dtype must be i32 or i64, got {}", name_of(dtype)), loc);
  TraceState& s = stateOf({&x}, "top_k", loc);
  ir::Attrs a;
  a.set("k", k);
  a.set("dtype", dtype);
  const std::vector<ir::ValueId> r = s.builder.create(OpKind::TopK, {detail::valueOf(x, "top_k", loc)}, std::move(a), {},
                                                      s.locOverride ? *s.locOverride : loc);
  return {detail::wrap(s, r[0]), detail::wrap(s, r[1])};
}

Tensor searchsorted(const Tensor& sorted, const Tensor& values, std::string_view side, DType dtype, SrcLoc l) {
  Location loc = Location::from(l);
  if (side != "left" && side != "right")
    throw Error(fmt::format("searchsorted: side must be \"left\" or \"right\", got \"{}\"", side), loc);
  TraceState& s = stateOf({&sorted, &values}, "searchsorted", loc);
  Tensor a = sorted, v = values;
  meetDtypes(s, "searchsorted", {&a, &v}, loc);
  ir::Attrs at;
  at.set("right", side == "right");
  at.set("dtype", dtype);
  return emit(s, OpKind::SearchSorted, {a, v}, std::move(at), loc);
}

Tensor take(const Tensor& x, const Tensor& indices, int64_t axis, SrcLoc l) {
  Location loc = Location::from(l);
  ir::Attrs a;
  a.set("axis", normalizeAxis("take", axis, x.rank(), loc));
  return emit(stateOf({&x, &indices}, "take", loc), OpKind::Gather, {x, indices}, std::move(a), loc, "take");
}

namespace {
/// An op over x along one axis, with one more attribute (argmax's dtype, cumsum's reverse).
Tensor alongAxis(const char* op, OpKind k, const Tensor& x, int64_t axis, const char* name, ir::Attr extra,
                 const Location& loc) {
  ir::Attrs a;
  a.set("axis", normalizeAxis(op, axis, x.rank(), loc));
  a.set(name, std::move(extra));
  return emit(stateOf({&x}, op, loc), k, {x}, std::move(a), loc);
}
} // namespace

Tensor cumsum(const Tensor& x, int64_t axis, bool reverse, SrcLoc l) { return alongAxis("cumsum", OpKind::Cumsum, x, axis, "reverse", reverse, Location::from(l)); }
Tensor cumprod(const Tensor& x, int64_t axis, bool reverse, SrcLoc l) { return alongAxis("cumprod", OpKind::Cumprod, x, axis, "reverse", reverse, Location::from(l)); }

Tensor argmax(const Tensor& x, int64_t axis, DType dtype, SrcLoc l) { return alongAxis("argmax", OpKind::ArgMax, x, axis, "dtype", dtype, Location::from(l)); }
Tensor argmin(const Tensor& x, int64_t axis, DType dtype, SrcLoc l) { return alongAxis("argmin", OpKind::ArgMin, x, axis, "dtype", dtype, Location::from(l)); }

Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype, SrcLoc l) {
  Location loc = Location::from(l);
  ir::Attrs a;
  a.set("depth", depth);
  a.set("dtype", dtype);
  return emit(stateOf({&indices}, "one_hot", loc), OpKind::OneHot, {indices}, std::move(a), loc);
}

Tensor scatter_add(const Tensor& x, const Tensor& indices, const Tensor& updates, int64_t axis, SrcLoc l) {
  Location loc = Location::from(l);
  ir::Attrs a;
  a.set("axis", normalizeAxis("scatter_add", axis, x.rank(), loc));
  return emit(stateOf({&x, &indices, &updates}, "scatter_add", loc), OpKind::ScatterAdd, {x, indices, updates},
              std::move(a), loc);
}

Tensor sum(const Tensor& x, std::vector<int64_t> axes, bool k, SrcLoc l) { return reduce("reduce_sum", OpKind::ReduceSum, x, std::move(axes), k, Location::from(l)); }
Tensor prod(const Tensor& x, std::vector<int64_t> axes, bool k, SrcLoc l) { return reduce("reduce_prod", OpKind::ReduceProd, x, std::move(axes), k, Location::from(l)); }
Tensor max(const Tensor& x, std::vector<int64_t> axes, bool k, SrcLoc l) { return reduce("reduce_max", OpKind::ReduceMax, x, std::move(axes), k, Location::from(l)); }
Tensor min(const Tensor& x, std::vector<int64_t> axes, bool k, SrcLoc l) { return reduce("reduce_min", OpKind::ReduceMin, x, std::move(axes), k, Location::from(l)); }

Tensor mean(const Tensor& x, std::vector<int64_t> axes, bool keepdims, SrcLoc l) {
  Location loc = Location::from(l);
  if (axes.empty()) axes = allAxes(x.rank());
  int64_t count = 1;
  for (int64_t a : axes) count *= x.shape()[normalizeAxis("mean", a, x.rank(), loc)];
  Tensor s = sum(x, axes, keepdims, l);
  return div(s, full(s.shape(), static_cast<double>(count), s.dtype(), l), l);
}

Tensor logsumexp(const Tensor& x, std::vector<int64_t> axes, bool keepdims, SrcLoc l) {
  Location loc = Location::from(l);
  if (axes.empty()) axes = allAxes(x.rank());
  // Shift by the max where it is finite (an all -inf row stays -inf, not NaN).
  // The shift's gradient is exactly zero (1 - sum(softmax)), so it is not
  // differentiated at all.
  Tensor m = stop_gradient(max(x, axes, true, l), l);
  Tensor finite = eq(sub(m, m, l), zeros_like(m, l), l);
  Tensor shift = where(finite, m, zeros_like(m, l), l);
  Tensor r = add(log(sum(exp(sub(x, shift, l), l), axes, true, l), l), shift, l);
  if (keepdims) return r;
  Shape out;
  for (int64_t d = 0; d < x.rank(); ++d)
    if (std::find_if(axes.begin(), axes.end(), [&](int64_t a) { return normalizeAxis("logsumexp", a, x.rank(), loc) == d; }) == axes.end())
      out.push_back(x.shape()[d]);
  return reshape(r, out, l);
}

Tensor softmax(const Tensor& x, std::vector<int64_t> axes, SrcLoc l) {
  // exp(x - logsumexp(x)): the shift by the max is inside logsumexp.
  return exp(sub(x, logsumexp(x, std::move(axes), true, l), l), l);
}

Tensor log_softmax(const Tensor& x, std::vector<int64_t> axes, SrcLoc l) {
  return sub(x, logsumexp(x, std::move(axes), true, l), l);
}

#define ADJIT_SCALAR_OPERATORS(OP, FN, NAME)                                                      \
  Tensor operator OP(At a, AtScalar b) { return FN(a.t, scalar_like(a.t, b, NAME), a.loc); }      \
  Tensor operator OP(AtScalar a, const Tensor& b) { return FN(scalar_like(b, a, NAME), b, a.loc); }
ADJIT_SCALAR_OPERATORS(+, add, "add")
ADJIT_SCALAR_OPERATORS(-, sub, "sub")
ADJIT_SCALAR_OPERATORS(*, mul, "mul")
ADJIT_SCALAR_OPERATORS(/, div, "div")
ADJIT_SCALAR_OPERATORS(<, lt, "lt")
ADJIT_SCALAR_OPERATORS(<=, le, "le")
ADJIT_SCALAR_OPERATORS(>, gt, "gt")
ADJIT_SCALAR_OPERATORS(>=, ge, "ge")
#undef ADJIT_SCALAR_OPERATORS
#define ADJIT_SCALAR_FUNCTION(FN)                                                                  \
  Tensor FN(const Tensor& a, AtScalar b) { return FN(a, scalar_like(a, b, #FN), b.loc); }             \
  Tensor FN(AtScalar a, const Tensor& b) { return FN(scalar_like(b, a, #FN), b, a.loc); }
ADJIT_SCALAR_BINARY_FUNCTIONS(ADJIT_SCALAR_FUNCTION)
#undef ADJIT_SCALAR_FUNCTION
Tensor operator==(At a, AtScalar b) { return eq(a.t, scalar_like(a.t, b, "eq"), a.loc); }
Tensor operator==(AtScalar a, At b) { return eq(scalar_like(b.t, a, "eq"), b.t, a.loc); }
Tensor operator!=(At a, AtScalar b) { return ne(a.t, scalar_like(a.t, b, "ne"), a.loc); }
Tensor operator!=(AtScalar a, At b) { return ne(scalar_like(b.t, a, "ne"), b.t, a.loc); }

} // namespace adjit
