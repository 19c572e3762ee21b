// ir/ValueList.h — an op's operands or results: a few value ids inline, more
// on the heap. Nearly every op has at most four of each, so creating,
// copying and freeing an op touches no memory outside it (two heap vectors
// per op were a third of the allocations of tracing a 200,000-op gradient).
#pragma once

#include "support/Assert.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <utility>
#include <vector>

namespace adjit::ir {

using ValueId = int32_t;

/// A vector of value ids with inline room for kInline of them; the subset of
/// std::vector's interface the IR uses, and conversions to and from it.
class ValueList {
public:
  static constexpr uint32_t kInline = 4;
  using value_type = ValueId;
  using size_type = std::size_t;
  using iterator = ValueId*;
  using const_iterator = const ValueId*;

  ValueList() = default;
  ValueList(std::initializer_list<ValueId> ids) { append(ids.begin(), ids.size()); }
  ValueList(std::span<const ValueId> ids) { append(ids.data(), ids.size()); } // NOLINT: implicit, as a vector's data
  ValueList(const std::vector<ValueId>& ids) { append(ids.data(), ids.size()); } // NOLINT
  template <class It, class = decltype(*std::declval<It>())> ValueList(It first, It last) {
    for (; first != last; ++first) push_back(static_cast<ValueId>(*first));
  }
  ValueList(size_type n, ValueId v) { resize(n, v); }
  ValueList(const ValueList& o) { append(o.data(), o.size()); }
  ValueList(ValueList&& o) noexcept { take(o); }
  ValueList& operator=(const ValueList& o) {
    if (this != &o) {
      size_ = 0;
      append(o.data(), o.size());
    }
    return *this;
  }
  ValueList& operator=(ValueList&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  ValueList& operator=(std::initializer_list<ValueId> ids) {
    size_ = 0;
    append(ids.begin(), ids.size());
    return *this;
  }
  ~ValueList() { release(); }

  /// A copy as a std::vector: explicit for a list that lives on (an op's
  /// operands), so that no reference binds to a temporary copy of it;
  /// implicit for a temporary (what Builder::create returns).
  explicit operator std::vector<ValueId>() const& { return {begin(), end()}; }
  operator std::vector<ValueId>() && { return {begin(), end()}; } // NOLINT: implicit
  std::vector<ValueId> vec() const { return {begin(), end()}; }
  operator std::span<const ValueId>() const { return {data(), size()}; } // NOLINT: implicit

  size_type size() const { return size_; }
  bool empty() const { return size_ == 0; }
  ValueId* data() { return onHeap() ? heap_ : inline_; }
  const ValueId* data() const { return onHeap() ? heap_ : inline_; }
  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  ValueId& operator[](size_type i) { return data()[i]; }
  const ValueId& operator[](size_type i) const { return data()[i]; }
  ValueId& at(size_type i) {
    ADJIT_ASSERT(i < size_, "ValueList index out of range");
    return data()[i];
  }
  const ValueId& at(size_type i) const {
    ADJIT_ASSERT(i < size_, "ValueList index out of range");
    return data()[i];
  }
  ValueId& front() { return data()[0]; }
  const ValueId& front() const { return data()[0]; }
  ValueId& back() { return data()[size_ - 1]; }
  const ValueId& back() const { return data()[size_ - 1]; }

  void reserve(size_type n) {
    if (n > cap_) grow(n);
  }
  void push_back(ValueId v) {
    if (size_ == cap_) grow(size_ + 1);
    data()[size_++] = v;
  }
  void pop_back() { --size_; }
  void clear() { size_ = 0; }
  void resize(size_type n, ValueId v = 0) {
    reserve(n);
    for (size_type i = size_; i < n; ++i) data()[i] = v;
    size_ = static_cast<uint32_t>(n);
  }
  template <class It> void assign(It first, It last) {
    size_ = 0;
    for (; first != last; ++first) push_back(static_cast<ValueId>(*first));
  }
  iterator insert(const_iterator pos, ValueId v) {
    const size_type at = static_cast<size_type>(pos - begin());
    push_back(v);
    std::rotate(begin() + at, end() - 1, end());
    return begin() + at;
  }
  template <class It> iterator insert(const_iterator pos, It first, It last) {
    const size_type at = static_cast<size_type>(pos - begin()), old = size_;
    for (; first != last; ++first) push_back(static_cast<ValueId>(*first));
    std::rotate(begin() + at, begin() + old, end());
    return begin() + at;
  }
  iterator erase(const_iterator first, const_iterator last) {
    const size_type at = static_cast<size_type>(first - begin()), n = static_cast<size_type>(last - first);
    std::copy(begin() + at + n, end(), begin() + at);
    size_ -= static_cast<uint32_t>(n);
    return begin() + at;
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }

  friend bool operator==(const ValueList& a, const ValueList& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator==(const ValueList& a, const std::vector<ValueId>& b) {
    return a.size_ == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }

private:
  bool onHeap() const { return cap_ > kInline; }
  void append(const ValueId* ids, size_type n) {
    reserve(size_ + n);
    if (n) std::memcpy(data() + size_, ids, n * sizeof(ValueId));
    size_ += static_cast<uint32_t>(n);
  }
  void grow(size_type n) {
    const size_type cap = std::max<size_type>(n, 2 * static_cast<size_type>(cap_));
    ADJIT_ASSERT(cap <= UINT32_MAX, "ValueList: too many values");
    auto* p = new ValueId[cap];
    if (size_) std::memcpy(p, data(), size_ * sizeof(ValueId));
    release();
    heap_ = p;
    cap_ = static_cast<uint32_t>(cap);
  }
  void release() {
    if (onHeap()) delete[] heap_;
    cap_ = kInline;
  }
  /// Takes o's ids (its heap block, or a copy of its inline ones); o is left empty.
  void take(ValueList& o) {
    size_ = o.size_;
    cap_ = o.cap_;
    if (o.onHeap()) heap_ = o.heap_;
    else std::memcpy(inline_, o.inline_, sizeof inline_);
    o.size_ = 0;
    o.cap_ = kInline;
  }

  uint32_t size_ = 0, cap_ = kInline;
  union {
    ValueId inline_[kInline] = {};
    ValueId* heap_;
  };
};

} // namespace adjit::ir
