// trace/PortableMath.cpp — support/PortableMath.h's ln and e^x
// over traced Tensors (TensorMath): each step an elementwise op that rounds
// as IEEE says in the interpreter and in compiled code alike (no libm call,
// no contraction), so adjit::random's samplers give the same bits everywhere.
// f32 computes in f32 (the f32 series lengths; a few ulp, test_random measures it).
// Cost, adjit_bench random (R2: one thread, four runs of 5-21 rounds
// interleaved with the same formulas on the libm ops, AVX-512 host at load 4):
// exponential f32 0.81-0.84x, f64 1.16-1.35x; gumbel f32 0.86-0.92x, f64
// 0.81-1.04x (the samplers' logs of in-range values skip the edge cases:
// logOfNormal; with them and log1p's correction, 1.08x / 1.68x / 1.34x / 1.36x).
#include "trace/PortableMath.h"
#include "support/Assert.h"
#include "support/PortableMath.h"

#include <adjit/custom_gradient.h>

namespace adjit::portable {
namespace {

using Loc = std::source_location;

/// Arithmetic on traced Tensors of one float dtype (support/PortableMath.h's M).
struct TensorMath {
  using V = Tensor;
  DType t;
  Loc loc;
  bool f32() const { return t == DType::f32; }
  DType bitsType() const { return f32() ? DType::i32 : DType::i64; }
  Tensor integer(int64_t v) const {
    return f32() ? constant(Array(static_cast<int32_t>(v)), loc) : constant(Array(v), loc);
  }
  V c(double v) const { return full({}, v, t, loc); }
  V add(const V& a, const V& b) const { return adjit::add(a, b, loc); }
  V sub(const V& a, const V& b) const { return adjit::sub(a, b, loc); }
  V mul(const V& a, const V& b) const { return adjit::mul(a, b, loc); }
  V div(const V& a, const V& b) const { return adjit::div(a, b, loc); }
  V floor(const V& a) const { return adjit::floor(a, loc); }
  V lt(const V& a, const V& b) const { return adjit::lt(a, b, loc); }
  V gt(const V& a, const V& b) const { return adjit::gt(a, b, loc); }
  V eq(const V& a, const V& b) const { return adjit::eq(a, b, loc); }
  V and_(const V& a, const V& b) const { return logical_and(a, b, loc); }
  V select(const V& p, const V& a, const V& b) const { return where(p, a, b, loc); }
  V log(const V& a) const { return logAll(*this, a, f32()); }
  /// frexp of positive normal a from its bits: the exponent field less the
  /// bias - 1, and the mantissa under the exponent of 1/2 (exact).
  std::pair<V, V> frexp(const V& a) const {
    const Tensor bits = bitcast(a, bitsType(), loc);
    const int mantissa = f32() ? 23 : 52;
    const Tensor e = adjit::sub(shift_right_logical(bits, integer(mantissa), loc), integer(f32() ? 126 : 1022), loc);
    const Tensor m = bitwise_or(bitwise_and(bits, integer(f32() ? 0x007FFFFF : 0x000FFFFFFFFFFFFF), loc),
                                integer(f32() ? 0x3F000000 : 0x3FE0000000000000), loc);
    return {bitcast(m, t, loc), cast(e, t, loc)};
  }
  /// 2^n for integral n in the normal exponent range: n + bias in the exponent field.
  V pow2(const V& n) const {
    const Tensor biased = adjit::add(cast(n, bitsType(), loc), integer(f32() ? 127 : 1023), loc);
    return bitcast(shift_left(biased, integer(f32() ? 23 : 52), loc), t, loc);
  }
};

TensorMath mathOf(const char* fn, const Tensor& x, const Loc& loc) {
  ADJIT_ASSERT(x.valid() && (x.dtype() == DType::f32 || x.dtype() == DType::f64), std::string("portable ") + fn + " of a non-float");
  return TensorMath{x.dtype(), loc};
}

Tensor sigmoidValue(const Tensor& x, const Loc& loc) {
  TensorMath m = mathOf("sigmoid", x, loc);
  return m.div(m.c(1), m.add(m.c(1), expOf(m, neg(x, loc), m.f32())));
}

} // namespace

Tensor log(const Tensor& x, Loc loc) {
  TensorMath m = mathOf("log", x, loc);
  return logAll(m, x, m.f32());
}

Tensor logOfNormal(const Tensor& x, Loc loc) {
  TensorMath m = mathOf("log", x, loc);
  return logOf(m, x, m.f32());
}

Tensor expValue(const Tensor& x, Loc loc) {
  TensorMath m = mathOf("exp", x, loc);
  return expOf(m, x, m.f32());
}

Tensor digammaFromHalf(const Tensor& x, Loc loc) {
  TensorMath m = mathOf("digamma", x, loc);
  return portable::digammaFromHalf(m, x);
}

Tensor exp(const Tensor& x, Loc loc) {
  // d e^x = e^x dx
  auto f = custom_jvp([loc](Tensor v) { return expValue(v, loc); },
                      [loc](const std::tuple<Tensor>& p, const std::tuple<Tensor>& t) {
                        const Tensor y = expValue(std::get<0>(p), loc);
                        return std::make_pair(y, mul(y, std::get<0>(t), loc));
                      },
                      loc);
  return f(x);
}

Tensor sigmoid(const Tensor& x, Loc loc) {
  // d s(x) = s(x) (1 - s(x)) dx: finite where e^-x overflows (the quotient rule's would be inf/inf)
  auto f = custom_jvp([loc](Tensor v) { return sigmoidValue(v, loc); },
                      [loc](const std::tuple<Tensor>& p, const std::tuple<Tensor>& t) {
                        const Tensor y = sigmoidValue(std::get<0>(p), loc);
                        return std::make_pair(y, mul(mul(y, sub(AtScalar(1.0, loc), y), loc), std::get<0>(t), loc));
                      },
                      loc);
  return f(x);
}

} // namespace adjit::portable
