// support/Hash.h — stable 64-bit hashing for cache keys (FNV-1a over bytes).
#pragma once

#include <cstdint>
#include <string_view>

namespace adjit {

/// Stable across runs and platforms; used for kernel cache keys and file names.
inline uint64_t hashBytes(std::string_view bytes, uint64_t seed = 0xcbf29ce484222325ull) {
  uint64_t h = seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

inline uint64_t hashCombine(uint64_t a, uint64_t b) {
  return a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
}

} // namespace adjit
