// ir/Array.cpp — host arrays: 64-byte aligned, row-major storage.
#include <adjit/array.h>

#include <cmath>
#include <cstdlib>
#include <fmt/format.h>

namespace adjit {

static void* allocate(std::size_t bytes) {
  std::size_t n = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, n);
  if (!p) throw std::bad_alloc();
  return p;
}

Array::Array(Type type) : Array(std::move(type), true) {}

Array::Array(Type type, bool zero) : type_(std::move(type)) {
  for (int64_t d : type_.shape)
    if (d < 0) throw Error("Array: negative dimension in shape " + shape_str(type_.shape));
  const std::size_t n = type_.bytes();
  data_ = n <= kSmallBytes ? static_cast<void*>(small_) : allocate(n);
  if (zero) std::memset(data_, 0, n);
}

Array::~Array() { release(); }

void Array::release() {
  if (data_ && !small()) std::free(data_);
  data_ = nullptr;
}

Array::Array(const Array& o) : Array(o.type_, false) { std::memcpy(data_, o.data_, o.bytes()); }

Array& Array::operator=(const Array& o) {
  if (this != &o) *this = Array(o);
  return *this;
}

Array::Array(Array&& o) noexcept { *this = std::move(o); }

/// Takes o's data (copying it when it lives inline); o becomes an f32 scalar 0.
Array& Array::operator=(Array&& o) noexcept {
  if (this == &o) return *this;
  release();
  type_ = std::move(o.type_);
  data_ = o.small() ? static_cast<void*>(small_) : o.data_;
  if (o.small()) std::memcpy(small_, o.small_, kSmallBytes);
  o.type_ = Type{DType::f32, {}};
  o.data_ = o.small_;
  std::memset(o.small_, 0, kSmallBytes);
  return *this;
}

void Array::check(DType asked) const {
  if (asked != dtype())
    throw Error(fmt::format("Array: data of {} requested as {}", type_.str(), name_of(asked)));
}

void Array::set(int64_t i, double v) {
  void* p = raw();
  switch (dtype()) {
  case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
  case DType::f64: static_cast<double*>(p)[i] = v; break;
  case DType::i32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
  case DType::i64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
  case DType::i1: static_cast<uint8_t*>(p)[i] = v != 0; break;
  }
}

Array Array::reshaped(Shape shape) const {
  if (num_elements(shape) != size())
    throw Error("Array::reshaped: cannot reshape " + type_.str() + " to " + shape_str(shape));
  Array r(Type{dtype(), std::move(shape)});
  std::memcpy(r.raw(), raw(), bytes());
  return r;
}

std::string Array::str(int64_t limit) const {
  std::string s = type_.str() + " [";
  for (int64_t i = 0; i < size() && i < limit; ++i) {
    if (i) s += ", ";
    if (dtype() == DType::i1) s += get<bool>(i) ? "true" : "false";
    else if (is_floating(dtype())) s += fmt::format("{}", dtype() == DType::f32 ? double(get<float>(i)) : get<double>(i));
    else s += std::to_string(get<int64_t>(i));
  }
  if (size() > limit) s += ", ...";
  return s + "]";
}

bool Array::identical(const Array& o) const {
  return type_ == o.type_ && std::memcmp(raw(), o.raw(), bytes()) == 0;
}

} // namespace adjit
