// test/unit/test_random.cpp — integer bit ops, erf_inv, and adjit::random:
// Threefry's known-answer vectors, JAX's documented values, interpreter =
// JIT bit for bit, keys through jit, scan and vmap, sample statistics, gradients.
#include "Check.h"
#include "trace/PortableMath.h"

#include <adjit/adjit.h>

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <algorithm>
#include <limits>
#include <map>

using namespace adjit;
using namespace adjit::test;

namespace {

const Type kKey{DType::i32, {2}};

Array i64s(std::vector<int64_t> v) { return Array(v, {static_cast<int64_t>(v.size())}); }

/// The two words of `a` (i32[2]) as unsigned.
std::pair<uint32_t, uint32_t> words(const Array& a) {
  REQUIRE(a.type() == kKey);
  return {static_cast<uint32_t>(a.data<int32_t>()[0]), static_cast<uint32_t>(a.data<int32_t>()[1])};
}

/// f of one or two Tensors as a function of a vector of them (check3's form).
template <class F> auto onVector(F f) {
  return [f](const std::vector<Tensor>& v) {
    if constexpr (std::is_invocable_v<F, Tensor>) return f(v.at(0));
    else return f(v.at(0), v.at(1));
  };
}

/// check3 of a function of one or two Tensors.
template <class F> void check(F f, const std::vector<Array>& inputs, const Array& expected) {
  check3(onVector(f), inputs, expected);
}

/// f traced once, run by the interpreter and compiled: both results, which must
/// agree bit for bit (every sampler does: no libm call, no reassociated sum).
template <class F> Array sameBits(F f0, const std::vector<Array>& args) {
  auto f = onVector(f0);
  std::vector<Type> types;
  for (const Array& a : args) types.push_back(a.type());
  const Module m = trace(f, types);
  const Array interpreted = m.interpret("f", args).at(0);
  const Array compiled = jit(f)(args);
  CHECK(bytesOf(compiled) == bytesOf(interpreted));
  return compiled;
}

} // namespace

// ---- bit ops ---------------------------------------------------------------------------

TEST_CASE("bitwise and/or/xor/not on integers; the logical functions still take i1 only") {
  const int32_t kMin = std::numeric_limits<int32_t>::min();
  const Array a = i32({0x0F0F, -1, 12345, kMin}), b = i32({0x00FF, 0x5A5A5A5A, -12345, -1});
  check([](Tensor x, Tensor y) { return bitwise_and(x, y); }, {a, b}, i32({0x000F, 0x5A5A5A5A, 12345 & -12345, kMin}));
  check([](Tensor x, Tensor y) { return bitwise_or(x, y); }, {a, b}, i32({0x0FFF, -1, 12345 | -12345, -1}));
  check([](Tensor x, Tensor y) { return bitwise_xor(x, y); }, {a, b}, i32({0x0FF0, ~0x5A5A5A5A, 12345 ^ -12345, ~kMin}));
  check([](Tensor x) { return bitwise_not(x); }, {a}, i32({~0x0F0F, 0, ~12345, ~kMin}));
  check([](Tensor x) { return bitwise_xor(x, int64_t{0x100000000}); }, {i64s({1, -1})}, i64s({0x100000001, ~int64_t{0x100000000}}));
  // on i1 they are logical
  check([](Tensor x, Tensor y) { return bitwise_xor(x, y); }, {i1({true, true, false}), i1({true, false, false})},
         i1({false, true, false}));
  CHECK_THROWS_WITH_AS(trace([](Tensor x, Tensor y) { return logical_and(x, y); }, Type{DType::i32, {3}}, Type{DType::i32, {3}}),
                       doctest::Contains("and: expected i1 operands, got i32[3]"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor x) { return !x; }, Type{DType::i32, {3}}), doctest::Contains("not: expected an i1 operand, got i32[3]"),
                       Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor x) { return bitwise_not(x); }, Type{DType::f32, {3}}),
                       doctest::Contains("not: expected an i1 or integer operand, got f32[3]"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor x, Tensor y) { return bitwise_or(x, y); }, Type{DType::f64, {3}}, Type{DType::f64, {3}}),
                       doctest::Contains("or: expected i1 or integer operands, got f64[3]"), Error);
}

TEST_CASE("shifts: out-of-range amounts (negative or >= the width) as XLA defines them") {
  const Array x = i32({-8, -8, -8, -8, -8, -8, 0x40000001});
  const Array s = i32({-1, 0, 1, 31, 32, 33, 1});
  check([](Tensor a, Tensor b) { return shift_left(a, b); }, {x, s}, i32({0, -8, -16, 0, 0, 0, int32_t(0x80000002u)}));
  check([](Tensor a, Tensor b) { return shift_right_logical(a, b); }, {x, s},
         i32({0, -8, 0x7FFFFFFC, 1, 0, 0, 0x20000000}));
  check([](Tensor a, Tensor b) { return shift_right_arithmetic(a, b); }, {x, s}, i32({-1, -8, -4, -1, -1, -1, 0x20000000}));
  check([](Tensor a) { return shift_right_arithmetic(a, 64); }, {i64s({-5, 5})}, i64s({-1, 0}));
  check([](Tensor a) { return shift_right_logical(a, 60); }, {i64s({-1, 1})}, i64s({15, 0}));
  check([](Tensor a) { return shift_left(a, 40); }, {i64s({3, 1})}, i64s({int64_t{3} << 40, int64_t{1} << 40}));
  CHECK_THROWS_WITH_AS(trace([](Tensor a) { return shift_left(a, 1); }, Type{DType::f32, {3}}),
                       doctest::Contains("shift_left: expected i32 or i64 operands, got f32[3]"), Error);
}

TEST_CASE("population_count and bitcast") {
  check([](Tensor a) { return population_count(a); }, {i32({0, -1, 7, std::numeric_limits<int32_t>::min()})},
         i32({0, 32, 3, 1}));
  check([](Tensor a) { return population_count(a); }, {i64s({-1, 0x100000001})}, i64s({64, 2}));
  check([](Tensor a) { return bitcast(a, DType::i32); }, {f32({1.0f, -2.0f, 0.0f})},
         i32({0x3F800000, int32_t(0xC0000000u), 0}));
  check([](Tensor a) { return bitcast(a, DType::f32); }, {i32({0x3F800000, 0x7F800000})},
         f32({1.0f, std::numeric_limits<float>::infinity()}));
  check([](Tensor a) { return bitcast(a, DType::i64); }, {f64({1.0})}, Array(int64_t{0x3FF0000000000000}));
  check([](Tensor a) { return bitcast(a, DType::f64); }, {i64s({0x4000000000000000})}, f64({2.0}, {1}));
  CHECK_THROWS_WITH_AS(trace([](Tensor a) { return bitcast(a, DType::i64); }, Type{DType::f32, {3}}),
                       doctest::Contains("bitcast: expected dtypes of one width (f32 and i32, f64 and i64), got f32[3] to i64"), Error);
}

TEST_CASE("integer add and mul wrap in interpreter and compiled code (Threefry's u32 arithmetic)") {
  const int32_t kMax = std::numeric_limits<int32_t>::max();
  check([](Tensor a, Tensor b) { return a + b; }, {i32({kMax, -1}), i32({1, std::numeric_limits<int32_t>::min()})},
         i32({std::numeric_limits<int32_t>::min(), kMax}));
  check([](Tensor a, Tensor b) { return a * b; }, {i32({0x10000, -3}), i32({0x10000, kMax})}, i32({0, int32_t(0x80000003u)}));
}

// ---- erf_inv ---------------------------------------------------------------------------

namespace {

/// erf_inv(x) to about 1e-18 relative: Newton on erfc in long double (erfc
/// for x > 1/2, where 1 - x is exact, so the tails keep their digits).
long double erfInvReference(double x, double guess) {
  const long double ax = std::fabs(static_cast<long double>(x));
  long double y = std::fabs(static_cast<long double>(guess));
  for (int i = 0; i < 30; ++i) { // Newton: erf' = 2/sqrt(pi) e^(-y^2)
    const long double d = 1.1283791670955125738961589031215452L * std::exp(-y * y);
    y += ax > 0.5L ? (std::erfc(y) - (1 - ax)) / d : (ax - std::erf(y)) / d;
  }
  return x < 0 ? -y : y;
}

} // namespace

TEST_CASE("erf_inv against erf inverted in long double, f32 and f64, interpreter = JIT") {
  std::vector<double> xs;
  for (int i = -999; i <= 999; ++i) xs.push_back(i / 1000.0);
  for (double t : {1e-3, 1e-5, 1e-7, 1e-9, 1e-12, 1e-15}) {
    xs.push_back(1 - t);
    xs.push_back(t - 1);
    xs.push_back(t);
  }
  xs.push_back(0.4249); // either side of AS 241's first split
  xs.push_back(0.8501);
  // f64: a few ulp
  {
    const Array y = sameBits([](Tensor x) { return erf_inv(x); }, {f64(xs)});
    double worst = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const long double want = erfInvReference(xs[i], y.at(int64_t(i)));
      const double err = want == 0 ? std::fabs(y.at(int64_t(i))) : double(std::fabs((y.at(int64_t(i)) - want) / want));
      worst = std::max(worst, err);
    }
    MESSAGE("erf_inv f64: worst relative error " << worst);
    CHECK(worst < 2e-15); // measured 5.5e-16
  }
  // f32: Giles' approximation, a few ulp of f32
  {
    std::vector<float> fx;
    for (double x : xs)
      if (std::fabs(x) < 1 - 1e-7) fx.push_back(float(x));
    const Array y = sameBits([](Tensor x) { return erf_inv(x); }, {f32(fx)});
    double worst = 0;
    for (std::size_t i = 0; i < fx.size(); ++i) {
      const long double want = erfInvReference(fx[i], y.at(int64_t(i)));
      const double err = want == 0 ? std::fabs(y.at(int64_t(i))) : double(std::fabs((y.at(int64_t(i)) - want) / want));
      worst = std::max(worst, err);
    }
    MESSAGE("erf_inv f32: worst relative error " << worst);
    CHECK(worst < 4e-7); // measured 2.3e-7
  }
  const double inf = std::numeric_limits<double>::infinity();
  check([](Tensor x) { return erf_inv(x); }, {f64({1, -1, 0, 1.5})}, f64({inf, -inf, 0, std::nan("")}));
  check([](Tensor x) { return erf_inv(x); }, {f32({1, -1, 0, -1.5f})}, f32({INFINITY, -INFINITY, 0, NAN}));
}

