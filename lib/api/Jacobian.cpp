// api/Jacobian.cpp — the library side of jvp, linearize (in a trace),
// jacfwd and jacrev: tangents pushed forward through the ops traced since a
// mark, and Jacobians as one JVP or VJP batched over a basis (or, past a
// byte budget, one scan step per basis vector).
#include "autodiff/Reverse.h"
#include "batching/Rules.h"
#include "ir/OpInfo.h"
#include "trace/Tracer.h"

#include <adjit/control_flow.h>

#include <fmt/format.h>

#include <atomic>
#include <limits>
#include <optional>
#include <set>

namespace adjit::detail {
namespace {

/// autodiff::forward over the ops of the current trace since `mark`, for
/// the API `api` (named in its errors at `loc`): each tangent must have its
/// primal's type; nullopt for a y no tangent reaches.
std::vector<std::optional<Tensor>> forwardTangents(const char* api, const TraceMark& mark, const std::vector<Tensor>& xs,
                                                   const std::vector<Tensor>& dxs, const std::vector<Tensor>& ys,
                                                   const Location& loc) {
  TraceState* s = currentTrace();
  if (!s) throw Error(fmt::format("{}: called with Tensors outside of a trace", api), loc);
  if (xs.size() != dxs.size())
    throw Error(fmt::format("{}: {} tangents for {} primals (give them in the primals' structure)", api, dxs.size(),
                            xs.size()), loc);
  autodiff::ForwardRequest r;
  r.begin = opsSince(mark, api, loc);
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

std::vector<Tensor> pushForward(const char* api, const TraceMark& mark, const std::vector<Tensor>& xs,
                                const std::vector<Tensor>& dxs, const std::vector<Tensor>& ys, const Location& loc) {
  const std::vector<std::optional<Tensor>> t = forwardTangents(api, mark, xs, dxs, ys, loc);
  std::vector<Tensor> out;
  for (std::size_t k = 0; k < ys.size(); ++k) out.push_back(t[k] ? *t[k] : zeros_like(ys[k]));
  return out;
}

namespace {

// The rule: batched unless n basis vectors times the largest value that
// depends on one basis vector (in the traced JVP or VJP, the basis vector and
// the Jacobian's row included) passes JacobianPolicy::budget_bytes, 1 GiB by
// default. The budget bounds memory, not time: the batched program holds a
// few values of n times that size at once, where a scan step holds one
// vector's. Measured (adjit_vmap_bench --budget, one thread, f32, shared
// 2-core machine): jacfwd of sin(x) * x, batched against the scan, 0.087
// against 7.4 ms at n = 1024, 0.49 / 44 at 2048, 2.0 / 135 at 4096, 11.8 / 483
// at 8192 (256 MiB tangents); jacrev of it 0.053 / 0.053, 0.23 / 0.26,
// 3.6 / 3.7 (7.2 / 3.1 in a noisier run) and 22.0 / 21.8 ms: both write the
// n^2 Jacobian once, the batched form in one fused loop; tanh(A x) R^256 ->
// R^256, jacfwd 0.005 / 0.39 ms (its product with the basis folds to A^T,
// transforms/Fold.cpp and matmul's fold) and jacrev 0.16 / 14-20 ms. Up to 256 MiB of
// tangents the scan won on time only within run-to-run noise; past the
// budget it wins by fitting in memory.
std::atomic<JacobianPath> gPath{JacobianPath::automatic};
std::atomic<int64_t> gBudget{JacobianPolicy{}.budget_bytes};

/// Every op of `fn`, and of every function its ops call (transitively), has
/// a batching rule. A worklist over the functions, not a recursion.
bool everyOpBatches(const ir::Module& m, const ir::Function& fn) {
  std::vector<const ir::Function*> todo{&fn};
  std::set<std::string> seen{fn.name};
  while (!todo.empty()) {
    const ir::Function* f = todo.back();
    todo.pop_back();
    for (const ir::Op& op : f->ops) {
      if (!batching::rules(op.kind).batch) return false;
      for (const std::string& c : op.callees)
        if (seen.insert(c).second) {
          const ir::Function* callee = m.lookup(c);
          if (!callee) return false;
          todo.push_back(callee);
        }
    }
  }
  return true;
}

/// The bytes of the largest value of `fn` (per basis vector) that depends on
/// its first parameter, the basis vector: what the batch multiplies. Values
/// inside the bodies of loops and branches are not counted (a batched loop
/// keeps one step's values at a time).
int64_t largestTangentBytes(const ir::Function& fn) {
  std::vector<char> has(fn.types.size(), 0);
  has[static_cast<std::size_t>(fn.params.at(0))] = 1;
  int64_t most = static_cast<int64_t>(fn.type(fn.params[0]).bytes());
  for (const ir::Op& op : fn.ops) {
    if (std::none_of(op.operands.begin(), op.operands.end(), [&](ir::ValueId o) { return has[static_cast<std::size_t>(o)]; }))
      continue;
    for (ir::ValueId r : op.results) {
      has[static_cast<std::size_t>(r)] = 1;
      most = std::max(most, static_cast<int64_t>(fn.type(r).bytes()));
    }
  }
  return most;
}

/// Saturating a * b for byte counts.
int64_t timesBytes(int64_t a, int64_t b) {
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return std::numeric_limits<int64_t>::max();
  return a * b;
}

/// `step` (one JVP or VJP of a basis vector) traced once on one basis vector
/// and batched over `basis` (the n basis vectors along axis 0): [n, step's
/// result...]. nullopt where the policy keeps the scan: an op without a
/// batching rule, or n times the largest tangent value past the budget.
std::optional<Tensor> batchedRows(const char* api, const Tensor& basis, const std::function<Tensor(const Tensor&)>& step) {
  const JacobianPath path = gPath.load();
  const int64_t budget = gBudget.load();
  if (path == JacobianPath::scan) return std::nullopt;
  const Shape stacked = basis.shape(); // a copy: shape() returns one
  const int64_t n = stacked.at(0);
  const Shape per(stacked.begin() + 1, stacked.end());
  const Type vector{basis.dtype(), per};
  // The basis alone past the budget: no need to trace the batched form.
  if (path == JacobianPath::automatic && timesBytes(n, static_cast<int64_t>(vector.bytes())) > budget) return std::nullopt;
  TraceState& s = *currentTrace();
  const NestedFunction g = traceNested(s, fmt::format("{}.body", api), {vector},
                                       [&](const std::vector<Tensor>& ps) { return std::vector<Tensor>{step(ps.at(0))}; });
  auto drop = [&] { std::erase_if(s.module->functions, [&](const auto& f) { return f->name == g.name; }); };
  const ir::Function& fn = *s.module->lookup(g.name);
  const bool batches = everyOpBatches(*s.module, fn);
  if (!batches || (path == JacobianPath::automatic && timesBytes(n, largestTangentBytes(fn)) > budget)) {
    drop();
    return std::nullopt;
  }
  std::vector<batching::Batched> args{{basis, true}};
  for (ir::ValueId v : g.captured) args.push_back({wrap(s, v), false});
  std::vector<batching::Batched> ys;
  try {
    ys = batching::batchInline(fn, args, n);
  } catch (const Error&) {
    // A rule that cannot batch this use (a branch with effects under a
    // batched predicate): the scan computes it as before. What the rules
    // traced is left dead.
    drop();
    return std::nullopt;
  }
  drop();
  return batching::withBatch(ys.at(0).t, ys.at(0).batched, n);
}

} // namespace

JacobianPolicy setJacobianPolicy(const JacobianPolicy& p) {
  const JacobianPolicy before = jacobianPolicy();
  gPath.store(p.path);
  gBudget.store(p.budget_bytes);
  return before;
}

JacobianPolicy jacobianPolicy() { return JacobianPolicy{gPath.load(), gBudget.load()}; }

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
  // jacfwd learns the output's type from the JVP; jacrev needs it for the
  // basis, from one more trace of g (left dead in the trace, unless g has
  // effects: those run once more).
  std::optional<Type> out;
  if (!forward || x.size() == 0) {
    out = g(x).type();
    checkOut(*out);
  }
  const int64_t n = forward ? x.size() : num_elements(out->shape);
  if (n == 0) return full(jacobianShape(out->shape), 0, out->dtype);
  if (n > std::numeric_limits<int32_t>::max())
    throw Error(fmt::format("{}: {} basis vectors are more than one loop can count", api, n), loc);
  // The JVP along basis vector e of the input (forward) or the VJP of basis
  // vector e of the output (reverse).
  auto jvpAlong = [&](const Tensor& e) {
    return jvp([&](const Tensor& z) { return g(z); }, std::tuple<Tensor>{x}, std::tuple<Tensor>{e}).second;
  };
  auto vjpOf = [&](const Tensor& e) {
    auto [y, back] = tracedVjp([&](const Tensor& z) { return g(z); }, x);
    return back(e).at(0);
  };
  // Row i: the i-th basis vector's JVP or VJP. The basis is made in the
  // program (one_hot of an iota), not a constant of n^2 elements.
  const DType basisType = forward ? x.dtype() : out->dtype;
  const Shape& basisShape = forward ? in : out->shape;
  Shape stacked{n};
  stacked.insert(stacked.end(), basisShape.begin(), basisShape.end());
  std::optional<Tensor> rows;
  {
    const Tensor basis = reshape(one_hot(iota(Shape{n}, 0, DType::i32), n, basisType), stacked);
    rows = forward ? batchedRows(api, basis, jvpAlong) : batchedRows(api, basis, vjpOf);
  }
  if (!rows) {
    // One scan step per basis vector.
    auto body = [&](const Tensor& carry, const Tensor& i) {
      const Tensor e = reshape(one_hot(i, n, basisType), basisShape);
      return std::pair{carry, forward ? jvpAlong(e) : vjpOf(e)};
    };
    rows = scan(body, full(Shape{}, 0, DType::i32), iota(Shape{n}, 0, DType::i32)).second;
  }
  if (!forward) return reshape(*rows, jacobianShape(out->shape)); // one row per output element already
  // rows: [in elements, out...]; the input's axis goes last.
  const Shape rowsShape = rows->shape(); // a copy: shape() returns one
  const Shape outShape(rowsShape.begin() + 1, rowsShape.end());
  checkOut(Type{rows->dtype(), outShape});
  const int64_t r = static_cast<int64_t>(outShape.size());
  std::vector<int64_t> perm;
  for (int64_t d = 1; d <= r; ++d) perm.push_back(d);
  perm.push_back(0);
  return reshape(transpose(*rows, perm), jacobianShape(outShape));
}

} // namespace adjit::detail
