// api/JitEntry.h — one compiled signature of a jitted function (JitCore's
// cache entry), for the API code that runs its kernel itself (Map.cpp).
#pragma once

#include "jit/Engine.h"

#include <adjit/jit.h>

#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace adjit::detail {

struct JitCore::Entry {
  uint64_t key;
  std::vector<Type> types; ///< the arguments' types
  std::shared_ptr<engine::Kernel> kernel;
  std::shared_ptr<void> skeleton;
  TracedVariables variables; ///< implicit inputs after the arguments, written back after the call
  // While the entry is being traced and compiled (outside the lock), other
  // callers of its signature wait on `ready`; `done` is read under the lock.
  std::shared_future<void> ready;
  std::thread::id compiler;
  bool done = false;
};

struct JitCore::Impl {
  mutable std::mutex m;
  /// Entries by key; a key's bucket holds more than one entry only when
  /// different signatures collide. Entries are never removed once compiled,
  /// so `last` and callers' pointers stay valid.
  std::unordered_map<uint64_t, std::vector<std::unique_ptr<Entry>>> entries;
  std::atomic<Entry*> last{nullptr};
};

} // namespace adjit::detail
