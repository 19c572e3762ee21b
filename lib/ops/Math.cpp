// ops/Math.cpp — transcendental and root functions on floats: exp log log1p expm1
// sqrt rsqrt sin cos tanh sigmoid erf pow atan2. Lowered to libm calls marked side-effect
// free; the codegen maps them to glibc's libmvec variants in vectorised loops.
#include "codegen/Emitter.h"
#include "autodiff/VjpCtx.h"
#include "ops/Common.h"

namespace adjit::ops {
namespace {

using ir::EvalCtx;
using codegen::ScalarCtx;

struct ExpR { template <class T> T operator()(T x) const { return std::exp(x); } };
struct LogR { template <class T> T operator()(T x) const { return std::log(x); } };
struct Log1pR { template <class T> T operator()(T x) const { return std::log1p(x); } };
struct Expm1R { template <class T> T operator()(T x) const { return std::expm1(x); } };
struct SqrtR { template <class T> T operator()(T x) const { return std::sqrt(x); } };
struct RsqrtR { template <class T> T operator()(T x) const { return T(1) / std::sqrt(x); } };
struct SinR { template <class T> T operator()(T x) const { return std::sin(x); } };
struct CosR { template <class T> T operator()(T x) const { return std::cos(x); } };
struct TanhR { template <class T> T operator()(T x) const { return std::tanh(x); } };
struct SigmoidR { template <class T> T operator()(T x) const { return T(1) / (T(1) + std::exp(-x)); } };
struct ErfR { template <class T> T operator()(T x) const { return std::erf(x); } };

template <class R> std::vector<Array> evalWith(const EvalCtx& c) {
  return {mapUnary(c.args[0], c.resultType().dtype, [](auto x) -> decltype(x) {
    if constexpr (std::is_floating_point_v<decltype(x)>) return R{}(x);
    else ADJIT_UNREACHABLE("float op on integers");
  })};
}

struct PowR { template <class T> T operator()(T a, T b) const { return std::pow(a, b); } };
struct Atan2R { template <class T> T operator()(T y, T x) const { return std::atan2(y, x); } };

template <class R> std::vector<Array> evalBinaryWith(const EvalCtx& c) {
  return {mapBinary(c.args[0], c.args[1], c.resultType().dtype, [](auto a, auto b) -> decltype(a) {
    if constexpr (std::is_floating_point_v<decltype(a)>) return R{}(a, b);
    else ADJIT_UNREACHABLE("float op on integers");
  })};
}

/// Scalar body that calls the libm function its op's block declares in
/// `.libm` (e.g. "exp" -> expf / exp).
llvm::Value* libmCall(ScalarCtx& c) { return c.callMath(info(c.op.kind).hooks.libm.name, c.outType(), c.args); }

} // namespace

void defineMathOps(Table& t) {
  // exp(x) = e^x
  // d/dx e^x = e^x
  set(t, OpKind::Exp, {.infer = inferFloatUnary, .eval = evalWith<ExpR>, .fold = noFold, .scalar = libmCall, .libm = {"exp", 1, true}, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() * c.y(); }); }});
  // log(x) = ln x
  // d/dx ln x = 1/x (inf at 0, as the true derivative)
  set(t, OpKind::Log, {.infer = inferFloatUnary, .eval = evalWith<LogR>, .fold = noFold, .scalar = libmCall, .libm = {"log", 1, true}, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() / c.x(0); }); }});
  // log1p(x) = ln(1 + x), accurate near 0
  // d/dx ln(1 + x) = 1/(1 + x)
  set(t, OpKind::Log1p, {.infer = inferFloatUnary, .eval = evalWith<Log1pR>, .fold = noFold, .scalar = libmCall, .libm = {"log1p", 1, false}, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() / (c.x(0) + 1); }); }});
  // expm1(x) = e^x - 1, accurate near 0
  // d/dx (e^x - 1) = e^x
  set(t, OpKind::Expm1, {.infer = inferFloatUnary, .eval = evalWith<Expm1R>, .fold = noFold, .scalar = libmCall, .libm = {"expm1", 1, false}, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() * (c.y() + 1); }); }});
  // sin(x), cos(x)
  // d/dx sin x = cos x
  set(t, OpKind::Sin, {.infer = inferFloatUnary, .eval = evalWith<SinR>, .fold = noFold, .scalar = libmCall, .libm = {"sin", 1, true}, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() * cos(c.x(0)); }); }});
  // d/dx cos x = -sin x
  set(t, OpKind::Cos, {.infer = inferFloatUnary, .eval = evalWith<CosR>, .fold = noFold, .scalar = libmCall, .libm = {"cos", 1, true}, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return -c.dy() * sin(c.x(0)); }); }});
  // tanh(x)
  // d/dx tanh x = 1 - tanh^2 x
  set(t, OpKind::Tanh, {.infer = inferFloatUnary, .eval = evalWith<TanhR>, .fold = noFold, .scalar = libmCall, .libm = {"tanh", 1, false}, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() * (1 - c.y() * c.y()); }); }});

  // sqrt(x) = x^(1/2); a hardware instruction
  set(t, OpKind::Sqrt, {
      .infer = inferFloatUnary,
      .eval = evalWith<SqrtR>,
      .fold = noFold,
      .scalar = [](ScalarCtx& c) { return c.intrinsic(llvm::Intrinsic::sqrt, c.args); },
      // d/dx sqrt x = 1 / (2 sqrt x) (inf at 0, as the true derivative)
      .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() * 0.5 / c.y(); }); },
  });

  // rsqrt(x) = 1 / sqrt(x)
  set(t, OpKind::Rsqrt, {
      .infer = inferFloatUnary,
      .eval = evalWith<RsqrtR>,
      .fold = noFold,
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        llvm::Value* s = c.intrinsic(llvm::Intrinsic::sqrt, c.args);
        return c.b.CreateFDiv(c.constant(c.outType(), 1), s);
      },
      // d/dx x^(-1/2) = -x^(-3/2) / 2
      .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() * -0.5 * c.y() / c.x(0); }); },
  });

  // sigmoid(x) = 1 / (1 + e^-x); saturates cleanly to 0 and 1
  set(t, OpKind::Sigmoid, {
      .infer = inferFloatUnary,
      .eval = evalWith<SigmoidR>,
      .fold = noFold,
      .scalar = [](ScalarCtx& c) -> llvm::Value* {
        DType dt = c.outType();
        llvm::Value* negx = c.b.CreateFNeg(c.args[0]);
        llvm::Value* e = c.callMath(info(c.op.kind).hooks.libm.name, dt, {{negx}});
        return c.b.CreateFDiv(c.constant(dt, 1), c.b.CreateFAdd(c.constant(dt, 1), e));
      },
      .libm = {"exp", 1, true},
      // d/dx s(x) = s(x) (1 - s(x))
      .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return c.dy() * c.y() * (1 - c.y()); }); },
  });

  // erf(x) = 2/sqrt(pi) * integral_0^x e^(-t^2) dt
  // d/dx erf x = 2/sqrt(pi) e^(-x^2)
  set(t, OpKind::Erf, {.infer = inferFloatUnary, .eval = evalWith<ErfR>, .fold = noFold, .scalar = libmCall, .libm = {"erf", 1, false}, .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { Tensor x = c.x(0); return c.dy() * (1.1283791670955126 * exp(-(x * x))); }); }});

  // atan2(y, x): the angle of the point (x, y), in (-pi, pi]
  set(t, OpKind::Atan2, {
      .infer = inferFloatBinary,
      .eval = evalBinaryWith<Atan2R>,
      .fold = noFold,
      .scalar = libmCall, .libm = {"atan2", 2, false},
      // d atan2(y, x) = (x dy - y dx) / (x^2 + y^2)
      .vjp = [](const autodiff::VjpCtx& c) {
        Tensor y = c.x(0), x = c.x(1);
        c.grad(0, [&] { return c.dy() * x / (x * x + y * y); });
        c.grad(1, [&] { return -c.dy() * y / (x * x + y * y); });
      },
  });

  // pow(x, y) = x^y
  set(t, OpKind::Pow, {
      .infer = inferFloatBinary,
      .eval = evalBinaryWith<PowR>,
      .fold = [](const ir::FoldCtx& c) -> std::optional<ir::Folded> {
        if (c.isSplat(1, 1)) return ir::Folded{c.op.operands[0]}; // x^1 = x
        return std::nullopt;
      },
      .scalar = libmCall, .libm = {"pow", 2, true},
      // d x^y = y x^(y-1) dx + ln(x) x^y dy; each guarded where it would be 0 * inf
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] {
          Tensor x = c.x(0), y = c.x(1);
          return where(y == 0, zeros_like(x), c.dy() * y * pow(x, y - 1));
        });
        c.grad(1, [&] {
          Tensor x = c.x(0);
          return where(x == 0, zeros_like(x), c.dy() * log(x) * c.y());
        });
      },
  });
}

} // namespace adjit::ops
