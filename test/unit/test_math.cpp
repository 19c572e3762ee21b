// test/unit/test_math.cpp — the rest of the elementwise set (issue 52): values at
// edge cases against the C library in the interpreter and the JIT (check3),
// numpy's signs for integer and float division, integer_pow, the composites
// (relu, gelu, logaddexp, sinc, ...) and derivatives at their singular points,
// first and second derivatives against finite differences in f64.
#include "Check.h"

#include <adjit/check.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>

using namespace adjit;
using namespace adjit::test;
using V = std::vector<Tensor>;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kPi = std::numbers::pi;

double scalar(const Array& a) { return a.item<double>(); }
Array i64(std::vector<int64_t> v) { return arrayOf(std::move(v), {}); }

/// op(x) against ref(x) on `xs` in f64 and in f32 (the reference then runs in
/// float), interpreted and compiled. 16 or more values: vector loops run too.
template <class Op, class Ref> void againstStd(Op op, Ref ref, const std::vector<double>& xs, double rtol64 = 1e-13) {
  std::vector<double> want64;
  std::vector<float> xs32, want32;
  for (double x : xs) {
    want64.push_back(ref(x));
    xs32.push_back(static_cast<float>(x));
    want32.push_back(ref(static_cast<float>(x)));
  }
  check3([op](V v) { return op(v[0]); }, {f64(xs)}, f64(want64), rtol64);
  check3([op](V v) { return op(v[0]); }, {f32(xs32)}, f32(want32), 4e-6);
}

/// The binary version: op(a, b) against ref(a, b).
template <class Op, class Ref>
void againstStd2(Op op, Ref ref, const std::vector<double>& as, const std::vector<double>& bs, double rtol64 = 1e-13,
                 double rtol32 = 4e-6) {
  std::vector<double> want64;
  std::vector<float> as32, bs32, want32;
  for (std::size_t i = 0; i < as.size(); ++i) {
    want64.push_back(ref(as[i], bs[i]));
    as32.push_back(static_cast<float>(as[i]));
    bs32.push_back(static_cast<float>(bs[i]));
    want32.push_back(ref(as32.back(), bs32.back()));
  }
  check3([op](V v) { return op(v[0], v[1]); }, {f64(as), f64(bs)}, f64(want64), rtol64);
  check3([op](V v) { return op(v[0], v[1]); }, {f32(as32), f32(bs32)}, f32(want32), rtol32);
}

/// Edge values for the unary functions: NaN, both infinities, both zeros,
/// negatives, tiny and large magnitudes, and points inside each domain.
const std::vector<double> kEdges = {kNaN, kInf, -kInf, 0.0, -0.0, 1e-300, -1e-300, 0.5, -0.5, 1.0, -1.0, 0.999, 1.001,
                                    2.0, -3.0, 30.0, -30.0, 1e10};

} // namespace

