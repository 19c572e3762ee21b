// ops/Math.cpp — transcendental and root functions on floats: exp log log1p expm1
// sin cos tanh sqrt rsqrt sigmoid erf erf_inv lgamma digamma tan asin acos atan
// sinh cosh asinh acosh atanh log2 log10 exp2 cbrt atan2 pow hypot copysign
// nextafter xlogy xlog1py. Lowered to libm
// calls marked side-effect free (digamma to code of its own); the codegen maps
// libm calls to glibc's libmvec variants in vectorised loops.
#include "codegen/Emitter.h"
#include "autodiff/JvpCtx.h"
#include "autodiff/VjpCtx.h"
#include "ops/Common.h"
#include "support/PortableMath.h"

namespace adjit::ops {
namespace {

using ir::EvalCtx;
using codegen::ScalarCtx;
using portable::logOf; // erf_inv's ln (support/PortableMath.h)

// Reference evaluations (the interpreter's), one function object per op.
struct ExpEval { template <class T> T operator()(T x) const { return std::exp(x); } };
struct LogEval { template <class T> T operator()(T x) const { return std::log(x); } };
struct Log1pEval { template <class T> T operator()(T x) const { return std::log1p(x); } };
struct Expm1Eval { template <class T> T operator()(T x) const { return std::expm1(x); } };
struct SqrtEval { template <class T> T operator()(T x) const { return std::sqrt(x); } };
struct RsqrtEval { template <class T> T operator()(T x) const { return T(1) / std::sqrt(x); } };
struct SinEval { template <class T> T operator()(T x) const { return std::sin(x); } };
struct CosEval { template <class T> T operator()(T x) const { return std::cos(x); } };
struct TanhEval { template <class T> T operator()(T x) const { return std::tanh(x); } };
struct SigmoidEval { template <class T> T operator()(T x) const { return T(1) / (T(1) + std::exp(-x)); } };
struct ErfEval { template <class T> T operator()(T x) const { return std::erf(x); } };
struct TanEval { template <class T> T operator()(T x) const { return std::tan(x); } };
struct AsinEval { template <class T> T operator()(T x) const { return std::asin(x); } };
struct AcosEval { template <class T> T operator()(T x) const { return std::acos(x); } };
struct AtanEval { template <class T> T operator()(T x) const { return std::atan(x); } };
struct SinhEval { template <class T> T operator()(T x) const { return std::sinh(x); } };
struct CoshEval { template <class T> T operator()(T x) const { return std::cosh(x); } };
struct AsinhEval { template <class T> T operator()(T x) const { return std::asinh(x); } };
struct AcoshEval { template <class T> T operator()(T x) const { return std::acosh(x); } };
struct AtanhEval { template <class T> T operator()(T x) const { return std::atanh(x); } };
struct Log2Eval { template <class T> T operator()(T x) const { return std::log2(x); } };
struct Log10Eval { template <class T> T operator()(T x) const { return std::log10(x); } };
struct Exp2Eval { template <class T> T operator()(T x) const { return std::exp2(x); } };
struct CbrtEval { template <class T> T operator()(T x) const { return std::cbrt(x); } };

template <class R> std::vector<Array> evalWith(const EvalCtx& c) {
  return {mapUnary(c.args[0], c.resultType().dtype, [](auto x) -> decltype(x) {
    if constexpr (std::is_floating_point_v<decltype(x)>) return R{}(x);
    else ADJIT_UNREACHABLE("float op on integers");
  })};
}

struct PowEval { template <class T> T operator()(T a, T b) const { return std::pow(a, b); } };
struct Atan2Eval { template <class T> T operator()(T y, T x) const { return std::atan2(y, x); } };
struct HypotEval { template <class T> T operator()(T x, T y) const { return std::hypot(x, y); } };
struct CopysignEval { template <class T> T operator()(T x, T y) const { return std::copysign(x, y); } };
struct NextafterEval { template <class T> T operator()(T x, T y) const { return std::nextafter(x, y); } };
// 0 wherever x is 0, whatever y is (NaN and inf included), as JAX.
struct XlogyEval { template <class T> T operator()(T x, T y) const { return x == 0 ? T(0) : x * std::log(y); } };
struct Xlog1pyEval { template <class T> T operator()(T x, T y) const { return x == 0 ? T(0) : x * std::log1p(y); } };

template <class R> std::vector<Array> evalBinaryWith(const EvalCtx& c) {
  return {mapBinary(c.args[0], c.args[1], c.resultType().dtype, [](auto a, auto b) -> decltype(a) {
    if constexpr (std::is_floating_point_v<decltype(a)>) return R{}(a, b);
    else ADJIT_UNREACHABLE("float op on integers");
  })};
}

// ---- digamma and trigamma ----------------------------------------------------
// Both shift x up by 8 (psi(x) = psi(x + 8) - sum 1/(x + k)), where the
// asymptotic series is accurate to double precision, and reflect x < 1/2
// (psi(x) = psi(1 - x) - pi cot(pi x)). Written once, over an arithmetic M:
// doubles for the reference interpreter, LLVM values for the lowering.

constexpr double kPi = 3.14159265358979323846;

template <class M> typename M::V digammaOf(M& m, typename M::V x) {
  using V = typename M::V;
  const V reflect = m.lt(x, m.c(0.5));
  // the shift and the series (support/PortableMath.h, shared with the gamma sampler's gradient)
  const V psi = portable::digammaFromHalf(m, m.select(reflect, m.sub(m.c(1), x), x));
  const V px = m.mul(m.c(kPi), x);
  const V reflected = m.sub(psi, m.div(m.mul(m.c(kPi), m.cos(px)), m.sin(px)));
  // Poles at 0, -1, -2, ...: NaN, as TensorFlow.
  const V pole = m.and_(m.le(x, m.c(0)), m.eq(m.floor(x), x));
  return m.select(pole, m.c(std::nan("")), m.select(reflect, reflected, psi));
}

/// Arithmetic on host floats of type T, each operation rounded to T (as the
/// generated code rounds it): the reference side of the series above and below.
template <class T> struct HostMath {
  using V = T;
  V c(double v) const { return static_cast<T>(v); }
  V add(V a, V b) const { return a + b; }
  V sub(V a, V b) const { return a - b; }
  V mul(V a, V b) const { return a * b; }
  V div(V a, V b) const { return a / b; }
  V neg(V a) const { return -a; }
  V log(V a) const { return std::log(a); }
  V log1p(V a) const { return std::log1p(a); }
  V sqrt(V a) const { return std::sqrt(a); }
  V abs(V a) const { return std::fabs(a); }
  V sin(V a) const { return std::sin(a); }
  V cos(V a) const { return std::cos(a); }
  V floor(V a) const { return std::floor(a); }
  bool lt(V a, V b) const { return a < b; }
  bool le(V a, V b) const { return a <= b; }
  bool gt(V a, V b) const { return a > b; }
  bool eq(V a, V b) const { return a == b; }
  bool and_(bool a, bool b) const { return a && b; }
  V select(bool p, V a, V b) const { return p ? a : b; }
  /// {m, e} with a = m 2^e, m in [1/2, 1), for positive normal a (exact).
  std::pair<V, V> frexp(V a) const {
    int e = 0;
    const V mant = std::frexp(a, &e);
    return {mant, static_cast<V>(e)};
  }
};
using DoubleMath = HostMath<double>;

struct IrMath {
  using V = llvm::Value*;
  ScalarCtx& ctx;
  DType t;
  V c(double v) const { return ctx.constant(t, v); }
  V add(V a, V b) const { return ctx.b.CreateFAdd(a, b); }
  V sub(V a, V b) const { return ctx.b.CreateFSub(a, b); }
  V mul(V a, V b) const { return ctx.b.CreateFMul(a, b); }
  V div(V a, V b) const { return ctx.b.CreateFDiv(a, b); }
  V call(const char* f, V a) const { return ctx.callMath(f, t, {&a, 1}); }
  V neg(V a) const { return ctx.b.CreateFNeg(a); }
  V log(V a) const { return call("log", a); }
  V log1p(V a) const { return call("log1p", a); }
  V sqrt(V a) const { return ctx.intrinsic(llvm::Intrinsic::sqrt, {&a, 1}); }
  V abs(V a) const { return ctx.intrinsic(llvm::Intrinsic::fabs, {&a, 1}); }
  V sin(V a) const { return call("sin", a); }
  V cos(V a) const { return call("cos", a); }
  V floor(V a) const { return ctx.intrinsic(llvm::Intrinsic::floor, {&a, 1}); }
  V lt(V a, V b) const { return ctx.b.CreateFCmpOLT(a, b); }
  V le(V a, V b) const { return ctx.b.CreateFCmpOLE(a, b); }
  V gt(V a, V b) const { return ctx.b.CreateFCmpOGT(a, b); }
  V eq(V a, V b) const { return ctx.b.CreateFCmpOEQ(a, b); }
  V and_(V a, V b) const { return ctx.b.CreateAnd(a, b); }
  V select(V p, V a, V b) const { return ctx.b.CreateSelect(p, a, b); }
  /// frexp of a positive normal float from its bits: the exponent field less
  /// the bias - 1, and the mantissa under the exponent of 1/2 (exact, as std::frexp).
  std::pair<V, V> frexp(V a) const {
    auto& b = ctx.b;
    const bool f64 = t == DType::f64;
    llvm::Type* intTy = f64 ? b.getInt64Ty() : b.getInt32Ty();
    auto k = [&](uint64_t v) { return llvm::ConstantInt::get(intTy, v); };
    V bits = b.CreateBitCast(a, intTy);
    V e = b.CreateSub(b.CreateLShr(bits, f64 ? 52 : 23), k(f64 ? 1022 : 126));
    V mant = b.CreateOr(b.CreateAnd(bits, k(f64 ? 0x000FFFFFFFFFFFFFull : 0x007FFFFFu)),
                        k(f64 ? 0x3FE0000000000000ull : 0x3F000000u));
    return {b.CreateBitCast(mant, a->getType()), b.CreateSIToFP(e, a->getType())};
  }
};

// ---- erf_inv -------------------------------------------------------------------
// Written once over an arithmetic M (HostMath<double> for the interpreter,
// IrMath for the lowering) from IEEE-rounded +, -, *, /, sqrt and exact bit
// manipulation only: no libm call, whose vector variants (libmvec) round
// differently per vector width. So erf_inv gives the same bits in the
// interpreter and compiled for SSE, AVX2 or AVX-512, and so do the normal
// samples built on it. Both dtypes compute in f64; f32 rounds the result.
// erf_inv(+-1) = +-inf; |x| > 1 and NaN give NaN.

/// erf_inv for f32: Giles, "Approximating the
/// erfinv function" (GPU Computing Gems, 2010), the single-precision version
/// XLA (so JAX) uses: w = -ln((1 - x)(1 + x)); a degree-8 polynomial in
/// w - 2.5 for w < 5, else in sqrt(w) - 3; times x. Giles reports a relative
/// error below 3.7e-7 (a few ulp of f32); test_random measures it against erf
/// inverted in long double. XLA forms w with its own log1p(-x^2), so JAX's
/// values may differ from these in the last bits.
template <class M> typename M::V erfInvF32(M& m, typename M::V x) {
  using V = typename M::V;
  static constexpr double kCentral[] = {2.81022636e-08,  3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                                        -0.00125372503, -0.00417768164, 0.246640727,     1.50140941};
  static constexpr double kTail[] = {-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                                     -0.0076224613,   0.00943887047,  1.00167406,    2.83297682};
  V w = m.neg(logOf(m, m.mul(m.sub(m.c(1), x), m.add(m.c(1), x)), true));
  const auto central = m.lt(w, m.c(5));
  w = m.select(central, m.sub(w, m.c(2.5)), m.sub(m.sqrt(w), m.c(3)));
  V p = m.select(central, m.c(kCentral[0]), m.c(kTail[0]));
  for (int i = 1; i < 9; ++i) p = m.add(m.select(central, m.c(kCentral[i]), m.c(kTail[i])), m.mul(p, w));
  return m.mul(p, x);
}

/// erf_inv for f64: Wichura's algorithm AS 241 (PPND16, Applied Statistics
/// 37(3), 1988), the normal quantile to about 1e-16 relative, as erf_inv(x) =
/// PPND16((1 + x)/2) / sqrt(2) without forming (1 + x)/2: its q = p - 1/2 is
/// x/2 exactly, and min(p, 1 - p) = (1 - |x|)/2, exact for |x| > 0.85 where
/// it is used. Rational functions of degree 7/7: in 0.180625 - q^2 for |q| <=
/// 0.425, else in r - 1.6 or r - 5 (r = sqrt(-ln min(p, 1 - p)) below or above
/// 5). With logOf and the last roundings, a few ulp (test_random measures it).
template <class M> typename M::V erfInvF64(M& m, typename M::V x) {
  using V = typename M::V;
  static constexpr double kA[] = {3.3871328727963666080e0, 1.3314166789178437745e+2, 1.9715909503065514427e+3,
                                  1.3731693765509461125e+4, 4.5921953931549871457e+4, 6.7265770927008700853e+4,
                                  3.3430575583588128105e+4, 2.5090809287301226727e+3};
  static constexpr double kB[] = {1.0, 4.2313330701600911252e+1, 6.8718700749205790830e+2, 5.3941960214247511077e+3,
                                  2.1213794301586595867e+4, 3.9307895800092710610e+4, 2.8729085735721942674e+4,
                                  5.2264952788528545610e+3};
  static constexpr double kC[] = {1.42343711074968357734e0, 4.63033784615654529590e0, 5.76949722146069140550e0,
                                  3.64784832476320460504e0, 1.27045825245236838258e0, 2.41780725177450611770e-1,
                                  2.27238449892691845833e-2, 7.74545014278341407640e-4};
  static constexpr double kD[] = {1.0, 2.05319162663775882187e0, 1.67638483018380384940e0, 6.89767334985100004550e-1,
                                  1.48103976427480074590e-1, 1.51986665636164571966e-2, 5.47593808499534494600e-4,
                                  1.05075007164441684324e-9};
  static constexpr double kE[] = {6.65790464350110377720e0, 5.46378491116411436990e0, 1.78482653991729133580e0,
                                  2.96560571828504891230e-1, 2.65321895265761230930e-2, 1.24266094738807843860e-3,
                                  2.71155556874348757815e-5, 2.01033439929228813265e-7};
  static constexpr double kF[] = {1.0, 5.99832206555887937690e-1, 1.36929880922735805310e-1, 1.48753612908506148525e-2,
                                  7.86869131145613259100e-4, 1.84631831751005468180e-5, 1.42151175831644588870e-7,
                                  2.04426310338993978564e-15};
  // the quotient of two degree-7 polynomials (coefficients lowest first) at t
  auto rational = [&](const double* num, const double* den, V t) {
    V n = m.c(num[7]), d = m.c(den[7]);
    for (int i = 6; i >= 0; --i) {
      n = m.add(m.mul(n, t), m.c(num[i]));
      d = m.add(m.mul(d, t), m.c(den[i]));
    }
    return m.div(n, d);
  };
  const V q = m.mul(x, m.c(0.5)), ax = m.abs(x);
  const V central = m.mul(q, rational(kA, kB, m.sub(m.c(0.180625), m.mul(q, q))));
  // the tails (|q| > 0.425): r from the smaller of p and 1 - p (kept positive
  // and normal where it is not used), the sign of x
  const V pMin = m.select(m.gt(ax, m.c(0.5)), m.mul(m.sub(m.c(1), ax), m.c(0.5)), m.c(0.25));
  const V r = m.sqrt(m.neg(logOf(m, pMin, false)));
  const auto near = m.le(r, m.c(5));
  const V tail = m.select(near, rational(kC, kD, m.sub(r, m.c(1.6))), rational(kE, kF, m.sub(r, m.c(5))));
  const V signedTail = m.select(m.lt(x, m.c(0)), m.neg(tail), tail);
  const V ppnd = m.select(m.le(m.abs(q), m.c(0.425)), central, signedTail);
  return m.mul(ppnd, m.c(0.70710678118654752440)); // 1/sqrt(2)
}

/// erf_inv of x (f64) with the edge cases: +-inf at +-1, NaN beyond (and for
/// NaN); the series see a safe 0 there, so logOf's argument stays normal.
template <class M> typename M::V erfInvOf(M& m, typename M::V x, bool f32) {
  using V = typename M::V;
  const V ax = m.abs(x);
  const auto inside = m.lt(ax, m.c(1));
  const V safe = m.select(inside, x, m.c(0));
  const V y = f32 ? erfInvF32(m, safe) : erfInvF64(m, safe);
  const V edge = m.select(m.eq(ax, m.c(1)), m.mul(x, m.c(HUGE_VAL)), m.c(std::nan("")));
  return m.select(inside, y, edge);
}

struct ErfInvEval {
  template <class T> T operator()(T x) const {
    HostMath<T> m;
    return erfInvOf(m, x, std::is_same_v<T, float>);
  }
};

struct DigammaEval {
  template <class T> T operator()(T x) const {
    DoubleMath m;
    return static_cast<T>(digammaOf(m, static_cast<double>(x)));
  }
};
struct LgammaEval {
  template <class T> T operator()(T x) const {
    int sign; // lgamma_r: the sign goes here, not into the global signgam
    return static_cast<T>(lgamma_r(static_cast<double>(x), &sign));
  }
};

/// trigamma psi'(x), the derivative of digamma, from Tensor ops (so it is
/// differentiable in turn): the same shift by 8, the series
/// 1/y + 1/(2y^2) + 1/(6y^3) - 1/(30y^5) + 1/(42y^7) - 1/(30y^9) + 5/(66y^11)
/// - 691/(2730y^13) + 7/(6y^15), and psi'(x) = pi^2/sin^2(pi x) - psi'(1 - x).
Tensor trigamma(const Tensor& x) {
  Tensor reflect = x < 0.5;
  Tensor y = where(reflect, 1 - x, x), r = zeros_like(x);
  for (int k = 0; k < 8; ++k) {
    r = r + 1 / (y * y);
    y = y + 1;
  }
  Tensor inv = 1 / y, z = inv * inv;
  Tensor s = zeros_like(x) + 7.0 / 6;
  for (double coef : {-691.0 / 2730, 5.0 / 66, -1.0 / 30, 1.0 / 42, -1.0 / 30, 1.0 / 6}) s = coef + z * s;
  Tensor psi1 = inv + 0.5 * z + inv * z * s + r;
  Tensor sp = sin(kPi * x);
  return where(reflect, kPi * kPi / (sp * sp) - psi1, psi1);
}

/// Scalar body that calls the libm function its op's block declares in
/// `.libm` (e.g. "exp" -> expf / exp).
llvm::Value* libmCall(ScalarCtx& c) { return c.callMath(codegen::lowering(c.op.kind).libm.name, c.outType(), c.args); }

/// The hooks of an op computing libm's `name` of one floating operand: `R`
/// in the interpreter, the libm call (libmvec's variant in vector loops)
/// compiled, and the VJP `vjp` (the JVP is its diagonal).
template <class R> Hooks unaryLibm(const char* name, bool intrinsic, void (*vjp)(const autodiff::VjpCtx&)) {
  return {.infer = inferFloatUnary, .eval = evalWith<R>, .fold = noFold, .scalar = libmCall,
          .libm = {name, 1, intrinsic}, .jvp = autodiff::diagonalJvp, .vjp = vjp};
}

/// Scalar body of x * f(y), 0 where x is 0 (xlogy, xlog1py): f is the libm
/// function the op's block declares.
llvm::Value* timesLibmUnlessZero(ScalarCtx& c) {
  const DType t = c.outType();
  llvm::Value *x = c.args[0], *y = c.args[1];
  llvm::Value* f = c.callMath(codegen::lowering(c.op.kind).libm.name, t, {&y, 1});
  llvm::Value* zero = c.constant(t, 0);
  return c.b.CreateSelect(c.b.CreateFCmpOEQ(x, zero), zero, c.b.CreateFMul(x, f));
}

} // namespace

void defineMathOps(Table& t) {
  // exp(x) = e^x
  // d/dx e^x = e^x
  set(t, OpKind::Exp, {.infer = inferFloatUnary, .eval = evalWith<ExpEval>, .fold = noFold, .scalar = libmCall, .libm = {"exp", 1, true}, .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() * c.y(); }); }});
  // log(x) = ln x
  // d/dx ln x = 1/x (inf at 0, as the true derivative)
  set(t, OpKind::Log, {.infer = inferFloatUnary, .eval = evalWith<LogEval>, .fold = noFold, .scalar = libmCall, .libm = {"log", 1, true}, .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() / c.x(0); }); }});
  // log1p(x) = ln(1 + x), accurate near 0
  // d/dx ln(1 + x) = 1/(1 + x)
  set(t, OpKind::Log1p, {.infer = inferFloatUnary, .eval = evalWith<Log1pEval>, .fold = noFold, .scalar = libmCall, .libm = {"log1p", 1, false}, .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() / (c.x(0) + 1); }); }});
  // expm1(x) = e^x - 1, accurate near 0
  // d/dx (e^x - 1) = e^x
  set(t, OpKind::Expm1, {.infer = inferFloatUnary, .eval = evalWith<Expm1Eval>, .fold = noFold, .scalar = libmCall, .libm = {"expm1", 1, false}, .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() * (c.y() + 1); }); }});
  // sin(x), cos(x)
  // d/dx sin x = cos x
  set(t, OpKind::Sin, {.infer = inferFloatUnary, .eval = evalWith<SinEval>, .fold = noFold, .scalar = libmCall, .libm = {"sin", 1, true}, .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() * cos(c.x(0)); }); }});
  // d/dx cos x = -sin x
  set(t, OpKind::Cos, {.infer = inferFloatUnary, .eval = evalWith<CosEval>, .fold = noFold, .scalar = libmCall, .libm = {"cos", 1, true}, .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return -c.dy() * sin(c.x(0)); }); }});
  // tanh(x)
  // d/dx tanh x = 1 - tanh^2 x
  set(t, OpKind::Tanh, {.infer = inferFloatUnary, .eval = evalWith<TanhEval>, .fold = noFold, .scalar = libmCall, .libm = {"tanh", 1, false}, .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() * (1 - c.y() * c.y()); }); }});

  // sqrt(x) = x^(1/2); a hardware instruction
  set(t, OpKind::Sqrt, {
      .infer = inferFloatUnary,
      .eval = evalWith<SqrtEval>,
      .fold = noFold,
      .scalar = [](ScalarCtx& c) { return c.intrinsic(llvm::Intrinsic::sqrt, c.args); },
      // d/dx sqrt x = 1 / (2 sqrt x) (inf at 0, as the true derivative)
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() * 0.5 / c.y(); }); },
  });

  // rsqrt(x) = 1 / sqrt(x)
  set(t, OpKind::Rsqrt, {
      .infer = inferFloatUnary,
      .eval = evalWith<RsqrtEval>,
      .fold = noFold,
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        llvm::Value* s = c.intrinsic(llvm::Intrinsic::sqrt, c.args);
        return c.b.CreateFDiv(c.constant(c.outType(), 1), s);
      },
      // d/dx x^(-1/2) = -x^(-3/2) / 2
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() * -0.5 * c.y() / c.x(0); }); },
  });

  // sigmoid(x) = 1 / (1 + e^-x); saturates cleanly to 0 and 1
  set(t, OpKind::Sigmoid, {
      .infer = inferFloatUnary,
      .eval = evalWith<SigmoidEval>,
      .fold = noFold,
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        DType dt = c.outType();
        llvm::Value* negx = c.b.CreateFNeg(c.args[0]);
        llvm::Value* e = c.callMath(codegen::lowering(c.op.kind).libm.name, dt, {{negx}});
        return c.b.CreateFDiv(c.constant(dt, 1), c.b.CreateFAdd(c.constant(dt, 1), e));
      },
      .libm = {"exp", 1, true},
      // d/dx s(x) = s(x) (1 - s(x))
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() * c.y() * (1 - c.y()); }); },
  });

  // erf(x) = 2/sqrt(pi) * integral_0^x e^(-t^2) dt
  // d/dx erf x = 2/sqrt(pi) e^(-x^2)
  set(t, OpKind::Erf, {.infer = inferFloatUnary, .eval = evalWith<ErfEval>, .fold = noFold, .scalar = libmCall, .libm = {"erf", 1, false}, .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { Tensor x = c.x(0); return c.dy() * (1.1283791670955126 * exp(-(x * x))); }); }});

  // erf_inv(x) = y such that erf(y) = x, for x in [-1, 1] (the series above)
  // d/dx erf_inv x = sqrt(pi)/2 e^(erf_inv(x)^2) (inf at +-1, as the true derivative)
  set(t, OpKind::ErfInv, {
      .infer = inferFloatUnary,
      .eval = evalWith<ErfInvEval>,
      .fold = noFold,
      .scalar = [](ScalarCtx& c) {
        IrMath m{c, c.outType()};
        return erfInvOf(m, c.args[0], c.outType() == DType::f32);
      },
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] { Tensor y = c.y(); return c.dy() * (0.88622692545275801365 * exp(y * y)); });
      },
  });

  // lgamma(x) = ln |Gamma(x)|; +inf at the poles 0, -1, -2, ...
  // d/dx ln |Gamma(x)| = digamma(x). glibc has no vector lgamma: vector loops
  // call it per lane. (It also writes the global signgam, which nothing reads.)
  set(t, OpKind::Lgamma, {.infer = inferFloatUnary, .eval = evalWith<LgammaEval>, .fold = noFold, .scalar = libmCall, .libm = {"lgamma", 1, false, false}, .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() * digamma(c.x(0)); }); }});
  // digamma(x) = d/dx ln Gamma(x) (the series above, in registers); NaN at the poles
  // d/dx digamma x = trigamma(x), from Tensor ops above
  set(t, OpKind::Digamma, {.infer = inferFloatUnary, .eval = evalWith<DigammaEval>, .fold = noFold, .scalar = [](ScalarCtx& c) { IrMath m{c, c.outType()}; return digammaOf(m, c.args[0]); }, .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() * trigamma(c.x(0)); }); }});

  // atan2(y, x): the angle of the point (x, y), in (-pi, pi]
  set(t, OpKind::Atan2, {
      .infer = inferFloatBinary,
      .eval = evalBinaryWith<Atan2Eval>,
      .fold = noFold,
      .scalar = libmCall, .libm = {"atan2", 2, false},
      // d atan2(y, x) = (x dy - y dx) / (x^2 + y^2)
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        Tensor y = c.x(0), x = c.x(1);
        c.grad(0, [&] { return c.dy() * x / (x * x + y * y); });
        c.grad(1, [&] { return -c.dy() * y / (x * x + y * y); });
      },
  });

  // pow(x, y) = x^y
  set(t, OpKind::Pow, {
      .infer = inferFloatBinary,
      .eval = evalBinaryWith<PowEval>,
      .fold = [](const ir::FoldCtx& c) -> std::optional<ir::Folded> {
        if (c.isSplat(1, 1)) return ir::Folded{c.op.operands[0]}; // x^1 = x
        return std::nullopt;
      },
      .scalar = libmCall, .libm = {"pow", 2, true},
      // d x^y = y x^(y-1) dx + ln(x) x^y dy; dx guarded where it would be 0 * inf.
      // The dy term is 0 for x <= 0, as in TensorFlow: x^y is real there only
      // at integer y, where it has no derivative in y. Its log reads a safe
      // 1 there, so no derivative of it is NaN either (a constant exponent
      // inside a loop body gets this cotangent; a second derivative
      // multiplies it by zero).
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] {
          Tensor x = c.x(0), y = c.x(1);
          return where(y == 0, zeros_like(x), c.dy() * y * pow(x, y - 1));
        });
        c.grad(1, [&] {
          Tensor x = c.x(0), positive = x > 0;
          return where(positive, c.dy() * log(where(positive, x, ones_like(x))) * c.y(), zeros_like(x));
        });
      },
  });

  // ---- inverse trigonometric, hyperbolic, base-2 and base-10 functions, cube root ----
  // Each calls its libm function (libmvec's variant in vector loops). Derivatives
  // are the true ones, infinite where those are (asin, acos at +-1; acosh at 1;
  // atanh at +-1; cbrt at 0); the functions' own NaN outside their domains
  // propagates.
  // d/dx tan x = 1 + tan^2 x
  set(t, OpKind::Tan, unaryLibm<TanEval>("tan", false, [](const autodiff::VjpCtx& c) {
    c.grad(0, [&] { return c.dy() * (1 + c.y() * c.y()); });
  }));
  // d/dx asin x = 1 / sqrt(1 - x^2)
  set(t, OpKind::Asin, unaryLibm<AsinEval>("asin", false, [](const autodiff::VjpCtx& c) {
    c.grad(0, [&] { Tensor x = c.x(0); return c.dy() * rsqrt(1 - x * x); });
  }));
  // d/dx acos x = -1 / sqrt(1 - x^2)
  set(t, OpKind::Acos, unaryLibm<AcosEval>("acos", false, [](const autodiff::VjpCtx& c) {
    c.grad(0, [&] { Tensor x = c.x(0); return -c.dy() * rsqrt(1 - x * x); });
  }));
  // d/dx atan x = 1 / (1 + x^2)
  set(t, OpKind::Atan, unaryLibm<AtanEval>("atan", false, [](const autodiff::VjpCtx& c) {
    c.grad(0, [&] { Tensor x = c.x(0); return c.dy() / (1 + x * x); });
  }));
  // d/dx sinh x = cosh x
  set(t, OpKind::Sinh, unaryLibm<SinhEval>("sinh", false, [](const autodiff::VjpCtx& c) {
    c.grad(0, [&] { return c.dy() * cosh(c.x(0)); });
  }));
  // d/dx cosh x = sinh x
  set(t, OpKind::Cosh, unaryLibm<CoshEval>("cosh", false, [](const autodiff::VjpCtx& c) {
    c.grad(0, [&] { return c.dy() * sinh(c.x(0)); });
  }));
  // d/dx asinh x = 1 / sqrt(x^2 + 1)
  set(t, OpKind::Asinh, unaryLibm<AsinhEval>("asinh", false, [](const autodiff::VjpCtx& c) {
    c.grad(0, [&] { Tensor x = c.x(0); return c.dy() * rsqrt(x * x + 1); });
  }));
  // d/dx acosh x = 1 / sqrt((x - 1)(x + 1)) (factored: no cancellation near 1)
  set(t, OpKind::Acosh, unaryLibm<AcoshEval>("acosh", false, [](const autodiff::VjpCtx& c) {
    c.grad(0, [&] { Tensor x = c.x(0); return c.dy() * rsqrt((x - 1) * (x + 1)); });
  }));
  // d/dx atanh x = 1 / (1 - x^2)
  set(t, OpKind::Atanh, unaryLibm<AtanhEval>("atanh", false, [](const autodiff::VjpCtx& c) {
    c.grad(0, [&] { Tensor x = c.x(0); return c.dy() / (1 - x * x); });
  }));
  // d/dx log2 x = 1 / (x ln 2)
  set(t, OpKind::Log2, unaryLibm<Log2Eval>("log2", true, [](const autodiff::VjpCtx& c) {
    c.grad(0, [&] { return c.dy() / (c.x(0) * 0.69314718055994530942); });
  }));
  // d/dx log10 x = 1 / (x ln 10)
  set(t, OpKind::Log10, unaryLibm<Log10Eval>("log10", true, [](const autodiff::VjpCtx& c) {
    c.grad(0, [&] { return c.dy() / (c.x(0) * 2.30258509299404568402); });
  }));
  // d/dx 2^x = 2^x ln 2
  set(t, OpKind::Exp2, unaryLibm<Exp2Eval>("exp2", true, [](const autodiff::VjpCtx& c) {
    c.grad(0, [&] { return c.dy() * c.y() * 0.69314718055994530942; });
  }));
  // d/dx x^(1/3) = 1 / (3 cbrt(x)^2), written with the result so that it is +inf at 0 (not 0/0)
  set(t, OpKind::Cbrt, unaryLibm<CbrtEval>("cbrt", false, [](const autodiff::VjpCtx& c) {
    c.grad(0, [&] { return c.dy() / (3 * c.y() * c.y()); });
  }));

  // hypot(x, y) = sqrt(x^2 + y^2) without overflow or underflow in the squares
  set(t, OpKind::Hypot, {
      .infer = inferFloatBinary,
      .eval = evalBinaryWith<HypotEval>,
      .fold = noFold,
      .scalar = libmCall, .libm = {"hypot", 2, false},
      // d hypot(x, y) = (x dx + y dy) / hypot(x, y); at the origin (no derivative)
      // 0, a subgradient, as abs: the division reads 1 there, so neither this
      // rule nor its own derivative is 0/0.
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        Tensor h = c.y(), safe = where(h == 0, ones_like(h), h);
        c.grad(0, [&] { return c.dy() * c.x(0) / safe; });
        c.grad(1, [&] { return c.dy() * c.x(1) / safe; });
      },
  });

  // copysign(x, y) = |x| with the sign bit of y (so -0 and -NaN count as negative)
  set(t, OpKind::Copysign, {
      .infer = inferFloatBinary,
      .eval = evalBinaryWith<CopysignEval>,
      .fold = noFold,
      .scalar = [](ScalarCtx& c) { return c.intrinsic(llvm::Intrinsic::copysign, c.args); },
      // d copysign(x, y) = sign(x) copysign(1, y) dx (0 at x = 0, as abs); the
      // sign of y is piecewise constant: no cotangent for y
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] { Tensor x = c.x(0); return c.dy() * sign(x) * copysign(ones_like(x), c.x(1)); });
      },
      .deps = sparsity::piecewiseLinearFirstDeps,
  });

  // nextafter(x, y): the next representable number after x towards y (y where x == y)
  set(t, OpKind::Nextafter, {
      .infer = inferFloatBinary,
      .eval = evalBinaryWith<NextafterEval>,
      .fold = noFold,
      // glibc has no vector nextafter: vector loops call it per lane
      .scalar = libmCall, .libm = {"nextafter", 2, false, false},
      // nextafter(x, y) - x is one ulp at most, piecewise constant: d = dx,
      // and y's direction has no derivative (no cotangent)
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy(); }); },
      .deps = sparsity::piecewiseLinearFirstDeps,
  });

  // xlogy(x, y) = x log y, and 0 where x = 0 (whatever y is)
  set(t, OpKind::Xlogy, {
      .infer = inferFloatBinary,
      .eval = evalBinaryWith<XlogyEval>,
      .fold = noFold,
      .scalar = timesLibmUnlessZero, .libm = {"log", 1, true},
      // d xlogy = log(y) dx + x/y dy. At x = 0 the function is 0 for every y:
      // its y-derivative is 0 there (the division reads y = 1, so 0/0 never
      // happens); its x-derivative is log y (JAX's), -inf at y = 0.
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        Tensor x = c.x(0), y = c.x(1);
        c.grad(0, [&] { return c.dy() * log(y); });
        c.grad(1, [&] { return c.dy() * x / where(x == 0, ones_like(y), y); });
      },
  });

  // xlog1py(x, y) = x log(1 + y), and 0 where x = 0 (whatever y is)
  set(t, OpKind::Xlog1py, {
      .infer = inferFloatBinary,
      .eval = evalBinaryWith<Xlog1pyEval>,
      .fold = noFold,
      .scalar = timesLibmUnlessZero, .libm = {"log1p", 1, false},
      // d xlog1py = log(1 + y) dx + x/(1 + y) dy, the y-derivative 0 at x = 0 as xlogy's
      .jvp = autodiff::diagonalJvp, .vjp = [](const autodiff::VjpCtx& c) {
        Tensor x = c.x(0), y = c.x(1);
        c.grad(0, [&] { return c.dy() * log1p(y); });
        c.grad(1, [&] { return c.dy() * x / where(x == 0, ones_like(y), 1 + y); });
      },
  });
}

} // namespace adjit::ops
