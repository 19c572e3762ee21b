// jit/DiskCache.h — the persistent kernel cache shared by `jit` and
// `adjit compile`: content-addressed entries in ADJIT_CACHE_DIR, written
// atomically and validated on load.
//
// Trust model: an entry is native code that adjit loads and runs. Whoever can
// write to the cache directory can run code in every process that uses it, as
// with JAX's compilation cache; adjit creates the directory 0700. Do not point
// ADJIT_CACHE_DIR at a directory others can write.
#pragma once

#include "support/Hash.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace adjit::engine {

/// A cache key: the hash naming the entry and a differently seeded one checked
/// inside it, so that two keys colliding in the first are still told apart.
struct CacheKey {
  uint64_t hash = 0, check = 0;
  /// Hashes the key material: everything the cached output depends on.
  static CacheKey of(std::string_view material);
  /// The key of material already fed to `hash`.
  static CacheKey of(const LongHash& hash);
  std::string hex() const;
};

/// What identifies this build of adjit: the GNU build-id of the library (any
/// change to adjit's code changes it), else its version and build time.
const std::string& buildIdentity();

/// The cache directory: ADJIT_CACHE_DIR, else $XDG_CACHE_HOME/adjit, else
/// ~/.cache/adjit; empty when ADJIT_CACHE_DIR is set and empty (disabled), or
/// after the directory turned out unusable.
std::string cacheDirectory();

/// The parts stored under `key`, or nullopt when there is no valid entry (a
/// corrupt or truncated entry is reported on the compile log and ignored).
std::optional<std::vector<std::string>> diskLoad(const CacheKey& key);

/// Stores `parts` under `key` (temp file + rename; concurrent writers of one
/// key are harmless). A directory that cannot be written disables the disk
/// cache for the process, with one warning line on stderr.
void diskStore(const CacheKey& key, const std::vector<std::string>& parts);

} // namespace adjit::engine