TEST_CASE("math: trigonometric, hyperbolic, logarithms and roots against the C library") {
  againstStd([](const Tensor& x) { return tan(x); }, [](auto x) { return std::tan(x); }, kEdges);
  againstStd([](const Tensor& x) { return asin(x); }, [](auto x) { return std::asin(x); }, kEdges);
  againstStd([](const Tensor& x) { return acos(x); }, [](auto x) { return std::acos(x); }, kEdges);
  againstStd([](const Tensor& x) { return atan(x); }, [](auto x) { return std::atan(x); }, kEdges);
  againstStd([](const Tensor& x) { return sinh(x); }, [](auto x) { return std::sinh(x); }, kEdges);
  againstStd([](const Tensor& x) { return cosh(x); }, [](auto x) { return std::cosh(x); }, kEdges);
  againstStd([](const Tensor& x) { return asinh(x); }, [](auto x) { return std::asinh(x); }, kEdges);
  againstStd([](const Tensor& x) { return acosh(x); }, [](auto x) { return std::acosh(x); }, kEdges);
  againstStd([](const Tensor& x) { return atanh(x); }, [](auto x) { return std::atanh(x); }, kEdges);
  againstStd([](const Tensor& x) { return log2(x); }, [](auto x) { return std::log2(x); }, kEdges);
  againstStd([](const Tensor& x) { return log10(x); }, [](auto x) { return std::log10(x); }, kEdges);
  againstStd([](const Tensor& x) { return exp2(x); }, [](auto x) { return std::exp2(x); }, kEdges);
  againstStd([](const Tensor& x) { return cbrt(x); }, [](auto x) { return std::cbrt(x); }, kEdges);
  // Values known exactly (vector variants may differ from the scalar ones in the last bit).
  check3([](V v) { return log2(v[0]); }, {f64({1, 2, 1024, 0.125})}, f64({0, 1, 10, -3}), 1e-15);
  check3([](V v) { return exp2(v[0]); }, {f64({0, 1, 10, -3})}, f64({1, 2, 1024, 0.125}), 1e-15);
  check3([](V v) { return cbrt(v[0]); }, {f64({-27, 8, 0})}, f64({-3, 2, 0}), 1e-15);
}

TEST_CASE("math: rounding to integers, halfway cases, NaN, inf and integers") {
  const std::vector<double> xs = {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.7, 0.7, 2.2, -2.2, kNaN, kInf, -kInf, 1e300, -0.0, 0.0, 4503599627370497.0};
  againstStd([](const Tensor& x) { return round(x); }, [](auto x) { return std::round(x); }, xs, 0);
  againstStd([](const Tensor& x) { return rint(x); }, [](auto x) { return std::nearbyint(x); }, xs, 0);
  againstStd([](const Tensor& x) { return ceil(x); }, [](auto x) { return std::ceil(x); }, xs, 0);
  againstStd([](const Tensor& x) { return trunc(x); }, [](auto x) { return std::trunc(x); }, xs, 0);
  // The halfway cases spelled out: round goes away from zero, rint to even.
  check3([](V v) { return round(v[0]); }, {f64({-2.5, -0.5, 0.5, 1.5, 2.5})}, f64({-3, -1, 1, 2, 3}), 0);
  check3([](V v) { return rint(v[0]); }, {f64({-2.5, -0.5, 0.5, 1.5, 2.5})}, f64({-2, -0, 0, 2, 2}), 0);
  // Identity on integers.
  for (auto fn : {+[](const Tensor& x) { return round(x); }, +[](const Tensor& x) { return rint(x); },
                  +[](const Tensor& x) { return ceil(x); }, +[](const Tensor& x) { return trunc(x); }})
    check3([fn](V v) { return fn(v[0]); }, {i32({-7, 0, 5, 2147483647})}, i32({-7, 0, 5, 2147483647}), 0);
  // -0 keeps its sign through each.
  auto f = jit([](Tensor x) { return stack({round(x), rint(x), ceil(x), trunc(x)}); });
  for (double r : f(f64({-0.0})).to_vector<double>()) CHECK(std::signbit(r));
  for (double r : f(f64({-0.3})).to_vector<double>()) CHECK((r == 0 && std::signbit(r)));
}

