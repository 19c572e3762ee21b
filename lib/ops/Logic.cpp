// ops/Logic.cpp — comparisons (results i1); and/or/xor/not, logical on i1 and
// bitwise on integers (as XLA's And/Or/Xor/Not); select, cast.
#include "codegen/Emitter.h"
#include "autodiff/JvpCtx.h"
#include "autodiff/VjpCtx.h"
#include "ops/Common.h"

#include <limits>

namespace adjit::ops {
namespace {

using ir::EvalCtx;
using ir::InferCtx;
using codegen::ScalarCtx;

std::vector<Type> inferCompare(const InferCtx& c) {
  c.expectSameTypes();
  return {Type{DType::i1, c.operands[0].shape}};
}

/// and/or/xor: two operands of one type, i1 (logical) or integer (bitwise).
/// Checked before expectSameTypes, whose hint to cast to the other dtype would
/// not help a floating operand.
std::vector<Type> inferLogical(const InferCtx& c) {
  for (const Type& t : c.operands)
    if (!is_integer(t.dtype)) c.fail("expected i1 or integer operands, got {}", t.str());
  c.expectSameTypes();
  return {c.operands[0]};
}

/// One elementwise binary logical/bitwise op: fn on bool or integer elements.
template <class Fn> std::vector<Array> evalLogical(const EvalCtx& c, Fn fn) {
  return {mapBinary(c.args[0], c.args[1], c.args[0].dtype(), [&](auto a, auto b) -> decltype(a) {
    if constexpr (std::is_floating_point_v<decltype(a)>) ADJIT_UNREACHABLE("bitwise op on floats");
    else return static_cast<decltype(a)>(fn(a, b));
  })};
}

template <class Cmp> std::vector<Array> evalCompare(const EvalCtx& c) {
  return {mapBinary(c.args[0], c.args[1], DType::i1, [](auto a, auto b) { return Cmp{}(a, b); })};
}

/// Lowers a comparison: ordered float predicate (une for "ne"), signed int
/// predicate; i1 orders false < true, so its orderings compare unsigned
/// (eq and ne have no signedness to change).
template <llvm::CmpInst::Predicate F, llvm::CmpInst::Predicate I>
llvm::Value* lowerCompare(ScalarCtx& c) {
  llvm::Value *a = c.args[0], *b = c.args[1];
  if (is_floating(c.argType(0))) return c.b.CreateFCmp(F, a, b);
  llvm::CmpInst::Predicate p = I;
  if (c.argType(0) == DType::i1 && llvm::ICmpInst::isSigned(I)) p = llvm::CmpInst::getUnsignedPredicate(I);
  return c.b.CreateICmp(p, a, b);
}

/// Saturating conversion, matching llvm.fptosi.sat: NaN -> 0, out of range -> min/max.
template <class To, class From> To convert(From x) {
  if constexpr (std::is_same_v<To, bool>) {
    return x != From{0};
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    if (std::isnan(x)) return To{0};
    if (x <= static_cast<From>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (x >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(x);
  } else {
    return static_cast<To>(x);
  }
}

} // namespace

void defineLogicOps(Table& t) {
  using P = llvm::CmpInst::Predicate;
  // lt(x, y) = x < y   (likewise le gt ge eq ne; NaN compares false except ne)
  set(t, OpKind::Lt, {.infer = inferCompare, .eval = evalCompare<std::less<>>, .fold = noFold,
                      .scalar = lowerCompare<P::FCMP_OLT, P::ICMP_SLT>});
  set(t, OpKind::Le, {.infer = inferCompare, .eval = evalCompare<std::less_equal<>>, .fold = noFold,
                      .scalar = lowerCompare<P::FCMP_OLE, P::ICMP_SLE>});
  set(t, OpKind::Gt, {.infer = inferCompare, .eval = evalCompare<std::greater<>>, .fold = noFold,
                      .scalar = lowerCompare<P::FCMP_OGT, P::ICMP_SGT>});
  set(t, OpKind::Ge, {.infer = inferCompare, .eval = evalCompare<std::greater_equal<>>, .fold = noFold,
                      .scalar = lowerCompare<P::FCMP_OGE, P::ICMP_SGE>});
  set(t, OpKind::Eq, {.infer = inferCompare, .eval = evalCompare<std::equal_to<>>, .fold = noFold,
                      .scalar = lowerCompare<P::FCMP_OEQ, P::ICMP_EQ>});
  set(t, OpKind::Ne, {.infer = inferCompare, .eval = evalCompare<std::not_equal_to<>>, .fold = noFold,
                      .scalar = lowerCompare<P::FCMP_UNE, P::ICMP_NE>});

  // and(p, q), or(p, q), xor(p, q), not(p): logical on i1, bitwise on i32/i64
  // (for i1, whose only bit is the value, the two agree)
  set(t, OpKind::And, {
      .infer = inferLogical,
      .eval = [](const EvalCtx& c) { return evalLogical(c, [](auto a, auto b) { return a & b; }); },
      .fold = noFold,
      .scalar = [](ScalarCtx& c) { return c.b.CreateAnd(c.args[0], c.args[1]); },
  });
  set(t, OpKind::Or, {
      .infer = inferLogical,
      .eval = [](const EvalCtx& c) { return evalLogical(c, [](auto a, auto b) { return a | b; }); },
      .fold = noFold,
      .scalar = [](ScalarCtx& c) { return c.b.CreateOr(c.args[0], c.args[1]); },
  });
  set(t, OpKind::Xor, {
      .infer = inferLogical,
      .eval = [](const EvalCtx& c) { return evalLogical(c, [](auto a, auto b) { return a ^ b; }); },
      .fold = noFold,
      .scalar = [](ScalarCtx& c) { return c.b.CreateXor(c.args[0], c.args[1]); },
  });
  set(t, OpKind::Not, {
      .infer = [](const InferCtx& c) {
        if (!is_integer(c.operands[0].dtype)) c.fail("expected an i1 or integer operand, got {}", c.operands[0].str());
        return std::vector<Type>{c.operands[0]};
      },
      .eval = [](const EvalCtx& c) {
        return std::vector<Array>{mapUnary(c.args[0], c.args[0].dtype(), [](auto a) -> decltype(a) {
          using T = decltype(a);
          if constexpr (std::is_same_v<T, bool>) return !a;
          else if constexpr (std::is_integral_v<T>) return static_cast<T>(~a);
          else ADJIT_UNREACHABLE("not on floats");
        })};
      },
      .fold = noFold,
      .scalar = [](ScalarCtx& c) { return c.b.CreateNot(c.args[0]); },
  });

  // select(p, a, b) = p ? a : b
  set(t, OpKind::Select, {
      .infer = [](const InferCtx& c) {
        if (c.operands[0].dtype != DType::i1) c.fail("condition must be i1, got {}", c.operands[0].str());
        if (c.operands[1] != c.operands[2])
          c.fail("branches must have one type, got {} and {}", c.operands[1].str(), c.operands[2].str());
        if (c.operands[0].shape != c.operands[1].shape)
          c.fail("incompatible shapes {} and {}", c.operands[0].str(), c.operands[1].str());
        return std::vector<Type>{c.operands[1]};
      },
      .eval = [](const EvalCtx& c) {
        const Array &p = c.args[0], &a = c.args[1], &b = c.args[2];
        Array r(a.type());
        const std::size_t w = size_of(a.dtype());
        const auto* pp = elems<uint8_t>(p);
        for (int64_t i = 0; i < a.size(); ++i)
          std::memcpy(static_cast<char*>(r.raw()) + i * w,
                      static_cast<const char*>((pp[i] ? a : b).raw()) + i * w, w);
        return std::vector<Array>{std::move(r)};
      },
      .fold = [](const ir::FoldCtx& c) -> std::optional<ir::Folded> {
        if (c.op.operands[1] == c.op.operands[2]) return ir::Folded{c.op.operands[1]};
        if (c.isSplat(0, 1)) return ir::Folded{c.op.operands[1]};
        if (c.isSplat(0, 0)) return ir::Folded{c.op.operands[2]};
        return std::nullopt;
      },
      .scalar = [](ScalarCtx& c) { return c.b.CreateSelect(c.args[0], c.args[1], c.args[2]); },
      // the cotangent goes to the branch that was taken
      .jvp = autodiff::diagonalJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(1, [&] { return where(c.x(0), c.dy(), zeros_like(c.dy())); });
        c.grad(2, [&] { return where(c.x(0), zeros_like(c.dy()), c.dy()); });
      },
  });

  // cast(x) to attribute `dtype`: float->int saturates (NaN -> 0), x->i1 is x != 0
  set(t, OpKind::Cast, {
      .infer = [](const InferCtx& c) { return std::vector<Type>{Type{c.dtype("dtype"), c.operands[0].shape}}; },
      .eval = [](const EvalCtx& c) {
        const Array& x = c.args[0];
        Array r(c.resultType());
        dispatch(x.dtype(), [&](auto tin) {
          using From = decltype(tin);
          dispatch(r.dtype(), [&](auto tout) {
            using To = decltype(tout);
            for (int64_t i = 0; i < x.size(); ++i) elems<To>(r)[i] = convert<To>(elems<From>(x)[i]);
          });
        });
        return std::vector<Array>{std::move(r)};
      },
      .fold = foldIfSameType,
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        DType from = c.argType(0), to = c.outType();
        llvm::Value* x = c.args[0];
        llvm::Type* ty = c.scalarType(to);
        if (from == to) return x;
        if (to == DType::i1)
          return is_floating(from) ? c.b.CreateFCmpUNE(x, c.constant(from, 0)) : c.b.CreateICmpNE(x, c.constant(from, 0));
        if (is_floating(from) && is_floating(to)) return c.b.CreateFPCast(x, ty);
        if (is_floating(from)) return c.b.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {ty, x->getType()}, {x});
        if (from == DType::i1) return is_floating(to) ? c.b.CreateUIToFP(x, ty) : c.b.CreateZExt(x, ty);
        if (is_floating(to)) return c.b.CreateSIToFP(x, ty);
        return c.b.CreateSExtOrTrunc(x, ty);
      },
      // float -> float: cast the cotangent back; integer results carry none
      .jvp = autodiff::linearJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        if (is_floating(c.y().dtype())) c.grad(0, [&] { return cast(c.dy(), c.x(0).dtype()); });
      },
  });
}

} // namespace adjit::ops