namespace {

/// |y - want| in units of the last place of want rounded to T (the smallest
/// subnormal's below the normal range); 0 where both are the same inf or NaN.
template <class T> double ulpError(T y, long double want) {
  if (std::isnan(y) || std::isnan(want)) return std::isnan(y) && std::isnan(want) ? 0 : HUGE_VAL;
  const T w = static_cast<T>(want);
  if (std::isinf(w) || std::isinf(y)) return y == w ? 0 : HUGE_VAL;
  const T up = std::nextafter(std::fabs(w), std::numeric_limits<T>::infinity());
  const long double ulp = std::isinf(up) ? std::fabs(w) - std::nextafter(std::fabs(w), T(0)) : up - std::fabs(w);
  return double(std::fabs(static_cast<long double>(y) - want) / ulp);
}

/// Inputs spread over every binary exponent from 2^lo to 2^hi, both signs,
/// pseudo-random mantissas, and `extra`.
template <class T> std::vector<T> spread(int lo, int hi, bool negative, std::vector<T> extra) {
  uint64_t state = 12345;
  for (int e = lo; e <= hi; ++e)
    for (int j = 0; j < 24; ++j) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const T v = std::ldexp(T(1) + T(double(state >> 11) * 0x1p-53), e);
      extra.push_back(v);
      if (negative) extra.push_back(-v);
    }
  return extra;
}

/// The worst ulp error of portable `f` against `ref` in long double over xs,
/// after checking that the interpreter and compiled code agree bit for bit.
template <class T, class F, class R> double worstUlp(F f, R ref, const std::vector<T>& xs) {
  const Array y = sameBits([f](Tensor x) { return f(x, std::source_location::current()); }, {Array(xs, {int64_t(xs.size())})});
  double worst = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double e = ulpError(y.data<T>()[i], ref(static_cast<long double>(xs[i])));
    if (e > worst) worst = e;
    if (e > 8) {
      INFO("x = " << double(xs[i]) << " got " << double(y.data<T>()[i]));
      CHECK(e <= 8);
    }
  }
  return worst;
}

} // namespace

TEST_CASE("the samplers' portable log and exp: within a few ulp of long double's, libm's edge cases") {
  const double inf = HUGE_VAL, nan = std::nan("");
  const auto logRef = [](long double x) { return std::log(x); };
  const auto expRef = [](long double x) { return std::exp(x); };
  const auto plog = [](const Tensor& x, std::source_location l) { return portable::log(x, l); };
  const auto plogNormal = [](const Tensor& x, std::source_location l) { return portable::logOfNormal(x, l); };
  const auto pexp = [](const Tensor& x, std::source_location l) { return portable::expValue(x, l); };
  const auto psigmoid = [](const Tensor& x, std::source_location l) { return portable::sigmoid(x, l); };
  // log: every exponent, subnormals included, and near 1
  std::vector<float> nearOne32;
  std::vector<double> nearOne64;
  for (int k = 1; k < 60; ++k) {
    nearOne32.push_back(float(1 + std::ldexp(1.0, -k / 2 - 1)));
    nearOne32.push_back(float(1 - std::ldexp(1.0, -k / 2 - 1)));
    nearOne64.push_back(1 + std::ldexp(1.0, -k));
    nearOne64.push_back(1 - std::ldexp(1.0, -k));
  }
  const double log32 = worstUlp<float>(plog, logRef, spread<float>(-149, 127, false, nearOne32));
  const double log64 = worstUlp<double>(plog, logRef, spread<double>(-1074, 1023, false, nearOne64));
  // the samplers' log of positive normal numbers: the same series
  const double logNormal32 = worstUlp<float>(plogNormal, logRef, spread<float>(-126, 127, false, nearOne32));
  const double logNormal64 = worstUlp<double>(plogNormal, logRef, spread<double>(-1022, 1023, false, nearOne64));
  // exp: up to overflow, down into the subnormals and to 0, and tiny
  std::vector<float> exps32;
  std::vector<double> exps64;
  for (int i = -1100; i <= 1000; ++i) exps32.push_back(float(i * 0.0937));
  for (int i = -7500; i <= 7100; ++i) exps64.push_back(i * 0.09999);
  const double exp32 = worstUlp<float>(pexp, expRef, spread<float>(-60, 6, true, exps32));
  const double exp64 = worstUlp<double>(pexp, expRef, spread<double>(-80, 9, true, exps64));
  MESSAGE("worst ulp: log " << log32 << " (f32) " << log64 << " (f64); of normals " << logNormal32 << " " << logNormal64
                            << "; exp " << exp32 << " " << exp64);
  CHECK(log32 < 2); // measured 1.13
  CHECK(log64 < 2); // 1.35
  CHECK(logNormal32 < 2);
  CHECK(logNormal64 < 2);
  CHECK(exp32 < 2); // 1.04
  CHECK(exp64 < 2); // 1.02
  // libm's edge cases
  check([&](Tensor x) { return plog(x, std::source_location::current()); }, {f64({0, -0.0, -1, inf, nan, 1})},
        f64({-inf, -inf, nan, inf, nan, 0}));
  check([&](Tensor x) { return plog(x, std::source_location::current()); }, {f32({0, -2, INFINITY, NAN, 1})},
        f32({-INFINITY, NAN, INFINITY, NAN, 0}));
  check([&](Tensor x) { return pexp(x, std::source_location::current()); }, {f64({-inf, inf, nan, 0, 710, -746, 709})},
        f64({0, inf, nan, 1, inf, 0, std::exp(709.0)}));
  check([&](Tensor x) { return pexp(x, std::source_location::current()); }, {f32({-INFINITY, INFINITY, NAN, 0, 89, -104})},
        f32({0, INFINITY, NAN, 1, INFINITY, 0}));
  check([&](Tensor x) { return psigmoid(x, std::source_location::current()); }, {f32({-200, 200, 0, NAN})}, f32({0, 1, 0.5f, NAN}));
  // exp and sigmoid differentiate as the ops: e^x, and s (1 - s) also where e^-x overflows
  const Array ge = jit([](Tensor x) { return grad([](Tensor v) { return sum(portable::exp(v, std::source_location::current())); })(x); })(
      f64({-1, 0.5, 3}));
  for (int64_t i = 0; i < 3; ++i) CHECK(ge.at(i) == doctest::Approx(std::exp(double(i == 0 ? -1 : i == 1 ? 0.5 : 3))).epsilon(1e-15));
  const Array gs = jit([](Tensor x) { return grad([](Tensor v) { return sum(portable::sigmoid(v, std::source_location::current())); })(x); })(
      f32({-200, 0, 3}));
  CHECK(gs.at(0) == 0);
  CHECK(gs.at(1) == doctest::Approx(0.25));
  CHECK(gs.at(2) == doctest::Approx(1 / (1 + std::exp(-3.0)) * (1 - 1 / (1 + std::exp(-3.0)))).epsilon(1e-6));
}

TEST_CASE("exponential and gumbel are JAX's -log1p(-u) and -log(-log(u)) of the same uniforms, to a few ulp") {
  const int64_t n = 20000;
  const Array key = random::key_data(77);
  auto run = [&]<class T>(DType t, T eps) {
    INFO("dtype " << std::string(name_of(t)));
    const Array e = jit([&](Tensor k) { return random::exponential(k, {n}, t); })(key);
    const Array u = jit([&](Tensor k) { return random::uniform(k, {n}, t); })(key);
    const double tiny = t == DType::f32 ? double(std::numeric_limits<float>::min()) : std::numeric_limits<double>::min();
    const Array g = jit([&](Tensor k) { return random::gumbel(k, {n}, t); })(key);
    const Array ug = jit([&](Tensor k) { return random::uniform(k, {n}, t, tiny, 1); })(key);
    double worstE = 0, worstG = 0;
    for (int64_t i = 0; i < n; ++i) {
      worstE = std::max(worstE, ulpError(e.data<T>()[i], -std::log1p(-static_cast<long double>(u.data<T>()[i]))));
      // the outer log of an inexact inner one: errors of its relative size, absolute
      const long double want = -std::log(-std::log(static_cast<long double>(ug.data<T>()[i])));
      worstG = std::max(worstG, double(std::fabs(g.data<T>()[i] - want) / std::max<long double>(1, std::fabs(want))) / eps);
    }
    MESSAGE(name_of(t) << ": exponential worst " << worstE << " ulp, gumbel worst " << worstG << " eps");
    CHECK(worstE < 2);
    CHECK(worstG < 4);
  };
  run(DType::f32, std::numeric_limits<float>::epsilon());
  run(DType::f64, std::numeric_limits<double>::epsilon());
}

