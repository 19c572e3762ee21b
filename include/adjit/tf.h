// adjit/tf.h — TensorFlow's differentiation API inside a trace: tf.gradients,
// GradientTape (reverse mode over the ops traced while it lives) and
// ForwardAccumulator (forward mode over the same), with Unconnected.
#pragma once

#include <adjit/tree.h>
#include <adjit/variable.h>

#include <optional>
#include <variant>

namespace adjit {

/// What a gradient is for an x the ys do not depend on (tf.UnconnectedGradients).
enum class Unconnected {
  none, ///< std::nullopt
  zero, ///< zeros of x's shape and dtype
};

/// Symbolic gradients of sum(ys) (each weighted by its grad_ys, default ones)
/// with respect to each x, over everything traced so far in the current
/// function, as tf.gradients. Tensors in `stop_gradients` are constants, as if
/// wrapped in stop_gradient.
std::vector<std::optional<Tensor>> gradients(const std::vector<Tensor>& ys, const std::vector<Tensor>& xs,
                                             const std::vector<Tensor>& grad_ys = {},
                                             const std::vector<Tensor>& stop_gradients = {},
                                             Unconnected unconnected = Unconnected::none,
                                             std::source_location loc = std::source_location::current());

namespace detail {
/// A source of GradientTape::gradient: a watched Tensor or a Variable.
using SourceLeaf = std::variant<Tensor, Variable>;

/// Whether a leaf can be a source of GradientTape::gradient.
template <class L> struct IsSource : std::bool_constant<std::is_same_v<L, Tensor> || std::is_same_v<L, Variable>> {};
/// The gradients' structure for a structure of sources S: std::optional<Tensor> leaves.
template <class S> using SourceGrads = tree_rebind_t<S, std::optional<Tensor>>;
} // namespace detail

/// Records the ops traced while it lives; differentiates them on request, as
/// tf.GradientTape. Only watched tensors (and the trainable variables the
/// computation reads) are sources.
class GradientTape {
public:
  explicit GradientTape(bool persistent = false, std::source_location loc = std::source_location::current());
  /// Makes `t` a source: gradients with respect to it are computed.
  void watch(const Tensor& t);
  void watch(const std::vector<Tensor>& ts) {
    for (const Tensor& t : ts) watch(t);
  }
  /// d target / d source. A non-scalar target is differentiated with ones as
  /// its output gradient unless `output_gradient` is given. A second call on a
  /// non-persistent tape raises adjit::Error.
  std::optional<Tensor> gradient(const Tensor& target, const Tensor& source,
                                 std::optional<Tensor> output_gradient = std::nullopt,
                                 Unconnected unconnected = Unconnected::none,
                                 std::source_location loc = std::source_location::current());
  std::vector<std::optional<Tensor>> gradient(const Tensor& target, const std::vector<Tensor>& sources,
                                              std::optional<Tensor> output_gradient = std::nullopt,
                                              Unconnected unconnected = Unconnected::none,
                                              std::source_location loc = std::source_location::current());

  /// d target / d variable: the tape watches the trainable variables its
  /// computation reads (nullopt for a variable it did not read, or one that
  /// is not trainable).
  std::optional<Tensor> gradient(const Tensor& target, const Variable& variable,
                                 std::optional<Tensor> output_gradient = std::nullopt,
                                 Unconnected unconnected = Unconnected::none,
                                 std::source_location loc = std::source_location::current());
  std::vector<std::optional<Tensor>> gradient(const Tensor& target, const std::vector<Variable>& variables,
                                              std::optional<Tensor> output_gradient = std::nullopt,
                                              Unconnected unconnected = Unconnected::none,
                                              std::source_location loc = std::source_location::current());

