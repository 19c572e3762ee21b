// autodiff/VjpCtx.h — what an op's VJP rule sees. Rules are written with the
// same Tensor API as user code: they read the op's operands `x(i)`, results
// `y(i)` and result cotangents `ct(i)`, and add operand cotangents with
// `grad(i, t)`. A missing cotangent is a symbolic zero (std::nullopt): rules
// never see, and should never build, zero tensors for it.
#pragma once

#include "ir/IR.h"

#include <adjit/tensor.h>

#include <functional>
#include <optional>

namespace adjit::autodiff {

struct VjpCtx {
  const ir::Op& op;
  std::function<Tensor(ir::ValueId)> value;                 ///< a primal value as a Tensor
  std::function<std::optional<Tensor>(ir::ValueId)> cotangent;
  std::function<bool(std::size_t)> wants;                   ///< does operand i need a cotangent?
  std::function<void(std::size_t, const Tensor&)> add;      ///< accumulate into operand i
  /// For ops that call functions: operand cotangents (nullopt where none) from result cotangents.
  std::function<std::vector<std::optional<Tensor>>(const std::vector<Tensor>&, const std::vector<std::optional<Tensor>>&)> callVjp;

  /// For custom-gradient call sites: operand cotangents from the attached VJP
  /// function (traced on first use).
  std::function<std::vector<std::optional<Tensor>>(const std::vector<std::optional<Tensor>>&)> customVjp;
  /// The op's position in the current trace's function (rules that rebind
  /// their op in place, as control flow does, to return residuals).
  std::size_t opIndex = 0;

  Tensor x(std::size_t i) const { return value(op.operands.at(i)); }
  Tensor y(std::size_t i = 0) const { return value(op.results.at(i)); }
  std::optional<Tensor> ct(std::size_t i = 0) const { return cotangent(op.results.at(i)); }
  /// The cotangent of a single-result op (the driver only runs rules whose results have one).
  Tensor dy() const { return *ct(0); }
  /// Adds make() to operand i's cotangent if operand i needs one; otherwise
  /// builds nothing.
  template <class Make> void grad(std::size_t i, Make&& make) const {
    if (wants(i)) add(i, make());
  }
};

/// custom_jvp's VJP: the transpose of the user's forward rule. The rule is
/// checked linear in its tangents (checkLinear), inlined on stand-ins u for
/// them, and reverse mode over it from its tangent outputs, seeded with the
/// result cotangents, gives dx = J^T dy. A captured input that needs a
/// cotangent is an Error, as in JAX.
void customJvpVjp(const VjpCtx& c);

} // namespace adjit::autodiff
