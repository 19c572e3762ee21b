// ops/Common.h — helpers shared by the op family files: dtype dispatch for
// reference evaluation, common type rules, and shape utilities.
#pragma once

#include "ops/OpTable.h"
#include "support/Assert.h"

#include <cmath>
#include <cstring>
#include <type_traits>

namespace adjit::ops {

/// Checks that `f` takes `types` ("parameter i of @f is T, but the <what> passes U").
inline void expectParams(const ir::InferCtx& c, const ir::Function& f, ir::TypeRefs types, std::string_view what) {
  if (f.params.size() != types.size())
    c.fail("@{} takes {} parameters, but the {} passes {}", f.name, f.params.size(), what, types.size());
  for (std::size_t i = 0; i < types.size(); ++i)
    if (f.type(f.params[i]) != types[i])
      c.fail("parameter {} of @{} is {}, but the {} passes {}", i, f.name, f.type(f.params[i]).str(), what, types[i].str());
}

template <class T> constexpr bool isInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;

/// Wrapping integer arithmetic (no UB), plain arithmetic for floats.
template <class T, class Op> T wrap(T a, T b, Op op) {
  if constexpr (isInt<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(op(static_cast<U>(a), static_cast<U>(b)));
  } else {
    return op(a, b);
  }
}


/// Calls f(T{}) with T the C++ element type of `t` (bool for i1).
template <class F> decltype(auto) dispatch(DType t, F&& f) {
  switch (t) {
  case DType::f32: return f(float{});
  case DType::f64: return f(double{});
  case DType::i32: return f(int32_t{});
  case DType::i64: return f(int64_t{});
  case DType::i1: return f(bool{});
  }
  ADJIT_UNREACHABLE("bad dtype");
}

template <class T> T* elems(Array& a) { return static_cast<T*>(a.raw()); }
template <class T> const T* elems(const Array& a) { return static_cast<const T*>(a.raw()); }

/// Elementwise map of one array into a new one of dtype `out`. fn(T) -> U.
template <class Fn> Array mapUnary(const Array& x, DType out, Fn fn) {
  Array r(Type{out, x.shape()});
  dispatch(x.dtype(), [&](auto tin) {
    using T = decltype(tin);
    dispatch(out, [&](auto tout) {
      using U = decltype(tout);
      const T* in = elems<T>(x);
      U* o = elems<U>(r);
      for (int64_t i = 0; i < x.size(); ++i) o[i] = static_cast<U>(fn(in[i]));
    });
  });
  return r;
}

/// Elementwise map of two same-shaped arrays. fn(T, T) -> U.
template <class Fn> Array mapBinary(const Array& a, const Array& b, DType out, Fn fn) {
  ADJIT_ASSERT(a.shape() == b.shape() && a.dtype() == b.dtype(), "mapBinary: operand mismatch");
  Array r(Type{out, a.shape()});
  dispatch(a.dtype(), [&](auto tin) {
    using T = decltype(tin);
    dispatch(out, [&](auto tout) {
      using U = decltype(tout);
      const T* x = elems<T>(a);
      const T* y = elems<T>(b);
      U* o = elems<U>(r);
      for (int64_t i = 0; i < a.size(); ++i) o[i] = static_cast<U>(fn(x[i], y[i]));
    });
  });
  return r;
}

/// Row-major strides of a shape, in elements.
std::vector<int64_t> stridesOf(const Shape& s);
/// Multi-index of linear position `i` in `s`.
std::vector<int64_t> unravel(int64_t i, const Shape& s);
/// Linear position of a multi-index in `s`.
int64_t ravel(std::span<const int64_t> idx, const Shape& s);

// Common type rules.
/// One floating operand; result has its type (exp, log, tanh, ...).
std::vector<Type> inferFloatUnary(const ir::InferCtx& c);
/// One numeric (non-i1) operand; result has its type (neg, abs, ...).
std::vector<Type> inferNumericUnary(const ir::InferCtx& c);
/// Two numeric operands of one type; result has that type (add, mul, ...).
std::vector<Type> inferNumericBinary(const ir::InferCtx& c);
/// Two floating operands of one type (pow).
std::vector<Type> inferFloatBinary(const ir::InferCtx& c);

/// Folds an op to its operand 0 when the result has exactly the operand's type
/// (a reshape, broadcast, slice or cast that changes nothing).
std::optional<ir::Folded> foldIfSameType(const ir::FoldCtx& c);

/// Reads `axes` (each in range, no repeats) for an operand of rank `rank`; sorted, normalised.
std::vector<int64_t> readAxes(const ir::InferCtx& c, int64_t rank);

} // namespace adjit::ops
