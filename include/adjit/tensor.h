// adjit/tensor.h — symbolic tensors and the ops users trace with. Each call
// records an op in the function being traced; shape and dtype errors raise
// adjit::Error at the caller's source line.
#pragma once

#include <adjit/array.h>

#include <concepts>
#include <cstdint>
#include <optional>
#include <source_location>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace adjit {

/// One item of numpy-style indexing (defined below).
struct IndexItem;

namespace detail {
/// For static_assert messages that depend on a template parameter.
template <class...> inline constexpr bool kFalse = false;
} // namespace detail

/// A value of the function being traced: a statically shaped tensor.
class Tensor {
public:
  Tensor() = default;
  /// By value: tracing more ops may move the trace's storage.
  Type type() const;
  /// The element type.
  DType dtype() const { return type().dtype; }
  /// The dimensions.
  Shape shape() const { return type().shape; }
  /// The number of dimensions.
  int64_t rank() const { return static_cast<int64_t>(shape().size()); }
  /// The number of elements.
  int64_t size() const { return num_elements(shape()); }
  /// False for a default-constructed Tensor (which no op accepts).
  bool valid() const { return trace_ != 0; }
  /// Not a bool: `if (sum(x) > 0.0)` runs while tracing, when the value is not
  /// known. One short compile error says so (instead of a failed conversion).
  template <std::same_as<bool> B> explicit operator B() const {
    static_assert(detail::kFalse<B>, "Tensor: an `if`, `while` or `&&` on a traced value runs while tracing, when its "
                                     "value is not known: branch with adjit::cond(pred, true_fn, false_fn, operands...), "
                                     "or select elementwise with where");
    return false;
  }

  /// An index that remembers where it was written: `x[5]` reports errors at
  /// the user's line (operator[] cannot take a source_location of its own).
  struct Position {
    int64_t i;
    std::source_location loc;
    Position(int64_t i, std::source_location loc = std::source_location::current()) : i(i), loc(loc) {}
  };
  /// x[i]: the i-th slice along axis 0 (negative i counts from the end).
  Tensor at(int64_t i, std::source_location loc = std::source_location::current()) const;
  Tensor operator[](Position p) const { return at(p.i, p.loc); }

  /// numpy indexing, one item per axis: an integer (negative counts from the
  /// end; the axis is dropped), `all` (numpy's `:`), `range(start, stop,
  /// step)` (any step but 0), `newaxis`, one `ellipsis` for the axes not
  /// named, integer scalar Tensors (run-time integers: negative counts from
  /// the end, out of range is clamped; the axis is dropped), `dslice(start,
  /// size)` (`size` elements from a run-time `start`, clamped so the window
  /// fits, as dynamic_slice), and one integer Tensor of rank >= 1 (its
  /// elements pick along the axis, as `take`). Axes left over at the end are
  /// kept whole: `x(all, 2)`, `x(range(1, {}, 2), newaxis)`, `x(ellipsis,
  /// -1)`, `x(i, range(0, 3))`, `x(dslice(i, 4))`, `x(idx)`. Run-time
  /// integers and dslices are one dynamic_slice.
  Tensor operator()(const IndexItem& a) const;
  Tensor operator()(const IndexItem& a, const IndexItem& b) const;
  Tensor operator()(const IndexItem& a, const IndexItem& b, const IndexItem& c) const;
  Tensor operator()(const IndexItem& a, const IndexItem& b, const IndexItem& c, const IndexItem& d) const;
  Tensor operator()(const IndexItem& a, const IndexItem& b, const IndexItem& c, const IndexItem& d,
                    const IndexItem& e) const;
  Tensor operator()(const IndexItem& a, const IndexItem& b, const IndexItem& c, const IndexItem& d,
                    const IndexItem& e, const IndexItem& f) const;
  /// The same with any number of items.
  Tensor index(const std::vector<IndexItem>& items) const;

  // Internal: the trace this tensor belongs to (a unique number) and its value id.
  /// Internal: the tensor of value `id` in trace `trace`.
  Tensor(uint64_t trace, int32_t id) : trace_(trace), id_(id) {}
  /// Internal: the trace this tensor belongs to (a unique number).
  uint64_t trace() const { return trace_; }
  /// Internal: its value id in that trace's function.
  int32_t id() const { return id_; }

private:
  uint64_t trace_ = 0;
  int32_t id_ = -1;
};

