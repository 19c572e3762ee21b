// ops/GradientOps.cpp — ops that steer differentiation: stop_gradient.
#include "codegen/Emitter.h"
#include "ops/Common.h"

namespace adjit::ops {

void defineGradientOps(Table& t) {
  // stop_gradient(x) = x; its result carries no gradient (kNonDifferentiable).
  // Not folded away: passes may run before autodiff on IR text.
  set(t, OpKind::StopGradient, {
      .infer = [](const ir::InferCtx& c) { return std::vector<Type>{c.operands[0]}; },
      .eval = [](const ir::EvalCtx& c) { return std::vector<Array>{c.args[0]}; },
      .fold = noFold,
      .scalar = [](codegen::ScalarCtx& c) { return c.args[0]; },
  });
}

} // namespace adjit::ops
