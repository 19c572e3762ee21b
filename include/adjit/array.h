// adjit/array.h — host arrays: the values passed to and returned from compiled code.
#pragma once

#include <adjit/dtype.h>
#include <adjit/error.h>

#include <cstring>
#include <memory>
#include <source_location>
#include <span>
#include <vector>

namespace adjit {

/// A host array: dtype, shape, and contiguous row-major data it owns, or,
/// made by Array::view, data of the caller's that it only points to.
/// Copying an Array copies its data (a copy of a view owns its copy); moving
/// is cheap.
class Array {
public:
  /// An f32 scalar 0.
  Array() : Array(Type{DType::f32, {}}) {}
  /// Zero-filled array of the given type. An error (a negative dimension, more
  /// than 2^62 bytes) names `loc`, the caller's line; so do those of the other
  /// constructors that can fail.
  explicit Array(Type type, std::source_location loc = std::source_location::current());
  Array(DType dtype, Shape shape, std::source_location loc = std::source_location::current())
      : Array(Type{dtype, std::move(shape)}, loc) {}

  /// Scalars: `Array(2.0f)` is f32, `Array(2.0)` f64, `Array(int32_t{2})` i32,
  /// `Array(int64_t{2})` i64, `Array(true)` i1.
  Array(float v) : Array(DType::f32, {}) { *data<float>() = v; }
  Array(double v) : Array(DType::f64, {}) { *data<double>() = v; }
  Array(int32_t v) : Array(DType::i32, {}) { *data<int32_t>() = v; }
  Array(int64_t v) : Array(DType::i64, {}) { *data<int64_t>() = v; }
  Array(bool v) : Array(DType::i1, {}) { *data<uint8_t>() = v; }

  /// From a vector and a shape (the shape defaults to 1-D). Throws adjit::Error
  /// when the shape's element count differs from the vector's size.
  template <class T>
  Array(const std::vector<T>& values, Shape shape, std::source_location loc = std::source_location::current());
  // (No location here: it cannot fail, and `Array(v, {})` would be ambiguous.)
  template <class T> Array(const std::vector<T>& values)
      : Array(values, Shape{static_cast<int64_t>(values.size())}) {}

  Array(const Array& o);
  Array& operator=(const Array& o);
  Array(Array&& o) noexcept : type_(std::move(o.type_)) { take(o); }
  Array& operator=(Array&& o) noexcept {
    if (this != &o) {
      release();
      type_ = std::move(o.type_);
      take(o);
    }
    return *this;
  }
  /// Frees the data (small arrays live inline).
  ~Array() { release(); }

  /// An array whose data is left uninitialised (to be overwritten).
  static Array uninitialized(Type type) { return Array(std::move(type), false); }

  /// A view of `data`, which the caller keeps alive and row-major and
  /// contiguous, of type `type`: nothing is copied. Passed to a jitted
  /// function it is read in place; given to `Jitted::into` it is written in
  /// place. A view of const data is read-only (`into` refuses it). Buffers
  /// given to one call must not overlap (`into` checks its outputs).
  static Array view(void* data, Type type, std::source_location loc = std::source_location::current()) {
    return Array(data, std::move(type), false, Location::from(loc));
  }
  static Array view(const void* data, Type type, std::source_location loc = std::source_location::current()) {
    return Array(const_cast<void*>(data), std::move(type), true, Location::from(loc));
  }
  /// A typed view: `Array::view(ptr, {rows, cols})` (bool or uint8_t data for i1).
  template <class T> static Array view(T* data, Shape shape, std::source_location loc = std::source_location::current()) {
    using U = std::remove_const_t<T>;
    return view(data, Type{std::is_same_v<U, bool> || std::is_same_v<U, uint8_t> ? DType::i1 : dtype_of<U>(), std::move(shape)},
                loc);
  }
  /// Whether this array points to a caller's buffer (Array::view).
  bool is_view() const { return view_; }
  /// Whether this is a view of const data.
  bool is_read_only() const { return readOnly_; }

  /// The dtype and shape.
  const Type& type() const { return type_; }
  /// The element type.
  DType dtype() const { return type_.dtype; }
  /// The dimensions.
  const Shape& shape() const { return type_.shape; }
  /// The number of elements.
  int64_t size() const { return type_.size(); }
  /// The size of the data in bytes.
  std::size_t bytes() const { return type_.bytes(); }

