// autodiff/Reverse.h — the reverse-mode driver. It walks a range of ops of the
// function being traced in reverse, calls each op's VJP rule, accumulates the
// cotangents of values used several times, and keeps "no cotangent" symbolic.
// Its output is ordinary IR appended to the same function: there is no tape.
#pragma once

#include "ir/Builder.h"
#include "ir/IR.h"

#include <adjit/tensor.h>

#include "trace/Tracer.h"

#include <functional>
#include <memory>
#include <optional>

namespace adjit::autodiff {

/// Gives the ops a rule creates its op's location; restores the trace's
/// location override when the rule returns.
struct LocScope {
  detail::TraceState& s;
  std::optional<Location> saved;
  LocScope(detail::TraceState& st, const Location& l) : s(st), saved(st.locOverride) { s.locOverride = l; }
  ~LocScope() { s.locOverride = saved; }
};

struct Request {
  std::size_t begin = 0, end = 0;                ///< primal ops [begin, end) of the current trace
  std::vector<ir::ValueId> targets;              ///< the ys
  std::vector<std::optional<Tensor>> seeds;      ///< cotangent per target (nullopt: ones)
  std::vector<ir::ValueId> sources;              ///< the xs
  std::vector<ir::ValueId> stops;                ///< values treated as constants
};

/// Appends the reverse pass to the current trace; returns each source's
/// cotangent (nullopt where no target depends on it). Throws adjit::Error
/// "No gradient defined for operation ..." for an op on a differentiable path
/// without a VJP rule.
std::vector<std::optional<Tensor>> reverse(const Request& r);

/// Forward mode over ops [begin, end) of the current trace: `tangents[k]` is
/// the tangent of `sources[k]`. Appends the tangent computation to the trace
/// and returns each target's tangent (nullopt where no tangent reaches it:
/// a symbolic zero). Throws adjit::Error for an op on the path without a
/// forward rule.
struct ForwardRequest {
  std::size_t begin = 0, end = 0;
  std::vector<ir::ValueId> sources;
  std::vector<Tensor> tangents;
  std::vector<ir::ValueId> targets;
  std::vector<ir::ValueId> stops; ///< values treated as constants
  /// Tangents of earlier walks, read and extended (a ForwardAccumulator's).
  /// With it every op in range that reads a tangent is differentiated, as
  /// TensorFlow's accumulator does, so each op is walked once however many
  /// questions follow; without it only the ops on a path to a target are.
  std::unordered_map<ir::ValueId, Tensor>* carried = nullptr;
};
std::vector<std::optional<Tensor>> forward(const ForwardRequest& r);

/// The JVP of function `name` of `m`: a function `<name>.jvp` taking (x...,
/// dx...) and returning (y..., dy...), with a dx for each floating parameter
/// and a dy for each floating result (zeros where no tangent reaches it).
/// Built once per module; returns its name.
std::string jvpFunction(const std::shared_ptr<ir::Module>& m, const std::string& name);

/// The layout of a JVP function that control-flow ops call: the callee's
/// parameters in consecutive groups (a loop's consts, carries, slices), each
/// group followed by the tangents of its parameters marked in `tangentIn`;
/// the outputs likewise, each group followed by the tangents of the outputs
/// marked in `tangentOut` (zeros where none reaches; the tangents of
/// unmarked outputs, such as residuals, are dropped).
struct JvpLayout {
  std::vector<std::size_t> paramGroups, outputGroups; ///< sizes; they sum to the counts
  std::vector<char> tangentIn, tangentOut;
  /// The first `carries` outputs come back as inputs (a loop's carries): one
  /// that gets a tangent must be marked (see tangentReach), or the loop
  /// would drop it.
  std::size_t carries = 0;
};
std::string jvpFunction(const std::shared_ptr<ir::Module>& m, const std::string& name, const JvpLayout& layout);

/// Which outputs of `g` may have a tangent when the parameters marked in
/// `in` have one: a floating result of a differentiable op with an operand
/// that may (an over-approximation of what forward mode builds).
std::vector<char> tangentReach(const ir::Function& g, const std::vector<char>& in);

/// Operand cotangents of op `opIndex` of the current trace, from its result
/// cotangents `cts` (nullopt: none), by the op's VJP rule; only operands with
/// `wanted[k]` get one (nullopt elsewhere). The reverse driver calls it for
/// each op; forward mode calls it to transpose a rule. Throws adjit::Error
/// "No gradient defined for operation ..." for an op without a rule.
std::vector<std::optional<Tensor>> applyVjpRule(std::size_t opIndex, const std::vector<std::optional<Tensor>>& cts,
                                                const std::vector<char>& wanted);

/// Copies the ops of `src` into the builder's function, its parameters bound
/// to `args`; returns the copies of its outputs.
std::vector<ir::ValueId> inlineFunction(ir::Builder& b, const ir::Function& src, const std::vector<ir::ValueId>& args);

/// The function `<name>.<kind>` of `m` derived from function `name` by
/// `body`, which traces it in the scope given (parameters and ops) and
/// returns its outputs; built once per module (kept in m.derived) and never
/// left half-built when `body` throws. Returns its name.
/// `variant` tells apart functions of one kind derived differently (it is
/// part of the cache key, not of the name).
std::string derive(const std::shared_ptr<ir::Module>& m, const std::string& kind, const std::string& name,
                   const std::function<std::vector<Tensor>(detail::TraceScope&, const ir::Function&)>& body,
                   const std::string& variant = {});

/// Whether a call op is {recompute = true} (checkpointing): its derivatives
/// run the callee again rather than keep its intermediates.
bool recomputes(const ir::Op& call);

/// The combined VJP of function `name` of `m`: a function `<name>.vjp` taking
/// (x..., dy...) and returning (y..., dx...), with a dy for each floating
/// result and a dx for each floating parameter (zeros where unconnected).
/// Built once per module; returns its name.
std::string combinedVjp(const std::shared_ptr<ir::Module>& m, const std::string& name);

/// The gradient of function `name` (one floating scalar result): a function
/// `<name>.grad` (x...) -> (dx...) for its floating parameters.
/// With `argnums`, with respect to those parameters only (floating ones), in
/// that order: `<name>.grad` (x...) -> (dx per listed parameter).
std::string gradFunction(const std::shared_ptr<ir::Module>& m, const std::string& name,
                         const std::optional<std::vector<std::size_t>>& argnums = std::nullopt);

/// The split VJP of a function: `fwd` (x...) -> (y..., residuals...) and
/// `bwd` (residuals..., dy...) -> (dx...), named `<name>.fwd` and `<name>.bwd`
/// unless those names are taken; per residual, whether it is one of the
/// parameters (an input, not a saved intermediate).
struct SplitVjp {
  std::string fwd, bwd;
  std::vector<bool> residualIsParam;
};
SplitVjp splitVjp(const std::shared_ptr<ir::Module>& m, const std::string& name);
/// The same with `bwd` (residuals..., dy...) -> (dx per parameter in `wrt`,
/// in that order): a residual only other parameters' cotangents would read
/// is not kept (a loop body's split, whose constants need no cotangent).
SplitVjp splitVjp(const std::shared_ptr<ir::Module>& m, const std::string& name, const std::vector<std::size_t>& wrt);

/// Throws an Error at `site`, "<what>: <purpose>, but its op ...", naming
/// the first op of `fn` (or of a function it calls) through which its
/// results are not linear in the parameters marked `dependent` (by op
/// traits: kLinear and its kin in the op table). Returns, per result of
/// `fn`, whether it varies with them.
std::vector<char> checkLinear(const ir::Module& m, const ir::Function& fn, const std::vector<char>& dependent,
                              const std::string& what, const std::string& purpose, const Location& site);

/// linearize's halves of function `name`'s JVP (jvpFunction): `fwd` is
/// `<name>.primal` (x...) -> (y..., residuals...), every op that reads no
/// tangent; `bwd` is `<name>.linear` (residuals..., dx...) -> (dy...), the
/// ops that do: a function linear in dx that does not recompute the primal
/// (except inside recompute_grad regions, whose JVP recomputes by design).
SplitVjp splitJvp(const std::shared_ptr<ir::Module>& m, const std::string& name);

/// Per residual of a split forward (its outputs past the first nY): the
/// parameter it is, or -1 for a value the forward computes.
std::vector<int64_t> residualParams(const ir::Function& fwd, std::size_t nY);

} // namespace adjit::autodiff
