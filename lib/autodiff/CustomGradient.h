// autodiff/CustomGradient.h — custom-gradient call sites: recording them at
// trace time, and tracing their VJP functions lazily, when the reverse pass
// first reaches one with a cotangent.
#pragma once

#include "ir/IR.h"
#include "trace/Tracer.h"

#include <adjit/custom_gradient.h>

#include <functional>
#include <optional>

namespace adjit::ir {

struct LazyVjp {
  uint64_t fwdTrace = 0;   ///< the trace of the forward body (its values become residuals)
  uint64_t outerTrace = 0; ///< the trace the call site is in
  std::map<ValueId, ValueId> outerToFwd; ///< outer values passed to or captured by the forward -> its parameters
  std::shared_ptr<detail::CaptureHook> outerHook; ///< the outer trace's captures, to resolve tensors from further out
  std::string fwd;         ///< the forward function
  std::size_t inputs = 0;  ///< user inputs (the operands after them are captured constants)
  std::size_t outputs = 0; ///< user outputs
  std::size_t assigns = 0; ///< variable assignments exported after the outputs
  /// Calls the user's grad_fn with the output cotangents (in trace order); returns its gradients.
  detail::GradFnErased gradFn;
  bool takesVariables = false;
  std::vector<std::shared_ptr<detail::VariableState>> variables; ///< read by the forward, given to grad_fn
  std::vector<int64_t> variableOperands;                         ///< their call-site operands
  Location loc; ///< the custom_gradient call's source line
  // Filled when first differentiated:
  std::string fwdWithResiduals, vjp;
  std::vector<ValueId> residuals; ///< values of `fwd` that the VJP reads
  std::vector<int64_t> residualSources; ///< per residual: fwd parameter index, or -1 (an extra output)
  /// Per operand: grad_fn returned std::nullopt (None) for it. The VJP function
  /// returns zeros there; gradients taken in this process see "no gradient".
  std::vector<bool> noGradient;
};

} // namespace adjit::ir

namespace adjit::autodiff {

/// Operand cotangents of the custom_vjp op `f.ops[opIndex]` of the current
/// trace, tracing its VJP function if this is the first time (and rewriting
/// the call site to return the residuals the VJP reads).
/// With `recompute`, the call of the VJP function is {recompute = true}.
std::vector<std::optional<Tensor>> customVjp(std::size_t opIndex, const std::vector<std::optional<Tensor>>& cts,
                                             bool recompute = false);

/// A custom_vjp call site's functions once its VJP is known: the forward
/// that also returns the residuals, the VJP function, and per residual the
/// operand it is (or -1: the forward's next extra result).
struct BoundVjp {
  std::string fwd, vjp;
  std::vector<int64_t> residuals;
};
/// The functions of custom_vjp call site `site` of `m`: read from a site
/// already rewritten (two callees), else from its pending VJP, traced now if
/// it has not been (the site itself is left as it is). Batching uses it.
BoundVjp boundVjp(const std::shared_ptr<ir::Module>& m, const ir::Op& site);

/// Whether ADJIT_CHECK_CUSTOM_VJP asks to check custom VJPs as they run.
bool checkingCustomVjps();
/// Adds to the current trace a run-time check of a custom VJP's gradients
/// `dxs` (per operand of the call of `fwdName` with `operands`, for the output
/// cotangents `dys`) against the autodiff of the forward, or a central
/// difference where it has none; a mismatch raises adjit::Error at `loc`
/// naming `names[i]` and the worst element.
void checkCustomVjp(const std::string& fwdName, const std::vector<Tensor>& operands, std::size_t outputs,
                    const std::vector<std::optional<Tensor>>& dys, const std::vector<std::optional<Tensor>>& dxs,
                    const std::vector<std::string>& names, const Location& loc);

/// Traces every custom-gradient VJP of the module that is still pending, and
/// rewrites its call sites, so the module's text carries everything needed to
/// differentiate it (in another process, by `adjit compile --vjp`).
void materializeAll(const std::shared_ptr<ir::Module>& m);

} // namespace adjit::autodiff
