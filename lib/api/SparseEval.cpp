// api/SparseEval.cpp — sparse_jacobian and sparse_hessian: the plan of a
// signature (pattern, coloring, seeds, where each nonzero is in the
// compressed product) and the traced compressed evaluation.
#include "ir/IR.h"
#include "sparsity/Coloring.h"
#include "support/Assert.h"
#include "trace/Tracer.h"

#include <adjit/sparse_derivatives.h>

#include <fmt/format.h>

#include <mutex>
#include <unordered_map>

namespace adjit {

template <> Array BasicSparseMatrix<Array>::to_dense() const {
  Array d(values.dtype(), Shape{rows, cols});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = row_ptr[static_cast<std::size_t>(r)]; k < row_ptr[static_cast<std::size_t>(r) + 1]; ++k)
      d.set(r * cols + col_idx[static_cast<std::size_t>(k)], values.at(k));
  return d;
}

// In a trace: one gather from the values with a zero appended, each dense
// element reading its nonzero or that zero.
template <> Tensor BasicSparseMatrix<Tensor>::to_dense() const {
  std::vector<int64_t> index(static_cast<std::size_t>(rows * cols), nnz());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = row_ptr[static_cast<std::size_t>(r)]; k < row_ptr[static_cast<std::size_t>(r) + 1]; ++k)
      index[static_cast<std::size_t>(r * cols + col_idx[static_cast<std::size_t>(k)])] = k;
  const Tensor padded = concatenate({values, constant(Array(values.dtype(), Shape{1}))});
  return reshape(take(padded, constant(Array(index, Shape{rows * cols}))), Shape{rows, cols});
}