TEST_CASE("math: integer floor_divide, mod and fmod have numpy's signs; a division by zero gives 0") {
  const int32_t kMin = std::numeric_limits<int32_t>::min();
  const Array a = i32({7, -7, 7, -7, 0, 5, -5, kMin, kMin, 3, -3, 6, -6});
  const Array b = i32({2, 2, -2, -2, 3, 0, 0, -1, 1, 7, 7, 3, 3});
  // [snippet:integer-division]
  // a:              7  -7   7  -7   0   5  -5  MIN  MIN  3  -3   6  -6
  // b:              2   2  -2  -2   3   0   0   -1    1  7   7   3   3
  check3([](V v) { return floor_divide(v[0], v[1]); }, {a, b}, i32({3, -4, -4, 3, 0, 0, 0, kMin, kMin, 0, -1, 2, -2}), 0);
  check3([](V v) { return mod(v[0], v[1]); }, {a, b}, i32({1, 1, -1, -1, 0, 0, 0, 0, 0, 3, 4, 0, 0}), 0);
  check3([](V v) { return remainder(v[0], v[1]); }, {a, b}, i32({1, 1, -1, -1, 0, 0, 0, 0, 0, 3, 4, 0, 0}), 0);
  check3([](V v) { return fmod(v[0], v[1]); }, {a, b}, i32({1, -1, 1, -1, 0, 0, 0, 0, 0, 3, -3, 0, 0}), 0);
  // [/snippet:integer-division]
  // a = b * floor_divide(a, b) + mod(a, b) wherever b != 0, on i64 with the extremes.
  const int64_t kMin64 = std::numeric_limits<int64_t>::min(), kMax64 = std::numeric_limits<int64_t>::max();
  const std::vector<int64_t> as = {kMin64, kMax64, -9, 9, -9, 9, kMin64, 1, -1};
  const std::vector<int64_t> bs = {3, -7, 4, -4, -4, 4, kMax64, kMin64, kMin64};
  auto f = jit([](Tensor x, Tensor y) { return stack({floor_divide(x, y), mod(x, y)}); });
  const std::vector<int64_t> got = f(i64(as), i64(bs)).to_vector<int64_t>();
  const std::vector<int64_t> viaInterp =
      trace([](Tensor x, Tensor y) { return stack({floor_divide(x, y), mod(x, y)}); }, i64(as).type(), i64(bs).type())
          .interpret("f", {i64(as), i64(bs)})[0]
          .to_vector<int64_t>();
  CHECK(got == viaInterp);
  for (std::size_t i = 0; i < as.size(); ++i) {
    const int64_t q = got[i], r = got[as.size() + i];
    INFO(as[i] << " divmod " << bs[i] << " = " << q << ", " << r);
    CHECK(static_cast<int64_t>(static_cast<uint64_t>(q) * static_cast<uint64_t>(bs[i]) + static_cast<uint64_t>(r)) == as[i]);
    CHECK((r == 0 || (r < 0) == (bs[i] < 0)));
    CHECK(((r < 0 ? -static_cast<__int128>(r) : r) < (bs[i] < 0 ? -static_cast<__int128>(bs[i]) : bs[i])));
  }
}

TEST_CASE("math: float mod and floor_divide are Python's, fmod is C's") {
  const std::vector<double> a = {5.5, -5.5, 5.5, -5.5, -3.0, 3.0, 1.0, 1.0, -1.0, 0.0, 5.0, -5.0, kInf, 1.0, kNaN};
  const std::vector<double> b = {2.0, 2.0, -2.0, -2.0, 3.0, -3.0, 0.1, 0.0, 0.0, 0.0, kInf, kInf, 2.0, kNaN, 1.0};
  check3([](V v) { return mod(v[0], v[1]); }, {f64(a), f64(b)},
         f64({1.5, 0.5, -0.5, -1.5, 0.0, -0.0, 0.09999999999999995, kNaN, kNaN, kNaN, 5.0, kInf, kNaN, kNaN, kNaN}), 1e-15);
  check3([](V v) { return floor_divide(v[0], v[1]); }, {f64(a), f64(b)},
         f64({2, -3, -3, 2, -1, -1, 9, kInf, -kInf, kNaN, 0, -1, kNaN, kNaN, kNaN}), 0);
  againstStd2([](const Tensor& x, const Tensor& y) { return fmod(x, y); }, [](auto x, auto y) { return std::fmod(x, y); }, a, b, 0, 0);
  // The zero remainder has the divisor's sign (Python: -3.0 % 3 == 0.0, 3.0 % -3 == -0.0).
  auto f = jit([](Tensor x, Tensor y) { return mod(x, y); });
  const std::vector<double> zeros = f(f64({-3.0, 3.0, -0.0, 0.0}), f64({3.0, -3.0, 1.0, -1.0})).to_vector<double>();
  CHECK(!std::signbit(zeros[0]));
  CHECK(std::signbit(zeros[1]));
  CHECK(!std::signbit(zeros[2]));
  CHECK(std::signbit(zeros[3]));
  // f32 agrees with the same rules computed in float.
  check3([](V v) { return mod(v[0], v[1]); }, {f32({5.5f, -5.5f, 7.0f}), f32({2.0f, 2.0f, -0.5f})}, f32({1.5f, 0.5f, -0.0f}), 0);
  check3([](V v) { return floor_divide(v[0], v[1]); }, {f32({5.5f, -5.5f, 7.0f}), f32({2.0f, 2.0f, -0.5f})}, f32({2, -3, -14}), 0);
}