/// numpy's `:`, a whole axis, for Tensor::operator().
struct All {};
inline constexpr All all{};
/// numpy's `np.newaxis`: inserts an axis of size 1.
struct NewAxis {};
inline constexpr NewAxis newaxis{};
/// numpy's `...`: as many whole axes as the other items leave.
struct Ellipsis {};
inline constexpr Ellipsis ellipsis{};
/// numpy's start:stop:step. An unset start or stop is the end of the axis in
/// the step's direction; negative values count from the end; out-of-range
/// bounds are clipped, as numpy.
struct Range {
  std::optional<int64_t> start, stop;
  int64_t step = 1;
};
/// range(1, 5) is 1:5, range(2, {}) is 2:, range({}, {}, -1) is ::-1.
inline Range range(std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step = 1) {
  return Range{start, stop, step};
}

/// `size` elements from the run-time index `start` (an integer scalar
/// Tensor) along one axis; see dslice.
struct DynamicRange {
  Tensor start;
  int64_t size;
};
/// dslice(i, k) for Tensor::operator(): elements [i, i + k) of an axis, with i
/// a scalar integer Tensor known at run time (Pallas' `pl.dslice`; `x[i:i+k]`
/// in numpy). The start is clamped into [0, n - k] as dynamic_slice does.
inline DynamicRange dslice(const Tensor& start, int64_t size) { return DynamicRange{start, size}; }

/// One item of Tensor::operator(), remembering the line it was written on.
struct IndexItem {
  std::variant<int64_t, All, Range, NewAxis, Ellipsis, Tensor, DynamicRange> what;
  std::source_location loc;
  template <std::integral I>
  IndexItem(I i, std::source_location l = std::source_location::current()) : what(static_cast<int64_t>(i)), loc(l) {}
  IndexItem(All a, std::source_location l = std::source_location::current()) : what(a), loc(l) {}
  IndexItem(Range r, std::source_location l = std::source_location::current()) : what(r), loc(l) {}
  IndexItem(NewAxis n, std::source_location l = std::source_location::current()) : what(n), loc(l) {}
  IndexItem(Ellipsis e, std::source_location l = std::source_location::current()) : what(e), loc(l) {}
  IndexItem(const Tensor& t, std::source_location l = std::source_location::current()) : what(t), loc(l) {}
  IndexItem(DynamicRange r, std::source_location l = std::source_location::current()) : what(r), loc(l) {}
};

/// A start index of dynamic_slice and dynamic_update_slice: an integer scalar
/// Tensor (known at run time) or a C++ integer.
struct StartIndex {
  std::variant<int64_t, Tensor> what;
  template <std::integral I>
  StartIndex(I i) : what(static_cast<int64_t>(i)) {} // NOLINT: implicit, as in {i, 0}
  StartIndex(const Tensor& t) : what(t) {}           // NOLINT
};

/// A C++ arithmetic scalar used next to a tensor: it takes the tensor's dtype.
template <class T>
concept Scalar = std::is_arithmetic_v<T>;

/// An operand captured with the caller's source location (for operators,
/// which cannot take default arguments themselves).
struct At {
  Tensor t;
  std::source_location loc;
  At(const Tensor& x, std::source_location l = std::source_location::current()) : t(x), loc(l) {}
};
/// A C++ scalar operand captured with the caller's source location; it takes the other
/// operand's dtype (a floating scalar next to an integer tensor is an error).
struct AtScalar {
  double v;
  bool integral;
  std::source_location loc;
  template <Scalar S>
  AtScalar(S x, std::source_location l = std::source_location::current())
      : v(static_cast<double>(x)), integral(std::is_integral_v<S>), loc(l) {}
};

/// Shorthand for the source-location parameters of the functions below.
using SrcLoc = std::source_location;
#define ADJIT_HERE std::source_location loc = std::source_location::current()

