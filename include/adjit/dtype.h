// adjit/dtype.h — element types and statically shaped tensor types.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace adjit {

/// Element type of a tensor. `i1` is the boolean type of comparisons.
enum class DType : uint8_t { f32, f64, i32, i64, i1 };

/// Number of bytes one element occupies in a host buffer (i1 uses one byte).
std::size_t size_of(DType t);
/// The IR spelling: "f32", "f64", "i32", "i64", "i1".
std::string_view name_of(DType t);
/// True for f32 and f64.
inline bool is_floating(DType t) { return t == DType::f32 || t == DType::f64; }
/// True for i32, i64 and i1.
inline bool is_integer(DType t) { return !is_floating(t); }

/// Maps a C++ element type to its DType (`dtype_of<float>` is f32).
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<bool>() { return DType::i1; }

/// Dimensions, outermost first.
using Shape = std::vector<int64_t>;

/// Number of elements of a shape (1 for rank 0).
/// Shapes hold at most this many elements, and types this many bytes.
inline constexpr int64_t kMaxElements = int64_t{1} << 62;

/// The number of elements of a shape; adjit::Error beyond kMaxElements (-1 for
/// a negative dimension, which callers report).
int64_t num_elements(const Shape& s);

/// A tensor type: dtype and static shape. Prints as `f32[2,3]`; a scalar is `f32[]`.
struct Type {
  DType dtype = DType::f32;
  Shape shape;

  /// The number of dimensions.
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  /// The number of elements.
  int64_t size() const { return num_elements(shape); }
  /// Bytes of a value of this type; adjit::Error beyond kMaxElements.
  std::size_t bytes() const;
  /// As written in IR text: "f32[2,3]".
  std::string str() const;
  friend bool operator==(const Type&, const Type&) = default;
};

/// "[2,3]".
std::string shape_str(const Shape& s);

} // namespace adjit