TEST_CASE("erf_inv's derivative is sqrt(pi)/2 exp(erf_inv(x)^2)") {
  const Array x = f64({-0.9, -0.3, 0.0, 0.5, 0.99});
  auto f = [](Tensor v) { return sum(erf_inv(v)); };
  const Array g = jit([&](Tensor v) { return grad(f)(v); })(x);
  for (int64_t i = 0; i < x.size(); ++i) {
    const double y = double(erfInvReference(x.at(i), 0.5));
    CHECK(g.at(i) == doctest::Approx(0.886226925452758 * std::exp(y * y)).epsilon(1e-12));
  }
}

// ---- Threefry and keys ----------------------------------------------------------------

TEST_CASE("Threefry-2x32 (20 rounds) gives Random123's known-answer vectors") {
  struct Kat {
    uint32_t k0, k1, x0, x1, y0, y1;
  };
  const Kat kats[] = {
      {0, 0, 0, 0, 0x6b200159, 0x99ba4efe},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x1cb996fc, 0xbb002be7},
      {0x13198a2e, 0x03707344, 0x243f6a88, 0x85a308d3, 0xc4923a9c, 0x483df7a0},
  };
  for (const Kat& k : kats) {
    const Array key = i32({int32_t(k.k0), int32_t(k.k1)});
    const Array counter = i32({int32_t(k.x0), int32_t(k.x1)});
    const Array y = sameBits(
        [](Tensor key, Tensor c) {
          auto [y0, y1] = random::threefry_2x32(key, c(range(0, 1)), c(range(1, 2)));
          return concatenate({y0, y1});
        },
        {key, counter});
    CHECK(words(y) == std::pair{k.y0, k.y1});
  }
}

TEST_CASE("keys, split and fold_in are JAX's (jax_threefry_partitionable)") {
  // key(seed) = {seed >> 32, seed & 0xffffffff}
  CHECK(words(sameBits([](Tensor) { return random::key(42); }, {Array(0)})) == std::pair{0u, 42u});
  CHECK(words(random::key_data(-1)) == std::pair{0xffffffffu, 0xffffffffu});
  CHECK(words(sameBits([](Tensor s) { return random::key(s); }, {Array(int64_t{0x123456789})})) == std::pair{1u, 0x23456789u});
  CHECK(words(sameBits([](Tensor s) { return random::key(s); }, {Array(int32_t{-5})})) == std::pair{0u, uint32_t(-5)});
  // split(key, n)[i] = Threefry(key, (0, i)); fold_in(key, d) = Threefry(key, (0, d))
  const Array keys = sameBits([](Tensor k) { return random::split(k, 3); }, {random::key_data(0)});
  REQUIRE(keys.type() == Type{DType::i32, {3, 2}});
  CHECK(uint32_t(keys.data<int32_t>()[0]) == 0x6b200159u);
  CHECK(uint32_t(keys.data<int32_t>()[1]) == 0x99ba4efeu);
  const Array folded = sameBits([](Tensor k) { return random::fold_in(k, 2); }, {random::key_data(0)});
  CHECK(uint32_t(folded.data<int32_t>()[0]) == uint32_t(keys.data<int32_t>()[4]));
  CHECK(uint32_t(folded.data<int32_t>()[1]) == uint32_t(keys.data<int32_t>()[5]));
  const Array tracedFold = sameBits([](Tensor k, Tensor d) { return random::fold_in(k, d); }, {random::key_data(0), Array(2)});
  CHECK(bytesOf(tracedFold) == bytesOf(folded));
}

TEST_CASE("uniform gives JAX's documented values") {
  // jax.random.uniform(key(0)) = 0.947667; key, sub = split(key); uniform(sub) = 0.00729382
  const Array u = sameBits([](Tensor k) { return random::uniform(k); }, {random::key_data(0)});
  CHECK(u.data<float>()[0] == doctest::Approx(0.947667).epsilon(1e-6));
  CHECK(u.data<float>()[0] == std::bit_cast<float>(0x3F800000u | (0xF29A4FA7u >> 9)) - 1.0f); // (0x6b200159 ^ 0x99ba4efe) >> 9
  const Array sub = sameBits([](Tensor k) { return random::uniform(random::split(k)[1]); }, {random::key_data(0)});
  CHECK(sub.data<float>()[0] == doctest::Approx(0.00729382).epsilon(1e-5));
}

TEST_CASE("normal, f32, as JAX computes it (values of test/unit/random_reference.py)") {
  // JAX's algorithm written again in Python with erf_inv by Newton in double; the
  // f32 values agree to rounding (the reference's erf_inv is exact, ours Giles').
  const Array a = sameBits([](Tensor k) { return random::normal(k, {3}); }, {random::key_data(123)});
  ADJIT_CHECK_CLOSE(a, f32({1.6359469605120818f, 0.8408094361529712f, 0.0221239300474554f}), 2e-6);
  const Array b = sameBits([](Tensor k) { return random::normal(random::split(k, 1)[0], {3}); }, {random::key_data(123)});
  ADJIT_CHECK_CLOSE(b, f32({-0.4909335238173966f, -0.9478693406582335f, -1.7751972217817842f}), 2e-6);
}

TEST_CASE("randint is JAX's algorithm (values of test/unit/random_reference.py)") {
  auto draw = [](int64_t seed, int64_t n, int64_t lo, int64_t hi) {
    return sameBits([=](Tensor k) { return random::randint(k, {n}, lo, hi); }, {random::key_data(seed)});
  };
  CHECK(bytesOf(draw(0, 6, -3, 7)) == bytesOf(i32({6, -3, -1, 0, -2, 4})));
  // bounds beyond i32: clipped, the span wraps to 0 and the low word is the offset
  CHECK(bytesOf(draw(1, 4, -(int64_t{1} << 40), int64_t{1} << 40)) ==
        bytesOf(i32({-413835524, 210002863, -1191255328, -1392002199})));
  CHECK(bytesOf(draw(2, 4, 0, 1000003)) == bytesOf(i32({412979, 885476, 23129, 796887})));
}

TEST_CASE("samples are the same under jit, in a scan carrying the key, and by element position") {
  // a scan that splits the key each step and draws a normal sample: the same as unrolled by hand
  auto scanned = [](Tensor key) {
    auto [last, ys] = scan(
        [](Tensor k, std::tuple<>) {
          Tensor ks = random::split(k);
          return std::pair{ks[0], random::normal(ks[1], {4})};
        },
        key, std::tuple<>{}, {.length = 5});
    return ys;
  };
  auto unrolled = [](Tensor key) {
    std::vector<Tensor> ys;
    for (int i = 0; i < 5; ++i) {
      Tensor ks = random::split(key);
      key = ks[0];
      ys.push_back(random::normal(ks[1], {4}));
    }
    return stack(ys);
  };
  const Array viaScan = sameBits(scanned, {random::key_data(7)});
  const Array viaUnrolled = sameBits(unrolled, {random::key_data(7)});
  CHECK(bytesOf(viaScan) == bytesOf(viaUnrolled));
  // element i depends on its position only: a [2, 3] sample is the [6] one reshaped
  const Array flat = sameBits([](Tensor k) { return random::uniform(k, {6}); }, {random::key_data(3)});
  const Array shaped = sameBits([](Tensor k) { return reshape(random::uniform(k, {2, 3}), {6}); }, {random::key_data(3)});
  CHECK(bytesOf(flat) == bytesOf(shaped));
}

TEST_CASE("fold_in with a fori_loop's traced index gives fold_in's values for each index") {
  auto looped = jit([](Tensor key) {
    Tensor init = full({4}, 0.0, DType::f32);
    return fori_loop(0, 4, [&](Tensor i, Tensor acc) {
      Tensor u = random::uniform(random::fold_in(key, i), {});
      return where(iota({4}) == i, broadcast_to(u, {4}), acc);
    }, init);
  });
  auto direct = jit([](Tensor key) {
    std::vector<Tensor> us;
    for (int64_t i = 0; i < 4; ++i) us.push_back(random::uniform(random::fold_in(key, i), {}));
    return stack(us);
  });
  CHECK(bytesOf(looped(random::key_data(9))) == bytesOf(direct(random::key_data(9))));
}

TEST_CASE("uniform, normal and randint give the same bits for SSE, AVX2 and the host, on 1 or 4 threads") {
  auto f = [](Tensor k) {
    Tensor ks = random::split(k, 3);
    return concatenate({random::uniform(ks[0], {1000}), random::normal(ks[1], {1000}),
                        cast(random::randint(ks[2], {1000}, -50, 50), DType::f32)});
  };
  const Array key = random::key_data(11);
  const Array host = jit(f)(key);
  for (const char* cpu : {"x86-64-v2", "x86-64-v3"}) {
    INFO("cpu " << cpu);
    CHECK(bytesOf(jit(f, {.cpu = cpu})(key)) == bytesOf(host));
  }
  CHECK(bytesOf(jit(f, {.threads = 4})(key)) == bytesOf(host));
  auto big = [](Tensor k) { return random::normal(k, {1 << 16}, DType::f64); };
  CHECK(bytesOf(jit(big, {.threads = 4})(key)) == bytesOf(jit(big, {.threads = 1})(key)));
}

