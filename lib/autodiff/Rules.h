// autodiff/Rules.h — each op's derivative rules: its JVP (forward mode), its
// VJP (reverse mode), and the facts the derivative passes read (which results
// carry no gradient, which ops are linear in which operands). Owned here, by
// the passes that use them; filled by the op's block in lib/ops at start-up
// (ops/OpTable.cpp), next to its type rule and lowering.
#pragma once

#include "ir/IR.h"

#include <cstdint>

namespace adjit::autodiff {

struct VjpCtx;
struct JvpCtx;

/// What the derivative passes know of an op kind.
enum Trait : uint32_t {
  kNonDifferentiable = 1u << 0, ///< results carry no gradient
  kGradientIsError = 1u << 1,   ///< differentiable in form, but its VJP rule raises an error (prevent_gradient)
  // Linearity, for checking that a custom gradient's grad_fn is linear in its
  // output gradients before forward mode transposes it (Linearity.cpp).
  kLinear = 1u << 2,        ///< linear in its floating operands jointly (integer operands, an index or predicate, fixed)
  kLinearInEach = 1u << 3,  ///< linear in each operand while the others are fixed (mul, matmul)
  kLinearInFirst = 1u << 4, ///< linear in operand 0 while the others are fixed (div)
  kLinearInLast = 1u << 5,  ///< linear in its last operand while the others are fixed (triangular_solve in b)
};

/// The derivative rules of an op kind.
struct Rules {
  uint32_t traits = 0; ///< Trait bits
  /// Sets result tangents from operand tangents (forward mode). Required
  /// unless the op is kNonDifferentiable.
  void (*jvp)(const JvpCtx&) = nullptr;
  /// Adds operand cotangents from result cotangents (reverse mode). Required
  /// unless the op is kNonDifferentiable.
  void (*vjp)(const VjpCtx&) = nullptr;
  bool has(Trait t) const { return (traits & t) != 0; }
};

/// The derivative rules of op kind k.
const Rules& rules(ir::OpKind k);
/// Sets op kind k's rules: called once per op, at start-up (ops/OpTable.cpp).
void define(ir::OpKind k, const Rules& r);

} // namespace adjit::autodiff
