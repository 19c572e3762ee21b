// support/PortableMath.h — ln and e^x written once over an
// arithmetic M from IEEE-rounded +, -, *, / and exact bit manipulation only:
// no libm call, whose vector variants (glibc's libmvec) round differently per
// vector width. Whatever evaluates M's operations with IEEE rounding (host
// floats, LLVM IR, traced Tensor ops run by the interpreter or compiled for
// SSE, AVX2 or AVX-512) gets the same bits. erf_inv (ops/Math.cpp) and the
// samplers of adjit::random (trace/PortableMath.cpp) are built on these.
// Also the digamma series for arguments >= 1/2, which the digamma op and the
// gamma sampler's gradient share.
//
// M provides what each function uses of: V (a value), c(double) (a constant
// of M's dtype, rounded once), add sub mul div, floor, lt gt eq (a
// predicate), and_ of predicates, select(p, a, b) of values, frexp(a) -> {m,
// e} with a = m 2^e, m in [1/2, 1) for positive normal a (exact), pow2(n) =
// 2^n for integral n in the normal exponent range (exact), and log (M's ln:
// digammaFromHalf only, which is portable when M's ln is). The ln and e^x
// functions take `f32`: whether M's dtype is f32 (else f64), which picks
// series lengths and ranges.
#pragma once

#include <cmath>
#include <limits>