namespace {

/// Every sampler, by name, as a function of a key (and nothing else): the
/// samplers built on log, log1p, exp and sigmoid (exponential, gumbel,
/// categorical, gamma, loggamma, beta, dirichlet, weighted choice) and those
/// that are not (truncated_normal, bernoulli, permutation, choice).
std::vector<std::pair<const char*, std::function<Tensor(Tensor)>>> everySampler(int64_t n) {
  const Shape s{n};
  return {
      {"exponential f32", [s](Tensor k) { return random::exponential(k, s); }},
      {"exponential f64", [s](Tensor k) { return random::exponential(k, s, DType::f64); }},
      {"gumbel f32", [s](Tensor k) { return random::gumbel(k, s); }},
      {"gumbel f64", [s](Tensor k) { return random::gumbel(k, s, DType::f64); }},
      {"categorical", [n](Tensor k) {
         return random::categorical(k, broadcast_to(constant(f32({0.1f, -2, 1.5f, 0.3f, 0, 0.7f, -0.2f})), {n, 7}));
       }},
      {"truncated_normal", [s](Tensor k) { return random::truncated_normal(k, -1.5, 2, s); }},
      {"gamma f32", [n](Tensor k) {
         return random::gamma(k, broadcast_to(constant(f32({0.3f, 1, 2.5f, 40})), {n / 4, 4}));
       }},
      {"gamma f64", [n](Tensor k) {
         return random::gamma(k, broadcast_to(constant(f64({0.01, 0.7, 3, 1e4})), {n / 4, 4}));
       }},
      {"loggamma", [n](Tensor k) { return random::loggamma(k, broadcast_to(constant(f32({1e-3f, 0.5f, 5})), {n / 3, 3})); }},
      {"beta", [s](Tensor k) { return random::beta(k, full({}, 0.05, DType::f32), full({}, 3, DType::f32), s); }},
      {"dirichlet", [n](Tensor k) { return random::dirichlet(k, constant(f64({0.2, 1, 7, 30})), Shape{n / 4}); }},
      {"bernoulli", [s](Tensor k) { return random::bernoulli(k, full(s, 0.3, DType::f32)); }},
      {"permutation", [n](Tensor k) { return random::permutation(k, n); }},
      {"permutation of x", [n](Tensor k) { return random::permutation(k, reshape(iota({n}, 0, DType::f32), {n / 2, 2}), 1); }},
      {"choice", [s](Tensor k) { return random::choice(k, 13, s); }},
      {"choice without replacement", [n](Tensor k) { return random::choice(k, n, {n / 2}, false); }},
      {"weighted choice", [s](Tensor k) {
         return random::choice(k, 6, s, true, constant(f32({0.1f, 0, 3, 0.5f, 1e-30f, 2})));
       }},
      {"weighted choice without replacement", [n](Tensor k) {
         return random::choice(k, n, {n / 2}, false, exp(iota({n}, 0, DType::f32) * (-4.0f / float(n))));
       }},
  };
}

} // namespace

TEST_CASE("every sampler gives the same bits in the interpreter and compiled for SSE, AVX2 and the host, on 1 or 4 threads") {
  // 2^14 samples: long enough for every vector width's loops and for 4 threads' chunks
  const int64_t n = 1 << 14;
  const Array key = random::key_data(2026);
  for (const auto& [name, f] : everySampler(n)) {
    INFO("sampler " << std::string(name));
    const Module m = trace([f](Tensor k) { return f(k); }, kKey);
    const Array interpreted = m.interpret("f", {key}).at(0);
    // optimised code (tiers off), and a first call's quickly compiled code
    const Array host = jit(f, {.tiers = false})(key);
    CHECK(bytesOf(host) == bytesOf(interpreted));
    CHECK(bytesOf(jit(f)(key)) == bytesOf(host));
    for (const char* cpu : {"x86-64-v2", "x86-64-v3"}) {
      INFO("cpu " << std::string(cpu));
      CHECK(bytesOf(jit(f, {.cpu = cpu, .tiers = false})(key)) == bytesOf(host));
    }
    CHECK(bytesOf(jit(f, {.threads = 4, .tiers = false})(key)) == bytesOf(host));
  }
}

TEST_CASE("gamma, loggamma, beta and dirichlet: gradients in parameters of the sample's shape give the same bits everywhere") {
  // Per-element parameters: the gradient has no sum over samples (a sum's vector loops reassociate).
  const int64_t n = 1 << 12;
  // f64: the f64 series of the gradient (logGammaGrad) shows every bit
  std::vector<double> as;
  for (int64_t i = 0; i < n; ++i) as.push_back(0.05 + 30 * std::fmod(double(i) * 0.6180339887498949, 1.0));
  const Array a = Array(as, {n});
  const Array key = random::key_data(99);
  const std::vector<std::pair<const char*, std::function<Tensor(Tensor, Tensor)>>> grads = {
      {"gamma", [](Tensor a, Tensor k) { return grad([](Tensor a, Tensor k) { return sum(random::gamma(k, a)); })(a, k); }},
      {"loggamma", [](Tensor a, Tensor k) { return grad([](Tensor a, Tensor k) { return sum(random::loggamma(k, a)); })(a, k); }},
      {"beta", [](Tensor a, Tensor k) { return grad([](Tensor a, Tensor k) { return sum(random::beta(k, a, 2.0 * a)); })(a, k); }},
      {"dirichlet", [n](Tensor a, Tensor k) {
         return grad([n](Tensor a, Tensor k) {
           const Tensor d = random::dirichlet(k, reshape(a, {n / 4, 4}));
           return sum(d * d);
         })(a, k);
       }},
  };
  for (const auto& [name, g] : grads) {
    INFO("gradient of " << std::string(name));
    const Module m = trace([g](Tensor a, Tensor k) { return g(a, k); }, a.type(), kKey);
    const Array interpreted = m.interpret("f", {a, key}).at(0);
    const Array host = jit(g, {.tiers = false})(a, key);
    CHECK(bytesOf(host) == bytesOf(interpreted));
    for (const char* cpu : {"x86-64-v2", "x86-64-v3"}) {
      INFO("cpu " << std::string(cpu));
      CHECK(bytesOf(jit(g, {.cpu = cpu, .tiers = false})(a, key)) == bytesOf(host));
    }
    CHECK(bytesOf(jit(g, {.threads = 4, .tiers = false})(a, key)) == bytesOf(host));
  }
}

TEST_CASE("vmap over a batch of keys gives each key's values bit for bit: uniform, normal, split, fold_in, randint, every sampler") {
  // keys i32[4, 2], and the same keys one at a time; batched along axis 0 and,
  // transposed, along axis 1
  const Array keys = jit([](Tensor k) { return random::split(k, 4); })(random::key_data(51));
  const Array keysT = jit([](Tensor ks) { return transpose(ks); })(keys);
  std::vector<Array> each;
  for (int64_t i = 0; i < 4; ++i) each.push_back(jit([i](Tensor ks) { return ks[i]; })(keys));
  auto perKey = [&](auto f, const char* what) {
    INFO(what);
    const Array batched = sameBits([f](Tensor ks) { return vmap(f)(ks); }, {keys});
    const Array batchedT = sameBits([f](Tensor ks) { return vmap(f, {.in_axes = {1}})(ks); }, {keysT});
    CHECK(bytesOf(batchedT) == bytesOf(batched));
    for (int64_t i = 0; i < 4; ++i) {
      INFO("key " << i);
      const Array one = sameBits(f, {each[i]});
      const Array slice = jit([i](Tensor b) { return b[i]; })(batched);
      CHECK(bytesOf(slice) == bytesOf(one));
    }
  };
  perKey([](Tensor k) { return random::uniform(k, {5}); }, "uniform f32");
  perKey([](Tensor k) { return random::uniform(k, {2, 3}, DType::f64, -2.0, 3.0); }, "uniform f64 [-2, 3)");
  perKey([](Tensor k) { return random::normal(k, {5}); }, "normal f32");
  perKey([](Tensor k) { return random::normal(k, {3}, DType::f64); }, "normal f64");
  perKey([](Tensor k) { return random::split(k, 3); }, "split");
  perKey([](Tensor k) { return random::fold_in(k, 7); }, "fold_in");
  perKey([](Tensor k) { return random::uniform(random::split(k)[1], {4}); }, "uniform of a split key");
  perKey([](Tensor k) { return random::bernoulli(k, 0.3, {6}); }, "bernoulli");
  perKey([](Tensor k) { return random::randint(k, {6}, -5, 1000); }, "randint");
  for (const auto& [name, f] : everySampler(8)) perKey(f, name);
  // fold_in with batched data and a batched or shared key
  const Array ds = i32({3, -1, 0, 100});
  const Array folded = sameBits([](Tensor ks, Tensor d) { return vmap([](Tensor k, Tensor d) { return random::fold_in(k, d); })(ks, d); },
                                {keys, ds});
  const Array foldedShared = sameBits(
      [](Tensor k, Tensor d) {
        return vmap([](Tensor k, Tensor d) { return random::fold_in(k, d); }, {.in_axes = {std::nullopt, 0}})(k, d);
      },
      {each[0], ds});
  for (int64_t i = 0; i < 4; ++i) {
    INFO("data " << i);
    const Array d = Array(ds.data<int32_t>()[i]);
    const Array one = sameBits([](Tensor k, Tensor d) { return random::fold_in(k, d); }, {each[i], d});
    const Array shared = sameBits([](Tensor k, Tensor d) { return random::fold_in(k, d); }, {each[0], d});
    CHECK(bytesOf(jit([i](Tensor b) { return b[i]; })(folded)) == bytesOf(one));
    CHECK(bytesOf(jit([i](Tensor b) { return b[i]; })(foldedShared)) == bytesOf(shared));
  }
}