// ---- elementwise, with numpy broadcasting ---------------------------------------
/// a + b.
Tensor add(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// a - b.
Tensor sub(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// a * b.
Tensor mul(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// a / b (integers: truncated toward zero; division by zero gives 0).
Tensor div(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// a raised to the power b (floating).
Tensor pow(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// The angle of the point (x, y) in radians, in (-pi, pi] (floating).
Tensor atan2(const Tensor& y, const Tensor& x, ADJIT_HERE);
/// The larger of a and b (NaN if either is NaN).
Tensor maximum(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// The smaller of a and b (NaN if either is NaN).
Tensor minimum(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// The remainder of a / b truncated toward zero, with a's sign (C's fmod;
/// integers: 0 where b is 0).
Tensor fmod(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// Python's a % b (numpy's mod): the remainder of floor_divide, with b's sign,
/// so that a = b * floor_divide(a, b) + mod(a, b). Floats: NaN where b is 0;
/// integers: 0 where b is 0.
Tensor mod(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// The same as mod (numpy's name).
Tensor remainder(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// Python's a // b (numpy's floor_divide): the quotient rounded toward minus
/// infinity. Floats: a / b where b is 0; integers: 0 where b is 0 (as div),
/// MIN // -1 wraps to MIN.
Tensor floor_divide(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// sqrt(a^2 + b^2) without overflow or underflow in the squares (floating).
Tensor hypot(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// |a| with the sign bit of b (-0 counts as negative) (floating).
Tensor copysign(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// The next representable number after a in the direction of b (b where a == b;
/// floating). Its derivative is 1 in a and 0 in b.
Tensor nextafter(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// log(e^a + e^b) without overflow (floating).
Tensor logaddexp(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// log2(2^a + 2^b) without overflow (floating).
Tensor logaddexp2(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// x * log(y), and 0 where x is 0 whatever y is (floating).
Tensor xlogy(const Tensor& x, const Tensor& y, ADJIT_HERE);
/// x * log(1 + y), and 0 where x is 0 whatever y is (floating).
Tensor xlog1py(const Tensor& x, const Tensor& y, ADJIT_HERE);
/// -x.
Tensor neg(const Tensor& x, ADJIT_HERE);
/// e^x.
Tensor exp(const Tensor& x, ADJIT_HERE);
/// The natural logarithm.
Tensor log(const Tensor& x, ADJIT_HERE);
/// log(1 + x), accurate near 0.
Tensor log1p(const Tensor& x, ADJIT_HERE);
/// e^x - 1, accurate near 0.
Tensor expm1(const Tensor& x, ADJIT_HERE);
/// The square root.
Tensor sqrt(const Tensor& x, ADJIT_HERE);
/// 1 / sqrt(x).
Tensor rsqrt(const Tensor& x, ADJIT_HERE);
/// The sine (radians).
Tensor sin(const Tensor& x, ADJIT_HERE);
/// The cosine (radians).
Tensor cos(const Tensor& x, ADJIT_HERE);
/// The hyperbolic tangent.
Tensor tanh(const Tensor& x, ADJIT_HERE);
/// 1 / (1 + e^-x).
Tensor sigmoid(const Tensor& x, ADJIT_HERE);
/// The error function, 2/sqrt(pi) times the integral of e^(-t^2) from 0 to x.
Tensor erf(const Tensor& x, ADJIT_HERE);
/// The inverse error function: y with erf(y) = x, for x in [-1, 1] (+-inf at
/// +-1, NaN outside). Relative error below 3e-7 in f32 (Giles' approximation,
/// as XLA) and 6e-16 in f64 (Wichura's AS 241); it calls no libm function, so
/// its bits do not depend on the CPU's vector width. Its derivative is
/// sqrt(pi)/2 e^(erf_inv(x)^2).
Tensor erf_inv(const Tensor& x, ADJIT_HERE);
/// ln |Gamma(x)| (+inf at 0, -1, -2, ...); its derivative is digamma.
Tensor lgamma(const Tensor& x, ADJIT_HERE);
/// The digamma function, d/dx ln Gamma(x) (NaN at 0, -1, -2, ...); its
/// derivative (trigamma) is itself differentiable.
Tensor digamma(const Tensor& x, ADJIT_HERE);
/// |x|.
Tensor abs(const Tensor& x, ADJIT_HERE);
/// -1, 0 or 1 by the sign of x (NaN stays NaN).
Tensor sign(const Tensor& x, ADJIT_HERE);
/// The largest integer not greater than x.
Tensor floor(const Tensor& x, ADJIT_HERE);
/// The smallest integer not less than x.
Tensor ceil(const Tensor& x, ADJIT_HERE);
/// x rounded toward zero.
Tensor trunc(const Tensor& x, ADJIT_HERE);
/// x rounded to the nearest integer, halfway cases away from zero (C's round;
/// numpy's round is rint).
Tensor round(const Tensor& x, ADJIT_HERE);
/// x rounded to the nearest integer, halfway cases to even (numpy's rint and round).
Tensor rint(const Tensor& x, ADJIT_HERE);
/// The tangent (radians).
Tensor tan(const Tensor& x, ADJIT_HERE);
/// The arcsine, in [-pi/2, pi/2] (NaN outside [-1, 1]).
Tensor asin(const Tensor& x, ADJIT_HERE);
/// The arccosine, in [0, pi] (NaN outside [-1, 1]).
Tensor acos(const Tensor& x, ADJIT_HERE);
/// The arctangent, in [-pi/2, pi/2].
Tensor atan(const Tensor& x, ADJIT_HERE);
/// The hyperbolic sine.
Tensor sinh(const Tensor& x, ADJIT_HERE);
/// The hyperbolic cosine.
Tensor cosh(const Tensor& x, ADJIT_HERE);
/// The inverse hyperbolic sine.
Tensor asinh(const Tensor& x, ADJIT_HERE);
/// The inverse hyperbolic cosine (NaN below 1).
Tensor acosh(const Tensor& x, ADJIT_HERE);
/// The inverse hyperbolic tangent (+-inf at +-1, NaN beyond).
Tensor atanh(const Tensor& x, ADJIT_HERE);
/// The base-2 logarithm.
Tensor log2(const Tensor& x, ADJIT_HERE);
/// The base-10 logarithm.
Tensor log10(const Tensor& x, ADJIT_HERE);
/// 2^x.
Tensor exp2(const Tensor& x, ADJIT_HERE);
/// The cube root (negative for negative x).
Tensor cbrt(const Tensor& x, ADJIT_HERE);
/// x * x.
Tensor square(const Tensor& x, ADJIT_HERE);
/// 1 / x.
Tensor reciprocal(const Tensor& x, ADJIT_HERE);
/// x^n for a constant integer n by repeated squaring (about 2 log2 |n|
/// multiplications, exact for integers, which wrap): lax.integer_pow. x^0 is
/// 1; a negative n gives 1 / x^-n and needs a floating x.
Tensor integer_pow(const Tensor& x, int64_t n, ADJIT_HERE);
/// True where x is NaN (false for integers); not differentiable.
Tensor isnan(const Tensor& x, ADJIT_HERE);
/// True where x is +inf or -inf (false for integers); not differentiable.
Tensor isinf(const Tensor& x, ADJIT_HERE);
/// True where x is neither NaN nor infinite (true for integers); not differentiable.
Tensor isfinite(const Tensor& x, ADJIT_HERE);
/// max(x, 0); its derivative at 0 is 0 (as JAX), and NaN stays NaN.
Tensor relu(const Tensor& x, ADJIT_HERE);
/// x * sigmoid(x) (also called swish).
Tensor silu(const Tensor& x, ADJIT_HERE);
/// log(1 + e^x), computed as max(x, 0) + log1p(e^-|x|) so it neither
/// overflows nor loses small values.
Tensor softplus(const Tensor& x, ADJIT_HERE);
/// The Gaussian error linear unit x * Phi(x): exactly, 0.5 x (1 + erf(x /
/// sqrt 2)) (PyTorch's default), or with `approximate` the tanh form 0.5 x (1 +
/// tanh(sqrt(2/pi) (x + 0.044715 x^3))) (JAX's default).
Tensor gelu(const Tensor& x, bool approximate = false, ADJIT_HERE);
/// The normalised sinc, sin(pi x) / (pi x), and 1 at 0; a Taylor polynomial
/// near 0 keeps its derivatives of every order right there.
Tensor sinc(const Tensor& x, ADJIT_HERE);
/// Comparisons give i1 tensors.
Tensor lt(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// a <= b.
Tensor le(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// a > b.
Tensor gt(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// a >= b.
Tensor ge(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// a == b.
Tensor eq(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// a != b.
Tensor ne(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// a && b, for i1 tensors.
Tensor logical_and(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// a || b, for i1 tensors.
Tensor logical_or(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// !x, for an i1 tensor.
Tensor logical_not(const Tensor& x, ADJIT_HERE);
/// a & b, bitwise on i32/i64 tensors (logical and on i1), as lax.bitwise_and.
Tensor bitwise_and(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// a | b, bitwise on i32/i64 tensors (logical or on i1).
Tensor bitwise_or(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// a ^ b, bitwise on i32/i64 tensors (logical exclusive or on i1).
Tensor bitwise_xor(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// ~x, bitwise on i32/i64 tensors (logical not on i1).
Tensor bitwise_not(const Tensor& x, ADJIT_HERE);
/// x << s on i32/i64 tensors; the bits shifted out are lost (x * 2^s wrapped).
/// As XLA: an amount outside [0, width) (read as unsigned) gives 0.
Tensor shift_left(const Tensor& x, const Tensor& s, ADJIT_HERE);
/// x >> s on i32/i64 tensors with zeros shifted in: x's bits read as unsigned
/// (how an i32 holds a u32). An amount outside [0, width) gives 0.
Tensor shift_right_logical(const Tensor& x, const Tensor& s, ADJIT_HERE);
/// x >> s on i32/i64 tensors with copies of the sign bit shifted in (floor of
/// x / 2^s). An amount outside [0, width) gives the sign: 0 or -1.
Tensor shift_right_arithmetic(const Tensor& x, const Tensor& s, ADJIT_HERE);
/// The number of bits set in each element of an i32/i64 tensor (its two's
/// complement bits), as the same dtype.
Tensor population_count(const Tensor& x, ADJIT_HERE);
/// x's bits read as dtype `to` of the same width: f32 <-> i32, f64 <-> i64
/// (lax.bitcast_convert_type). Not differentiable.
Tensor bitcast(const Tensor& x, DType to, ADJIT_HERE);
/// The binary functions that also take a C++ scalar on either side, as an
/// X-macro list (lib/trace/Ops.cpp defines them from the same list).
#define ADJIT_SCALAR_BINARY_FUNCTIONS(X) X(add) X(sub) X(mul) X(div) X(pow) X(atan2) X(maximum) X(minimum) \
  X(lt) X(le) X(gt) X(ge) X(eq) X(ne) X(fmod) X(mod) X(remainder) X(floor_divide) X(hypot) X(copysign) X(nextafter) \
  X(logaddexp) X(logaddexp2) X(xlogy) X(xlog1py) X(bitwise_and) X(bitwise_or) X(bitwise_xor) X(shift_left)       \
  X(shift_right_logical) X(shift_right_arithmetic)
/// The binary functions with a C++ scalar on either side, `pow(x, 2)` or
/// `maximum(0.0, x)`: the scalar takes the tensor's dtype, as with operators.
#define ADJIT_SCALAR_FUNCTION(FN)                                                              \
  Tensor FN(const Tensor& a, AtScalar b);                                                      \
  Tensor FN(AtScalar a, const Tensor& b);
ADJIT_SCALAR_BINARY_FUNCTIONS(ADJIT_SCALAR_FUNCTION)
#undef ADJIT_SCALAR_FUNCTION
/// pow(x, n) with a C++ integer n is integer_pow (repeated squaring, exact
/// for integer x); with a floating scalar or a tensor exponent it is pow.
template <std::integral I>
Tensor pow(const Tensor& x, I n, std::source_location loc = std::source_location::current()) {
  return integer_pow(x, static_cast<int64_t>(n), loc);
}
/// x limited to [lo, hi] elementwise, broadcasting all three (numpy's clip:
/// hi where lo > hi; NaN stays NaN). The gradient goes to whichever of x, lo
/// and hi was taken: TensorFlow's clip_by_value gradient when lo <= hi.
Tensor clip(const Tensor& x, const Tensor& lo, const Tensor& hi, ADJIT_HERE);
/// clip with C++ scalar bounds, which take x's dtype.
Tensor clip(const Tensor& x, AtScalar lo, AtScalar hi);
/// where(c, a, b) = c ? a : b elementwise (c is i1), broadcasting all three.
Tensor where(const Tensor& c, const Tensor& a, const Tensor& b, ADJIT_HERE);
/// x converted to dtype `to` (float to integer saturates; NaN gives 0).
Tensor cast(const Tensor& x, DType to, ADJIT_HERE);
/// Identity forward; no gradient flows through it (none, not zero).
Tensor stop_gradient(const Tensor& x, ADJIT_HERE);
/// Identity forward; asking for a gradient through it raises adjit::Error
/// ("No gradient defined for operation ... Reason: <message>") at this line,
/// as TensorFlow's prevent_gradient. stop_gradient(prevent_gradient(x)) is fine.
Tensor prevent_gradient(const Tensor& x, std::string message = {}, ADJIT_HERE);

// ---- creation ---------------------------------------------------------------------
/// A constant tensor holding `value` (the array is embedded in the IR).
Tensor constant(const Array& value, ADJIT_HERE);
/// A tensor of `shape` filled with `value`, of dtype `dtype`.
Tensor full(const Shape& shape, double value, DType dtype, ADJIT_HERE);
/// full without a dtype is weakly typed, like a C++ scalar (JAX's weak
/// types): f32 on its own, but where it meets a tensor of another dtype in a
/// binary op, `where` or `clip`, it takes that dtype (`x + full({3}, 2.0)`
/// with x f64 is f64). A non-integral value meeting an integer tensor is an
/// error naming both.
Tensor full(const Shape& shape, double value, ADJIT_HERE);
/// Zeros of x's type.
Tensor zeros_like(const Tensor& x, ADJIT_HERE);
/// Ones of x's type.
Tensor ones_like(const Tensor& x, ADJIT_HERE);
/// Element at index i has value i[axis]; a negative axis counts from the end.
Tensor iota(const Shape& shape, int64_t axis = 0, DType dtype = DType::i32, ADJIT_HERE);

// ---- shapes -------------------------------------------------------------------------
/// Same elements, new shape; one dimension may be -1 (inferred).
Tensor reshape(const Tensor& x, const std::vector<int64_t>& shape, ADJIT_HERE);
/// x repeated to `shape` by numpy's broadcasting rules.
Tensor broadcast_to(const Tensor& x, const Shape& shape, ADJIT_HERE);
/// Permutes axes; the default reverses them.
Tensor transpose(const Tensor& x, std::vector<int64_t> perm = {}, ADJIT_HERE);
/// Elements start[d] + k*stride[d] < limit[d] along each axis d (stride defaults to 1).
Tensor slice(const Tensor& x, const std::vector<int64_t>& start, const std::vector<int64_t>& limit,
             std::vector<int64_t> stride = {}, ADJIT_HERE);
/// Joins tensors along an existing axis (the other dimensions must match).
Tensor concatenate(const std::vector<Tensor>& xs, int64_t axis = 0, ADJIT_HERE);
/// Zero padding: `low`/`high` elements before/after each axis, `interior` between elements.
Tensor pad(const Tensor& x, const std::vector<int64_t>& low, const std::vector<int64_t>& high,
           std::vector<int64_t> interior = {}, ADJIT_HERE);
/// The sum of the tensors xs[k], each zero-padded to `shape`: element i of
/// xs[k] is added at low[k][d] + i·(interior[k][d] + 1) along each axis d
/// (interior defaults to 0). Regions may overlap, as when a matrix is
/// assembled from blocks. Each addend is added into its own region, so the
/// cost is the addends' sizes plus one pass over `shape`, not one pass per
/// addend; the compiler makes it from sums of pads (the gradient of many
/// slices of one tensor).
Tensor pad_sum(const std::vector<Tensor>& xs, const Shape& shape, const std::vector<std::vector<int64_t>>& low,
               const std::vector<std::vector<int64_t>>& interior = {}, ADJIT_HERE);
/// Joins equal-typed tensors along a new axis.
Tensor stack(const std::vector<Tensor>& xs, int64_t axis = 0, ADJIT_HERE);
/// one_hot(indices, depth): a new last axis of `depth` with 1 where it equals
/// the (i32 or i64) index and 0 elsewhere; an index outside [0, depth) gives
/// a row of zeros, as TensorFlow and JAX. Not differentiable.
Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype = DType::f32, ADJIT_HERE);
/// The running sum along `axis`: r[..., j, ...] = x[..., 0, ...] + ... +
/// x[..., j, ...], or from the end with `reverse`. Its gradient is the
/// running sum of the cotangent the other way.
Tensor cumsum(const Tensor& x, int64_t axis, bool reverse = false, ADJIT_HERE);
/// The running product along `axis` (from the end with `reverse`). Its
/// gradient is exact where x has zeros (no division by x).
Tensor cumprod(const Tensor& x, int64_t axis, bool reverse = false, ADJIT_HERE);
/// The index of the first largest element along `axis` (removed from the
/// shape), as i64 (TensorFlow's default) or i32; a NaN counts as largest, as
/// in numpy. Not differentiable.
Tensor argmax(const Tensor& x, int64_t axis, DType dtype = DType::i64, ADJIT_HERE);
/// The index of the first smallest element along `axis`; see argmax.
Tensor argmin(const Tensor& x, int64_t axis, DType dtype = DType::i64, ADJIT_HERE);
/// take(x, indices, axis): x's slices along `axis` at integer `indices`
/// (negative indices count from the end; others out of range are clamped).
Tensor take(const Tensor& x, const Tensor& indices, int64_t axis = 0, ADJIT_HERE);
/// x with `updates` added at `indices` along `axis` (out-of-range indices are dropped).
Tensor scatter_add(const Tensor& x, const Tensor& indices, const Tensor& updates, int64_t axis = 0, ADJIT_HERE);
/// The window of x of shape `sizes` starting at `starts`, one start per axis
/// (integer scalar Tensors or C++ integers, as JAX's lax.dynamic_slice:
/// `dynamic_slice(x, {i, 0}, {3, 4})`; a 1-D index tensor s is passed as
/// `{s[0], s[1]}`). Each start is clamped into [0, n - size] as XLA does, so
/// the window always lies inside x (a negative start is 0, not counted from
/// the end). Its gradient puts the cotangent back in place in zeros.
Tensor dynamic_slice(const Tensor& x, const std::vector<StartIndex>& starts, const std::vector<int64_t>& sizes, ADJIT_HERE);
/// x with the window at `starts` (clamped as dynamic_slice's, so the whole
/// update lands inside x) replaced by `update`, which has x's dtype and rank.
Tensor dynamic_update_slice(const Tensor& x, const Tensor& update, const std::vector<StartIndex>& starts, ADJIT_HERE);

// ---- reductions (axes empty = all axes) ------------------------------------------
/// The sum over `axes` (reduced axes kept with size 1 if `keepdims`).
Tensor sum(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdims = false, ADJIT_HERE);
/// The product over `axes`.
Tensor prod(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdims = false, ADJIT_HERE);
/// The largest element over `axes` (NaN propagates).
Tensor max(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdims = false, ADJIT_HERE);
/// The smallest element over `axes` (NaN propagates).
Tensor min(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdims = false, ADJIT_HERE);
/// The arithmetic mean over `axes` (floating).
Tensor mean(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdims = false, ADJIT_HERE);
/// log(sum(exp(x))) computed stably as m + log(sum(exp(x - m))), m = max(x).
Tensor logsumexp(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdims = false, ADJIT_HERE);
/// exp(x) / sum(exp(x)) over `axes` (default: the last), computed stably from
/// x - max(x); a composite of IR ops, like logsumexp.
Tensor softmax(const Tensor& x, std::vector<int64_t> axes = {-1}, ADJIT_HERE);
/// x - logsumexp(x) over `axes` (default: the last), stable for large |x|.
Tensor log_softmax(const Tensor& x, std::vector<int64_t> axes = {-1}, ADJIT_HERE);

// ---- sorting and selection -------------------------------------------------------------
/// x sorted along `axis` (default: the last), stably, in numpy's order: NaNs
/// last, -0.0 and 0.0 equal. `descending` reverses the order exactly (NaNs
/// first, larger first) while equal elements keep their original order, as
/// JAX's and PyTorch's `descending=True`. The gradient moves the cotangent
/// back through the permutation.
Tensor sort(const Tensor& x, int64_t axis = -1, bool descending = false, ADJIT_HERE);
/// JAX's lax.sort over several operands of one shape: all sorted along `axis`
/// by the order of operands[0] (the keys; stable, as sort), the others moved
/// with it. Returns the sorted operands in order.
std::vector<Tensor> sort(const std::vector<Tensor>& operands, int64_t axis = -1, bool descending = false, ADJIT_HERE);
/// The positions that sort x along `axis` (stable: ties in their original
/// order), as i64 (numpy's) or i32. Not differentiable.
Tensor argsort(const Tensor& x, int64_t axis = -1, bool descending = false, DType dtype = DType::i64, ADJIT_HERE);
/// Keys sorted along `axis` and values (of the keys' shape, any dtype) moved
/// with them: {sorted keys, values in that order}, as JAX's lax.sort_key_val.
std::pair<Tensor, Tensor> sort_key_val(const Tensor& keys, const Tensor& values, int64_t axis = -1,
                                       bool descending = false, ADJIT_HERE);
/// The k largest elements along the last axis and their positions.
struct TopK {
  Tensor values;  ///< [..., k], largest first (NaN counts as largest)
  Tensor indices; ///< their positions along the last axis; equal values keep the lower position first
};
/// The k largest elements of the last axis, as JAX's lax.top_k (indices i32
/// by default, as JAX's and TensorFlow's). Gradients flow to the picked
/// elements.
TopK top_k(const Tensor& x, int64_t k, DType dtype = DType::i32, ADJIT_HERE);
/// Where each element of `values` would be inserted into the sorted 1-D
/// `sorted` to keep it sorted, as numpy's searchsorted: the number of
/// elements that sort before it (side "left") or not after it ("right"), in
/// sort's order (NaN last). `sorted` must be sorted; values has any shape;
/// i64 by default. Not differentiable.
Tensor searchsorted(const Tensor& sorted, const Tensor& values, std::string_view side = "left",
                    DType dtype = DType::i64, ADJIT_HERE);

// ---- linear algebra -------------------------------------------------------------------
/// Matrix product; 1-D operands are promoted like numpy; batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b, ADJIT_HERE);
/// Flags of `matmul(a, b, options)`, as tf.linalg.matmul's: the product uses
/// the transpose of the last two axes of `a` (or `b`), read in place (no copy).
struct MatmulOptions {
  bool transpose_a = false;
  bool transpose_b = false;
};
/// op(a) @ op(b), op transposing the last two axes where `options` say so:
/// `matmul(x, w, {.transpose_b = true})` is x @ w^T. Flagged operands need rank >= 2.
Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions options, ADJIT_HERE);
/// The lower triangle of the last two axes: x[..., i, j] where j - i <= k
/// (k = 0 keeps the diagonal; k = -1 starts below it), zero elsewhere.
Tensor tril(const Tensor& x, int64_t k = 0, ADJIT_HERE);
/// The upper triangle of the last two axes: x[..., i, j] where j - i >= k, zero elsewhere.
Tensor triu(const Tensor& x, int64_t k = 0, ADJIT_HERE);
/// Einstein summation, numpy's spec: `einsum("bij,bjk->bik", {a, b})`; without
/// `->` the output is the letters used once, sorted. Every operand is
/// transposed and broadcast onto all the letters, the operands multiplied and
/// the letters not in the output summed; the `contract` pass turns a pair
/// into a matmul. A letter repeated within one operand (a diagonal) and `...`
/// are errors naming the spec.
Tensor einsum(const std::string& spec, const std::vector<Tensor>& operands, ADJIT_HERE);
/// Inner product of 1-D tensors (matmul otherwise).
Tensor dot(const Tensor& a, const Tensor& b, ADJIT_HERE);

#undef ADJIT_HERE

// ---- operators --------------------------------------------------------------------------
#define ADJIT_BINARY_OPERATOR(OP, FN)                                                          \
  inline Tensor operator OP(At a, const Tensor& b) { return FN(a.t, b, a.loc); }              \
  Tensor operator OP(At a, AtScalar b);                                                        \
  Tensor operator OP(AtScalar a, const Tensor& b);
ADJIT_BINARY_OPERATOR(+, add)
ADJIT_BINARY_OPERATOR(-, sub)
ADJIT_BINARY_OPERATOR(*, mul)
ADJIT_BINARY_OPERATOR(/, div)
ADJIT_BINARY_OPERATOR(<, lt)
ADJIT_BINARY_OPERATOR(<=, le)
ADJIT_BINARY_OPERATOR(>, gt)
ADJIT_BINARY_OPERATOR(>=, ge)
#undef ADJIT_BINARY_OPERATOR
// == and != take both operands through the same conversions, so that C++20's
// reversed candidates tie with (and lose to) the written ones.
#define ADJIT_EQUALITY_OPERATOR(OP, FN)                                                        \
  inline Tensor operator OP(At a, At b) { return FN(a.t, b.t, a.loc); }                        \
  Tensor operator OP(At a, AtScalar b);                                                        \
  Tensor operator OP(AtScalar a, At b);
ADJIT_EQUALITY_OPERATOR(==, eq)
ADJIT_EQUALITY_OPERATOR(!=, ne)
#undef ADJIT_EQUALITY_OPERATOR
inline Tensor operator-(At x) { return neg(x.t, x.loc); }
/// !x, logical_not(x). It takes the Tensor itself, not an At: Tensor's
/// conversion to bool (there only to reject `if (x)` at compile time) would
/// make the built-in `!` tie with one taking an At. So an error names the
/// line of the op that made x, not the line of the `!`.
Tensor operator!(const Tensor& x);

/// A scalar as a tensor of dtype `like` (throws if a float scalar meets an integer dtype).
Tensor scalar_like(const Tensor& like, AtScalar s, const char* op);

} // namespace adjit