namespace detail {
namespace {

std::size_t at(int64_t i) { return static_cast<std::size_t>(i); }

/// The one floating dtype of `types` (f64 if none); mixed ones are an Error.
DType oneDtype(const std::string& api, const char* what, const std::vector<Type>& types, const Location& loc) {
  std::optional<DType> d;
  for (const Type& t : types) {
    if (!is_floating(t.dtype)) continue;
    if (d && *d != t.dtype)
      throw Error(fmt::format("{}: the function's floating {} must share one dtype, got {} and {}", api, what,
                              name_of(*d), name_of(t.dtype)), loc);
    d = t.dtype;
  }
  return d.value_or(DType::f64);
}

/// [colors, n] seed matrix: row c is 1 where color == c.
Array seedMatrix(DType dt, const sparsity::Coloring& c) {
  const int64_t n = static_cast<int64_t>(c.color.size());
  Array s(dt, Shape{c.count, n});
  for (int64_t j = 0; j < n; ++j) s.set(c.color[at(j)] * n + j, 1.0);
  return s;
}

} // namespace

std::shared_ptr<const SparsePlan> planSparse(const Module& m, const std::string& name, bool hessian,
                                             std::optional<SparseMode> mode, const Location& loc,
                                             const std::string& named, std::vector<bool> wrt) {
  const std::string api = !named.empty() ? named : hessian ? "sparse_hessian" : "sparse_jacobian";
  const ir::Function* fn = m.impl().lookup(name);
  ADJIT_ASSERT(fn, std::string("sparse: the module has no @") + name);
  std::vector<Type> ins;
  bool anyFloating = false;
  ADJIT_ASSERT(wrt.empty() || wrt.size() == fn->params.size(), "sparse: one wrt flag per argument leaf");
  for (std::size_t k = 0; k < fn->params.size(); ++k) {
    if (!wrt.empty() && !wrt[k]) continue;
    ins.push_back(fn->type(fn->params[k]));
    anyFloating = anyFloating || is_floating(ins.back().dtype);
  }
  if (!anyFloating)
    throw Error(fmt::format("{}: the function has no floating argument to differentiate{}", api,
                            wrt.empty() ? "" : " among those argnums selects"),
                loc);
  const DType inType = oneDtype(api, "arguments", ins, loc);
  const DType outType = oneDtype(api, "outputs", fn->resultTypes(), loc);
  auto plan = std::make_shared<SparsePlan>();
  plan->pattern = hessian ? hessianSparsity(m, name, wrt) : jacobianSparsity(m, name, wrt);
  plan->wrt = std::move(wrt);
  const SparsityPattern& p = plan->pattern;
  std::vector<int64_t> source(at(p.nnz()));
  if (hessian) {
    const sparsity::Coloring c = sparsity::colorStar(p.rows, p.row_ptr, p.col_idx);
    source = sparsity::starSource(p.rows, p.row_ptr, p.col_idx, c);
    plan->mode = SparseMode::forward;
    plan->colors = c.count;
    plan->dtype = inType;
    plan->seeds = seedMatrix(inType, c);
  } else {
    // The cheaper side first; the other only if its lower bound (the most
    // nonzeros in a row, or a column) could beat it.
    std::vector<int64_t> perCol(at(p.cols), 0);
    int64_t rowBound = 0, colBound = 0;
    for (int64_t r = 0; r < p.rows; ++r) rowBound = std::max(rowBound, p.row_ptr[at(r) + 1] - p.row_ptr[at(r)]);
    for (int64_t c : p.col_idx) colBound = std::max(colBound, ++perCol[at(c)]);
    std::optional<sparsity::Coloring> byCols, byRows;
    const bool colsFirst = mode ? *mode == SparseMode::forward : rowBound <= colBound;
    if (colsFirst) byCols = sparsity::colorColumns(p.rows, p.cols, p.row_ptr, p.col_idx);
    else byRows = sparsity::colorRows(p.rows, p.cols, p.row_ptr, p.col_idx);
    if (!mode) {
      if (colsFirst && colBound < byCols->count) byRows = sparsity::colorRows(p.rows, p.cols, p.row_ptr, p.col_idx);
      if (!colsFirst && rowBound <= byRows->count) byCols = sparsity::colorColumns(p.rows, p.cols, p.row_ptr, p.col_idx);
    }
    const bool forward = byCols && (!byRows || byCols->count <= byRows->count);
    plan->mode = forward ? SparseMode::forward : SparseMode::reverse;
    const sparsity::Coloring& c = forward ? *byCols : *byRows;
    plan->colors = c.count;
    plan->dtype = outType;
    plan->seeds = seedMatrix(forward ? inType : outType, c);
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t k = p.row_ptr[at(r)]; k < p.row_ptr[at(r) + 1]; ++k) {
        const int64_t j = p.col_idx[at(k)];
        source[at(k)] = forward ? c.color[at(j)] * p.rows + r : c.color[at(r)] * p.cols + j;
      }
  }
  plan->source = Array(source, Shape{p.nnz()});
  return plan;
}

Tensor compressedValues(const SparsePlan& plan, bool hessian, const Tensor& seeds, const Tensor& source,
                        const std::vector<Tensor>& leaves, const FlatFn& f, const Location& loc) {
  std::vector<std::size_t> floating;
  std::vector<Tensor> flat;
  for (std::size_t k = 0; k < leaves.size(); ++k)
    if (is_floating(leaves[k].dtype()) && (plan.wrt.empty() || plan.wrt[k])) {
      floating.push_back(k);
      flat.push_back(reshape(leaves[k], Shape{leaves[k].size()}));
    }
  const Tensor x = flat.size() == 1 ? flat[0] : concatenate(flat);
  // f on one vector of every floating input, returning one vector of every
  // floating output.
  auto g = [&](const Tensor& z) {
    std::vector<Tensor> ls = leaves;
    int64_t off = 0;
    for (std::size_t k : floating) {
      const int64_t n = leaves[k].size();
      ls[k] = reshape(slice(z, {off}, {off + n}), leaves[k].shape());
      off += n;
    }
    std::vector<Tensor> outs;
    for (const Tensor& o : f(ls))
      if (is_floating(o.dtype())) outs.push_back(reshape(o, Shape{o.size()}));
    return outs.size() == 1 ? outs[0] : concatenate(outs);
  };
  FlatFn one = [&](const std::vector<Tensor>& s) -> std::vector<Tensor> {
    const Tensor& e = s.at(0);
    if (hessian) {
      auto gradient = grad([&](const Tensor& z) { return reshape(g(z), Shape{}); });
      return {jvp(gradient, std::tuple<Tensor>{x}, std::tuple<Tensor>{e}).second};
    }
    if (plan.mode == SparseMode::forward) return {jvp(g, std::tuple<Tensor>{x}, std::tuple<Tensor>{e}).second};
    auto [y, back] = tracedVjp(g, x);
    return {back(e).at(0)};
  };
  const std::vector<Tensor> rows =
      vmapCall(one, {seeds}, {0}, [](std::size_t c) { return std::vector<std::optional<int64_t>>(c, 0); }, std::nullopt,
               loc);
  const Tensor& b = rows.at(0);
  return take(reshape(b, Shape{b.size()}), source);
}