TEST_CASE("math: integer_pow by repeated squaring, and pow with a C++ integer exponent") {
  // Wrapping products on i32: 1291^3 overflows.
  const std::vector<int32_t> xs = {2, -3, 1291, 0, 1, -1};
  for (int n : {0, 1, 2, 3, 7}) {
    std::vector<int32_t> want;
    for (int32_t x : xs) {
      uint32_t p = 1;
      for (int k = 0; k < n; ++k) p *= static_cast<uint32_t>(x);
      want.push_back(static_cast<int32_t>(p));
    }
    INFO("n = " << n);
    check3([n](V v) { return integer_pow(v[0], n); }, {i32(xs)}, i32(want), 0);
    check3([n](V v) { return pow(v[0], n); }, {i32(xs)}, i32(want), 0);
  }
  // Floats, negative exponents, 0^0 = NaN^0 = 1, against std::pow.
  const std::vector<double> fs = {0.5, -1.5, 3.0, 0.0, -0.0, kInf, -kInf, kNaN, 1e-3, 7.25};
  for (int n : {0, 1, 2, 5, 13, -1, -2, -7}) {
    INFO("n = " << n);
    againstStd([n](const Tensor& x) { return pow(x, n); }, [n](auto x) { return std::pow(x, decltype(x)(n)); }, fs, 1e-14);
  }
  // pow(x, 2) records integer_pow; a floating exponent stays pow.
  Module m = trace([](Tensor x) { return pow(x, 2) + pow(x, 2.5) + pow(x, int64_t{-3}); }, Type{DType::f64, {3}});
  const std::string text = m.str();
  CHECK(text.find("integer_pow(%0) {y = 2}") != std::string::npos);
  CHECK(text.find("integer_pow(%0) {y = -3}") != std::string::npos);
  CHECK(text.find(" pow(") != std::string::npos);
  // Integers take no negative exponent.
  CHECK_THROWS_WITH_AS(trace([](Tensor x) { return integer_pow(x, -1); }, Type{DType::i32, {3}}),
                       doctest::Contains("integer_pow: expected a non-negative exponent for the integer operand i32[3], got y = -1"),
                       Error);
}

