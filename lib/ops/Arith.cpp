// ops/Arith.cpp — elementwise arithmetic: neg abs sign floor add sub mul div maximum minimum.
// Integer arithmetic wraps; integer division truncates toward zero and x/0 is 0
// (so compiled code never traps).
#include "codegen/Emitter.h"
#include "autodiff/JvpCtx.h"
#include "autodiff/VjpCtx.h"
#include "ops/Common.h"

#include <type_traits>

namespace adjit::ops {
namespace {

using ir::EvalCtx;
using ir::FoldCtx;
using codegen::ScalarCtx;


template <class Fn> std::vector<Array> unary(const EvalCtx& c, Fn fn) {
  return {mapUnary(c.args[0], c.resultType().dtype, fn)};
}
template <class Fn> std::vector<Array> binary(const EvalCtx& c, Fn fn) {
  return {mapBinary(c.args[0], c.args[1], c.resultType().dtype, fn)};
}

bool isFloat(const ScalarCtx& c) { return is_floating(c.argType(0)); }

/// Folds `op(x, k)` to x when operand 1 is the constant splat `k`.
std::optional<ir::Folded> identityRight(const FoldCtx& c, double k) {
  if (c.isSplat(1, k)) return ir::Folded{c.op.operands[0]};
  return std::nullopt;
}

/// For commutative ops: `op(k, x)` or `op(x, k)` folds to x.
std::optional<ir::Folded> identityEither(const FoldCtx& c, double k) {
  if (c.isSplat(0, k)) return ir::Folded{c.op.operands[1]};
  return identityRight(c, k);
}

} // namespace

void defineArithOps(Table& t) {
  // neg(x) = -x
  set(t, OpKind::Neg, {
      .infer = inferNumericUnary,
      .eval = [](const EvalCtx& c) {
        return unary(c, [](auto x) { return wrap(decltype(x){0}, x, [](auto a, auto b) { return a - b; }); });
      },
      .fold = noFold,
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        return isFloat(c) ? c.b.CreateFNeg(c.args[0]) : c.b.CreateNeg(c.args[0]);
      },
      // d/dx -x = -1
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return -c.dy(); }); },
  });

  // abs(x) = |x|
  set(t, OpKind::Abs, {
      .infer = inferNumericUnary,
      .eval = [](const EvalCtx& c) {
        return unary(c, [](auto x) {
          using T = decltype(x);
          if constexpr (isInt<T>) return x < 0 ? wrap(T{0}, x, [](auto a, auto b) { return a - b; }) : x;
          else return std::fabs(x);
        });
      },
      .fold = noFold,
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        llvm::Value* x = c.args[0];
        if (isFloat(c)) return c.intrinsic(llvm::Intrinsic::fabs, {{x}});
        return c.intrinsic(llvm::Intrinsic::abs, {{x, c.b.getFalse()}});
      },
      // d/dx |x| = sign(x) (0 at 0)
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() * sign(c.x(0)); }); },
  });

  // sign(x) = -1, 0 or 1 (NaN stays NaN, -0 stays -0)
  set(t, OpKind::Sign, {
      .infer = inferNumericUnary,
      .eval = [](const EvalCtx& c) {
        return unary(c, [](auto x) {
          using T = decltype(x);
          return x > T{0} ? T{1} : x < T{0} ? T(-1) : x;
        });
      },
      .fold = noFold,
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        llvm::Value* x = c.args[0];
        DType t = c.outType();
        llvm::Value* zero = c.constant(t, 0);
        llvm::Value* gt = isFloat(c) ? c.b.CreateFCmpOGT(x, zero) : c.b.CreateICmpSGT(x, zero);
        llvm::Value* lt = isFloat(c) ? c.b.CreateFCmpOLT(x, zero) : c.b.CreateICmpSLT(x, zero);
        return c.b.CreateSelect(gt, c.constant(t, 1), c.b.CreateSelect(lt, c.constant(t, -1), x));
      },
      // d/dx sign(x) = 0 almost everywhere: no cotangent
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {},
  });

  // floor(x) = largest integer <= x (identity on integers)
  set(t, OpKind::Floor, {
      .infer = inferNumericUnary,
      .eval = [](const EvalCtx& c) {
        return unary(c, [](auto x) {
          if constexpr (isInt<decltype(x)>) return x;
          else return std::floor(x);
        });
      },
      .fold = noFold,
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        return isFloat(c) ? c.intrinsic(llvm::Intrinsic::floor, {{c.args[0]}}) : c.args[0];
      },
      // d/dx floor(x) = 0 almost everywhere: no cotangent
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {},
  });

  // add(x, y) = x + y
  set(t, OpKind::Add, {
      .infer = inferNumericBinary,
      .eval = [](const EvalCtx& c) {
        return binary(c, [](auto a, auto b) { return wrap(a, b, [](auto x, auto y) { return x + y; }); });
      },
      .fold = [](const FoldCtx& c) { return identityEither(c, 0); },
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        return isFloat(c) ? c.b.CreateFAdd(c.args[0], c.args[1]) : c.b.CreateAdd(c.args[0], c.args[1]);
      },
      // d(x + y) = dx + dy
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] { return c.dy(); });
        c.grad(1, [&] { return c.dy(); });
      },
  });

  // sub(x, y) = x - y
  set(t, OpKind::Sub, {
      .infer = inferNumericBinary,
      .eval = [](const EvalCtx& c) {
        return binary(c, [](auto a, auto b) { return wrap(a, b, [](auto x, auto y) { return x - y; }); });
      },
      .fold = [](const FoldCtx& c) { return identityRight(c, 0); },
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        return isFloat(c) ? c.b.CreateFSub(c.args[0], c.args[1]) : c.b.CreateSub(c.args[0], c.args[1]);
      },
      // d(x - y) = dx - dy
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] { return c.dy(); });
        c.grad(1, [&] { return -c.dy(); });
      },
  });

  // mul(x, y) = x * y
  set(t, OpKind::Mul, {
      .infer = inferNumericBinary,
      .eval = [](const EvalCtx& c) {
        return binary(c, [](auto a, auto b) { return wrap(a, b, [](auto x, auto y) { return x * y; }); });
      },
      .fold = [](const FoldCtx& c) { return identityEither(c, 1); },
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        return isFloat(c) ? c.b.CreateFMul(c.args[0], c.args[1]) : c.b.CreateMul(c.args[0], c.args[1]);
      },
      // d(x y) = y dx + x dy
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] { return c.dy() * c.x(1); });
        c.grad(1, [&] { return c.dy() * c.x(0); });
      },
  });

  // div(x, y) = x / y; integers truncate toward zero, x/0 = 0, MIN/-1 = MIN
  set(t, OpKind::Div, {
      .infer = inferNumericBinary,
      .eval = [](const EvalCtx& c) {
        return binary(c, [](auto a, auto b) {
          using T = decltype(a);
          if constexpr (isInt<T>) {
            if (b == 0) return T{0};
            if (b == T(-1)) return wrap(T{0}, a, [](auto x, auto y) { return x - y; });
            return static_cast<T>(a / b);
          } else {
            return a / b;
          }
        });
      },
      .fold = [](const FoldCtx& c) { return identityRight(c, 1); },
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        llvm::Value *a = c.args[0], *d = c.args[1];
        if (isFloat(c)) return c.b.CreateFDiv(a, d);
        DType t = c.outType();
        llvm::Value* isZero = c.b.CreateICmpEQ(d, c.constant(t, 0));
        llvm::Value* isMinus1 = c.b.CreateICmpEQ(d, c.constant(t, -1));
        llvm::Value* safe = c.b.CreateSelect(c.b.CreateOr(isZero, isMinus1), c.constant(t, 1), d);
        llvm::Value* q = c.b.CreateSDiv(a, safe);
        q = c.b.CreateSelect(isMinus1, c.b.CreateNeg(a), q);
        return c.b.CreateSelect(isZero, c.constant(t, 0), q);
      },
      // d(x / y) = dx / y - (x / y) / y dy
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] { return c.dy() / c.x(1); });
        c.grad(1, [&] { return -c.dy() * c.y() / c.x(1); });
      },
  });

  // maximum(x, y); NaN if either is NaN
  set(t, OpKind::Maximum, {
      .infer = inferNumericBinary,
      .eval = [](const EvalCtx& c) {
        return binary(c, [](auto a, auto b) {
          if constexpr (isInt<decltype(a)>) return a > b ? a : b;
          else return (std::isnan(a) || std::isnan(b)) ? a + b : (a > b ? a : b == a && std::signbit(b) ? a : b);
        });
      },
      .fold = noFold,
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        return c.intrinsic(isFloat(c) ? llvm::Intrinsic::maximum : llvm::Intrinsic::smax, c.args);
      },
      // the cotangent goes to the larger operand; ties split it equally
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        auto share = [&](const Tensor& a, const Tensor& b) {
          Tensor dy = c.dy();
          return where(a > b, dy, where(a == b, dy * 0.5, zeros_like(dy)));
        };
        c.grad(0, [&] { return share(c.x(0), c.x(1)); });
        c.grad(1, [&] { return share(c.x(1), c.x(0)); });
      },
  });

  // clip(x, lo, hi) = min(max(x, lo), hi), as numpy: hi where lo > hi; NaN stays NaN
  set(t, OpKind::Clip, {
      .infer = [](const ir::InferCtx& c) {
        c.expectSameTypes();
        if (c.operands[0].dtype == DType::i1) c.fail("expected a numeric operand, got {}", c.operands[0].str());
        return std::vector<Type>{c.operands[0]};
      },
      .eval = [](const ir::EvalCtx& c) {
        Array r(c.args[0].type());
        dispatch(r.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T *x = elems<T>(c.args[0]), *lo = elems<T>(c.args[1]), *hi = elems<T>(c.args[2]);
          for (int64_t i = 0; i < r.size(); ++i) {
            const T low = x[i] < lo[i] ? lo[i] : x[i];
            elems<T>(r)[i] = low > hi[i] ? hi[i] : low;
          }
        });
        return std::vector<Array>{std::move(r)};
      },
      .fold = noFold,
      // Two selects, no min/max intrinsic: NaN compares false and passes through.
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        llvm::Value *x = c.args[0], *lo = c.args[1], *hi = c.args[2];
        const bool f = isFloat(c);
        llvm::Value* low = c.b.CreateSelect(f ? c.b.CreateFCmpOLT(x, lo) : c.b.CreateICmpSLT(x, lo), lo, x);
        return c.b.CreateSelect(f ? c.b.CreateFCmpOGT(low, hi) : c.b.CreateICmpSGT(low, hi), hi, low);
      },
      // The derivative of the two selects: hi where it was taken, else lo where
      // x was below it, else x. For lo <= hi this is TensorFlow's
      // clip_by_value gradient (x keeps it at the bounds themselves).
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        const Tensor &x = c.x(0), &lo = c.x(1), &hi = c.x(2);
        Tensor dy = c.dy(), zero = zeros_like(dy);
        Tensor below = x < lo, above = where(below, lo, x) > hi;
        c.grad(0, [&] { return where(logical_or(below, above), zero, dy); });
        c.grad(1, [&] { return where(logical_and(below, logical_not(above)), dy, zero); });
        c.grad(2, [&] { return where(above, dy, zero); });
      },
  });

  // minimum(x, y); NaN if either is NaN
  set(t, OpKind::Minimum, {
      .infer = inferNumericBinary,
      .eval = [](const EvalCtx& c) {
        return binary(c, [](auto a, auto b) {
          if constexpr (isInt<decltype(a)>) return a < b ? a : b;
          else return (std::isnan(a) || std::isnan(b)) ? a + b : (a < b ? a : b == a && !std::signbit(b) ? a : b);
        });
      },
      .fold = noFold,
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        return c.intrinsic(isFloat(c) ? llvm::Intrinsic::minimum : llvm::Intrinsic::smin, c.args);
      },
      // the cotangent goes to the smaller operand; ties split it equally
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        auto share = [&](const Tensor& a, const Tensor& b) {
          Tensor dy = c.dy();
          return where(a < b, dy, where(a == b, dy * 0.5, zeros_like(dy)));
        };
        c.grad(0, [&] { return share(c.x(0), c.x(1)); });
        c.grad(1, [&] { return share(c.x(1), c.x(0)); });
      },
  });
}

} // namespace adjit::ops