SparseFunction addSparseFunction(const std::shared_ptr<ir::Module>& m, const std::string& name, bool hessian,
                                 std::optional<SparseMode> mode) {
  const char* flag = hessian ? "--sparse-hessian" : "--sparse-jacobian";
  const ir::Function* f = m->lookup(name);
  if (!f) throw Error(fmt::format("compile: {} {}: no function named @{}", flag, name, name));
  const Location loc = f->loc;
  const std::string api = fmt::format("compile: {} {}", flag, name);
  if (hessian) {
    const std::vector<Type> ys = f->resultTypes();
    if (ys.size() != 1 || !is_floating(ys[0].dtype) || ys[0].size() != 1 || ys[0].rank() != 0) {
      std::string got;
      for (const Type& t : ys) got += (got.empty() ? "" : ", ") + t.str();
      throw Error(fmt::format("{}: @{} must return one floating scalar, got ({})", api, name, got), loc);
    }
  }
  SparseFunction out;
  out.plan = planSparse(Module(m), name, hessian, mode, loc, api);
  const std::vector<Type> params = f->paramTypes();
  TraceScope scope(m, name + (hessian ? ".sparse_hessian" : ".sparse_jacobian"));
  out.function = scope.state().fn->name;
  std::vector<Tensor> leaves;
  for (const Type& t : params) leaves.push_back(scope.param(t));
  if (out.plan->pattern.nnz() == 0) {
    scope.finish({constant(Array(out.plan->dtype, Shape{0}))});
    return out;
  }
  // @name itself, called in whichever trace is current (the batched JVP's
  // or VJP's body is a trace of its own, in the same module).
  FlatFn call = [&](const std::vector<Tensor>& xs) {
    TraceState& s = *currentTrace();
    std::vector<ir::ValueId> ids;
    for (const Tensor& x : xs) ids.push_back(valueOf(x, name, loc));
    std::vector<Tensor> ys;
    for (ir::ValueId r : s.builder.create(ir::OpKind::Call, ids, {}, {name}, loc)) ys.push_back(wrap(s, r));
    return ys;
  };
  scope.finish({compressedValues(*out.plan, hessian, constant(out.plan->seeds), constant(out.plan->source), leaves, call,
                                 loc)});
  return out;
}

struct SparsePlanCache::Impl {
  mutable std::mutex m;
  std::unordered_map<uint64_t, std::shared_ptr<const SparsePlan>> plans;
};
SparsePlanCache::SparsePlanCache() : impl_(std::make_unique<Impl>()) {}
SparsePlanCache::~SparsePlanCache() = default;
std::shared_ptr<const SparsePlan> SparsePlanCache::find(uint64_t key) const {
  std::lock_guard<std::mutex> lock(impl_->m);
  const auto it = impl_->plans.find(key);
  return it == impl_->plans.end() ? nullptr : it->second;
}
std::shared_ptr<const SparsePlan> SparsePlanCache::insert(uint64_t key, std::shared_ptr<const SparsePlan> plan) {
  std::lock_guard<std::mutex> lock(impl_->m);
  return impl_->plans.emplace(key, std::move(plan)).first->second;
}

} // namespace detail
} // namespace adjit