namespace {

struct Moments {
  double mean = 0, var = 0;
};
Moments momentsOf(const Array& a) {
  Moments m;
  for (int64_t i = 0; i < a.size(); ++i) m.mean += a.at(i);
  m.mean /= double(a.size());
  for (int64_t i = 0; i < a.size(); ++i) m.var += (a.at(i) - m.mean) * (a.at(i) - m.mean);
  m.var /= double(a.size() - 1);
  return m;
}

} // namespace

TEST_CASE("sample statistics: uniform, normal, exponential, bernoulli, randint, categorical, truncated_normal") {
  constexpr int64_t n = 200000; // standard errors: about 0.0022 / sqrt(var)
  const Array k = random::key_data(2024);
  {
    const Array u = sameBits([](Tensor k) { return random::uniform(k, {n}, DType::f64, -2, 6); }, {k});
    const Moments m = momentsOf(u);
    CHECK(m.mean == doctest::Approx(2).epsilon(0.01));
    CHECK(m.var == doctest::Approx(64.0 / 12).epsilon(0.01));
    double lo = 1e9, hi = -1e9;
    for (int64_t i = 0; i < n; ++i) lo = std::min(lo, u.at(i)), hi = std::max(hi, u.at(i));
    CHECK(lo >= -2);
    CHECK(hi < 6);
  }
  for (DType t : {DType::f32, DType::f64}) {
    const Array z = sameBits([t](Tensor k) { return random::normal(k, {n}, t); }, {k});
    const Moments m = momentsOf(z);
    CHECK(std::fabs(m.mean) < 0.01);
    CHECK(m.var == doctest::Approx(1).epsilon(0.015));
    int64_t beyond2 = 0; // P(|z| > 2) = 0.0455
    for (int64_t i = 0; i < n; ++i) beyond2 += std::fabs(z.at(i)) > 2;
    CHECK(double(beyond2) / n == doctest::Approx(0.0455).epsilon(0.05));
  }
  {
    const Moments m = momentsOf(sameBits([](Tensor k) { return random::exponential(k, {n}); }, {k}));
    CHECK(m.mean == doctest::Approx(1).epsilon(0.015));
    CHECK(m.var == doctest::Approx(1).epsilon(0.03));
  }
  {
    const Array b = sameBits([](Tensor k) { return random::bernoulli(k, 0.3, {n}); }, {k});
    int64_t ones = 0;
    for (int64_t i = 0; i < n; ++i) ones += b.at(i) != 0;
    CHECK(double(ones) / n == doctest::Approx(0.3).epsilon(0.02));
  }
  {
    const Array r = sameBits([](Tensor k) { return random::randint(k, {n}, -3, 7); }, {k});
    std::vector<int64_t> counts(10);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = int64_t(r.at(i));
      REQUIRE(v >= -3);
      REQUIRE(v < 7);
      ++counts[size_t(v + 3)];
    }
    for (int64_t c : counts) CHECK(double(c) / n == doctest::Approx(0.1).epsilon(0.04));
    // maxval <= minval gives minval; the whole i32 range is reachable
    const Array same = sameBits([](Tensor k) { return random::randint(k, {4}, 5, 5); }, {k});
    for (int64_t i = 0; i < 4; ++i) CHECK(same.at(i) == 5);
    const Array wide = sameBits([](Tensor k) { return random::randint(k, {1000}, -(int64_t{1} << 40), int64_t{1} << 40); }, {k});
    int64_t negative = 0;
    for (int64_t i = 0; i < 1000; ++i) negative += wide.at(i) < 0;
    CHECK(negative > 400);
    CHECK(negative < 600);
  }
  {
    // categorical over 3 classes with probabilities 0.2, 0.3, 0.5, 20000 rows
    const Array logits = f32({std::log(0.2f), std::log(0.3f), std::log(0.5f)});
    const Array c = sameBits([](Tensor k, Tensor l) { return random::categorical(k, broadcast_to(l, {20000, 3})); }, {k, logits});
    REQUIRE(c.type() == Type{DType::i32, {20000}});
    std::vector<int64_t> counts(3);
    for (int64_t i = 0; i < c.size(); ++i) ++counts[size_t(c.at(i))];
    CHECK(double(counts[0]) / 20000 == doctest::Approx(0.2).epsilon(0.05));
    CHECK(double(counts[1]) / 20000 == doctest::Approx(0.3).epsilon(0.05));
    CHECK(double(counts[2]) / 20000 == doctest::Approx(0.5).epsilon(0.05));
  }
  {
    // a standard normal truncated to [-1, 2]: mean (phi(-1) - phi(2)) / (Phi(2) - Phi(-1)) = 0.2288
    const Array t = sameBits([](Tensor k) { return random::truncated_normal(k, -1, 2, {n}); }, {k});
    const Moments m = momentsOf(t);
    CHECK(m.mean == doctest::Approx(0.2288).epsilon(0.03));
    for (int64_t i = 0; i < n; ++i) {
      CHECK(t.at(i) > -1);
      CHECK(t.at(i) < 2);
      if (!(t.at(i) > -1 && t.at(i) < 2)) break;
    }
  }
}

TEST_CASE("the reparameterisation trick: mu + sigma * normal(key) differentiates in mu and sigma, not the key") {
  // d/dmu sum(mu + sigma z) = n; d/dsigma = sum(z)
  auto f = [](Tensor params) {
    Tensor z = random::normal(random::key(5), {100}, DType::f64);
    return sum(params[0] + params[1] * z);
  };
  const Array g = jit([&](Tensor p) { return grad(f)(p); })(f64({0.5, 2.0}));
  const Array z = jit([](Tensor k) { return random::normal(k, {100}, DType::f64); })(random::key_data(5));
  double sz = 0;
  for (int64_t i = 0; i < 100; ++i) sz += z.at(i);
  CHECK(g.at(0) == doctest::Approx(100));
  CHECK(g.at(1) == doctest::Approx(sz).epsilon(1e-12));
  // a key that is a parameter carries no gradient (integers): asking for one is the usual error for i32 inputs
}

TEST_CASE("random functions report bad keys, dtypes and shapes at the caller's line") {
  CHECK_THROWS_WITH_AS(trace([](Tensor k) { return random::uniform(k, {3}); }, Type{DType::i32, {3}}),
                       doctest::Contains("random.uniform: expected a key, i32[2], got i32[3]"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor k) { return random::normal(k, {3}, DType::i32); }, kKey),
                       doctest::Contains("random.normal: expected a floating dtype, got i32"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor k) { return random::randint(k, {3}, 0, 4, DType::f32); }, kKey),
                       doctest::Contains("random.randint: expected dtype i32 or i64, got f32"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor k) { return random::split(k, -1); }, kKey),
                       doctest::Contains("random.split: expected a number of keys >= 0, got -1"), Error);
  int line = 0;
  try {
    trace([&](Tensor k) {
      line = __LINE__ + 1;
      return random::uniform(k, {2}, DType::i64);
    }, kKey);
  } catch (const Error& e) {
    CHECK(e.location().line == static_cast<uint32_t>(line));
  }
}

// ---- permutation and choice ------------------------------------------------------------

namespace {

std::vector<int32_t> ints(const Array& a) {
  const int64_t n = num_elements(a.type().shape);
  return std::vector<int32_t>(a.data<int32_t>(), a.data<int32_t>() + n);
}

/// Whether v holds each of 0..n-1 once.
bool isPermutation(std::vector<int32_t> v, int64_t n) {
  if (static_cast<int64_t>(v.size()) != n) return false;
  std::sort(v.begin(), v.end());
  for (int64_t i = 0; i < n; ++i)
    if (v[i] != i) return false;
  return true;
}

bool distinct(std::vector<int32_t> v) {
  std::sort(v.begin(), v.end());
  return std::adjacent_find(v.begin(), v.end()) == v.end();
}

} // namespace

TEST_CASE("permutation: every element once, for one and two sort rounds, interpreter = JIT, per key") {
  for (int64_t n : {1, 2, 7, 64, 1000, 1626, 3000}) { // 1626 and up take two rounds
    CAPTURE(n);
    auto f = [n](Tensor key) { return random::permutation(key, n); };
    const Array a = sameBits(f, {random::key_data(0)});
    CHECK(a.type() == Type{DType::i32, {n}});
    CHECK(isPermutation(ints(a), n));
    CHECK(bytesOf(sameBits(f, {random::key_data(0)})) == bytesOf(a)); // deterministic for a key
    if (n >= 7) {
      const Array b = sameBits(f, {random::key_data(1)});
      CHECK(isPermutation(ints(b), n));
      CHECK(ints(b) != ints(a)); // another key, another order
      CHECK(ints(a) != ints(sameBits([n](Tensor) { return iota({n}, 0, DType::i32); }, {random::key_data(0)})));
    }
  }
  // an empty permutation
  CHECK(jit([](Tensor key) { return random::permutation(key, 0); })(random::key_data(0)).type() ==
        Type{DType::i32, {0}});
}