TEST_CASE("math: hypot, copysign, nextafter, xlogy and xlog1py at edge values") {
  const std::vector<double> a = {3, -3, 0, -0.0, kInf, kNaN, 1e200, 1e-200, -kInf, 2, 0.5, -2};
  const std::vector<double> b = {4, 4, -0.0, 5, kNaN, 1, 1e200, 1e-200, 1, -0.0, kNaN, -kNaN};
  againstStd2([](const Tensor& x, const Tensor& y) { return hypot(x, y); }, [](auto x, auto y) { return std::hypot(x, y); }, a, b);
  againstStd2([](const Tensor& x, const Tensor& y) { return copysign(x, y); }, [](auto x, auto y) { return std::copysign(x, y); }, a, b, 0, 0);
  const std::vector<double> na = {1, 1, 0, 0, 1, kNaN, 1, -kInf, 1e300, 5e-324, -1};
  const std::vector<double> nb = {2, 0, 1, -1, 1, 1, kNaN, 0, kInf, 0, -2};
  againstStd2([](const Tensor& x, const Tensor& y) { return nextafter(x, y); }, [](auto x, auto y) { return std::nextafter(x, y); }, na, nb, 0, 0);
  // xlogy is 0 wherever x is 0 (y NaN, inf or 0 included).
  const std::vector<double> x = {0, 0, 0, 0, 2, -1, 1, 1, 3};
  const std::vector<double> y = {0, kNaN, kInf, -1, 3, 0.5, 0, -2, 1e-300};
  auto xlogyRef = [](auto p, auto q) { return p == 0 ? decltype(p)(0) : p * std::log(q); };
  auto xlog1pyRef = [](auto p, auto q) { return p == 0 ? decltype(p)(0) : p * std::log1p(q); };
  againstStd2([](const Tensor& p, const Tensor& q) { return xlogy(p, q); }, xlogyRef, x, y);
  againstStd2([](const Tensor& p, const Tensor& q) { return xlog1py(p, q); }, xlog1pyRef, x, y);
  check3([](V v) { return xlogy(v[0], v[1]); }, {f64({0, 0, 0}), f64({0, 0, 0})}, f64({0, 0, 0}), 0); // ... and xlogy(0, 0) in particular
  // Scalars on either side.
  check3([](V v) { return hypot(v[0], 4.0) + copysign(2.0, v[0]); }, {f64({3, -3})}, f64({7, 3}), 1e-15);
}

TEST_CASE("math: isnan, isinf and isfinite") {
  const Array x = f32({0.0f, -1.5f, INFINITY, -INFINITY, NAN, 3e38f, -0.0f});
  check3([](V v) { return isnan(v[0]); }, {x}, i1({false, false, false, false, true, false, false}));
  check3([](V v) { return isinf(v[0]); }, {x}, i1({false, false, true, true, false, false, false}));
  check3([](V v) { return isfinite(v[0]); }, {x}, i1({true, true, false, false, false, true, true}));
  check3([](V v) { return isnan(v[0]); }, {f64({kNaN, 1.0})}, i1({true, false}));
  check3([](V v) { return logical_or(isnan(v[0]), isinf(v[0])); }, {i32({-1, 0, 7})}, i1({false, false, false}));
  check3([](V v) { return isfinite(v[0]); }, {i32({-1, 0, 7})}, i1({true, true, true}));
  // A mask from isnan carries no gradient; the selected values do.
  auto g = grad([](Tensor v) { return sum(where(isnan(v), zeros_like(v), v * 3.0)); });
  CHECK(g(f64({1.0, kNaN, 2.0})).to_vector<double>() == std::vector<double>{3.0, 0.0, 3.0});
}

