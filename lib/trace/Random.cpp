// trace/Random.cpp — adjit::random: JAX's counter-based random numbers as
// composites of elementwise ops. Threefry-2x32 (Salmon et al., "Parallel
// random numbers: as easy as 1, 2, 3", SC 2011; 20 rounds) on i32 tensors
// that hold u32 bits: add wraps, rotations are two shifts and an or. Keys,
// splits and bits follow JAX's jax_threefry_partitionable=True: element i of
// a sample of n elements is Threefry(key, counter (hi(i), lo(i))) of its
// row-major position, its two output words xor'ed (or joined for 64 bits).
// The samplers take ln, ln(1 + x), e^x and the sigmoid from
// trace/PortableMath.h, not the ops (libm): so every sample has the same bits
// in the interpreter and compiled for any vector width or thread count.
#include "trace/PortableMath.h"

#include <adjit/control_flow.h>
#include <adjit/custom_gradient.h>
#include <adjit/error.h>
#include <adjit/random.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include <limits>

namespace adjit::random {
namespace {

using Loc = std::source_location;

/// The i32 that holds the bits of the unsigned word w.
double word(uint32_t w) { return static_cast<double>(static_cast<int32_t>(w)); }

/// x rotated left by r bits, as 32-bit words.
Tensor rotl(const Tensor& x, int r, const Loc& loc) {
  return bitwise_or(shift_left(x, AtScalar(r, loc)), shift_right_logical(x, AtScalar(32 - r, loc)), loc);
}

/// Threefry-2x32, 20 rounds, of counters (x0, x1) under key (k0, k1): i32
/// tensors holding u32 words, broadcasting against each other.
std::pair<Tensor, Tensor> threefry2x32(const Tensor& k0, const Tensor& k1, Tensor x0, Tensor x1, const Loc& loc) {
  static constexpr int kRotations[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  // the third key word makes the key schedule's parity 0x1BD11BDA (Threefish's constant)
  const Tensor ks[3] = {k0, k1, bitwise_xor(bitwise_xor(k0, k1, loc), AtScalar(0x1BD11BDA, loc))};
  x0 = add(x0, k0, loc);
  x1 = add(x1, k1, loc);
  for (int i = 0; i < 5; ++i) {
    for (int r : kRotations[i % 2]) { // mix: x0 += x1; x1 = rotl(x1, r) ^ x0
      x0 = add(x0, x1, loc);
      x1 = bitwise_xor(rotl(x1, r, loc), x0, loc);
    }
    // key injection s = i + 1 after every 4 rounds
    x0 = add(x0, ks[(i + 1) % 3], loc);
    x1 = add(x1, add(ks[(i + 2) % 3], AtScalar(i + 1, loc)), loc);
  }
  return {x0, x1};
}

void checkKey(const char* fn, const Tensor& key, const Loc& loc) {
  if (!key.valid()) throw Error(fmt::format("random.{}: the key is an empty Tensor", fn), Location::from(loc));
  if (key.type() != Type{DType::i32, {2}})
    throw Error(fmt::format("random.{}: expected a key, i32[2], got {}", fn, key.type().str()), Location::from(loc));
}

void checkFloat(const char* fn, DType dtype, const Loc& loc) {
  if (!is_floating(dtype))
    throw Error(fmt::format("random.{}: expected a floating dtype, got {}", fn, name_of(dtype)), Location::from(loc));
}

/// Threefry of `key` on the counters of `shape`'s elements (row-major
/// positions i as the words (i >> 32, i & 0xffffffff)).
std::pair<Tensor, Tensor> blocks(const Tensor& key, const Shape& shape, const Loc& loc) {
  const Tensor k0 = key.at(0, loc), k1 = key.at(1, loc);
  const int64_t n = num_elements(shape);
  if (n < 0) throw Error(fmt::format("random: negative dimension in shape {}", shape_str(shape)), Location::from(loc));
  std::vector<int64_t> dims(shape.begin(), shape.end());
  if (n <= std::numeric_limits<int32_t>::max()) // the high words are 0: one scalar, broadcast
    return threefry2x32(k0, k1, full({}, 0, DType::i32, loc), reshape(iota({n}, 0, DType::i32, loc), dims, loc), loc);
  const Tensor i = reshape(iota({n}, 0, DType::i64, loc), dims, loc);
  return threefry2x32(k0, k1, cast(shift_right_logical(i, AtScalar(32, loc)), DType::i32, loc), cast(i, DType::i32, loc),
                      loc);
}

/// A scalar of dtype t (the value rounded to t once).
Tensor scalar(DType t, double v, const Loc& loc) { return full({}, v, t, loc); }

/// v rounded to float where t is f32.
double rounded(DType t, double v) { return t == DType::f32 ? static_cast<double>(static_cast<float>(v)) : v; }

/// The next value of dtype t after v toward `toward`.
double nextAfter(DType t, double v, double toward) {
  if (t == DType::f32) return std::nextafter(static_cast<float>(v), static_cast<float>(toward));
  return std::nextafter(v, toward);
}

} // namespace

Tensor key(int64_t seed, Loc loc) {
  const auto s = static_cast<uint64_t>(seed);
  return constant(Array(std::vector<int32_t>{static_cast<int32_t>(s >> 32), static_cast<int32_t>(s)}), loc);
}

Array key_data(int64_t seed) {
  const auto s = static_cast<uint64_t>(seed);
  return Array(std::vector<int32_t>{static_cast<int32_t>(s >> 32), static_cast<int32_t>(s)});
}

Tensor key(const Tensor& seed, Loc loc) {
  if (!seed.valid() || seed.rank() != 0 || (seed.dtype() != DType::i32 && seed.dtype() != DType::i64))
    throw Error(fmt::format("random.key: expected an i32 or i64 scalar seed, got {}", seed.valid() ? seed.type().str() : "an empty Tensor"),
                Location::from(loc));
  if (seed.dtype() == DType::i32) return stack({full({}, 0, DType::i32, loc), seed}, 0, loc);
  return stack({cast(shift_right_logical(seed, AtScalar(32, loc)), DType::i32, loc), cast(seed, DType::i32, loc)}, 0, loc);
}

Tensor split(const Tensor& key, int64_t num, Loc loc) {
  checkKey("split", key, loc);
  if (num < 0) throw Error(fmt::format("random.split: expected a number of keys >= 0, got {}", num), Location::from(loc));
  auto [b0, b1] = blocks(key, {num}, loc);
  return stack({b0, b1}, 1, loc);
}

Tensor fold_in(const Tensor& key, int64_t data, Loc loc) {
  checkKey("fold_in", key, loc);
  auto [b0, b1] = threefry2x32(key.at(0, loc), key.at(1, loc), full({}, 0, DType::i32, loc),
                               full({}, word(static_cast<uint32_t>(data)), DType::i32, loc), loc);
  return stack({b0, b1}, 0, loc);
}

Tensor fold_in(const Tensor& key, const Tensor& data, Loc loc) {
  checkKey("fold_in", key, loc);
  if (!data.valid() || data.type() != Type{DType::i32, {}})
    throw Error(fmt::format("random.fold_in: expected i32[] data, got {}", data.valid() ? data.type().str() : "an empty Tensor"),
                Location::from(loc));
  auto [b0, b1] = threefry2x32(key.at(0, loc), key.at(1, loc), full({}, 0, DType::i32, loc), data, loc);
  return stack({b0, b1}, 0, loc);
}

std::pair<Tensor, Tensor> threefry_2x32(const Tensor& key, const Tensor& x0, const Tensor& x1, Loc loc) {
  checkKey("threefry_2x32", key, loc);
  for (const Tensor* x : {&x0, &x1})
    if (!x->valid() || x->dtype() != DType::i32)
      throw Error(fmt::format("random.threefry_2x32: expected i32 counters, got {}", x->valid() ? x->type().str() : "an empty Tensor"),
                  Location::from(loc));
  return threefry2x32(key.at(0, loc), key.at(1, loc), x0, x1, loc);
}

Tensor bits(const Tensor& key, const Shape& shape, DType dtype, Loc loc) {
  checkKey("bits", key, loc);
  auto [b0, b1] = blocks(key, shape, loc);
  if (dtype == DType::i32) return bitwise_xor(b0, b1, loc);
  if (dtype != DType::i64)
    throw Error(fmt::format("random.bits: expected dtype i32 or i64, got {}", name_of(dtype)), Location::from(loc));
  // 64 bits: the first word high, the second low (zero-extended)
  const Tensor hi = shift_left(cast(b0, DType::i64, loc), AtScalar(32, loc));
  return bitwise_or(hi, bitwise_and(cast(b1, DType::i64, loc), AtScalar(int64_t{0xFFFFFFFF}, loc)), loc);
}

Tensor uniform(const Tensor& key, const Shape& shape, DType dtype, double minval, double maxval, Loc loc) {
  checkKey("uniform", key, loc);
  checkFloat("uniform", dtype, loc);
  // Random mantissa bits under the exponent of 1: a float in [1, 2), minus 1.
  Tensor floats;
  if (dtype == DType::f32) {
    const Tensor b = bits(key, shape, DType::i32, loc);
    const Tensor m = bitwise_or(shift_right_logical(b, AtScalar(32 - 23, loc)), AtScalar(0x3F800000, loc));
    floats = sub(bitcast(m, DType::f32, loc), AtScalar(1.0, loc));
  } else {
    const Tensor b = bits(key, shape, DType::i64, loc);
    const Tensor m = bitwise_or(shift_right_logical(b, AtScalar(64 - 52, loc)), AtScalar(int64_t{0x3FF0000000000000}, loc));
    floats = sub(bitcast(m, DType::f64, loc), AtScalar(1.0, loc));
  }
  // floats * (maxval - minval) + minval, the bounds and their difference in dtype, and not below minval
  const double lo = rounded(dtype, minval), hi = rounded(dtype, maxval), scale = rounded(dtype, hi - lo);
  const Tensor lower = scalar(dtype, lo, loc);
  return maximum(lower, add(mul(floats, scalar(dtype, scale, loc), loc), lower, loc), loc);
}

Tensor normal(const Tensor& key, const Shape& shape, DType dtype, Loc loc) {
  checkKey("normal", key, loc);
  checkFloat("normal", dtype, loc);
  // u in (-1, 1): the open interval keeps erf_inv finite
  const Tensor u = uniform(key, shape, dtype, nextAfter(dtype, -1, 0), 1, loc);
  return mul(scalar(dtype, std::sqrt(2.0), loc), erf_inv(u, loc), loc);
}

Tensor bernoulli(const Tensor& key, double p, const Shape& shape, Loc loc) {
  checkKey("bernoulli", key, loc);
  return lt(uniform(key, shape, DType::f32, 0, 1, loc), AtScalar(p, loc));
}

Tensor bernoulli(const Tensor& key, const Tensor& p, std::optional<Shape> shape, Loc loc) {
  checkKey("bernoulli", key, loc);
  if (!p.valid()) throw Error("random.bernoulli: p is an empty Tensor", Location::from(loc));
  checkFloat("bernoulli", p.dtype(), loc);
  const Shape s = shape ? *shape : p.shape();
  return lt(uniform(key, s, p.dtype(), 0, 1, loc), p, loc);
}

namespace {

/// a mod s for u64 words a held in i64 and a trace-time u64 divisor s (s = 0
/// leaves a, as XLA's unsigned remainder by 0). The i64 ops are signed, so:
/// s above 2^63 needs at most one subtraction; otherwise (a >> 1) mod s is a
/// remainder of non-negative numbers, and 2 ((a >> 1) mod s) + (a & 1) < 2 s
/// needs at most one more subtraction, compared as unsigned (sign bits flipped).
Tensor umod64(const Tensor& a, uint64_t s, const Loc& loc) {
  if (s == 0) return a;
  auto constant64 = [&](uint64_t v) { return constant(Array(static_cast<int64_t>(v)), loc); }; // exact (not via double)
  const Tensor sign = constant64(uint64_t{1} << 63);
  auto geUnsigned = [&](const Tensor& x, uint64_t y) { // x >= y as u64
    return ge(bitwise_xor(x, sign, loc), constant64(y ^ (uint64_t{1} << 63)), loc);
  };
  auto reduceOnce = [&](const Tensor& x) { // x mod s for x < 2 s (as u64)
    return where(geUnsigned(x, s), sub(x, constant64(s), loc), x, loc);
  };
  if (s > (uint64_t{1} << 63)) return reduceOnce(a);
  if (s == (uint64_t{1} << 63)) return bitwise_and(a, constant64(~(uint64_t{1} << 63)), loc);
  const Tensor divisor = constant64(s);
  const Tensor half = shift_right_logical(a, constant64(1), loc);
  const Tensor r = sub(half, mul(div(half, divisor, loc), divisor, loc), loc);
  return reduceOnce(add(add(r, r, loc), bitwise_and(a, constant64(1), loc), loc));
}

/// randint to i64, JAX's algorithm with 64-bit words (jax_enable_x64): the span
/// as u64 (1 when maxval <= minval), 2^64 mod span as (2^32 mod span)^2 mod
/// span, and (higher mod span) * that + lower mod span, wrapped, mod span.
Tensor randint64(const Tensor& key, const Shape& shape, int64_t minval, int64_t maxval, const Loc& loc) {
  const uint64_t span = maxval <= minval ? 1 : static_cast<uint64_t>(maxval) - static_cast<uint64_t>(minval);
  const uint64_t m32 = (uint64_t{1} << 32) % span;
  const uint64_t multiplier = (m32 * m32) % span;
  const Tensor keys = split(key, 2, loc);
  const Tensor higher = bits(keys.at(0, loc), shape, DType::i64, loc);
  const Tensor lower = bits(keys.at(1, loc), shape, DType::i64, loc);
  const Tensor m = constant(Array(static_cast<int64_t>(multiplier)), loc);
  const Tensor offset = umod64(add(mul(umod64(higher, span, loc), m, loc), umod64(lower, span, loc), loc), span, loc);
  // minval + offset, wrapping as u64 (the result is in [minval, maxval))
  return add(constant(Array(minval), loc), offset, loc);
}

} // namespace

Tensor randint(const Tensor& key, const Shape& shape, int64_t minval, int64_t maxval, DType dtype, Loc loc) {
  checkKey("randint", key, loc);
  if (dtype == DType::i64) return randint64(key, shape, minval, maxval, loc);
  if (dtype != DType::i32)
    throw Error(fmt::format("random.randint: expected dtype i32 or i64, got {}", name_of(dtype)), Location::from(loc));
  // JAX's algorithm on the trace-time bounds: clip into i32; the span as u32,
  // 1 when maxval <= minval, one more when maxval was above i32's range.
  constexpr int64_t kMin = std::numeric_limits<int32_t>::min(), kMax = std::numeric_limits<int32_t>::max();
  const bool maxOutOfRange = maxval > kMax;
  const int64_t lo = std::clamp(minval, kMin, kMax), hi = std::clamp(maxval, kMin, kMax);
  uint32_t span = static_cast<uint32_t>(hi) - static_cast<uint32_t>(lo);
  if (hi <= lo) span = 1;
  if (maxOutOfRange && hi > lo) span += 1; // may wrap to 0: then the remainders below leave their operand
  // (a % 0 = a, as XLA's unsigned remainder)
  auto rem = [&](uint64_t a) { return span == 0 ? a : a % span; };
  // 2^32 % span, as (2^16 % span)^2 % span in u32 (the square wraps as JAX's)
  const uint32_t m16 = static_cast<uint32_t>(rem(uint64_t{1} << 16));
  const uint32_t multiplier = static_cast<uint32_t>(rem(static_cast<uint32_t>(m16 * m16)));

  // Two independent words per sample: (higher % span) * 2^32 + lower, mod span.
  // In i64, where the u32 words and their remainders are non-negative.
  const Tensor keys = split(key, 2, loc);
  const Tensor mask = full({}, double(0xFFFFFFFF), DType::i64, loc);
  auto u64 = [&](const Tensor& w) { return bitwise_and(cast(w, DType::i64, loc), mask, loc); };
  auto remainder = [&](const Tensor& a) { // a % span for 0 <= a < 2^32
    if (span == 0) return a;
    return sub(a, mul(div(a, AtScalar(int64_t{span}, loc)), AtScalar(int64_t{span}, loc)), loc);
  };
  const Tensor higher = u64(bits(keys.at(0, loc), shape, DType::i32, loc));
  const Tensor lower = u64(bits(keys.at(1, loc), shape, DType::i32, loc));
  // (higher % span) * multiplier + lower % span, wrapped to u32 as in JAX, then % span
  Tensor offset = bitwise_and(mul(remainder(higher), AtScalar(int64_t{multiplier}, loc)), mask, loc);
  offset = remainder(bitwise_and(add(offset, remainder(lower), loc), mask, loc));
  return add(full({}, double(lo), DType::i32, loc), cast(offset, DType::i32, loc), loc);
}

Tensor gumbel(const Tensor& key, const Shape& shape, DType dtype, Loc loc) {
  checkKey("gumbel", key, loc);
  checkFloat("gumbel", dtype, loc);
  const double tiny = dtype == DType::f32 ? double(std::numeric_limits<float>::min()) : std::numeric_limits<double>::min();
  // u in [tiny, 1) and -log u in (0, 709]: both positive normal
  return neg(portable::logOfNormal(neg(portable::logOfNormal(uniform(key, shape, dtype, tiny, 1, loc), loc), loc), loc), loc);
}

Tensor categorical(const Tensor& key, const Tensor& logits, int64_t axis, Loc loc) {
  checkKey("categorical", key, loc);
  if (!logits.valid()) throw Error("random.categorical: the logits are an empty Tensor", Location::from(loc));
  checkFloat("categorical", logits.dtype(), loc);
  if (logits.rank() == 0)
    throw Error(fmt::format("random.categorical: expected logits with an axis to sample along, got {}", logits.type().str()),
                Location::from(loc));
  return argmax(add(gumbel(key, logits.shape(), logits.dtype(), loc), logits, loc), axis, DType::i32, loc);
}

Tensor exponential(const Tensor& key, const Shape& shape, DType dtype, Loc loc) {
  checkKey("exponential", key, loc);
  checkFloat("exponential", dtype, loc);
  // JAX's -log1p(-u) as -log(1 - u): u is a multiple of 2^-23 (2^-52) in
  // [0, 1), so 1 - u is exact and positive normal (the same value as log1p's,
  // without its correction)
  const Tensor u = uniform(key, shape, dtype, 0, 1, loc);
  return neg(portable::logOfNormal(sub(AtScalar(1.0, loc), u), loc), loc);
}

Tensor truncated_normal(const Tensor& key, double lower, double upper, const Shape& shape, DType dtype, Loc loc) {
  checkKey("truncated_normal", key, loc);
  checkFloat("truncated_normal", dtype, loc);
  // a = erf(lower / sqrt 2), b = erf(upper / sqrt 2), in dtype (at trace time; JAX computes them with XLA's erf)
  const double sqrt2 = rounded(dtype, std::sqrt(2.0)), lo = rounded(dtype, lower), hi = rounded(dtype, upper);
  auto erfIn = [&](double v) {
    return dtype == DType::f32 ? double(std::erf(static_cast<float>(static_cast<float>(v) / static_cast<float>(sqrt2))))
                               : std::erf(v / sqrt2);
  };
  const Tensor u = uniform(key, shape, dtype, erfIn(lo), erfIn(hi), loc);
  const Tensor out = mul(scalar(dtype, sqrt2, loc), erf_inv(u, loc), loc);
  // clipped into the open interval (rounding, or u = a, may reach the bounds)
  return clip(out, scalar(dtype, nextAfter(dtype, lo, HUGE_VAL), loc), scalar(dtype, nextAfter(dtype, hi, -HUGE_VAL), loc), loc);
}

namespace {

/// JAX's _shuffle: x sorted along `axis` by fresh random u32 keys (stably),
/// ceil(3 ln size / ln(2^32 - 1)) times, each with a new split of the key.
/// Sorting by random keys is a uniform shuffle when the keys are distinct;
/// equal keys keep their elements in order, so each extra round makes the
/// chance that a collision decides an order smaller (about size^2 / 2^33 per
/// round): tjablin's bound, size^3 < 2^(32 rounds), picks the number of rounds.
Tensor shuffle(Tensor key, Tensor x, int64_t axis, const Loc& loc) {
  const int64_t size = num_elements(x.shape());
  const int rounds =
      static_cast<int>(std::ceil(3 * std::log(double(std::max<int64_t>(1, size))) / std::log(4294967295.0)));
  for (int r = 0; r < rounds; ++r) {
    const Tensor keys = split(key, 2, loc);
    key = keys.at(0, loc);
    // the u32 bits flipped in their sign bit sort as i32 in the u32 order JAX sorts them in
    const Tensor sortKeys = bitwise_xor(bits(keys.at(1, loc), x.shape(), DType::i32, loc),
                                        full({}, word(0x80000000u), DType::i32, loc), loc);
    x = sort_key_val(sortKeys, x, axis, false, loc).second;
  }
  return x;
}

/// axis in [0, rank), or an Error naming fn.
int64_t normalAxis(const char* fn, int64_t axis, int64_t rank, const Loc& loc) {
  if (axis < -rank || axis >= rank)
    throw Error(fmt::format("random.{}: expected an axis in [{}, {}), got {}", fn, -rank, rank, axis), Location::from(loc));
  return axis < 0 ? axis + rank : axis;
}

} // namespace

Tensor permutation(const Tensor& key, int64_t n, Loc loc) {
  checkKey("permutation", key, loc);
  if (n < 0) throw Error(fmt::format("random.permutation: expected n >= 0, got {}", n), Location::from(loc));
  if (n > std::numeric_limits<int32_t>::max())
    throw Error(fmt::format("random.permutation: expected n < 2^31 (i32 indices), got {}", n), Location::from(loc));
  return shuffle(key, iota({n}, 0, DType::i32, loc), 0, loc);
}

Tensor permutation(const Tensor& key, const Tensor& x, int64_t axis, Loc loc) {
  checkKey("permutation", key, loc);
  if (!x.valid()) throw Error("random.permutation: x is an empty Tensor", Location::from(loc));
  if (x.rank() == 0)
    throw Error(fmt::format("random.permutation: expected x with an axis to shuffle, got {}", x.type().str()),
                Location::from(loc));
  axis = normalAxis("permutation", axis, x.rank(), loc);
  if (x.rank() == 1) return shuffle(key, x, 0, loc); // JAX shuffles a vector itself: the same order as below
  return take(x, permutation(key, x.shape()[axis], loc), axis, loc);
}

Tensor choice(const Tensor& key, int64_t n, const Shape& shape, bool replace, const std::optional<Tensor>& p, Loc loc) {
  checkKey("choice", key, loc);
  const int64_t draws = num_elements(shape);
  if (draws < 0) throw Error(fmt::format("random.choice: negative dimension in shape {}", shape_str(shape)), Location::from(loc));
  if (p) {
    if (!p->valid()) throw Error("random.choice: p is an empty Tensor", Location::from(loc));
    if (!is_floating(p->dtype()) || p->shape() != Shape{n})
      throw Error(fmt::format("random.choice: expected p of a floating dtype and shape [{}] (one weight per choice), got {}",
                              n, p->type().str()),
                  Location::from(loc));
  }
  if (draws == 0) return full(shape, 0, DType::i32, loc);
  if (n <= 0)
    throw Error(fmt::format("random.choice: expected n > 0 to draw {} samples from, got {}", draws, n), Location::from(loc));
  if (n > std::numeric_limits<int32_t>::max())
    throw Error(fmt::format("random.choice: expected n < 2^31 (i32 indices), got {}", n), Location::from(loc));
  if (!replace && draws > n)
    throw Error(fmt::format("random.choice: cannot take {} samples of shape {} from {} without replacement", draws,
                            shape_str(shape), n),
                Location::from(loc));
  const std::vector<int64_t> dims(shape.begin(), shape.end());
  if (!p) {
    if (replace) return randint(key, shape, 0, n, DType::i32, loc);
    return reshape(slice(permutation(key, n, loc), {0}, {draws}, {}, loc), dims, loc);
  }
  if (replace) { // inverse CDF: the first i with cumsum(p)[i] >= total * (1 - u), u in [0, 1)
    const Tensor cdf = cumsum(*p, 0, false, loc);
    const Tensor u = uniform(key, shape, p->dtype(), 0, 1, loc);
    const Tensor r = mul(cdf.at(n - 1, loc), sub(AtScalar(1.0, loc), u), loc);
    return searchsorted(cdf, r, "left", DType::i32, loc);
  }
  // Gumbel top-k: the k largest of log p + gumbel are a weighted sample without replacement
  // (the indices carry no gradient to p)
  const Tensor g = add(gumbel(key, {n}, p->dtype(), loc), portable::log(stop_gradient(*p, loc), loc), loc);
  return reshape(top_k(g, draws, DType::i32, loc).indices, dims, loc);
}

Tensor choice(const Tensor& key, const Tensor& x, const Shape& shape, bool replace, const std::optional<Tensor>& p,
              int64_t axis, Loc loc) {
  checkKey("choice", key, loc);
  if (!x.valid()) throw Error("random.choice: x is an empty Tensor", Location::from(loc));
  if (x.rank() == 0)
    throw Error(fmt::format("random.choice: expected x with an axis to choose along, got {} (pass an integer n to "
                            "choose from 0..n-1)", x.type().str()),
                Location::from(loc));
  axis = normalAxis("choice", axis, x.rank(), loc);
  const Tensor indices = choice(key, x.shape()[axis], shape, replace, p, loc);
  if (num_elements(shape) == 0) {
    const Shape xs = x.shape(); // one copy: Tensor::shape() returns a new vector each call
    Shape out(xs.begin(), xs.begin() + axis);
    out.insert(out.end(), shape.begin(), shape.end());
    out.insert(out.end(), xs.begin() + axis + 1, xs.end());
    return full(out, 0, x.dtype(), loc);
  }
  return take(x, indices, axis, loc);
}

namespace {

/// log of Gamma(alpha, 1) samples for alpha of shape `s` (taken as constants):
/// Marsaglia and Tsang's rejection method as JAX's gamma, in log space as JAX's
/// loggamma. alpha >= 1: log(d v) of the accepted d v; alpha < 1: log Gamma(alpha + 1)
/// + log(u) / alpha (their boost, Gamma(a) = Gamma(a + 1) u^(1/a), in logs, so
/// tiny alpha gives a finite log where the sample itself underflows). alpha <= 0
/// or NaN gives NaN (as JAX). The rejection is one while_loop over all elements:
/// each round draws a normal and a uniform for every element (keys
/// fold_in(key, round)) and the elements still pending take their first
/// accepted value; it stops when all have one (a round accepts with
/// probability >= 0.95). Not JAX's values (JAX draws per element).
Tensor logGammaSample(const Tensor& key, const Tensor& alpha0, const Shape& s, const Loc& loc) {
  const DType t = alpha0.dtype();
  const Tensor valid = gt(alpha0, AtScalar(0.0, loc)); // false for NaN
  // invalid elements sample as a = 1 (so that the loop ends) and give NaN at the end
  const Tensor a = where(valid, alpha0, full({}, 1, t, loc), loc);
  const Tensor keys = split(key, 2, loc);
  const Tensor small = lt(a, AtScalar(1.0, loc));
  const Tensor alpha = where(small, add(a, AtScalar(1.0, loc)), a, loc);
  // log u / a with u in (0, 1] (1 - uniform, exact): finite
  const Tensor boostU = sub(AtScalar(1.0, loc), uniform(keys.at(0, loc), s, t, 0, 1, loc));
  const Tensor logBoost = where(small, div(portable::logOfNormal(boostU, loc), a, loc),
                                full({}, 0, t, loc), loc);
  const Tensor d = sub(alpha, AtScalar(1.0 / 3.0, loc));
  const Tensor c = div(AtScalar(1.0, loc), sqrt(mul(AtScalar(9.0, loc), d), loc));
  const double tiny = t == DType::f32 ? double(std::numeric_limits<float>::min()) : std::numeric_limits<double>::min();
  // Marsaglia-Tsang: x normal, v = (1 + c x)^3, accept d v when v > 0 and
  // log u < x^2 / 2 + d - d v + d log v.
  using Carry = std::tuple<Tensor, Tensor, Tensor>; // round (i32[]), value, accepted (i1)
  auto pending = [&](const Carry& carry) {
    return gt(max(cast(logical_not(std::get<2>(carry), loc), DType::i32, loc), {}, false, loc), AtScalar(0, loc));
  };
  auto round = [&](const Carry& carry) {
    const auto& [i, value, accepted] = carry;
    const Tensor rk = split(fold_in(keys.at(1, loc), i, loc), 2, loc);
    const Tensor x = normal(rk.at(0, loc), s, t, loc);
    const Tensor u = uniform(rk.at(1, loc), s, t, 0, 1, loc);
    const Tensor w = add(AtScalar(1.0, loc), mul(c, x, loc));
    const Tensor v = mul(mul(w, w, loc), w, loc);
    const Tensor bound = add(sub(add(mul(AtScalar(0.5, loc), mul(x, x, loc)), d, loc), mul(d, v, loc), loc),
                             mul(d, portable::logOfNormal(maximum(v, full({}, tiny, t, loc), loc), loc), loc), loc);
    const Tensor ok = logical_and(gt(v, AtScalar(0.0, loc)), lt(portable::log(u, loc), bound, loc), loc);
    const Tensor take = logical_and(ok, logical_not(accepted, loc), loc);
    return Carry{add(i, AtScalar(1, loc)), where(take, mul(d, v, loc), value, loc), logical_or(accepted, ok, loc)};
  };
  const Carry done = while_loop(pending, round,
                                Carry{full({}, 0, DType::i32, loc), full(s, 1, t, loc), full(s, 0, DType::i1, loc)}, {}, loc);
  return where(valid, add(portable::log(std::get<1>(done), loc), logBoost, loc), full({}, std::nan(""), t, loc), loc);
}

/// d log x / d a for x ~ Gamma(a, 1) at log x = lx, by implicit differentiation
/// of the CDF (Figurnov et al. 2018, JAX's random_gamma_grad): dx/da =
/// -(dP/da)(a, x) / p(a, x), P the regularised lower incomplete gamma, p the
/// density. With P = e^L S, L = a log x - x - lgamma(a + 1), S = sum_n t_n,
/// t_0 = 1, t_n = t_{n-1} x / (a + n), and dt_n/da = -t_n H_n, H_n = sum_{k<=n}
/// 1/(a + k): e^L / p = x / a, so
///   d log x / da = -(S (log x - digamma(a + 1)) + dS/da) / a,
/// finite as x -> 0 (x underflowing to 0 is fine: only log x enters besides S).
/// The series runs in f64 in one while_loop over all elements until every
/// element's terms are past x and below 1e-17 of its sums (about x + 10
/// sqrt(x) terms; capped at 100,000 rounds, a ~ 10^7; 10^5 f32 samples with
/// their gradient took 49 ms at a = 0.5, 67 ms at a = 10, 0.7 s at a = 10^4,
/// the samples alone 4-12 ms: an asymptotic form for large a would help); in the far upper tail
/// (x well above a) S (log x - digamma) and dS/da cancel, losing about
/// log10(1/Q(a, x)) digits of f64 (Q = 1 - P): still f32-exact. Not itself
/// differentiable: its inputs pass through prevent_gradient (second
/// derivatives in a are an Error, as JAX has no rule for random_gamma_grad).
Tensor logGammaGrad(const Tensor& a0, const Tensor& lx0, const Loc& loc) {
  const std::string why = "second derivatives of random.gamma/loggamma/beta/dirichlet in their parameters are not implemented";
  const DType t = a0.dtype();
  const Tensor valid = logical_and(gt(a0, AtScalar(0.0, loc)), logical_not(isnan(lx0, loc), loc), loc);
  const Tensor a = where(valid, cast(prevent_gradient(a0, why, loc), DType::f64, loc), full({}, 1, DType::f64, loc), loc);
  const Tensor lx = where(valid, cast(prevent_gradient(lx0, why, loc), DType::f64, loc), full({}, 0, DType::f64, loc), loc);
  const Tensor x = portable::expValue(lx, loc);
  const Tensor one = full(a.shape(), 1, DType::f64, loc), zero = full(a.shape(), 0, DType::f64, loc);
  // carry: n, t_n, H_n, S, dS/da
  using Carry = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;
  constexpr int kMaxRounds = 100000;
  auto pending = [&](const Carry& carry) {
    const auto& [n, tn, h, sum, dsum] = carry;
    const Tensor an = add(a, n, loc);
    // converged: past the largest term, and the term and its derivative negligible
    const Tensor conv = logical_and(gt(an, x, loc),
                                    logical_and(le(tn, mul(sum, AtScalar(1e-17, loc)), loc),
                                                le(mul(tn, h, loc), mul(neg(dsum, loc), AtScalar(1e-17, loc)), loc), loc),
                                    loc);
    const Tensor any = gt(max(cast(logical_not(conv, loc), DType::i32, loc), {}, false, loc), AtScalar(0, loc));
    return logical_and(any, lt(n, AtScalar(double(kMaxRounds), loc)), loc);
  };
  auto term = [&](const Carry& carry) {
    const auto& [n, tn, h, sum, dsum] = carry;
    const Tensor n1 = add(n, AtScalar(1.0, loc));
    const Tensor an = add(a, n1, loc);
    const Tensor t1 = mul(tn, div(x, an, loc), loc);
    const Tensor h1 = add(h, div(AtScalar(1.0, loc), an), loc);
    return Carry{n1, t1, h1, add(sum, t1, loc), sub(dsum, mul(t1, h1, loc), loc)};
  };
  const auto [n, tn, h, sum, dsum] =
      while_loop(pending, term, Carry{full({}, 0, DType::f64, loc), one, zero, one, zero}, {}, loc);
  // digamma of a + 1 >= 1 by the digamma op's series on the portable ln: the same bits everywhere
  const Tensor bracket =
      add(mul(sum, sub(lx, portable::digammaFromHalf(add(a, AtScalar(1.0, loc)), loc), loc), loc), dsum, loc);
  const Tensor g = neg(div(bracket, a, loc), loc);
  return where(valid, cast(g, t, loc), full({}, std::nan(""), t, loc), loc);
}

/// a broadcast to the sample shape, after checking the key and a.
Tensor shapeParameter(const char* fn, const Tensor& key, const Tensor& a, const Shape& s, const Loc& loc) {
  checkKey(fn, key, loc);
  if (!a.valid()) throw Error(fmt::format("random.{}: the shape parameter is an empty Tensor", fn), Location::from(loc));
  checkFloat(fn, a.dtype(), loc);
  return broadcast_to(a, s, loc);
}

} // namespace

Tensor loggamma(const Tensor& key, const Tensor& a, std::optional<Shape> shape, Loc loc) {
  const Shape s = shape ? *shape : (a.valid() ? a.shape() : Shape{});
  const Tensor alpha = shapeParameter("loggamma", key, a, s, loc);
  // The sampler's own derivative in a is not the distribution's (the rejection
  // depends on a): custom_jvp attaches the implicit one, d log x / da at the sample.
  auto sample = custom_jvp(
      [s, loc](Tensor k, Tensor al) { return logGammaSample(k, stop_gradient(al, loc), s, loc); },
      [s, loc](const std::tuple<Tensor, Tensor>& primals, const std::tuple<Tensor, Tensor>& tangents) {
        const auto& [k, al] = primals;
        const Tensor y = logGammaSample(k, stop_gradient(al, loc), s, loc);
        return std::make_pair(y, mul(std::get<1>(tangents), logGammaGrad(al, y, loc), loc));
      },
      loc);
  return sample(key, alpha);
}

Tensor gamma(const Tensor& key, const Tensor& a, std::optional<Shape> shape, Loc loc) {
  checkKey("gamma", key, loc);
  if (!a.valid()) throw Error("random.gamma: a is an empty Tensor", Location::from(loc));
  checkFloat("gamma", a.dtype(), loc);
  // d x / da = x d log x / da (the chain rule through exp)
  return portable::exp(loggamma(key, a, shape, loc), loc);
}

Tensor beta(const Tensor& key, const Tensor& a, const Tensor& b, std::optional<Shape> shape, Loc loc) {
  checkKey("beta", key, loc);
  if (!a.valid() || !b.valid()) throw Error("random.beta: a or b is an empty Tensor", Location::from(loc));
  const Shape s = shape ? *shape : add(a, b, loc).shape();
  const Tensor keys = split(key, 2, loc);
  // G_a / (G_a + G_b) = sigmoid(log G_a - log G_b): finite for tiny a and b, whose samples underflow
  const Tensor la = loggamma(keys.at(0, loc), a, s, loc), lb = loggamma(keys.at(1, loc), b, s, loc);
  return portable::sigmoid(sub(la, lb, loc), loc);
}

Tensor dirichlet(const Tensor& key, const Tensor& alpha, std::optional<Shape> shape, Loc loc) {
  checkKey("dirichlet", key, loc);
  if (!alpha.valid() || alpha.rank() == 0)
    throw Error(fmt::format("random.dirichlet: expected alpha with a last axis of categories, got {}",
                            alpha.valid() ? alpha.type().str() : "an empty Tensor"),
                Location::from(loc));
  const Shape as = alpha.shape(); // one copy: Tensor::shape() returns a new vector each call
  Shape s = shape ? *shape : Shape(as.begin(), as.end() - 1);
  s.push_back(alpha.shape().back());
  // gamma samples normalised along the last axis, in logs: softmax of their
  // logs, e^(l - max l) / sum e^(l - max l). The sum is a cumsum's last
  // element, added in order, and it reaches every category by a reverse cumsum
  // of it padded with zeros (exactly the sum): both ops, and their transposes
  // in the gradient, add in order, so the same bits everywhere (a reduce_sum,
  // also the transpose of a broadcast, is vectorised with partial sums whose
  // order depends on the vector width). The max shift cancels: it carries no gradient.
  const Tensor l = loggamma(key, alpha, s, loc);
  const Tensor e = portable::exp(sub(l, stop_gradient(max(l, {-1}, true, loc), loc), loc), loc);
  const int64_t k = s.back(), last = static_cast<int64_t>(s.size()) - 1;
  if (k == 0) return e;
  std::vector<int64_t> start(s.size(), 0), limit(s.begin(), s.end()), before(s.size(), 0);
  start.back() = k - 1;
  before.back() = k - 1;
  const Tensor total = slice(cumsum(e, last, false, loc), start, limit, {}, loc); // [..., 1]
  const Tensor totals = cumsum(pad(total, before, std::vector<int64_t>(s.size(), 0), {}, loc), last, true, loc);
  return div(e, totals, loc);
}

} // namespace adjit::random
