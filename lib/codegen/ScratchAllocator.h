// codegen/ScratchAllocator.h — offsets in a function's scratch region for
// buffers whose live ranges do not overlap (PlanPlacement.cpp places them).
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <set>
#include <utility>

namespace adjit::codegen {

/// Bytes of the scratch region for buffers whose live ranges do not overlap:
/// best fit among the free gaps, freed gaps merged with their neighbours.
/// O(log n) per buffer: a gradient keeps tens of thousands of residuals live.
class ScratchAllocator {
public:
  uint64_t allocate(uint64_t bytes) {
    auto fit = bySize_.lower_bound({bytes, 0});
    if (fit != bySize_.end()) {
      const auto [size, offset] = *fit;
      erase(offset, size);
      if (size > bytes) insert(offset + bytes, size - bytes);
      return offset;
    }
    // No gap is large enough: grow the region, from the gap at its end if there is one.
    uint64_t offset = top_;
    if (auto last = byOffset_.empty() ? byOffset_.end() : std::prev(byOffset_.end());
        last != byOffset_.end() && last->first + last->second == top_) {
      offset = last->first;
      erase(last->first, last->second);
    }
    top_ = offset + bytes;
    size_ = std::max(size_, top_);
    return offset;
  }
  void release(uint64_t offset, uint64_t bytes) {
    if (auto next = byOffset_.find(offset + bytes); next != byOffset_.end()) {
      bytes += next->second;
      erase(next->first, next->second);
    }
    if (auto it = byOffset_.lower_bound(offset); it != byOffset_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        bytes += prev->second;
        erase(prev->first, prev->second);
      }
    }
    if (offset + bytes == top_) top_ = offset; // the region's end is free again
    else insert(offset, bytes);
  }
  uint64_t size() const { return size_; }

private:
  void insert(uint64_t offset, uint64_t bytes) {
    byOffset_.emplace(offset, bytes);
    bySize_.insert({bytes, offset});
  }
  void erase(uint64_t offset, uint64_t bytes) {
    byOffset_.erase(offset);
    bySize_.erase({bytes, offset});
  }
  std::map<uint64_t, uint64_t> byOffset_;           ///< free gaps below top_: offset -> bytes
  std::set<std::pair<uint64_t, uint64_t>> bySize_;  ///< the same gaps: (bytes, offset)
  uint64_t top_ = 0, size_ = 0;
};

} // namespace adjit::codegen