TEST_CASE("math: composites square, reciprocal, relu, silu, softplus, gelu, logaddexp, sinc") {
  const std::vector<double> xs = {-3.0, -0.5, 0.0, 0.25, 2.0, 40.0};
  auto each = [&](double (*fn)(double)) {
    std::vector<double> r;
    for (double x : xs) r.push_back(fn(x));
    return f64(r);
  };
  const Array x = f64(xs);
  check3([](V v) { return square(v[0]); }, {x}, each([](double t) { return t * t; }), 0);
  check3([](V v) { return reciprocal(v[0]); }, {x}, each([](double t) { return 1 / t; }), 0);
  check3([](V v) { return relu(v[0]); }, {x}, each([](double t) { return t > 0 ? t : 0.0; }), 0);
  check3([](V v) { return silu(v[0]); }, {x}, each([](double t) { return t / (1 + std::exp(-t)); }), 1e-14);
  check3([](V v) { return softplus(v[0]); }, {x}, each([](double t) { return std::log1p(std::exp(t)); }), 1e-14);
  check3([](V v) { return gelu(v[0]); }, {x}, each([](double t) { return 0.5 * t * (1 + std::erf(t / std::sqrt(2.0))); }), 1e-14);
  check3([](V v) { return gelu(v[0], true); }, {x}, each([](double t) {
           return 0.5 * t * (1 + std::tanh(std::sqrt(2 / kPi) * (t + 0.044715 * t * t * t)));
         }), 1e-14);
  check3([](V v) { return sinc(v[0]); }, {f64({0.0, 0.5, -2.5, 1e-3, -0.01, 0.0159, 0.016, 3.0})},
         f64({1.0, 2 / kPi, std::sin(-2.5 * kPi) / (-2.5 * kPi), std::sin(kPi * 1e-3) / (kPi * 1e-3), std::sin(kPi * 0.01) / (kPi * 0.01),
              std::sin(kPi * 0.0159) / (kPi * 0.0159), std::sin(kPi * 0.016) / (kPi * 0.016), std::sin(3 * kPi) / (3 * kPi)}),
         4e-15);
  // Integers: square and relu work, reciprocal divides as integers do.
  check3([](V v) { return relu(v[0]) + square(v[0]); }, {i32({-3, 0, 4})}, i32({9, 0, 20}), 0);
  // Stable at the extremes: no overflow, nothing lost.
  check3([](V v) { return softplus(v[0]); }, {f64({1000, -1000, -40})}, f64({1000, 0, std::exp(-40.0)}), 1e-15);
  check3([](V v) { return relu(v[0]); }, {f64({kNaN, -kInf, kInf})}, f64({kNaN, 0, kInf}), 0);
  const std::vector<double> a = {1.0, 1000.0, -kInf, kInf, kNaN, -kInf, 0.5, -745.0};
  const std::vector<double> b = {2.0, 1000.0, -kInf, kInf, 1.0, 3.0, -0.25, -745.0};
  check3([](V v) { return logaddexp(v[0], v[1]); }, {f64(a), f64(b)},
         f64({std::log(std::exp(1.0) + std::exp(2.0)), 1000 + std::log(2.0), -kInf, kInf, kNaN, 3.0,
              std::log(std::exp(0.5) + std::exp(-0.25)), -745 + std::log(2.0)}),
         4e-15);
  check3([](V v) { return logaddexp2(v[0], v[1]); }, {f64(a), f64(b)},
         f64({std::log2(2.0 + 4.0), 1001, -kInf, kInf, kNaN, 3.0, std::log2(std::exp2(0.5) + std::exp2(-0.25)), -744}), 4e-15);
  check3([](V v) { return logaddexp(v[0], 0.0); }, {f32({0.0f, 10.0f})}, f32({std::log(2.0f), 10.0000454f}), 1e-6);
}

