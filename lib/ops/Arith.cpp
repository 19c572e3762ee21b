// ops/Arith.cpp — elementwise arithmetic: neg abs sign floor round ceil trunc rint
// integer_pow add sub mul div maximum minimum clip fmod mod floor_divide.
// Integer arithmetic wraps; integer division truncates toward zero (div, fmod)
// or floors (floor_divide, mod), and a division by zero gives 0, quotient and
// remainder alike (so compiled code never traps).
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

/// Rounding to an integral value: `R` for the interpreter, the LLVM intrinsic
/// `Id` compiled; integers are integral already.
template <class R> std::vector<Array> evalRounding(const EvalCtx& c) {
  return unary(c, [](auto x) {
    if constexpr (isInt<decltype(x)>) return x;
    else return R{}(x);
  });
}
template <llvm::Intrinsic::ID Id> llvm::Value* lowerRounding(ScalarCtx& c) {
  return isFloat(c) ? c.intrinsic(Id, {{c.args[0]}}) : c.args[0];
}
struct RoundEval { template <class T> T operator()(T x) const { return std::round(x); } };
struct CeilEval { template <class T> T operator()(T x) const { return std::ceil(x); } };
struct TruncEval { template <class T> T operator()(T x) const { return std::trunc(x); } };
// The default floating-point environment rounds to nearest, ties to even.
struct RintEval { template <class T> T operator()(T x) const { return std::nearbyint(x); } };

/// x^n by repeated squaring (x^13 = x * x^4 * x^8), the same multiplications
/// in the same order for the interpreter (V a number) and compiled code (V an
/// llvm::Value*), so both round alike. x^0 is `one`.
template <class V, class Mul> V powBySquaring(V x, uint64_t n, V one, Mul mul) {
  V acc = one, base = x;
  bool any = false;
  for (; n; n >>= 1) {
    if (n & 1) {
      acc = any ? mul(acc, base) : base;
      any = true;
    }
    if (n > 1) base = mul(base, base);
  }
  return acc;
}
uint64_t magnitude(int64_t n) { return n < 0 ? uint64_t{0} - static_cast<uint64_t>(n) : static_cast<uint64_t>(n); }

// Quotients and remainders with numpy's signs. Integers: a division by zero
// gives 0 (as div), and MIN / -1 wraps to MIN with remainder 0.
template <class T> T intFmod(T a, T b) { return b == 0 || b == T(-1) ? T{0} : static_cast<T>(a % b); }
template <class T> T intMod(T a, T b) {
  const T r = intFmod(a, b);
  return r != 0 && (r < 0) != (b < 0) ? static_cast<T>(r + b) : r;
}
template <class T> T intFloorDivide(T a, T b) {
  if (b == 0) return T{0};
  if (b == T(-1)) return wrap(T{0}, a, [](auto x, auto y) { return x - y; });
  const T r = static_cast<T>(a % b), q = static_cast<T>(a / b);
  return r != 0 && (r < 0) != (b < 0) ? static_cast<T>(q - 1) : q;
}
// Floats: Python's (and numpy's) mod has the divisor's sign (a zero remainder
// too); floor_divide is the quotient that goes with it, (a - mod(a, b)) / b
// snapped to an integer, so a = b * floor_divide(a, b) + mod(a, b) up to
// rounding even where floor(a / b) would round the wrong way (1 // 0.1 is 9).
template <class T> T floatMod(T a, T b) {
  const T r = std::fmod(a, b);
  if (r == 0) return std::copysign(T(0), b);
  return (r < 0) != (b < 0) ? r + b : r;
}
template <class T> T floatFloorDivide(T a, T b) {
  if (b == 0) return a / b;
  const T r = std::fmod(a, b);
  T q = (a - r) / b;
  if (r != 0 && (r < 0) != (b < 0)) q -= 1;
  if (q == 0) return std::copysign(T(0), a / b);
  const T f = std::floor(q);
  return q - f > T(0.5) ? f + 1 : f;
}

