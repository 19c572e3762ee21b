// autodiff/Jacobian.cpp — the library side of jvp, linearize (in a trace),
// jacfwd and jacrev: tangents pushed forward through the ops traced since a
// mark, and Jacobians as one scan over a basis.
#include "autodiff/Reverse.h"
#include "trace/Tracer.h"

#include <adjit/control_flow.h>

#include <fmt/format.h>

#include <limits>
#include <optional>

namespace adjit::detail {
namespace {

/// autodiff::forward over the ops of the current trace since `mark`, for
/// the API `api` (named in its errors at `loc`): each tangent must have its
/// primal's type; nullopt for a y no tangent reaches.
std::vector<std::optional<Tensor>> forwardTangents(const char* api, std::size_t mark, const std::vector<Tensor>& xs,
                                                   const std::vector<Tensor>& dxs, const std::vector<Tensor>& ys,
                                                   const Location& loc) {
  TraceState* s = currentTrace();
  if (!s) throw Error(fmt::format("{}: called with Tensors outside of a trace", api), loc);
  if (xs.size() != dxs.size())
    throw Error(fmt::format("{}: {} tangents for {} primals (give them in the primals' structure)", api, dxs.size(),
                            xs.size()), loc);
  autodiff::ForwardRequest r;
  r.begin = mark;
  r.end = s->fn->ops.size();
  for (std::size_t k = 0; k < xs.size(); ++k) {
    traceOf(dxs[k], api, loc);
    if (dxs[k].type() != xs[k].type())
      throw Error(fmt::format("{}: tangent {} is {}, but its primal is {}", api, k, dxs[k].type().str(),
                              xs[k].type().str()), loc);
    r.sources.push_back(valueOf(xs[k], api, loc));
    r.tangents.push_back(dxs[k]);
  }
  for (const Tensor& y : ys) r.targets.push_back(valueOf(y, api, loc));
  return autodiff::forward(r);
}

} // namespace

std::vector<Tensor> pushForward(const char* api, std::size_t mark, const std::vector<Tensor>& xs,
                                const std::vector<Tensor>& dxs, const std::vector<Tensor>& ys, const Location& loc) {
  const std::vector<std::optional<Tensor>> t = forwardTangents(api, mark, xs, dxs, ys, loc);
  std::vector<Tensor> out;
  for (std::size_t k = 0; k < ys.size(); ++k) out.push_back(t[k] ? *t[k] : zeros_like(ys[k]));
  return out;
}

Tensor jacobian(bool forward, const std::function<Tensor(const Tensor&)>& g, const Tensor& x, const Location& loc) {
  const char* api = forward ? "jacfwd" : "jacrev";
  traceOf(x, api, loc);
  if (!is_floating(x.dtype()))
    throw Error(fmt::format("{}: the differentiated argument must be floating, got {}", api, x.type().str()), loc);
  const Shape in = x.shape(); // a copy: shape() returns one
  auto jacobianShape = [&](const Shape& out) {
    Shape shape = out;
    shape.insert(shape.end(), in.begin(), in.end());
    return shape;
  };
  auto checkOut = [&](const Type& out) {
    if (!is_floating(out.dtype))
      throw Error(fmt::format("{}: the function must return a floating Tensor, got {}", api, out.str()), loc);
  };
  // jacfwd learns the output's type from the loop's steps; jacrev needs it to
  // count them, from one more trace of g (left dead in the trace, unless g
  // has effects: those run once more).
  std::optional<Type> out;
  if (!forward || x.size() == 0) {
    out = g(x).type();
    checkOut(*out);
  }
  const int64_t n = forward ? x.size() : num_elements(out->shape);
  if (n == 0) return full(jacobianShape(out->shape), 0, out->dtype);
  if (n > std::numeric_limits<int32_t>::max())
    throw Error(fmt::format("{}: {} basis vectors are more than one loop can count", api, n), loc);
  // Step i: the i-th basis vector of the input (forward) or output (reverse).
  auto body = [&](const Tensor& carry, const Tensor& i) {
    if (forward) {
      const Tensor e = reshape(one_hot(i, n, x.dtype()), x.shape());
      return std::pair{carry, jvp([&](const Tensor& z) { return g(z); }, std::tuple<Tensor>{x}, std::tuple<Tensor>{e}).second};
    }
    auto [y, back] = tracedVjp([&](const Tensor& z) { return g(z); }, x);
    const Tensor e = reshape(one_hot(i, n, out->dtype), out->shape);
    return std::pair{carry, back(e).at(0)};
  };
  auto [carry, rows] = scan(body, full(Shape{}, 0, DType::i32), iota(Shape{n}, 0, DType::i32));
  (void)carry;
  if (!forward) return reshape(rows, jacobianShape(out->shape)); // one row per output element already
  // rows: [in elements, out...]; the input's axis goes last.
  const Shape rowsShape = rows.shape(); // a copy: shape() returns one
  const Shape outShape(rowsShape.begin() + 1, rowsShape.end());
  checkOut(Type{rows.dtype(), outShape});
  const int64_t r = static_cast<int64_t>(outShape.size());
  std::vector<int64_t> perm;
  for (int64_t d = 1; d <= r; ++d) perm.push_back(d);
  perm.push_back(0);
  return reshape(transpose(rows, perm), jacobianShape(outShape));
}

} // namespace adjit::detail