TEST_CASE("math: derivatives at the singular points") {
  auto d = [](auto f, double x) { return scalar(grad(f)(x)); };
  auto dd = [](auto f, double x) { return scalar(grad(grad(f))(x)); };
  // relu'(0) = 0 (JAX), softplus'(0) = 1/2, sinc'(0) = 0, sinc''(0) = -pi^2/3.
  CHECK(d([](Tensor x) { return relu(x); }, 0.0) == 0.0);
  CHECK(d([](Tensor x) { return relu(x); }, 2.0) == 1.0);
  CHECK(d([](Tensor x) { return softplus(x); }, 0.0) == doctest::Approx(0.5).epsilon(1e-15));
  CHECK(d([](Tensor x) { return sinc(x); }, 0.0) == 0.0);
  CHECK(dd([](Tensor x) { return sinc(x); }, 0.0) == doctest::Approx(-kPi * kPi / 3).epsilon(1e-12));
  CHECK(dd([](Tensor x) { return sinc(x); }, 0.0159) ==
        doctest::Approx(dd([](Tensor x) { return sinc(x); }, 0.0161)).epsilon(1e-3)); // no jump where the polynomial ends
  // Rounding has zero derivative; floor_divide too.
  for (auto f : {+[](Tensor x) { return round(x) + rint(x) + ceil(x) + trunc(x) + floor_divide(x, 0.3); }})
    CHECK(d(f, 1.7) == 0.0);
  // cbrt'(0) = +inf (the true derivative, not 0/0); integer_pow'(0) = 0 for n = 2.
  CHECK(d([](Tensor x) { return cbrt(x); }, 0.0) == kInf);
  CHECK(d([](Tensor x) { return pow(x, 2); }, 0.0) == 0.0);
  CHECK(d([](Tensor x) { return pow(x, 0); }, 3.0) == 0.0);
  CHECK(dd([](Tensor x) { return pow(x, 3); }, 2.0) == 12.0);
  // xlogy at x = 0: d/dy = 0 (the function is 0 for every y), d/dx = log y.
  auto [gx, gy] = grad([](Tensor p, Tensor q) { return sum(xlogy(p, q)); }, argnums<0, 1>)(f64({0.0, 0.0, 2.0}), f64({3.0, 0.0, 4.0}));
  ADJIT_CHECK_CLOSE(gx, f64({std::log(3.0), -kInf, std::log(4.0)}), 1e-15);
  CHECK(gy.to_vector<double>() == std::vector<double>{0.0, 0.0, 0.5});
  auto [hx, hy] = grad([](Tensor p, Tensor q) { return sum(xlog1py(p, q)); }, argnums<0, 1>)(f64({0.0, 2.0}), f64({-1.0, 3.0}));
  ADJIT_CHECK_CLOSE(hx, f64({-kInf, std::log1p(3.0)}), 1e-15);
  CHECK(hy.to_vector<double>() == std::vector<double>{0.0, 0.5});
  // hypot at the origin: 0 (a subgradient, as abs), not NaN.
  auto [ha, hb] = grad([](Tensor p, Tensor q) { return sum(hypot(p, q)); }, argnums<0, 1>)(f64({0.0, 3.0}), f64({0.0, 4.0}));
  ADJIT_CHECK_CLOSE(ha, f64({0.0, 0.6}), 1e-15);
  ADJIT_CHECK_CLOSE(hb, f64({0.0, 0.8}), 1e-15);
  // logaddexp at a = b splits the gradient; copysign's follows the sign it takes.
  auto [la, lb] = grad([](Tensor p, Tensor q) { return sum(logaddexp(p, q)); }, argnums<0, 1>)(f64({1.5}), f64({1.5}));
  CHECK(scalar(la) == 0.5);
  CHECK(scalar(lb) == 0.5);
  CHECK(scalar(grad([](Tensor x) { return copysign(x, full({}, -1.0, DType::f64)); })(2.0)) == -1.0);
  CHECK(scalar(grad([](Tensor x) { return copysign(x, full({}, -1.0, DType::f64)); })(-2.0)) == 1.0);
  // mod and fmod: d/dx = 1, d/dy = -(the quotient), floored or truncated.
  auto [ma, mb] = grad([](Tensor p, Tensor q) { return sum(mod(p, q)); }, argnums<0, 1>)(f64({-5.5, 5.5}), f64({2.0, 2.0}));
  CHECK(ma.to_vector<double>() == std::vector<double>{1.0, 1.0});
  CHECK(mb.to_vector<double>() == std::vector<double>{3.0, -2.0});
  auto [fa, fb] = grad([](Tensor p, Tensor q) { return sum(fmod(p, q)); }, argnums<0, 1>)(f64({-5.5, 5.5}), f64({2.0, 2.0}));
  CHECK(fa.to_vector<double>() == std::vector<double>{1.0, 1.0});
  CHECK(fb.to_vector<double>() == std::vector<double>{2.0, -2.0});
}