TEST_CASE("permutation: all 24 orders of 4 about equally often over 4800 keys") {
  auto f = jit([](Tensor key) { return random::permutation(key, 4); });
  std::map<std::vector<int32_t>, int> counts;
  int position[4][4] = {};
  for (int seed = 0; seed < 4800; ++seed) {
    const std::vector<int32_t> v = ints(f(random::key_data(seed)));
    REQUIRE(isPermutation(v, 4));
    ++counts[v];
    for (int j = 0; j < 4; ++j) ++position[v[j]][j];
  }
  CHECK(counts.size() == 24);
  for (const auto& [order, c] : counts) CHECK(std::abs(c - 200) < 60); // sd ~14
  for (auto& row : position)
    for (int c : row) CHECK(std::abs(c - 1200) < 130); // sd ~30
}

TEST_CASE("permutation of a tensor shuffles slices along an axis, the same order as permutation(key, n)") {
  const Array x = i32({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  const Array perm4 = jit([](Tensor key) { return random::permutation(key, 4); })(random::key_data(5));
  const Array perm3 = jit([](Tensor key) { return random::permutation(key, 3); })(random::key_data(5));
  const Array cols = sameBits([](Tensor key, Tensor v) { return random::permutation(key, v, -1); }, {random::key_data(5), x});
  const Array rows = sameBits([](Tensor key, Tensor v) { return random::permutation(key, v); }, {random::key_data(5), x});
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      CHECK(cols.data<int32_t>()[i * 4 + j] == x.data<int32_t>()[i * 4 + perm4.data<int32_t>()[j]]);
      CHECK(rows.data<int32_t>()[i * 4 + j] == x.data<int32_t>()[perm3.data<int32_t>()[i] * 4 + j]);
    }
  // a vector is shuffled itself: the same order as its positions' permutation
  const Array v = f64({10, 11, 12, 13, 14, 15, 16});
  const Array shuffled = sameBits([](Tensor key, Tensor t) { return random::permutation(key, t); }, {random::key_data(3), v});
  const Array perm7 = jit([](Tensor key) { return random::permutation(key, 7); })(random::key_data(3));
  for (int i = 0; i < 7; ++i) CHECK(shuffled.data<double>()[i] == 10 + perm7.data<int32_t>()[i]);
  // differentiable in x: the gradient of sum(w * shuffle(x)) is w shuffled back
  const Array g = jit([](Tensor key, Tensor t) {
    return grad([&](Tensor u) { return sum(random::permutation(key, u) * iota({7}, 0, DType::f64)); })(t);
  })(random::key_data(3), v);
  for (int i = 0; i < 7; ++i) CHECK(g.data<double>()[perm7.data<int32_t>()[i]] == i);
}

TEST_CASE("choice with replacement: uniform and weighted frequencies; shapes; interpreter = JIT") {
  const Array uniformDraws = sameBits([](Tensor key) { return random::choice(key, 5, {20000}); }, {random::key_data(1)});
  const Array p = f64({0.1, 0.0, 0.2, 0.3, 0.4});
  const Array weighted =
      sameBits([](Tensor key, Tensor w) { return random::choice(key, 5, {20000}, true, w); }, {random::key_data(2), p});
  int u[5] = {}, w[5] = {};
  for (int32_t i : ints(uniformDraws)) ++u[i];
  for (int32_t i : ints(weighted)) ++w[i];
  for (int i = 0; i < 5; ++i) {
    CHECK(std::abs(u[i] / 20000.0 - 0.2) < 0.015);
    CHECK(std::abs(w[i] / 20000.0 - p.data<double>()[i]) < 0.015);
  }
  CHECK(w[1] == 0); // zero weight: never picked
  // unnormalised f32 weights, a 2-D shape
  const Array counts = jit([](Tensor key) {
    return random::choice(key, 3, {100, 100}, true, constant(Array(std::vector<float>{1, 2, 1})));
  })(random::key_data(3));
  CHECK(counts.type() == Type{DType::i32, {100, 100}});
  int c[3] = {};
  for (int32_t i : ints(counts)) ++c[i];
  CHECK(std::abs(c[1] / 10000.0 - 0.5) < 0.03);
  // from a tensor: its slices along an axis
  const Array x = f64({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 5});
  const Array picked = sameBits([](Tensor key, Tensor t) { return random::choice(key, t, {4, 3}, true, std::nullopt, 1); },
                                {random::key_data(4), x});
  const Array idx = jit([](Tensor key) { return random::choice(key, 5, {4, 3}); })(random::key_data(4));
  CHECK(picked.type() == Type{DType::f64, {2, 4, 3}});
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 12; ++k) CHECK(picked.data<double>()[r * 12 + k] == 5 * r + idx.data<int32_t>()[k]);
  // nothing to draw
  CHECK(jit([](Tensor key) { return random::choice(key, 0, {0}); })(random::key_data(0)).type() == Type{DType::i32, {0}});
}

TEST_CASE("choice without replacement: distinct samples; uniform and weighted first picks") {
  for (int64_t n : {1, 6, 10}) {
    CAPTURE(n);
    const Array all = sameBits([n](Tensor key) { return random::choice(key, n, {n}, false); }, {random::key_data(7)});
    CHECK(isPermutation(ints(all), n));
  }
  const Array some = sameBits([](Tensor key) { return random::choice(key, 10, {2, 3}, false); }, {random::key_data(8)});
  CHECK(some.type() == Type{DType::i32, {2, 3}});
  CHECK(distinct(ints(some)));
  const Array p = f64({0.5, 0.0, 0.25, 0.125, 0.125});
  const Array wsome = sameBits([](Tensor key, Tensor w) { return random::choice(key, 5, {4}, false, w); },
                               {random::key_data(9), p});
  CHECK(isPermutation([&] { auto v = ints(wsome); v.push_back(1); return v; }(), 5)); // all but the zero weight
  // over many keys: the first pick follows p, the pair is distinct
  auto f = jit([](Tensor key, Tensor w) { return random::choice(key, 5, {2}, false, w); });
  auto g = jit([](Tensor key) { return random::choice(key, 5, {2}, false); });
  int first[5] = {}, uniformFirst[5] = {};
  for (int seed = 0; seed < 4000; ++seed) {
    const auto v = ints(f(random::key_data(seed), p));
    const auto u = ints(g(random::key_data(seed)));
    REQUIRE(v[0] != v[1]);
    REQUIRE(u[0] != u[1]);
    ++first[v[0]];
    ++uniformFirst[u[0]];
  }
  for (int i = 0; i < 5; ++i) {
    CHECK(std::abs(first[i] / 4000.0 - p.data<double>()[i]) < 0.03);
    CHECK(std::abs(uniformFirst[i] / 4000.0 - 0.2) < 0.03);
  }
}

TEST_CASE("dirichlet without a shape takes alpha's batch shape; choice of x with no draws keeps x's other axes") {
  // (both once read a shape through iterators of two temporary copies)
  const Array d = jit([](Tensor k) { return random::dirichlet(k, constant(f64({1, 2, 3, 4, 5, 6}, {2, 3}))); })(random::key_data(1));
  REQUIRE(d.type() == Type{DType::f64, {2, 3}});
  for (int64_t r = 0; r < 2; ++r) CHECK(d.at(3 * r) + d.at(3 * r + 1) + d.at(3 * r + 2) == doctest::Approx(1.0));
  const Array one = jit([](Tensor k) { return random::dirichlet(k, constant(f32({0.5f, 2}))); })(random::key_data(2));
  CHECK(one.type() == Type{DType::f32, {2}});
  const Array none = jit([](Tensor k) {
    return random::choice(k, constant(f32({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 5})), {0}, true, std::nullopt, 1);
  })(random::key_data(3));
  CHECK(none.type() == Type{DType::f32, {2, 0}});
}

TEST_CASE("gamma, beta and dirichlet: sample means and variances; interpreter = JIT; a < 1 boosted") {
  auto moments = [](const Array& x) {
    const int64_t n = num_elements(x.type().shape);
    double m = 0, v = 0;
    for (int64_t i = 0; i < n; ++i) m += x.at(i);
    m /= n;
    for (int64_t i = 0; i < n; ++i) v += (x.at(i) - m) * (x.at(i) - m);
    return std::pair{m, v / n};
  };
  for (double a : {0.3, 1.0, 4.5}) {
    CAPTURE(a);
    const Array x = jit([a](Tensor key) { return random::gamma(key, full({}, a, DType::f64), Shape{40000}); })(random::key_data(11));
    const auto [m, v] = moments(x);
    CHECK(m == doctest::Approx(a).epsilon(0.03));
    CHECK(v == doctest::Approx(a).epsilon(0.08));
    for (int64_t i = 0; i < 40000; ++i) REQUIRE(x.at(i) >= 0);
  }
  // a tensor of shapes, f32; the interpreter agrees with compiled code
  const Array shapes = f32({0.5, 2, 8});
  const Array g = sameBits([](Tensor key, Tensor a) { return random::gamma(key, a, Shape{200, 3}); },
                           {random::key_data(12), shapes});
  CHECK(g.type() == Type{DType::f32, {200, 3}});
  const Array b = jit([](Tensor key) {
    return random::beta(key, full({}, 2.0, DType::f64), full({}, 6.0, DType::f64), Shape{20000});
  })(random::key_data(13));
  const auto [bm, bv] = moments(b);
  CHECK(bm == doctest::Approx(0.25).epsilon(0.03));
  CHECK(bv == doctest::Approx(2.0 * 6 / (64.0 * 9)).epsilon(0.1));
  const Array d = jit([](Tensor key) { return random::dirichlet(key, constant(f64({1, 2, 7})), Shape{5000}); })(random::key_data(14));
  REQUIRE(d.type() == Type{DType::f64, {5000, 3}});
  double col[3] = {};
  for (int64_t i = 0; i < 5000; ++i) {
    CHECK(d.at(3 * i) + d.at(3 * i + 1) + d.at(3 * i + 2) == doctest::Approx(1.0));
    for (int j = 0; j < 3; ++j) col[j] += d.at(3 * i + j) / 5000;
  }
  CHECK(col[0] == doctest::Approx(0.1).epsilon(0.05));
  CHECK(col[2] == doctest::Approx(0.7).epsilon(0.02));
}