  /// The general form: d(sum of targets, each weighted by its output
  /// gradient) / d(each leaf of `sources`), a structure of Tensors and
  /// Variables (tuples, pairs, arrays, vectors, nested); the result mirrors it
  /// with std::optional<Tensor> leaves. `tape.gradient({y1, y2}, std::tuple{x, w})`.
  template <class S>
  detail::SourceGrads<S> gradient(const std::vector<Tensor>& targets, const S& sources,
                                  const std::vector<Tensor>& output_gradients = {},
                                  Unconnected unconnected = Unconnected::none,
                                  std::source_location loc = std::source_location::current()) {
    static_assert(detail::allLeaves<S, detail::IsSource>(),
                  "GradientTape::gradient: sources must be Tensors or Variables, in tuples, pairs, arrays, vectors or "
                  "structs registered with ADJIT_TREE");
    std::vector<detail::SourceLeaf> leaves;
    tree_for_each(sources, [&](const auto& leaf) { leaves.emplace_back(leaf); });
    std::vector<std::optional<Tensor>> ogs(output_gradients.begin(), output_gradients.end());
    const std::vector<std::optional<Tensor>> g =
        gradientOfLeaves(targets, ogs, leaves, unconnected, Location::from(loc));
    const std::optional<Tensor>* it = g.data();
    return detail::rebuild<std::optional<Tensor>>(sources, it);
  }
  /// One target and a structure of sources (see above).
  template <class S>
  detail::SourceGrads<S> gradient(const Tensor& target, const S& sources,
                                             std::optional<Tensor> output_gradient = std::nullopt,
                                             Unconnected unconnected = Unconnected::none,
                                             std::source_location loc = std::source_location::current()) {
    std::vector<Tensor> ogs;
    if (output_gradient) ogs.push_back(*output_gradient);
    return gradient(std::vector<Tensor>{target}, sources, ogs, unconnected, loc);
  }

private:
  /// The one implementation behind every gradient overload.
  std::vector<std::optional<Tensor>> gradientOfLeaves(const std::vector<Tensor>& targets,
                                                      const std::vector<std::optional<Tensor>>& output_gradients,
                                                      const std::vector<detail::SourceLeaf>& sources,
                                                      Unconnected unconnected, const Location& loc);
  void checkUse(const Location& loc);
  std::size_t begin_;
  uint64_t trace_;
  bool persistent_;
  bool used_ = false;
  std::vector<Tensor> watched_;
};

namespace detail {
struct AccumulatorState;
} // namespace detail

/// tf.autodiff.ForwardAccumulator inside a trace: tangents for `primals`
/// (moving along `tangents`, leaf by leaf of the same type) propagate
/// through the ops traced while the accumulator lives, and `jvp(y)` asks for
/// the tangent of a value traced since. Integer and boolean primals take no
/// tangent. Nests with GradientTape either way: an accumulator around a
/// tape's gradient computes Hessian-vector products (forward over reverse),
/// a tape around an accumulator differentiates its jvp (reverse over
/// forward). Tangents are built when asked for, each op's once; as in
/// TensorFlow, the ops an answer adds are not watched (the jvp of a jvp is
/// None: nest a second accumulator for second order).
class ForwardAccumulator {
public:
  ForwardAccumulator(const Tensor& primal, const Tensor& tangent,
                     std::source_location loc = std::source_location::current());
  ForwardAccumulator(std::vector<Tensor> primals, std::vector<Tensor> tangents,
                     std::source_location loc = std::source_location::current());
  /// The tangent of `y`: std::nullopt when no primal's tangent reaches it
  /// (zeros with Unconnected::zero), as TensorFlow's acc.jvp.
  std::optional<Tensor> jvp(const Tensor& y, Unconnected unconnected = Unconnected::none,
                            std::source_location loc = std::source_location::current()) const;
  std::vector<std::optional<Tensor>> jvp(const std::vector<Tensor>& ys, Unconnected unconnected = Unconnected::none,
                                         std::source_location loc = std::source_location::current()) const;

private:
  std::shared_ptr<detail::AccumulatorState> state_; ///< shared by copies
};

} // namespace adjit
