// trace/MathComposites.cpp — elementwise functions written with other ops
// (no rows of their own): square reciprocal isnan isinf isfinite relu silu
// softplus gelu logaddexp logaddexp2 sinc. Each traces the ops it is made of,
// so its derivatives are theirs; the comments say why each form is the
// stable one and what its derivative is at the awkward points.
#include <adjit/error.h>
#include <adjit/tensor.h>

#include <fmt/format.h>

#include <limits>

namespace adjit {

namespace {

/// For composites whose ops would name themselves in the error: names the function the user called.
void expectFloating(const char* op, const Tensor& x, SrcLoc l) {
  if (!x.valid()) throw Error(fmt::format("{}: got an invalid (default-constructed) Tensor", op), Location::from(l));
  if (!is_floating(x.dtype()))
    throw Error(fmt::format("{}: expected a floating-point operand, got {}", op, x.type().str()), Location::from(l));
}

constexpr double kPi = 3.14159265358979323846;

} // namespace

Tensor square(const Tensor& x, SrcLoc l) { return mul(x, x, l); }
Tensor reciprocal(const Tensor& x, SrcLoc l) { return div(scalar_like(x, AtScalar(1, l), "reciprocal"), x, l); }

// isnan(x) = x != x; isinf(x) = |x| == inf; isfinite(x) = |x| < inf (NaN compares
// false). Integers are never NaN nor infinite. Comparisons: i1, no gradient.
Tensor isnan(const Tensor& x, SrcLoc l) { return ne(x, x, l); }
Tensor isinf(const Tensor& x, SrcLoc l) {
  if (!is_floating(x.dtype())) return ne(x, x, l);
  return eq(abs(x, l), AtScalar(std::numeric_limits<double>::infinity(), l));
}
Tensor isfinite(const Tensor& x, SrcLoc l) {
  if (!is_floating(x.dtype())) return eq(x, x, l);
  return lt(abs(x, l), AtScalar(std::numeric_limits<double>::infinity(), l));
}

// relu(x) = x where x > 0, else 0: a select, whose derivative at 0 is 0 (JAX's
// choice; maximum's would split the tie). NaN <= 0 is false: NaN stays NaN.
Tensor relu(const Tensor& x, SrcLoc l) { return where(le(x, AtScalar(0, l)), zeros_like(x, l), x, l); }

// silu(x) = x sigmoid(x); d/dx = s(x) (1 + x (1 - s(x)))
Tensor silu(const Tensor& x, SrcLoc l) {
  expectFloating("silu", x, l);
  return mul(x, sigmoid(x, l), l);
}

// softplus(x) = log(1 + e^x) = max(x, 0) + log1p(e^-|x|). Its derivative is
// sigmoid(x) everywhere, 1/2 at 0 too: maximum splits the tie, and d|x| = 0 there.
Tensor softplus(const Tensor& x, SrcLoc l) {
  expectFloating("softplus", x, l);
  return add(maximum(x, AtScalar(0, l)), log1p(exp(neg(abs(x, l), l), l), l), l);
}

// gelu(x) = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), or the tanh approximation
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Tensor gelu(const Tensor& x, bool approximate, SrcLoc l) {
  expectFloating("gelu", x, l);
  Tensor inner = approximate ? tanh(mul(add(x, mul(integer_pow(x, 3, l), AtScalar(0.044715, l)), l),
                                        AtScalar(0.79788456080286535588, l)), l)
                             : erf(mul(x, AtScalar(0.70710678118654752440, l)), l);
  return mul(mul(x, AtScalar(0.5, l)), add(inner, AtScalar(1, l)), l);
}

// logaddexp(a, b) = max(a, b) + log1p(e^-|a - b|); d/da = e^(a - result) =
// sigmoid(a - b), 1/2 each at a = b (maximum's tie, and d|d| = 0 at 0). Where
// a - b is NaN (a NaN, or equal infinities) the answer is a + b: NaN, or that
// infinity.
Tensor logaddexp(const Tensor& a, const Tensor& b, SrcLoc l) {
  Tensor d = sub(a, b, l);
  expectFloating("logaddexp", d, l);
  Tensor r = add(maximum(a, b, l), log1p(exp(neg(abs(d, l), l), l), l), l);
  return where(isnan(d, l), add(a, b, l), r, l);
}

// logaddexp2(a, b) = max(a, b) + log1p(2^-|a - b|) / ln 2, as logaddexp.
Tensor logaddexp2(const Tensor& a, const Tensor& b, SrcLoc l) {
  Tensor d = sub(a, b, l);
  expectFloating("logaddexp2", d, l);
  Tensor r = add(maximum(a, b, l), div(log1p(exp2(neg(abs(d, l), l), l), l), AtScalar(0.69314718055994530942, l)), l);
  return where(isnan(d, l), add(a, b, l), r, l);
}

// sinc(x) = sin(pi x) / (pi x), 1 at 0. For |pi x| < 0.05 it is the Taylor
// polynomial 1 - z/6 + z^2/120 - z^3/5040 in z = (pi x)^2 (the next term is
// below 1e-16 there): so every derivative at and near 0 is right (d/dx = 0 and
// d^2/dx^2 = -pi^2/3 at 0), with no 0/0 (the quotient reads 1 there).
Tensor sinc(const Tensor& x, SrcLoc l) {
  expectFloating("sinc", x, l);
  Tensor px = mul(x, AtScalar(kPi, l)), z = mul(px, px, l);
  Tensor small = lt(abs(px, l), AtScalar(0.05, l));
  Tensor poly = mul(z, AtScalar(-1.0 / 5040, l));
  poly = mul(z, add(poly, AtScalar(1.0 / 120, l)), l);
  poly = mul(z, add(poly, AtScalar(-1.0 / 6, l)), l);
  poly = add(poly, AtScalar(1, l));
  Tensor safe = where(small, ones_like(px, l), px, l);
  return where(small, poly, div(sin(safe, l), safe, l), l);
}

} // namespace adjit