namespace {

/// The regularised lower incomplete gamma P(a, x) (upper = false) or Q(a, x) =
/// 1 - P (upper = true) in long double: the series x^a e^-x / Gamma(a + 1) sum
/// x^n / ((a + 1)...(a + n)) below x = a + 1, the continued fraction of Q
/// (modified Lentz) above, each side's complement by subtraction.
long double incompleteGamma(long double a, long double x, bool upper) {
  const long double logPrefix = a * std::log(x) - x - std::lgamma(a);
  if (x < a + 1) {
    long double term = 1 / a, sum = term;
    for (int n = 1; n < 100000 && term > sum * 1e-21L; ++n) sum += term *= x / (a + n);
    const long double p = sum * std::exp(logPrefix);
    return upper ? 1 - p : p;
  }
  const long double tiny = 1e-300L;
  long double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 100000; ++i) {
    const long double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const long double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-21L) break;
  }
  const long double q = std::exp(logPrefix) * h;
  return upper ? q : 1 - q;
}

/// The reference of d x / da for a Gamma(a) sample x: -(dP/da) / (dP/dx), dP/da
/// by a central difference of P (of -Q above a + 1, where P is near 1), dP/dx
/// the density.
double gammaSampleGrad(double a, double x) {
  const bool upper = x >= a + 1;
  const long double h = 1e-7L * std::max(1.0, a);
  long double dP = (incompleteGamma(a + h, x, upper) - incompleteGamma(a - h, x, upper)) / (2 * h);
  if (upper) dP = -dP;
  const long double density = std::exp((a - 1) * std::log((long double)x) - x - std::lgamma((long double)a));
  return static_cast<double>(-dP / density);
}

double trigammaOf(double a) { // psi'(a): shift up, then the asymptotic series
  double r = 0;
  for (; a < 20; a += 1) r += 1 / (a * a);
  const double z = 1 / (a * a);
  return r + 1 / a + z / 2 + z / a * (1.0 / 6 - z * (1.0 / 30 - z / 42));
}

double valueOf(const Array& a) { return a.item<double>(); }

/// The mean of the first n values of x.
double meanOf(const Array& x, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m += x.at(i);
  return m / n;
}

} // namespace

TEST_CASE("gamma's gradient in a is the implicit one, -(dP/da)/(dP/dx) at the sample, f64 and f32") {
  // One shape per element: the gradient of sum(gamma(key, a)) is d x_i / d a_i.
  for (DType t : {DType::f64, DType::f32}) {
    for (double a : {0.01, 0.3, 1.0, 2.5, 10.0, 100.0, 1000.0}) {
      CAPTURE(name_of(t));
      CAPTURE(a);
      const int64_t n = 64;
      auto f = [](Tensor key, Tensor as) {
        auto sample = [key](Tensor as) { return random::gamma(key, as); };
        return std::pair{sample(as), grad([&](Tensor as) { return sum(sample(as)); })(as)};
      };
      const Array as = t == DType::f64 ? Array(std::vector<double>(n, a), {n}) : Array(std::vector<float>(n, float(a)), {n});
      const auto [x, g] = jit(f)(random::key_data(21), as);
      int compared = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double xi = x.at(i);
        if (xi == 0) { // underflowed (a = 0.01): the gradient is 0 there too
          CHECK(g.at(i) == 0);
          continue;
        }
        if (t == DType::f32 && xi < 1e-30) { // f32 subnormals: a few digits only
          CHECK(std::abs(g.at(i)) < 1e-25);
          continue;
        }
        CAPTURE(xi);
        const double want = gammaSampleGrad(a, xi);
        CHECK(g.at(i) == doctest::Approx(want).epsilon(t == DType::f64 ? 3e-7 : 2e-5).scale(0));
        ++compared;
      }
      CHECK(compared > n / 4);
    }
  }
}

TEST_CASE("gamma, loggamma, beta and dirichlet gradients: Monte Carlo against the moments' derivatives; jvp = grad") {
  const int64_t n = 40000;
  // d/da E[x] = 1 for x ~ Gamma(a); d/da E[log x] = trigamma(a)
  for (double a : {0.2, 0.5, 3.0, 20.0}) {
    CAPTURE(a);
    auto grads = jit([n](Tensor key, Tensor a) {
      auto meanX = [&](Tensor a) { return mean(random::gamma(key, a, Shape{n})); };
      auto meanLog = [&](Tensor a) { return mean(random::loggamma(key, a, Shape{n})); };
      return std::pair{grad(meanX)(a), grad(meanLog)(a)};
    });
    const auto [gx, glog] = grads(random::key_data(31), Array(a));
    CHECK(valueOf(gx) == doctest::Approx(1.0).epsilon(0.03));
    CHECK(valueOf(glog) == doctest::Approx(trigammaOf(a)).epsilon(0.03));
    // forward mode gives the same number
    // (the key a parameter, as above: a constant key would have the fold pass
    // evaluate the sampler's bits at compile time)
    const Array tangent = jit([n](Tensor key, Tensor a) {
      return jvp([&](Tensor a) { return mean(random::gamma(key, a, Shape{n})); }, std::tuple<Tensor>{a},
                 std::tuple<Tensor>{ones_like(a)})
          .second;
    })(random::key_data(31), Array(a));
    CHECK(valueOf(tangent) == doctest::Approx(valueOf(gx)).epsilon(1e-10));
  }
  // Beta(a, b): d E/da = b / (a + b)^2, d E/db = -a / (a + b)^2
  const Array gb = jit([n](Tensor key, Tensor ab) {
    return grad([&](Tensor ab) { return mean(random::beta(key, ab[0], ab[1], Shape{n})); })(ab);
  })(random::key_data(32), f64({2.0, 6.0}));
  CHECK(gb.at(0) == doctest::Approx(6.0 / 64).epsilon(0.05));
  CHECK(gb.at(1) == doctest::Approx(-2.0 / 64).epsilon(0.05));
  // Dirichlet(1, 2, 7): d E[x_0] / d alpha_j = (sum - alpha_0) / sum^2 for j = 0, -alpha_0 / sum^2 otherwise
  const Array gd = jit([n](Tensor key, Tensor alpha) {
    return grad([&](Tensor alpha) { return mean(random::dirichlet(key, alpha, Shape{n})(all, 0)); })(alpha);
  })(random::key_data(33), f64({1, 2, 7}));
  CHECK(gd.at(0) == doctest::Approx(0.09).epsilon(0.05));
  CHECK(gd.at(1) == doctest::Approx(-0.01).epsilon(0.1));
  CHECK(gd.at(2) == doctest::Approx(-0.01).epsilon(0.1));
}

TEST_CASE("gamma: a <= 0 or NaN gives NaN; second derivatives in a are an Error; a batch of keys under vmap") {
  const Array x = jit([](Tensor key, Tensor a) { return random::gamma(key, a); })(
      random::key_data(41), f32({-1.0f, 0.0f, std::nanf(""), 1.0f, 0.5f}));
  CHECK(std::isnan(x.at(0)));
  CHECK(std::isnan(x.at(1)));
  CHECK(std::isnan(x.at(2)));
  CHECK(std::isfinite(x.at(3)));
  CHECK(std::isfinite(x.at(4)));
  const Array b = jit([](Tensor key) { return random::beta(key, constant(f64({-1.0, 2.0})), constant(f64({2.0, 2.0}))); })(random::key_data(42));
  CHECK(std::isnan(b.at(0)));
  CHECK(std::isfinite(b.at(1)));
  CHECK_THROWS_WITH_AS(jit([](Tensor key, Tensor a) {
                         return grad([&](Tensor a) { return grad([&](Tensor a) { return random::gamma(key, a); })(a); })(a);
                       })(random::key_data(43), Array(2.0)),
                       doctest::Contains("second derivatives of random.gamma"), Error);
  // per-key samples and gradients under vmap equal the ones of each key alone
  auto sampleAndGrad = [](Tensor key, Tensor a) {
    return std::pair{random::gamma(key, a), grad([&](Tensor a) { return random::gamma(key, a); })(a)};
  };
  const Array keys = jit([](Tensor k) { return random::split(k, 3); })(random::key_data(44));
  const auto [xs, gs] = jit(vmap(sampleAndGrad, {.in_axes = {0, std::nullopt}}))(keys, Array(1.5));
  for (int64_t i = 0; i < 3; ++i) {
    const Array key = jit([i](Tensor ks) { return ks[i]; })(keys);
    const auto [xi, gi] = jit(sampleAndGrad)(key, Array(1.5));
    CHECK(xs.at(i) == doctest::Approx(valueOf(xi)).epsilon(1e-12));
    CHECK(gs.at(i) == doctest::Approx(valueOf(gi)).epsilon(1e-12));
  }
}