  /// Typed access to the data. Throws adjit::Error when T does not match the dtype
  /// (i1 data is read as `bool` or `uint8_t`).
  template <class T> T* data();
  template <class T> const T* data() const { return const_cast<Array*>(this)->data<T>(); }
  /// The data, untyped (row-major, contiguous).
  void* raw() { return data_; }
  const void* raw() const { return data_; }

  /// The single element of a size-1 array, converted to T.
  template <class T> T item() const;
  /// All elements converted to T.
  template <class T> std::vector<T> to_vector() const;
  /// Element `i` (flat row-major index) converted to T (exact for integers).
  template <class T = double> T get(int64_t i) const;
  /// Element `i` converted to double.
  double at(int64_t i) const { return get<double>(i); }
  /// Sets element `i` (flat index) from a double, converting to the dtype.
  void set(int64_t i, double v);

  /// A new array with the same data and another shape of equal size.
  Array reshaped(Shape shape) const;
  /// "f32[3] [1, 2, 3]"; at most `limit` elements are listed.
  std::string str(int64_t limit = 32) const;
  /// Same type and bitwise-equal data (NaNs compare by bits).
  bool identical(const Array& o) const;

private:
  Array(Type type, bool zero, const Location& where = {});
  Array(void* data, Type type, bool readOnly, const Location& where);
  void check(DType asked) const;
  void release() {
    if (data_ && !small() && !view_) releaseHeap();
    data_ = nullptr;
    view_ = readOnly_ = false;
  }
  void releaseHeap();
  /// Takes o's data (copying it when it lives inline); o becomes an f32 scalar 0.
  void take(Array& o) noexcept {
    if (o.small()) {
      data_ = small_;
      std::memcpy(small_, o.small_, kSmallBytes);
    } else {
      data_ = o.data_;
    }
    view_ = o.view_;
    readOnly_ = o.readOnly_;
    o.view_ = o.readOnly_ = false;
    o.type_.dtype = DType::f32;
    o.type_.shape.clear();
    o.data_ = o.small_;
    std::memset(o.small_, 0, kSmallBytes);
  }
  bool small() const { return data_ == small_; }
  static constexpr std::size_t kSmallBytes = 16; ///< scalars and tiny arrays live inline
  Type type_;
  void* data_ = nullptr;
  bool view_ = false, readOnly_ = false;
  alignas(16) unsigned char small_[kSmallBytes];
};

template <class T> Array::Array(const std::vector<T>& values, Shape shape, std::source_location loc)
    : Array(Type{dtype_of<T>(), std::move(shape)}, loc) {
  if (static_cast<std::size_t>(size()) != values.size())
    throw Error("Array: shape " + shape_str(this->shape()) + " has " + std::to_string(size()) +
                " elements, but " + std::to_string(values.size()) + " values were given",
                Location::from(loc));
  if constexpr (std::is_same_v<T, bool>) {
    for (std::size_t i = 0; i < values.size(); ++i) data<uint8_t>()[i] = values[i];
  } else {
    if (!values.empty()) std::memcpy(raw(), values.data(), values.size() * sizeof(T));
  }
}

template <class T> T* Array::data() {
  if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, uint8_t>) check(DType::i1);
  else check(dtype_of<T>());
  return static_cast<T*>(raw());
}

template <class T> T Array::item() const {
  if (size() != 1)
    throw Error("Array::item: array of type " + type_.str() + " does not have exactly one element");
  return get<T>(0);
}

template <class T> T Array::get(int64_t i) const {
  const void* p = raw();
  switch (dtype()) {
  case DType::f32: return static_cast<T>(static_cast<const float*>(p)[i]);
  case DType::f64: return static_cast<T>(static_cast<const double*>(p)[i]);
  case DType::i32: return static_cast<T>(static_cast<const int32_t*>(p)[i]);
  case DType::i64: return static_cast<T>(static_cast<const int64_t*>(p)[i]);
  case DType::i1: return static_cast<T>(static_cast<const uint8_t*>(p)[i] != 0);
  }
  return T{};
}

template <class T> std::vector<T> Array::to_vector() const {
  std::vector<T> out(static_cast<std::size_t>(size()));
  for (int64_t i = 0; i < size(); ++i) out[static_cast<std::size_t>(i)] = get<T>(i);
  return out;
}

} // namespace adjit
