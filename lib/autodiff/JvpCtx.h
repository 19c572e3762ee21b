// autodiff/JvpCtx.h — what an op's JVP rule sees (forward mode). Rules are
// written with the same Tensor API as user code: they read the op's operands
// `x(i)`, results `y(i)` and operand tangents `dx(i)`, and set result
// tangents with `tangent(i, t)`. A missing tangent is a symbolic zero
// (std::nullopt): rules never see, and should never build, zero tensors for
// it, and a result left without a tangent has none.
#pragma once

#include "ir/IR.h"

#include <adjit/tensor.h>

#include <functional>
#include <optional>

namespace adjit::autodiff {

struct JvpCtx {
  const ir::Op& op;
  std::size_t opIndex; ///< the op's position in the current trace's function
  std::function<Tensor(ir::ValueId)> value;
  std::function<std::optional<Tensor>(ir::ValueId)> tangentOf;
  std::function<void(std::size_t, const Tensor&)> set;

  Tensor x(std::size_t i) const { return value(op.operands.at(i)); }
  Tensor y(std::size_t i = 0) const { return value(op.results.at(i)); }
  std::optional<Tensor> dx(std::size_t i) const { return tangentOf(op.operands.at(i)); }
  void tangent(std::size_t i, const Tensor& t) const { set(i, t); }
};

// Rules shared by families of ops, each stated with its math.

/// Elementwise ops: the Jacobian with respect to each operand is diagonal, so
/// it equals its transpose, and the VJP rule applied to the tangent dx_i is
/// J_i dx_i. dy = sum over operands of J_i dx_i.
void diagonalJvp(const JvpCtx& c);
/// Ops linear in their floating operands jointly (reshape, slice, pad,
/// reduce_sum, gather's operand, ...): dy = op(dx...), integer operands (an
/// index) kept; a missing tangent among present ones is a zero.
void linearJvp(const JvpCtx& c);
/// Ops linear in each of two operands (matmul): d op(a, b) = op(da, b) + op(a, db).
void bilinearJvp(const JvpCtx& c);
/// Any op with a VJP rule that is linear in the cotangents (every built-in
/// rule): the JVP is the transpose of the VJP. With u standing for the
/// result cotangents, the rule computes g_i = J_iᵀ u; reverse mode over that
/// computation, seeded with dx_i at g_i, gives d/du sum_i <g_i, dx_i> =
/// sum_i J_i dx_i. Used for products and extrema (reduce_prod, cumprod,
/// reduce_max), and for calls and control flow, whose rules build functions.
void transposedJvp(const JvpCtx& c);
/// A VJP rule for the op being differentiated: operand cotangents (where
/// `wanted`) from result cotangents (nullopt: none).
using VjpRule = std::function<std::vector<std::optional<Tensor>>(const std::vector<std::optional<Tensor>>& cts,
                                                                  const std::vector<char>& wanted)>;
/// transposedJvp with another rule than the op's own.
void transposeRule(const JvpCtx& c, const VjpRule& rule);
/// call @g(x...): dy = @g.jvp(x..., dx...), the callee's own JVP, when the
/// call recomputes its forward (recompute_grad): under linearize the whole
/// region then lands in the linear function, which recomputes it instead of
/// keeping its intermediates. Other calls keep their residuals: the
/// transpose of their split VJP (transposedJvp).
void callJvp(const JvpCtx& c);
/// The JVP of an op whose operands and results are its first callee's
/// parameters and results: a call of that callee's JVP function (which
/// computes the primal again next to the tangents, without the host
/// callbacks the op itself runs).
void calleeJvp(const JvpCtx& c);
/// custom_vjp (a custom gradient's call site): the transpose of the user's
/// VJP function (transposedJvp), once checkLinear has shown it linear in the
/// output gradients; otherwise an Error at the custom_gradient's line naming
/// the op that is not. (TensorFlow builds forward mode from backward
/// functions the same way; grad_pass_through comes out right: its VJP is
/// the identity.) A recompute_grad site ({recompute = true}) is
/// differentiated through its forward instead (calleeJvp): its VJP is the
/// forward's own derivative, so there is nothing to recompute or transpose.
void customVjpJvp(const JvpCtx& c);
/// custom_jvp (a user's forward rule): dy = the rule's tangent outputs, the
/// rule inlined on (x, dx) with zeros for missing dx. An input captured from
/// the enclosing trace that has a tangent is an Error (the rule gives none).
void customJvpJvp(const JvpCtx& c);

} // namespace adjit::autodiff
