// ir/Array.cpp — host arrays: 64-byte aligned, row-major storage.
#include <adjit/array.h>

#include <cmath>
#include <mutex>
#include <unordered_map>
#include <cstdlib>
#include <fmt/format.h>

namespace adjit {

namespace {

/// Keeps recently freed large blocks for reuse, by size (as PyTorch's caching
/// allocator does): a jitted function called in a loop then gets its output
/// and input buffers back without the kernel faulting in fresh pages (glibc
/// maps and unmaps blocks this large on every allocation). Bounded in bytes.
class BlockCache {
public:
  static constexpr std::size_t kMinBytes = 64 << 10;
  static constexpr std::size_t kMaxCachedBytes = 512u << 20;

  static std::size_t rounded(std::size_t bytes) {
    const std::size_t unit = bytes >= kMinBytes ? 4096 : 64;
    return (std::max<std::size_t>(bytes, 1) + unit - 1) / unit * unit;
  }
  void* take(std::size_t n) {
    if (n >= kMinBytes) {
      std::lock_guard lock(m_);
      auto it = free_.find(n);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= n;
        return p;
      }
    }
    void* p = std::aligned_alloc(64, n);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void give(void* p, std::size_t n) {
    if (n >= kMinBytes) {
      std::lock_guard lock(m_);
      if (cached_ + n <= kMaxCachedBytes) {
        free_[n].push_back(p);
        cached_ += n;
        return;
      }
    }
    std::free(p);
  }
  ~BlockCache() {
    for (auto& [n, blocks] : free_)
      for (void* p : blocks) std::free(p);
  }

private:
  std::mutex m_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::size_t cached_ = 0;
};

BlockCache& blocks() {
  static BlockCache* cache = new BlockCache; // never destroyed: Arrays may outlive static destruction
  return *cache;
}

/// Keeps a few recently freed small blocks per thread, by size (multiples of
/// 64 bytes up to kMaxBytes), so that a jitted function with a small result,
/// called in a loop, gets its result's block back without glibc: its
/// aligned_alloc has no thread cache and took its slow path (bins,
/// consolidation) every time, about 1,350 instructions per call of det's
/// gradient at ell = 5 (callgrind, a 200-byte result; 3,800 in the kernel).
/// Per thread, so no lock; blocks freed on another thread than the one that
/// took them join that thread's cache. At most kPerBin blocks per size (under
/// 0.6 MB a thread), freed when the thread ends.
struct SmallBlocks {
  static constexpr std::size_t kMaxBytes = 4096, kBins = kMaxBytes / 64, kPerBin = 4;
  void* block[kBins][kPerBin] = {};
  unsigned char count[kBins] = {};
  ~SmallBlocks();
};

/// Set once the thread's SmallBlocks is gone: thread-locals destroyed after it
/// (and, on the main thread, statics) free their Arrays straight to glibc.
/// Trivially destructible, so it can be read at any point of the thread's end.
thread_local bool smallBlocksGone = false;

SmallBlocks::~SmallBlocks() {
  smallBlocksGone = true;
  for (std::size_t b = 0; b < kBins; ++b)
    for (unsigned char i = 0; i < count[b]; ++i) std::free(block[b][i]);
}

SmallBlocks& smallBlocks() {
  thread_local SmallBlocks cache;
  return cache;
}

void* allocate(std::size_t bytes) {
  const std::size_t n = BlockCache::rounded(bytes);
  if (n <= SmallBlocks::kMaxBytes && !smallBlocksGone) {
    SmallBlocks& c = smallBlocks();
    unsigned char& k = c.count[n / 64 - 1];
    if (k > 0) return c.block[n / 64 - 1][--k];
  }
  return blocks().take(n);
}

void releaseBlock(void* p, std::size_t n) {
  if (n <= SmallBlocks::kMaxBytes && !smallBlocksGone) {
    SmallBlocks& c = smallBlocks();
    unsigned char& k = c.count[n / 64 - 1];
    if (k < SmallBlocks::kPerBin) {
      c.block[n / 64 - 1][k++] = p;
      return;
    }
  }
  blocks().give(p, n);
}

} // namespace

Array::Array(Type type, std::source_location loc) : Array(std::move(type), true, Location::from(loc)) {}

Array::Array(Type type, bool zero, const Location& where) : type_(std::move(type)) {
  for (int64_t d : type_.shape)
    if (d < 0) throw Error("Array: negative dimension in shape " + shape_str(type_.shape), where);
  const std::size_t n = [&] {
    try {
      return type_.bytes();
    } catch (const Error& e) {
      throw Error("Array: " + e.message(), where);
    }
  }();
  try {
    data_ = n <= kSmallBytes ? static_cast<void*>(small_) : allocate(n);
  } catch (const std::bad_alloc&) {
    throw Error(fmt::format("Array: cannot allocate {} bytes for {}", n, type_.str()), where);
  }
  if (zero) std::memset(data_, 0, n);
}

Array::Array(void* data, Type type, bool readOnly, const Location& where)
    : type_(std::move(type)), data_(data), view_(true), readOnly_(readOnly) {
  for (int64_t d : type_.shape)
    if (d < 0) throw Error("Array::view: negative dimension in shape " + shape_str(type_.shape), where);
  try {
    type_.bytes();
  } catch (const Error& e) {
    throw Error("Array::view: " + e.message(), where);
  }
  if (!data && type_.size() > 0) throw Error("Array::view: a null pointer for " + type_.str(), where);
}

void Array::releaseHeap() { releaseBlock(data_, BlockCache::rounded(type_.bytes())); }

Array::Array(const Array& o) : Array(o.type_, false) { std::memcpy(data_, o.data_, o.bytes()); }

Array& Array::operator=(const Array& o) {
  if (this != &o) *this = Array(o);
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
    else if (dtype() == DType::f32) s += fmt::format("{}", get<float>(i));
    else if (dtype() == DType::f64) s += fmt::format("{}", get<double>(i));
    else s += std::to_string(get<int64_t>(i));
  }
  if (size() > limit) s += ", ...";
  return s + "]";
}

bool Array::identical(const Array& o) const {
  return type_ == o.type_ && std::memcmp(raw(), o.raw(), bytes()) == 0;
}

} // namespace adjit
