// ops/Bits.cpp — integer bit ops on i32/i64: shifts and population count; and
// bitcast, which reinterprets the bits of an element as another dtype of the
// same width (f32 <-> i32, f64 <-> i64). Together with the bitwise and/or/xor/
// not of Logic.cpp and the wrapping integer add/mul of Arith.cpp they are the
// unsigned 32-bit arithmetic of counter-based random numbers (Threefry): an
// i32 holds a u32's bits, add and mul wrap, and only shifts to the right and
// comparisons need to know the sign, which shift_right_logical ignores.
// None is differentiable.
#include "codegen/Emitter.h"
#include "ops/Common.h"

#include <bit>

namespace adjit::ops {
namespace {

using ir::EvalCtx;
using ir::InferCtx;
using codegen::ScalarCtx;

/// Two operands of one type, i32 or i64 (not i1, which has no bits to shift).
std::vector<Type> inferIntBinary(const InferCtx& c) {
  for (const Type& t : c.operands)
    if (t.dtype != DType::i32 && t.dtype != DType::i64) c.fail("expected i32 or i64 operands, got {}", t.str());
  c.expectSameTypes();
  return {c.operands[0]};
}

/// Shifts as XLA defines them: the amount is read as unsigned, so a negative
/// amount is out of range like one of the width or more; out of range, a left
/// or logical right shift gives 0 and an arithmetic right shift gives the sign
/// (0 or -1). In range, shift_left(x, s) = x * 2^s wrapped; the right shifts
/// divide by 2^s rounding down, the logical one reading x as unsigned.
enum class Shift { Left, RightLogical, RightArithmetic };

template <Shift K, class T> T shiftOf(T x, T amount) {
  using U = std::make_unsigned_t<T>;
  constexpr U bits = sizeof(T) * 8;
  const U s = static_cast<U>(amount);
  if constexpr (K == Shift::Left) return s >= bits ? T{0} : static_cast<T>(static_cast<U>(x) << s);
  else if constexpr (K == Shift::RightLogical) return s >= bits ? T{0} : static_cast<T>(static_cast<U>(x) >> s);
  else return s >= bits ? (x < 0 ? T(-1) : T{0}) : static_cast<T>(x >> s); // C++20: >> of a negative is arithmetic
}

template <Shift K> std::vector<Array> evalShift(const EvalCtx& c) {
  return {mapBinary(c.args[0], c.args[1], c.args[0].dtype(), [](auto x, auto s) -> decltype(x) {
    if constexpr (isInt<decltype(x)>) return shiftOf<K>(x, s);
    else ADJIT_UNREACHABLE("shift of a non-integer");
  })};
}

/// LLVM's shifts are poison at amounts >= the width: the amount is compared
/// unsigned with the width and the out-of-range result selected instead
/// (the arithmetic shift by width - 1 gives the sign).
template <Shift K> llvm::Value* lowerShift(ScalarCtx& c) {
  llvm::Value *x = c.args[0], *s = c.args[1];
  const DType t = c.outType();
  const int width = t == DType::i32 ? 32 : 64;
  llvm::Value* inRange = c.b.CreateICmpULT(s, c.constant(t, width));
  if constexpr (K == Shift::RightArithmetic)
    return c.b.CreateAShr(x, c.b.CreateSelect(inRange, s, c.constant(t, width - 1)));
  llvm::Value* safe = c.b.CreateSelect(inRange, s, c.constant(t, 0)); // no poison to select away
  llvm::Value* r = K == Shift::Left ? c.b.CreateShl(x, safe) : c.b.CreateLShr(x, safe);
  return c.b.CreateSelect(inRange, r, c.constant(t, 0));
}

} // namespace

void defineBitsOps(Table& t) {
  // shift_left(x, s) = x << s (0 for s outside [0, width))
  set(t, OpKind::ShiftLeft, {.infer = inferIntBinary, .eval = evalShift<Shift::Left>, .fold = noFold,
                             .scalar = lowerShift<Shift::Left>});
  // shift_right_logical(x, s) = x >> s with zeros shifted in (0 for s outside [0, width))
  set(t, OpKind::ShiftRightLogical, {.infer = inferIntBinary, .eval = evalShift<Shift::RightLogical>,
                                     .fold = noFold, .scalar = lowerShift<Shift::RightLogical>});
  // shift_right_arithmetic(x, s) = x >> s with copies of the sign bit shifted in
  // (the sign, 0 or -1, for s outside [0, width))
  set(t, OpKind::ShiftRightArithmetic, {.infer = inferIntBinary, .eval = evalShift<Shift::RightArithmetic>,
                                        .fold = noFold, .scalar = lowerShift<Shift::RightArithmetic>});

  // population_count(x) = the number of bits set in x (of the two's complement bits), as x's dtype
  set(t, OpKind::PopulationCount, {
      .infer = [](const InferCtx& c) {
        const Type& x = c.operands[0];
        if (x.dtype != DType::i32 && x.dtype != DType::i64) c.fail("expected an i32 or i64 operand, got {}", x.str());
        return std::vector<Type>{x};
      },
      .eval = [](const EvalCtx& c) {
        return std::vector<Array>{mapUnary(c.args[0], c.args[0].dtype(), [](auto x) -> decltype(x) {
          using T = decltype(x);
          if constexpr (isInt<T>) return static_cast<T>(std::popcount(static_cast<std::make_unsigned_t<T>>(x)));
          else ADJIT_UNREACHABLE("population_count of a non-integer");
        })};
      },
      .fold = noFold,
      .scalar = [](ScalarCtx& c) { return c.intrinsic(llvm::Intrinsic::ctpop, c.args); },
  });

  // bitcast(x) to attribute `dtype`: the same bits read as a dtype of the same
  // width (f32 <-> i32, f64 <-> i64; to its own dtype it is the identity)
  set(t, OpKind::Bitcast, {
      .infer = [](const InferCtx& c) {
        const Type& x = c.operands[0];
        const DType to = c.dtype("dtype");
        if (x.dtype == DType::i1 || to == DType::i1 || size_of(x.dtype) != size_of(to))
          c.fail("expected dtypes of one width (f32 and i32, f64 and i64), got {} to {}", x.str(), name_of(to));
        return std::vector<Type>{Type{to, x.shape}};
      },
      .eval = [](const EvalCtx& c) {
        Array r(c.resultType());
        std::memcpy(r.raw(), c.args[0].raw(), c.resultType().bytes());
        return std::vector<Array>{std::move(r)};
      },
      .fold = foldIfSameType,
      .scalar = [](ScalarCtx& c) { return c.b.CreateBitCast(c.args[0], c.scalarType(c.outType())); },
  });
}

} // namespace adjit::ops