namespace adjit::portable {

/// ln y for positive normal y, with *shift (if given) added to y's binary
/// exponent (ln(y 2^shift); exact in the exponent): y = m 2^e with m in [sqrt(1/2),
/// sqrt(2)) (frexp, exact), ln m = 2 atanh(s) = 2s (1 + s^2/3 + s^4/5 + ...)
/// with s = (m - 1)/(m + 1), |s| <= 0.172, to 1/11 for f32 and 1/21 for f64
/// (the series' remainder below half an ulp), and e ln 2 in two parts (the
/// high part's low bits are zero, so e ln2Hi is exact). Within a few ulp.
template <class M> typename M::V logShifted(M& m, typename M::V y, const typename M::V* shift, bool f32) {
  using V = typename M::V;
  auto [mant, e] = m.frexp(y); // mant in [1/2, 1)
  const auto low = m.lt(mant, m.c(0.70710678118654752440));
  mant = m.select(low, m.add(mant, mant), mant);
  e = m.select(low, m.sub(e, m.c(1)), e);
  if (shift) e = m.add(e, *shift);
  const V s = m.div(m.sub(mant, m.c(1)), m.add(mant, m.c(1))), z = m.mul(s, s);
  const int terms = f32 ? 5 : 10;
  V series = m.c(1.0 / (2 * terms + 1));
  for (int k = terms - 1; k >= 1; --k) series = m.add(m.c(1.0 / (2 * k + 1)), m.mul(z, series));
  const V twoS = m.add(s, s);
  const V lnM = m.add(twoS, m.mul(m.mul(twoS, z), series));
  // ln 2 = ln2Hi + ln2Lo: f32's high part has 12 zero low bits, f64's 11
  const double ln2Hi = f32 ? 6.93145751953125e-01 : 6.93147180369123816490e-01;
  const double ln2Lo = f32 ? 1.428606765330187045e-06 : 1.90821492927058770002e-10;
  return m.add(m.mul(e, m.c(ln2Hi)), m.add(lnM, m.mul(e, m.c(ln2Lo))));
}

/// ln y for positive normal y (logShifted without a shift).
template <class M> typename M::V logOf(M& m, typename M::V y, bool f32) { return logShifted(m, y, nullptr, f32); }

/// ln x for every x, as libm's log: subnormals scaled into the normal range
/// first (by 2^24 or 2^54, exact), ln 0 = -inf, ln inf = inf, NaN for x < 0
/// and for NaN.
template <class M> typename M::V logAll(M& m, typename M::V x, bool f32) {
  using V = typename M::V;
  const double normalMin = f32 ? double(std::numeric_limits<float>::min()) : std::numeric_limits<double>::min();
  const int up = f32 ? 24 : 54;
  const double inf = std::numeric_limits<double>::infinity();
  const auto subnormal = m.lt(x, m.c(normalMin));
  // finite positive x, else a safe 1 (the result is picked below)
  const auto regular = m.and_(m.gt(x, m.c(0)), m.lt(x, m.c(inf)));
  const V y = m.select(regular, m.select(subnormal, m.mul(x, m.c(std::ldexp(1.0, up))), x), m.c(1));
  const V shift = m.select(subnormal, m.c(-up), m.c(0));
  const V ln = logShifted(m, y, &shift, f32);
  const V edge = m.select(m.eq(x, m.c(0)), m.c(-inf), m.select(m.eq(x, m.c(inf)), m.c(inf), m.c(std::nan(""))));
  return m.select(regular, ln, edge);
}

/// e^x: x = n ln 2 + r with n = floor(x / ln 2 + 1/2) and |r| <= ln(2)/2 (n
/// ln 2 in two parts, Cody and Waite, so x - n ln2Hi is exact), e^r by its
/// Taylor series to r^7 (f32) or r^13 (f64) (remainders below a tenth of an
/// ulp), times 2^n as 2^(n/2) 2^(n - n/2): both normal, and only the second
/// product rounds, so subnormal results round once. x is clamped first to
/// where the result is 0 or inf either way; NaN stays NaN. Within a few ulp.
template <class M> typename M::V expOf(M& m, typename M::V x, bool f32) {
  using V = typename M::V;
  // below: e^x < half the smallest subnormal; above: e^x > the largest finite
  const double lo = f32 ? -104.5 : -746.0, hi = f32 ? 89.5 : 710.5;
  const auto notNan = m.eq(x, x);
  V xc = m.select(m.lt(x, m.c(lo)), m.c(lo), m.select(m.gt(x, m.c(hi)), m.c(hi), x));
  xc = m.select(notNan, xc, m.c(0)); // keeps the conversions below defined
  const V n = m.floor(m.add(m.mul(xc, m.c(1.44269504088896340736)), m.c(0.5)));
  const double ln2Hi = f32 ? 6.93145751953125e-01 : 6.93147180369123816490e-01;
  const double ln2Lo = f32 ? 1.428606765330187045e-06 : 1.90821492927058770002e-10;
  const V r = m.sub(m.sub(xc, m.mul(n, m.c(ln2Hi))), m.mul(n, m.c(ln2Lo)));
  // e^r - 1 = r (1 + r/2! + r^2/3! + ...): q = sum_{k >= 1} r^(k-1)/k!
  const int degree = f32 ? 7 : 13;
  double factorial = 1;
  for (int k = 2; k <= degree; ++k) factorial *= k;
  V q = m.c(1 / factorial);
  for (int k = degree - 1; k >= 1; --k) {
    factorial /= (k + 1);
    q = m.add(m.c(1 / factorial), m.mul(r, q));
  }
  const V er = m.add(m.c(1), m.mul(r, q));
  const V n1 = m.floor(m.mul(n, m.c(0.5)));
  const V y = m.mul(m.mul(er, m.pow2(n1)), m.pow2(m.sub(n, n1)));
  return m.select(notNan, y, x);
}

/// digamma psi(y) for y >= 1/2 (the digamma op's series, ops/Math.cpp, which
/// reflects smaller arguments into this range): psi(y) = psi(y + 8) - sum_k<8
/// 1/(y + k), and at y + 8 the asymptotic series ln y - 1/(2y) - 1/(12 y^2) +
/// ... to y^-14, accurate to double precision there. M::log is M's ln (libm's
/// for the op; logAll for traced Tensors).
template <class M> typename M::V digammaFromHalf(M& m, typename M::V y) {
  using V = typename M::V;
  V r = m.c(0);
  for (int k = 0; k < 8; ++k) {
    r = m.add(r, m.div(m.c(1), y));
    y = m.add(y, m.c(1));
  }
  const V inv = m.div(m.c(1), y), z = m.mul(inv, inv);
  // -1/(12 y^2) + 1/(120 y^4) - 1/(252 y^6) + 1/(240 y^8) - 1/(132 y^10) + 691/(32760 y^12) - 1/(12 y^14)
  V s = m.c(-1.0 / 12);
  for (double coef : {691.0 / 32760, -1.0 / 132, 1.0 / 240, -1.0 / 252, 1.0 / 120, -1.0 / 12}) s = m.add(m.c(coef), m.mul(z, s));
  s = m.mul(z, s);
  return m.sub(m.add(m.sub(m.log(y), m.mul(m.c(0.5), inv)), s), r);
}

} // namespace adjit::portable
