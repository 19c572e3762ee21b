// adjit/random.h — counter-based random numbers with explicit keys, as JAX's
// jax.random: no hidden state, reproducible everywhere. A key is an i32[2]
// tensor (JAX's raw uint32[2] key, its bits held in i32); samplers are
// composites of elementwise ops (Threefry-2x32, 20 rounds), so they run inside
// compiled code, fuse into one vectorised loop, and work under jit and in loop
// bodies (a key carried through a scan). Values are bit-identical to JAX under
// its default jax_threefry_partitionable=True where the functions say so.
#pragma once

#include <adjit/tensor.h>

namespace adjit::random {

#define ADJIT_HERE std::source_location loc = std::source_location::current()

/// The key of a seed, JAX's `jax.random.key_data(jax.random.key(seed))`: i32[2]
/// holding {seed >> 32, seed & 0xffffffff} as unsigned words (JAX with 64-bit
/// seeds, jax_enable_x64; the same as JAX's default for seeds in [0, 2^31)).
Tensor key(int64_t seed, ADJIT_HERE);
/// The key of a traced i32 or i64 scalar seed (an i32 seed s gives {0, s}).
Tensor key(const Tensor& seed, ADJIT_HERE);
/// The key of a seed as an Array, to pass to a jitted function (key(seed)'s value).
Array key_data(int64_t seed);
/// `num` new keys from `key`, i32[num, 2]: row i is Threefry(key, counter (0, i)),
/// as JAX's split; each is independent of the others and of `key`'s samples.
Tensor split(const Tensor& key, int64_t num = 2, ADJIT_HERE);
/// A new key from `key` and the integer `data` (its low 32 bits), as JAX's
/// fold_in: Threefry(key, counter (0, data)).
Tensor fold_in(const Tensor& key, int64_t data, ADJIT_HERE);
/// fold_in with traced data, an i32 scalar (a loop index in a scan body).
Tensor fold_in(const Tensor& key, const Tensor& data, ADJIT_HERE);
/// The Threefry-2x32 block (20 rounds) of counters (x0, x1) under `key`: i32
/// tensors holding u32 words, broadcasting against each other; the two output
/// words. The generator under every function here (JAX's threefry_2x32).
std::pair<Tensor, Tensor> threefry_2x32(const Tensor& key, const Tensor& x0, const Tensor& x1, ADJIT_HERE);
/// Random bits of `shape`, as JAX's random_bits: i32 holds 32 random bits per
/// element (a u32's bits), i64 64.
Tensor bits(const Tensor& key, const Shape& shape, DType dtype = DType::i32, ADJIT_HERE);

/// Uniform samples in [minval, maxval) of a floating dtype, as JAX's uniform:
/// the random bits fill the mantissa of a number in [1, 2), from which 1 is
/// subtracted; then scaled to the interval (and not below minval). Bit-identical to JAX.
Tensor uniform(const Tensor& key, const Shape& shape = {}, DType dtype = DType::f32, double minval = 0, double maxval = 1,
               ADJIT_HERE);
/// Standard normal samples, as JAX's normal: sqrt(2) erf_inv(u) with u uniform
/// in (-1, 1). Gradients flow through `mu + sigma * normal(key, ...)` to mu and
/// sigma (the reparameterisation trick); none flows to the key.
Tensor normal(const Tensor& key, const Shape& shape = {}, DType dtype = DType::f32, ADJIT_HERE);
/// i1 samples, true with probability p: uniform(key, shape, f32) < p, as JAX's bernoulli.
Tensor bernoulli(const Tensor& key, double p = 0.5, const Shape& shape = {}, ADJIT_HERE);
/// bernoulli with a tensor of probabilities (floating), which broadcasts to
/// `shape` (empty: p's own shape); the samples compare uniform of p's dtype with p.
Tensor bernoulli(const Tensor& key, const Tensor& p, std::optional<Shape> shape = std::nullopt, ADJIT_HERE);
/// Integers in [minval, maxval) of dtype i32 or i64, as JAX's randint (from
/// two splits of `key`, two words of the dtype's width per sample, so nearly
/// unbiased; minval when maxval <= minval; for i32, bounds outside i32 are
/// clipped into it, as JAX). i64 is JAX's algorithm with 64-bit words (JAX
/// with jax_enable_x64), its unsigned remainders emulated on i64.
Tensor randint(const Tensor& key, const Shape& shape, int64_t minval, int64_t maxval, DType dtype = DType::i32,
               ADJIT_HERE);
/// Samples of the standard Gumbel distribution, as JAX's gumbel (mode "low"):
/// -log(-log(u)) with u uniform in [tiny, 1).
Tensor gumbel(const Tensor& key, const Shape& shape = {}, DType dtype = DType::f32, ADJIT_HERE);
/// Indices sampled along `axis` of `logits` (unnormalised log-probabilities),
/// i32, the other axes kept, as JAX's categorical: argmax(logits + gumbel).
/// Not differentiable in the logits.
Tensor categorical(const Tensor& key, const Tensor& logits, int64_t axis = -1, ADJIT_HERE);
/// Samples of the standard exponential distribution, -log1p(-u), as JAX's exponential.
Tensor exponential(const Tensor& key, const Shape& shape = {}, DType dtype = DType::f32, ADJIT_HERE);
/// Standard normal samples conditioned on [lower, upper], as JAX's
/// truncated_normal: sqrt(2) erf_inv(u) with u uniform between erf(lower /
/// sqrt(2)) and erf(upper / sqrt(2)), clipped to the open interval.
Tensor truncated_normal(const Tensor& key, double lower, double upper, const Shape& shape = {},
                        DType dtype = DType::f32, ADJIT_HERE);

/// A random permutation of 0..n-1, i32[n], as JAX's permutation(key, n): the
/// range sorted (stably) by fresh random 32-bit keys, for as many rounds as
/// JAX's _shuffle takes (ceil(3 ln n / ln(2^32 - 1)): one up to n = 1625, then
/// two), each round with a new split of `key`, so that ties between sort keys
/// leave no visible bias. JAX's algorithm step for step (its splits, bits and
/// stable sort in unsigned order), meant to give JAX's permutations bit for bit
/// (not yet compared with values from JAX). n = 0 gives an empty i32[0].
Tensor permutation(const Tensor& key, int64_t n, ADJIT_HERE);
/// x shuffled along `axis` (negative counts from the end): x's slices along
/// the axis in the order of permutation(key, x.shape[axis]), the same slices
/// for every position of the other axes, as JAX's permutation(key, x, axis).
/// Differentiable in x (the gradient is the inverse shuffle of the cotangent).
Tensor permutation(const Tensor& key, const Tensor& x, int64_t axis = 0, ADJIT_HERE);
/// Samples of 0..n-1 of `shape`, i32, as JAX's choice(key, n, shape, replace, p):
/// - with replacement, uniform: randint(key, shape, 0, n);
/// - with replacement, weighted by p (floating, p[n], need not sum to 1): the
///   first i whose running sum of p reaches total(p) * (1 - uniform(key)), as
///   JAX (an inverse-CDF search; entries with p = 0 are never picked);
/// - without replacement, uniform: the first num_elements(shape) entries of
///   permutation(key, n);
/// - without replacement, weighted: the indices of the largest
///   log(p) + gumbel(key, {n}) (the Gumbel top-k trick), largest first.
/// Errors, at the caller's line: n <= 0 with samples to draw, more samples than
/// n without replacement, p not a floating vector of length n. Without
/// replacement and fewer nonzero p than samples, the samples are not all of
/// nonzero weight (as JAX's). Not differentiable in p.
Tensor choice(const Tensor& key, int64_t n, const Shape& shape = {}, bool replace = true,
              const std::optional<Tensor>& p = std::nullopt, ADJIT_HERE);
/// Samples of x's slices along `axis`: take(x, choice(key, x.shape[axis],
/// shape, replace, p), axis), of shape x.shape[:axis] + shape +
/// x.shape[axis+1:], as JAX's choice(key, x, shape, replace, p, axis).
Tensor choice(const Tensor& key, const Tensor& x, const Shape& shape = {}, bool replace = true,
              const std::optional<Tensor>& p = std::nullopt, int64_t axis = 0, ADJIT_HERE);

/// Samples of the Gamma(a, 1) distribution, a floating tensor of shapes
/// broadcasting to `shape` (absent: a's shape), of a's dtype: exp(loggamma(key,
/// a, shape)). Differentiable in a: d x / da is the implicit reparameterisation
/// gradient -(dP/da) / (dP/dx) at the sample (P the Gamma CDF), as JAX's;
/// first derivatives only (a second derivative in a is an adjit::Error).
/// a <= 0 or NaN give NaN, as JAX. Not JAX's values (see loggamma).
Tensor gamma(const Tensor& key, const Tensor& a, std::optional<Shape> shape = std::nullopt, ADJIT_HERE);
/// log of Gamma(a, 1) samples, as JAX's loggamma: Marsaglia and Tsang's
/// rejection method (ACM TOMS 2000) as JAX's gamma, with their boost for a < 1
/// (Gamma(a + 1) times u^(1/a)) taken in logs, so tiny a (1e-3 in f32, whose
/// samples underflow to 0) gives finite logs. The rejection is one while_loop
/// over all elements: each round draws a normal and a uniform for every
/// element (keys fold_in(key, round)) and the elements still pending take
/// their first accepted value (each round accepts with probability >= 0.95).
/// Not JAX's values (JAX draws per element). Differentiable in a (d log x /
/// da by implicit differentiation of the CDF, a series in f64), first
/// derivatives only; a <= 0 or NaN give NaN.
Tensor loggamma(const Tensor& key, const Tensor& a, std::optional<Shape> shape = std::nullopt, ADJIT_HERE);
/// Samples of Beta(a, b): G_a / (G_a + G_b) with G gamma samples from two
/// splits of `key`, computed as sigmoid(log G_a - log G_b) (JAX's log space),
/// so finite and in [0, 1] for tiny a and b; shape absent: a and b broadcast.
/// Differentiable in a and b (through loggamma's gradient); NaN where a or b
/// is <= 0 or NaN.
Tensor beta(const Tensor& key, const Tensor& a, const Tensor& b, std::optional<Shape> shape = std::nullopt, ADJIT_HERE);
/// Samples of Dirichlet(alpha) along alpha's last axis (K categories): gamma
/// samples normalised to sum 1 along the last axis (softmax of loggamma
/// samples), of shape `shape` + [K] (shape absent: alpha's leading axes).
/// Differentiable in alpha; a row with an alpha <= 0 or NaN is all NaN.
Tensor dirichlet(const Tensor& key, const Tensor& alpha, std::optional<Shape> shape = std::nullopt, ADJIT_HERE);

#undef ADJIT_HERE

} // namespace adjit::random