TEST_CASE("math: first and second derivatives against finite differences (reverse and forward)") {
  const CheckGradsOptions two{.order = 2, .modes = {"rev", "fwd"}};
  const Array x = f64({-1.3, -0.4, 0.35, 0.9, 2.2});
  check_grads([](Tensor v) { return square(v) + reciprocal(v); }, x, two);
  check_grads([](Tensor v) { return relu(v) * v; }, x, two);
  check_grads([](Tensor v) { return silu(v); }, x, two);
  check_grads([](Tensor v) { return softplus(v); }, x, two);
  check_grads([](Tensor v) { return gelu(v); }, x, two);
  check_grads([](Tensor v) { return gelu(v, true); }, x, two);
  check_grads([](Tensor v) { return sinc(v); }, f64({-1.3, -0.01, 0.004, 0.35, 2.2}), two);
  check_grads([](Tensor v) { return tan(v) + atan(v) + sinh(v) + cosh(v) + asinh(v); }, x, two);
  check_grads([](Tensor v) { return asin(v * 0.4) + acos(v * 0.3) + atanh(v * 0.4); }, x, two);
  check_grads([](Tensor v) { return acosh(v * v + 1.5) + cbrt(v) + log2(v * v) + log10(v * v) + exp2(v); }, x, two);
  check_grads([](Tensor v) { return pow(v, 5) + pow(v, -3) + pow(v, 1) + pow(v, 0); }, x, two);
  const Array y = f64({0.7, 1.9, -0.8, 2.5, -1.3});
  const std::tuple xy{x, y};
  check_grads([](Tensor a, Tensor b) { return logaddexp(a, b) + logaddexp2(a, b); }, xy, two);
  check_grads([](Tensor a, Tensor b) { return hypot(a, b) + copysign(a, b) + nextafter(a, b); }, xy, two);
  check_grads([](Tensor a, Tensor b) { return xlogy(a, b * b) + xlog1py(a, b * b); }, xy, two);
  check_grads([](Tensor a, Tensor b) { return mod(a, b) + fmod(a, b) + floor_divide(a, b); }, xy, two);
}

TEST_CASE("math: clip and clamp on integers") {
  check3([](V v) { return clip(v[0], -2, 5); }, {i32({-9, -2, 0, 5, 9})}, i32({-2, -2, 0, 5, 5}), 0);
  check3([](V v) { return clip(v[0], v[1], v[2]); }, {i32({-9, 3, 9}), i32({-2, 4, 0}), i32({5, 1, 3})}, i32({-2, 1, 3}), 0);
  // numpy: hi where lo > hi.
  check3([](V v) { return clip(v[0], 6, 1); }, {i32({0, 3, 9})}, i32({1, 1, 1}), 0);
  CHECK_THROWS_WITH_AS(trace([](Tensor v) { return clip(v, 0.5, 2); }, Type{DType::i32, {3}}),
                       doctest::Contains("clip: cannot combine the floating-point scalar 0.5 with the integer tensor i32[3]"), Error);
}

TEST_CASE("math: errors name the function the user called") {
  CHECK_THROWS_WITH_AS(trace([](Tensor v) { return silu(v); }, Type{DType::i32, {3}}),
                       doctest::Contains("silu: expected a floating-point operand, got i32[3]"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor v) { return gelu(v); }, Type{DType::i64, {2}}),
                       doctest::Contains("gelu: expected a floating-point operand, got i64[2]"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor a, Tensor b) { return logaddexp(a, b); }, Type{DType::i32, {3}}, Type{DType::i32, {3}}),
                       doctest::Contains("logaddexp: expected a floating-point operand, got i32[3]"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor a, Tensor b) { return remainder(a, b); }, Type{DType::f32, {3}}, Type{DType::f64, {3}}),
                       doctest::Contains("remainder: mismatched dtypes"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor v) { return tan(v); }, Type{DType::i32, {3}}),
                       doctest::Contains("tan: expected a floating-point operand, got i32[3]"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor a, Tensor b) { return hypot(a, b); }, Type{DType::f32, {3}}, Type{DType::f32, {4}}),
                       doctest::Contains("hypot: incompatible shapes f32[3] and f32[4]"), Error);
}