/// The integer divisor b, or 1 where it is 0 or -1 (which the ops answer
/// without dividing: no trap on x/0 or MIN/-1).
llvm::Value* safeDivisor(ScalarCtx& c, llvm::Value* b) {
  const DType t = c.outType();
  llvm::Value* bad = c.b.CreateOr(c.b.CreateICmpEQ(b, c.constant(t, 0)), c.b.CreateICmpEQ(b, c.constant(t, -1)));
  return c.b.CreateSelect(bad, c.constant(t, 1), b);
}
/// Whether a nonzero remainder r and the divisor b differ in sign (where the
/// floored quotient is one below the truncated one).
llvm::Value* signsDiffer(ScalarCtx& c, llvm::Value* r, llvm::Value* b) {
  const DType t = c.outType();
  llvm::Value* zero = c.constant(t, 0);
  if (isFloat(c))
    return c.b.CreateAnd(c.b.CreateFCmpUNE(r, zero), c.b.CreateXor(c.b.CreateFCmpOLT(r, zero), c.b.CreateFCmpOLT(b, zero)));
  return c.b.CreateAnd(c.b.CreateICmpNE(r, zero), c.b.CreateXor(c.b.CreateICmpSLT(r, zero), c.b.CreateICmpSLT(b, zero)));
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
      .deps = sparsity::piecewiseLinearDeps,
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
      .deps = sparsity::zeroDeps,
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
      .deps = sparsity::zeroDeps,
  });

  // round(x): to the nearest integer, halfway cases away from zero (C's round,
  // lax.round's default); rint(x): halfway cases to even (numpy's rint and
  // round); ceil(x): the smallest integer >= x; trunc(x): toward zero. Identity
  // on integers; NaN, inf and -0 stay.
  // d/dx = 0 almost everywhere: no cotangent
  set(t, OpKind::Round, {.infer = inferNumericUnary, .eval = evalRounding<RoundEval>, .fold = noFold,
                         .scalar = lowerRounding<llvm::Intrinsic::round>, .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx&) {}, .deps = sparsity::zeroDeps});
  set(t, OpKind::Rint, {.infer = inferNumericUnary, .eval = evalRounding<RintEval>, .fold = noFold,
                        .scalar = lowerRounding<llvm::Intrinsic::roundeven>, .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx&) {}, .deps = sparsity::zeroDeps});
  set(t, OpKind::Ceil, {.infer = inferNumericUnary, .eval = evalRounding<CeilEval>, .fold = noFold,
                        .scalar = lowerRounding<llvm::Intrinsic::ceil>, .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx&) {}, .deps = sparsity::zeroDeps});
  set(t, OpKind::Trunc, {.infer = inferNumericUnary, .eval = evalRounding<TruncEval>, .fold = noFold,
                         .scalar = lowerRounding<llvm::Intrinsic::trunc>, .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx&) {}, .deps = sparsity::zeroDeps});

  // integer_pow(x) {y = n} = x^n for a constant integer n, by repeated squaring
  // (about 2 log2 |n| multiplications); x^-n = 1 / x^n on floats; x^0 = 1 (0^0
  // too). Integers wrap and take no negative exponent.
  set(t, OpKind::IntegerPow, {
      .infer = [](const ir::InferCtx& c) {
        const int64_t n = c.integer("y");
        const Type& x = c.operands[0];
        if (x.dtype == DType::i1) c.fail("expected a numeric operand, got {}", x.str());
        if (is_integer(x.dtype) && n < 0)
          c.fail("expected a non-negative exponent for the integer operand {}, got y = {}", x.str(), n);
        return std::vector<Type>{x};
      },
      .eval = [](const EvalCtx& c) {
        const int64_t n = c.op.attrs.integer("y");
        return unary(c, [n](auto x) {
          using T = decltype(x);
          const T p = powBySquaring(x, magnitude(n), T{1}, [](T a, T b) { return wrap(a, b, [](auto u, auto v) { return u * v; }); });
          if constexpr (isInt<T>) return p;
          else return n < 0 ? T(1) / p : p;
        });
      },
      .fold = [](const FoldCtx& c) -> std::optional<ir::Folded> {
        if (c.op.attrs.integer("y") == 1) return ir::Folded{c.op.operands[0]}; // x^1 = x
        return std::nullopt;
      },
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        const int64_t n = c.op.attrs.integer("y");
        const DType t = c.outType();
        const bool f = isFloat(c);
        auto mul = [&](llvm::Value* a, llvm::Value* b) { return f ? c.b.CreateFMul(a, b) : c.b.CreateMul(a, b); };
        llvm::Value* p = powBySquaring(c.args[0], magnitude(n), c.constant(t, 1), mul);
        return n < 0 ? c.b.CreateFDiv(c.constant(t, 1), p) : p;
      },
      // d/dx x^n = n x^(n-1) (for n = 0: no cotangent)
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        const int64_t n = c.op.attrs.integer("y");
        if (n == 0) return;
        c.grad(0, [&] { return c.dy() * static_cast<double>(n) * integer_pow(c.x(0), n - 1); });
      },
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
      // d(x / y) = dx / y - (x / y) / y dy. The cotangent of y is written
      // -(dy / y) (x / y): the quotient dy / y is x's cotangent, so when both
      // are needed the pullback divides once (CSE merges them), not twice; a
      // division costs several multiplies (ba's Jacobian had 22 of them).
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] { return c.dy() / c.x(1); });
        c.grad(1, [&] { return -(c.dy() / c.x(1)) * c.y(); });
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
      .deps = sparsity::piecewiseLinearDeps,
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
      .deps = sparsity::piecewiseLinearDeps,
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
      .deps = sparsity::piecewiseLinearDeps,
  });

  // fmod(x, y): the remainder of x / y truncated, with x's sign (C's fmod;
  // NaN for y = 0 on floats, 0 on integers)
  set(t, OpKind::Fmod, {
      .infer = inferNumericBinary,
      .eval = [](const EvalCtx& c) {
        return binary(c, [](auto a, auto b) -> decltype(a) {
          if constexpr (std::is_floating_point_v<decltype(a)>) return std::fmod(a, b);
          else if constexpr (isInt<decltype(a)>) return intFmod(a, b);
          else ADJIT_UNREACHABLE("i1 operands");
        });
      },
      .fold = noFold,
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        llvm::Value *a = c.args[0], *b = c.args[1];
        if (isFloat(c)) return c.b.CreateFRem(a, b);
        return c.b.CreateSRem(a, safeDivisor(c, b)); // x % 1 = 0: the 0 wanted for b = 0 and -1
      },
      // d fmod(x, y) = dx - trunc(x / y) dy (away from the jumps where x / y is an integer)
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] { return c.dy(); });
        c.grad(1, [&] { return -c.dy() * trunc(c.x(0) / c.x(1)); });
      },
      .deps = sparsity::piecewiseLinearDeps,
  });

  // mod(x, y): Python's x % y, numpy's mod and remainder: the remainder of the
  // floored division, with y's sign (+-0 too); NaN for y = 0 on floats, 0 on integers
  set(t, OpKind::Mod, {
      .infer = inferNumericBinary,
      .eval = [](const EvalCtx& c) {
        return binary(c, [](auto a, auto b) -> decltype(a) {
          if constexpr (std::is_floating_point_v<decltype(a)>) return floatMod(a, b);
          else if constexpr (isInt<decltype(a)>) return intMod(a, b);
          else ADJIT_UNREACHABLE("i1 operands");
        });
      },
      .fold = noFold,
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        llvm::Value *a = c.args[0], *b = c.args[1];
        const DType t = c.outType();
        if (!isFloat(c)) {
          llvm::Value* r = c.b.CreateSRem(a, safeDivisor(c, b));
          return c.b.CreateSelect(signsDiffer(c, r, b), c.b.CreateAdd(r, b), r);
        }
        llvm::Value* r = c.b.CreateFRem(a, b);
        llvm::Value* adjusted = c.b.CreateSelect(signsDiffer(c, r, b), c.b.CreateFAdd(r, b), r);
        llvm::Value* signedZero = c.intrinsic(llvm::Intrinsic::copysign, {{c.constant(t, 0), b}});
        return c.b.CreateSelect(c.b.CreateFCmpOEQ(r, c.constant(t, 0)), signedZero, adjusted);
      },
      // d mod(x, y) = dx - floor_divide(x, y) dy (away from the jumps)
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] { return c.dy(); });
        c.grad(1, [&] { return -c.dy() * floor_divide(c.x(0), c.x(1)); });
      },
      .deps = sparsity::piecewiseLinearDeps,
  });

  // floor_divide(x, y): Python's x // y, the floored quotient going with mod
  // (floats: numpy's, x / y where y = 0; integers: 0 where y = 0, MIN // -1 = MIN)
  set(t, OpKind::FloorDivide, {
      .infer = inferNumericBinary,
      .eval = [](const EvalCtx& c) {
        return binary(c, [](auto a, auto b) -> decltype(a) {
          if constexpr (std::is_floating_point_v<decltype(a)>) return floatFloorDivide(a, b);
          else if constexpr (isInt<decltype(a)>) return intFloorDivide(a, b);
          else ADJIT_UNREACHABLE("i1 operands");
        });
      },
      .fold = noFold, // not x // 1 = x: floats round down
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        llvm::Value *a = c.args[0], *b = c.args[1];
        const DType t = c.outType();
        llvm::Value* zero = c.constant(t, 0);
        if (!isFloat(c)) {
          llvm::Value* safe = safeDivisor(c, b);
          llvm::Value *q = c.b.CreateSDiv(a, safe), *r = c.b.CreateSRem(a, safe);
          q = c.b.CreateSelect(signsDiffer(c, r, b), c.b.CreateSub(q, c.constant(t, 1)), q);
          q = c.b.CreateSelect(c.b.CreateICmpEQ(b, c.constant(t, -1)), c.b.CreateNeg(a), q);
          return c.b.CreateSelect(c.b.CreateICmpEQ(b, zero), zero, q);
        }
        llvm::Value* r = c.b.CreateFRem(a, b);
        llvm::Value* q = c.b.CreateFDiv(c.b.CreateFSub(a, r), b);
        q = c.b.CreateSelect(signsDiffer(c, r, b), c.b.CreateFSub(q, c.constant(t, 1)), q);
        llvm::Value* fl = c.intrinsic(llvm::Intrinsic::floor, {{q}});
        fl = c.b.CreateSelect(c.b.CreateFCmpOGT(c.b.CreateFSub(q, fl), c.constant(t, 0.5)), c.b.CreateFAdd(fl, c.constant(t, 1)), fl);
        llvm::Value* quotient = c.b.CreateFDiv(a, b);
        llvm::Value* signedZero = c.intrinsic(llvm::Intrinsic::copysign, {{zero, quotient}});
        llvm::Value* result = c.b.CreateSelect(c.b.CreateFCmpOEQ(q, zero), signedZero, fl);
        return c.b.CreateSelect(c.b.CreateFCmpOEQ(b, zero), quotient, result);
      },
      // d floor_divide = 0 almost everywhere: no cotangent
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx&) {},
      .deps = sparsity::zeroDeps,
  });
}

} // namespace adjit::ops