TEST_CASE("beta in log space: finite, in [0, 1] and of mean a / (a + b) for a, b down to 1e-3 in f32") {
  const int64_t n = 20000;
  for (float a : {1e-3f, 0.01f, 0.1f})
    for (float bb : {1e-3f, 0.01f, 0.1f}) {
      CAPTURE(a);
      CAPTURE(bb);
      const Array x = jit([n](Tensor key, Tensor a, Tensor b) { return random::beta(key, a, b, Shape{n}); })(
          random::key_data(51), Array(a), Array(bb));
      for (int64_t i = 0; i < n; ++i) {
        REQUIRE(std::isfinite(x.at(i)));
        REQUIRE(x.at(i) >= 0);
        REQUIRE(x.at(i) <= 1);
      }
      // nearly all samples are near 0 or 1: the mean's standard error is about sqrt(m (1 - m) / n)
      const double m = double(a) / (double(a) + double(bb));
      CHECK(std::abs(meanOf(x, n) - m) < 5 * std::sqrt(m * (1 - m) / n) + 1e-3);
    }
}

TEST_CASE("randint to i64: JAX's algorithm with 64-bit words, checked in native u64 arithmetic") {
  // The host recomputes each sample from the same random words with native
  // unsigned arithmetic: this checks the u64 remainders emulated on signed i64.
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  const std::vector<std::pair<int64_t, int64_t>> bounds = {
      {-5, 5}, {0, 3}, {kMin, kMax}, {-1, kMax}, {0, int64_t{3} << 61}, {kMin, 7}, {12, 12}, {9, 2}, {-(int64_t{1} << 40), int64_t{1} << 40}};
  for (const auto& [lo, hi] : bounds) {
    CAPTURE(lo);
    CAPTURE(hi);
    const int64_t n = 2000;
    auto f = jit([lo, hi, n](Tensor key) {
      const Tensor keys = random::split(key, 2);
      return std::tuple{random::randint(key, {n}, lo, hi, DType::i64), random::bits(keys[0], {n}, DType::i64),
                        random::bits(keys[1], {n}, DType::i64)};
    });
    const auto [r, higher, lower] = f(random::key_data(61));
    REQUIRE(r.type() == Type{DType::i64, {n}});
    // JAX's formula in native u64 arithmetic (its products and sums wrap, as JAX's do)
    const uint64_t span = hi <= lo ? 1 : uint64_t(hi) - uint64_t(lo);
    const uint64_t m32 = (uint64_t{1} << 32) % span, multiplier = m32 * m32 % span;
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t h = uint64_t(higher.data<int64_t>()[i]), l = uint64_t(lower.data<int64_t>()[i]);
      const int64_t want = int64_t(uint64_t(lo) + ((h % span) * multiplier + l % span) % span);
      REQUIRE(r.data<int64_t>()[i] == want);
      if (hi > lo) REQUIRE((r.data<int64_t>()[i] >= lo && r.data<int64_t>()[i] < hi));
      else REQUIRE(r.data<int64_t>()[i] == lo);
    }
  }
  // i64 constants above 2^53 reach compiled code exactly (they once went through a double)
  const int64_t big = (int64_t{1} << 62) + 1;
  CHECK(jit([big](Tensor x) { return x + constant(Array(big)); })(Array(int64_t{0})).item<int64_t>() == big);
  // small spans: about uniform
  const Array d = jit([](Tensor key) { return random::randint(key, {60000}, -3, 3, DType::i64); })(random::key_data(62));
  int counts[6] = {};
  for (int64_t i = 0; i < 60000; ++i) ++counts[d.data<int64_t>()[i] + 3];
  for (int c : counts) CHECK(std::abs(c - 10000) < 500);
}

TEST_CASE("permutation and choice report bad arguments at the caller's line") {
  CHECK_THROWS_WITH_AS(trace([](Tensor k) { return random::choice(k, 3, {4}, false); }, kKey),
                       doctest::Contains("random.choice: cannot take 4 samples of shape [4] from 3 without replacement"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor k, Tensor p) { return random::choice(k, 4, {2}, true, p); }, kKey, Type{DType::f32, {3}}),
                       doctest::Contains("random.choice: expected p of a floating dtype and shape [4] (one weight per choice), got f32[3]"),
                       Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor k, Tensor p) { return random::choice(k, 3, {2}, true, p); }, kKey, Type{DType::i32, {3}}),
                       doctest::Contains("random.choice: expected p of a floating dtype"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor k) { return random::choice(k, 0, {2}); }, kKey),
                       doctest::Contains("random.choice: expected n > 0 to draw 2 samples from, got 0"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor k) { return random::permutation(k, -1); }, kKey),
                       doctest::Contains("random.permutation: expected n >= 0, got -1"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor k, Tensor x) { return random::permutation(k, x, 2); }, kKey, Type{DType::f32, {3, 2}}),
                       doctest::Contains("random.permutation: expected an axis in [-2, 2), got 2"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor k, Tensor x) { return random::permutation(k, x); }, kKey, Type{DType::f32, {}}),
                       doctest::Contains("random.permutation: expected x with an axis to shuffle, got f32[]"), Error);
  int line = 0;
  bool thrown = false;
  try {
    trace([&](Tensor k) {
      line = __LINE__ + 1;
      return random::choice(k, 2, {3}, false);
    }, kKey);
  } catch (const Error& e) {
    thrown = true;
    CHECK(e.location().line == static_cast<uint32_t>(line));
  }
  CHECK(thrown);
}

// ---- the guide's examples (docs/guide/random.md) ---------------------------------------

TEST_CASE("guide: random numbers") {
  // [snippet:random-basics]
  auto sample = jit([](Tensor key) {
    Tensor keys = random::split(key, 3);               // three new keys, i32[3, 2]
    Tensor noise = random::normal(keys[0], {2, 3});    // f32[2, 3]
    Tensor coins = random::bernoulli(keys[1], 0.25, {2, 3});
    Tensor dice = random::randint(keys[2], {2, 3}, 1, 7);
    return where(coins, noise, cast(dice, DType::f32));
  });
  Array key = random::key_data(0);  // JAX's jax.random.key(0): {0, 0}
  Array x = sample(key);            // the same numbers on every machine, every run
  // [/snippet:random-basics]
  CHECK(x.type() == Type{DType::f32, {2, 3}});
  CHECK(bytesOf(sample(key)) == bytesOf(x));

  // [snippet:random-scan]
  // A random walk: the key is carried through the loop, split at each step.
  auto walk = jit([](Tensor key) {
    auto step = [](std::pair<Tensor, Tensor> carry, std::tuple<>) {
      auto [key, position] = carry;
      Tensor keys = random::split(key);
      Tensor next = position + random::normal(keys[1], {}, DType::f64);
      return std::pair{std::pair{keys[0], next}, next};
    };
    return scan(step, std::pair{key, full({}, 0.0, DType::f64)}, std::tuple<>{}, {.length = 100}).second;
  });
  Array path = walk(random::key_data(42));  // f64[100]
  // [/snippet:random-scan]
  CHECK(path.type() == Type{DType::f64, {100}});

  // [snippet:random-grad]
  // E[(mu + sigma z)^2] = mu^2 + sigma^2 for z ~ N(0, 1): its gradient in (mu, sigma) is
  // about (2 mu, 2 sigma), estimated through the samples (the reparameterisation trick).
  auto loss = [](Tensor params, Tensor key) {
    Tensor z = random::normal(key, {100000}, DType::f64);
    Tensor x = params[0] + params[1] * z;
    return mean(x * x);
  };
  Array g = jit([&](Tensor p, Tensor key) { return grad(loss)(p, key); })(f64({1.0, 2.0}), random::key_data(0));
  // [/snippet:random-grad]
  CHECK(g.at(0) == doctest::Approx(2.0).epsilon(0.02));

  // [snippet:random-choice]
  auto deal = jit([](Tensor key, Tensor weights) {
    Tensor keys = random::split(key, 3);
    Tensor deck = random::permutation(keys[0], 52);                 // i32[52], each card once
    Tensor hand = random::choice(keys[1], 52, {5}, false);          // five distinct cards
    Tensor loaded = random::choice(keys[2], 6, {10}, true, weights); // ten rolls of a loaded die
    return std::tuple{deck, hand, loaded};
  });
  auto [deck, hand, loaded] = deal(random::key_data(0), f32({1, 1, 1, 1, 1, 5}));
  // [/snippet:random-choice]
  // [snippet:random-gamma-grad]
  // E[x] = a / (a + b) for x ~ Beta(a, b): its gradient in (a, b), (b, -a) / (a + b)^2,
  // estimated through the samples (implicit reparameterisation of the gamma samples).
  auto meanBeta = [](Tensor ab, Tensor key) { return mean(random::beta(key, ab[0], ab[1], Shape{100000})); };
  Array gab = jit([&](Tensor ab, Tensor key) { return grad(meanBeta)(ab, key); })(f64({2.0, 6.0}), random::key_data(0));
  // [/snippet:random-gamma-grad]
  CHECK(gab.at(0) == doctest::Approx(6.0 / 64).epsilon(0.05));
  CHECK(gab.at(1) == doctest::Approx(-2.0 / 64).epsilon(0.05));
  CHECK(isPermutation(ints(deck), 52));
  CHECK(distinct(ints(hand)));
  CHECK(loaded.type() == Type{DType::i32, {10}});
  CHECK(g.at(1) == doctest::Approx(4.0).epsilon(0.02));
}
