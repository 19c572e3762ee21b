// adjit/vmap.h — adjit::vmap: a function of one example turned into a
// function of a batch, as JAX's jax.vmap. The function is traced once on
// one example's types and every op of it is batched by its own rule (a
// batched matmul, a reduction over shifted axes, ...), never a loop over
// the examples; ops that read nothing batched run once for the whole batch.
#pragma once

#include <adjit/jit.h>

#include <optional>

namespace adjit {

/// Where vmap finds and puts the batch axis.
struct VmapOptions {
  /// One entry per argument of the function: the axis of that argument's
  /// every leaf that holds the batch (negative counts from the end), or
  /// std::nullopt for an argument every example shares. Empty: axis 0 of
  /// every argument.
  std::vector<std::optional<int64_t>> in_axes = {};
  /// One entry per result (per element of a returned std::tuple or
  /// std::pair, else one), or a single entry for all: where each of its
  /// leaves gets the batch axis; std::nullopt for a result that depends on
  /// no batched argument. A result that does not depend on one but has an
  /// axis is broadcast along it. Empty: axis 0 of every result.
  std::vector<std::optional<int64_t>> out_axes = {};
  /// The batch size when no argument is batched (must agree otherwise).
  std::optional<int64_t> axis_size = {};
};

namespace detail {

/// A batched function's body on the flattened leaves of its arguments.
using FlatFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
/// Traces `f` on one example of `leaves` (the batch axis of leaf i is
/// `axes[i]`, nullopt: shared) and batches it into the current trace.
/// Returns each result leaf with the batch axis at `outAxes(leaf count)[i]`.
std::vector<Tensor> vmapCall(const FlatFn& f, const std::vector<Tensor>& leaves, const std::vector<std::optional<int64_t>>& axes,
                             const std::function<std::vector<std::optional<int64_t>>(std::size_t)>& outAxes,
                             std::optional<int64_t> axisSize, const Location& loc);
/// vmap's error for out_axes that do not fit the results.
[[noreturn]] void vmapOutAxesError(std::size_t given, std::size_t results, const Location& loc);

/// The number of leaves of each element of a tuple or pair, else of r whole.
template <class R> std::vector<std::size_t> topLevelLeaves(const R& r) {
  std::vector<std::size_t> counts;
  auto count = [&](const auto& e) {
    std::vector<Tensor> ls;
    appendLeaves(e, ls);
    counts.push_back(ls.size());
  };
  if constexpr (kindOf<R> == TreeKind::tuple || kindOf<R> == TreeKind::pair) Traits<R>::each(r, count);
  else count(r);
  return counts;
}

} // namespace detail

/// A batched function (see adjit::vmap). Called with Tensors inside a trace,
/// its batched ops join that trace; called with Arrays or scalars, it is
/// compiled once per signature, like jit, and run.
template <class F> class Vmapped {
public:
  /// Made by adjit::vmap; `loc` is where it was called.
  Vmapped(F f, VmapOptions o, std::source_location loc)
      : f_(std::move(f)), o_(std::move(o)), loc_(Location::from(loc)),
        core_(std::make_shared<detail::JitCore>(JitOptions{.name = "vmap"})) {}
  /// With Tensors: batched into the current trace. With Arrays: compiled and run.
  template <class... Args> auto operator()(const Args&... args) const {
    return detail::tracedOrCompiled(*this, *core_, args...);
  }
  /// The batched ops traced into the current trace.
  template <class... Args> auto traced(const Args&... args) const {
    using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
    constexpr std::size_t n = sizeof...(Args);
    if (!o_.in_axes.empty() && o_.in_axes.size() != n)
      throw Error("vmap: in_axes has " + std::to_string(o_.in_axes.size()) + " entries, but the function is called with " +
                      std::to_string(n) + " arguments (give one per argument, std::nullopt for a shared one)",
                  loc_);
    std::vector<Tensor> leaves;
    std::vector<std::optional<int64_t>> axes;
    std::size_t k = 0;
    auto add = [&](const auto& a) {
      const std::size_t before = leaves.size();
      detail::appendLeaves(a, leaves);
      const std::optional<int64_t> axis = o_.in_axes.empty() ? std::optional<int64_t>(0) : o_.in_axes[k];
      axes.insert(axes.end(), leaves.size() - before, axis);
      ++k;
    };
    (add(args), ...);
    std::shared_ptr<R> skeleton;
    std::vector<std::size_t> top;
    detail::FlatFn body = [&](const std::vector<Tensor>& ps) {
      const Tensor* it = ps.data();
      std::tuple<Args...> example{detail::rebuild<Tensor>(args, it)...};
      R r = std::apply(f_, example);
      std::vector<Tensor> outs;
      detail::appendLeaves(r, outs);
      top = detail::topLevelLeaves(r);
      skeleton = std::make_shared<R>(std::move(r));
      return outs;
    };
    auto outAxes = [&](std::size_t count) {
      std::vector<std::optional<int64_t>> perLeaf;
      if (o_.out_axes.empty()) return std::vector<std::optional<int64_t>>(count, 0);
      if (o_.out_axes.size() == 1) return std::vector<std::optional<int64_t>>(count, o_.out_axes[0]);
      if (o_.out_axes.size() != top.size()) detail::vmapOutAxesError(o_.out_axes.size(), top.size(), loc_);
      for (std::size_t i = 0; i < top.size(); ++i) perLeaf.insert(perLeaf.end(), top[i], o_.out_axes[i]);
      return perLeaf;
    };
    std::vector<Tensor> outs = detail::vmapCall(body, leaves, axes, outAxes, o_.axis_size, loc_);
    const Tensor* it = outs.data();
    return detail::rebuild<Tensor>(*skeleton, it);
  }

private:
  F f_;
  VmapOptions o_;
  Location loc_;
  std::shared_ptr<detail::JitCore> core_;
};

/// vmap(f, options)(xs...): f applied to every example of a batch at once.
/// By default every argument's every leaf is batched along axis 0 and every
/// result gets the batch as axis 0; VmapOptions moves or drops them. The
/// batch sizes of the batched arguments must agree. Composes with grad,
/// jvp, jit and itself: vmap(grad(loss)) gives per-example gradients.
template <class F> Vmapped<std::decay_t<F>> vmap(F&& f, VmapOptions o = {}, std::source_location loc = std::source_location::current()) {
  return Vmapped<std::decay_t<F>>(std::forward<F>(f), std::move(o), loc);
}

} // namespace adjit
