// trace/PortableMath.h — ln, e^x and the logistic sigmoid as
// composites of traced IEEE-exact ops (support/PortableMath.h over Tensors),
// for the samplers of adjit::random: the same bits in the interpreter and
// compiled for any vector width, unlike the log/log1p/exp/sigmoid ops (libm,
// whose vector variants round differently per width; those stay the ops' lowering
// because they are faster).
#pragma once

#include <adjit/tensor.h>

#include <source_location>

namespace adjit::portable {

/// ln x (f32 or f64), libm's edge cases. Not differentiable (its body is bit
/// manipulation): for values no gradient flows through.
Tensor log(const Tensor& x, std::source_location loc);
/// ln x for positive normal x only (no edge cases: a few ops fewer, for
/// the samplers' logs of values known to be in range). Not differentiable.
Tensor logOfNormal(const Tensor& x, std::source_location loc);
/// e^x; differentiable (d e^x = e^x dx, by custom_jvp).
Tensor exp(const Tensor& x, std::source_location loc);
/// e^x without a derivative rule (for values no gradient flows through).
Tensor expValue(const Tensor& x, std::source_location loc);
/// digamma(x) for x >= 1/2 (the digamma op's series on this ln). Not differentiable.
Tensor digammaFromHalf(const Tensor& x, std::source_location loc);
/// 1 / (1 + e^-x); differentiable (d s = s (1 - s) dx, by custom_jvp).
Tensor sigmoid(const Tensor& x, std::source_location loc);

} // namespace adjit::portable
