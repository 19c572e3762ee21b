// adjit/sparse_derivatives.h — sparse_jacobian and sparse_hessian: compressed
// Jacobians and Hessians from a sparsity pattern, a coloring and one batched
// JVP or VJP over the colors' seed vectors.
#pragma once

#include <adjit/forward.h>
#include <adjit/sparse.h>
#include <adjit/vmap.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>

namespace adjit {

/// How the compressed derivative was computed: JVPs along column colors
/// (forward) or VJPs of row colors (reverse). Hessians: forward over reverse.
enum class SparseMode { forward, reverse };

/// Options of sparse_jacobian and sparse_hessian.
struct SparseOptions {
  /// Force forward or reverse mode (Jacobians only); unset: the mode with
  /// fewer colors, forward on a tie.
  std::optional<SparseMode> mode = {};
  /// The arguments to differentiate with respect to, by position (as grad's
  /// argnums; every floating leaf of each); empty: all of them. The others
  /// are held constant: they take no columns (in a Hessian, no rows either),
  /// and new values of them run the same compiled program.
  std::vector<std::size_t> argnums = {};
};

/// A sparse Jacobian or Hessian in compressed rows (sorted columns) with its
/// values, and how it was computed. Called with Arrays, sparse_jacobian and
/// sparse_hessian return a SparseMatrix (values an Array); inside a trace, a
/// SparseTensor (values a Tensor of that trace; the pattern is known).
template <class V> struct BasicSparseMatrix {
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> row_ptr{0};
  std::vector<int64_t> col_idx;
  /// The nonzeros' values, row by row (1-D, in the function's dtype).
  V values;
  /// Seed vectors used: JVPs (forward) or VJPs (reverse) in one batch.
  int64_t colors = 0;
  SparseMode mode = SparseMode::forward;
  /// How many nonzeros.
  int64_t nnz() const { return static_cast<int64_t>(col_idx.size()); }
  /// The matrix as a dense [rows, cols] Array (or Tensor).
  V to_dense() const;
};
/// What sparse_jacobian and sparse_hessian return when called with Arrays.
using SparseMatrix = BasicSparseMatrix<Array>;
/// What they return inside a trace (called with Tensors).
using SparseTensor = BasicSparseMatrix<Tensor>;
template <> Array BasicSparseMatrix<Array>::to_dense() const;
template <> Tensor BasicSparseMatrix<Tensor>::to_dense() const;

namespace detail {
/// A signature's pattern, coloring, seed matrix ([colors, n] or [colors, m])
/// and, per nonzero, its index in the flattened compressed product.
struct SparsePlan {
  SparsityPattern pattern;
  SparseMode mode = SparseMode::forward;
  int64_t colors = 0;
  DType dtype = DType::f64;
  Array seeds;
  Array source;
  /// Per argument leaf: differentiated (empty: every leaf).
  std::vector<bool> wrt;
};
/// The plan of `m`'s function `fn`; errors are named `api` (default:
/// sparse_jacobian or sparse_hessian).
std::shared_ptr<const SparsePlan> planSparse(const Module& m, const std::string& fn, bool hessian,
                                             std::optional<SparseMode> mode, const Location& loc,
                                             const std::string& api = {}, std::vector<bool> wrt = {});
/// Per argument leaf of `args`, whether `argnums` selects its argument (all
/// when empty); an argnum past the arguments is an Error at `loc`.
template <class... Args>
std::vector<bool> selectedLeaves(const std::vector<std::size_t>& argnums, const Location& loc, const char* api,
                                 const Args&... args) {
  std::vector<bool> wrt;
  if (argnums.empty()) return wrt;
  for (std::size_t a : argnums)
    if (a >= sizeof...(Args))
      throw Error(std::string(api) + ": argnums has " + std::to_string(a) + ", but the function is called with " +
                      std::to_string(sizeof...(Args)) + " argument" + (sizeof...(Args) == 1 ? "" : "s"),
                  loc);
  std::size_t i = 0;
  auto add = [&](const auto& arg) {
    TypeCollector tc;
    visitLeaves(arg, tc);
    const bool on = std::find(argnums.begin(), argnums.end(), i++) != argnums.end();
    wrt.insert(wrt.end(), tc.types.size(), on);
  };
  (add(args), ...);
  return wrt;
}
/// The nonzeros' values traced into the current trace: the batched JVP/VJP
/// (Hessian: JVP of the gradient) of f over the seeds, gathered at `source`.
Tensor compressedValues(const SparsePlan& plan, bool hessian, const Tensor& seeds, const Tensor& source,
                        const std::vector<Tensor>& leaves, const FlatFn& f, const Location& loc);
template <class V> BasicSparseMatrix<V> assemble(const SparsePlan& plan, V values) {
  BasicSparseMatrix<V> s;
  s.rows = plan.pattern.rows;
  s.cols = plan.pattern.cols;
  s.row_ptr = plan.pattern.row_ptr;
  s.col_idx = plan.pattern.col_idx;
  s.values = std::move(values);
  s.colors = plan.colors;
  s.mode = plan.mode;
  return s;
}
/// `adjit compile --sparse-jacobian NAME` (or --sparse-hessian): adds to `m`
/// a function of @NAME's arguments returning the nonzeros' values (its name
/// is returned, with the plan: the pattern and coloring).
struct SparseFunction {
  std::string function;
  std::shared_ptr<const SparsePlan> plan;
};
SparseFunction addSparseFunction(const std::shared_ptr<ir::Module>& m, const std::string& name, bool hessian,
                                 std::optional<SparseMode> mode = {});
/// Plans per argument signature, thread-safe.
class SparsePlanCache {
public:
  std::shared_ptr<const SparsePlan> find(uint64_t key) const;
  std::shared_ptr<const SparsePlan> insert(uint64_t key, std::shared_ptr<const SparsePlan> plan);
  ~SparsePlanCache();
  SparsePlanCache();

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
} // namespace detail

/// A sparse derivative of f (see sparse_jacobian, sparse_hessian): called
/// with Arrays, returns a SparseMatrix; the pattern and coloring are found
/// once per argument signature and the compressed evaluation compiled once.
template <class F> class SparseDerivativeFn {
public:
  /// Made by sparse_jacobian and sparse_hessian; `loc` is where they were called.
  SparseDerivativeFn(F f, bool hessian, SparseOptions o, std::source_location loc)
      : f_(std::move(f)), hessian_(hessian), o_(o), loc_(Location::from(loc)),
        core_(std::make_shared<detail::JitCore>(JitOptions{.name = hessian ? "sparse_hessian" : "sparse_jacobian"})),
        plans_(std::make_shared<detail::SparsePlanCache>()) {}

  /// The sparse Jacobian or Hessian at `args` (Arrays or scalars, in any
  /// supported structure): planned on the first call per signature. Called
  /// with Tensors inside a trace (a jit, vmap, map or grad body), the
  /// compressed evaluation joins that trace and a SparseTensor is returned.
  template <class... Args> auto operator()(const Args&... args) const {
    constexpr bool inTrace = (detail::hasTensor<Args> || ...);
    detail::ArgCollector c;
    (detail::visitLeaves(args, c), ...);
    static const std::size_t structure = typeid(std::tuple<Args...>).hash_code();
    c.mix(structure);
    std::shared_ptr<const detail::SparsePlan> plan = plans_->find(c.hash);
    if (!plan) {
      const char* api = hessian_ ? "sparse_hessian" : "sparse_jacobian";
      plan = plans_->insert(c.hash, detail::planSparse(trace_named("f", f_, args...), "f", hessian_, o_.mode, loc_, api,
                                                       detail::selectedLeaves(o_.argnums, loc_, api, args...)));
    }
    using V = std::conditional_t<inTrace, Tensor, Array>;
    if (plan->pattern.nnz() == 0) {
      Array none(plan->dtype, Shape{0});
      if constexpr (inTrace) return detail::assemble<V>(*plan, constant(none));
      else return detail::assemble<V>(*plan, none);
    }
    const F& f = f_;
    const bool h = hessian_;
    const Location loc = loc_;
    const detail::SparsePlan& pl = *plan;
    auto body = [&f, h, loc, &pl](const Tensor& seeds, const Tensor& source, const auto&... ts) {
      std::vector<Tensor> leaves;
      (detail::appendLeaves(ts, leaves), ...);
      detail::FlatFn flat = [&](const std::vector<Tensor>& ls) {
        const Tensor* it = ls.data();
        std::tuple<std::decay_t<decltype(ts)>...> targs{detail::rebuild<Tensor>(ts, it)...};
        const auto r = std::apply(f, targs);
        std::vector<Tensor> outs;
        detail::appendLeaves(r, outs);
        return outs;
      };
      return detail::compressedValues(pl, h, seeds, source, leaves, flat, loc);
    };
    if constexpr (inTrace) return detail::assemble<V>(*plan, body(constant(plan->seeds), constant(plan->source), args...));
    else return detail::assemble<V>(*plan, detail::callCompiled(*core_, body, plan->seeds, plan->source, args...));
  }
  /// Waits until every signature compiled so far runs its optimised code
  /// (JitOptions::tiers; as Jitted::wait_optimized).
  void wait_optimized() const { core_->waitOptimized(); }

private:
  F f_;
  bool hessian_;
  SparseOptions o_;
  Location loc_;
  std::shared_ptr<detail::JitCore> core_;
  std::shared_ptr<detail::SparsePlanCache> plans_;
};

/// sparse_jacobian(f, options)(args...): the Jacobian of f's floating outputs
/// (rows, flattened leaf by leaf) with respect to its floating arguments
/// (columns), as a SparseMatrix. Its pattern (jacobian_sparsity) is colored
/// by columns and by rows; the fewer colors pick the mode, and one JVP (or
/// VJP) batched over the colors' seed vectors computes every nonzero.
/// Floating arguments must share one dtype, and so must floating outputs.
template <class F>
SparseDerivativeFn<std::decay_t<F>> sparse_jacobian(F&& f, SparseOptions o = {},
                                                    std::source_location loc = std::source_location::current()) {
  return SparseDerivativeFn<std::decay_t<F>>(std::forward<F>(f), false, o, loc);
}

/// sparse_hessian(f, options)(args...): the Hessian of a scalar f with
/// respect to its floating arguments, from its pattern (hessian_sparsity)
/// star-colored: one JVP of the gradient (forward over reverse) batched over
/// the colors, each nonzero read directly from the product.
template <class F>
SparseDerivativeFn<std::decay_t<F>> sparse_hessian(F&& f, SparseOptions o = {},
                                                   std::source_location loc = std::source_location::current()) {
  return SparseDerivativeFn<std::decay_t<F>>(std::forward<F>(f), true, o, loc);
}

} // namespace adjit
