// runtime/Callbacks.cpp — the host-callback registry and its C entry point.
#include "runtime/Callbacks.h"

#include "support/Assert.h"

#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <utility>
#include <mutex>

namespace adjit::runtime {

std::string loopLimitMessage(int64_t limit) {
  return fmt::format("while_loop: the loop did not end within max_iterations = {} iterations", limit);
}

std::string stackOverflowMessage(int64_t bytes) {
  return fmt::format("while_loop: out of memory: the residual stack of the loop's reverse pass could not grow to {} bytes "
                     "(does the loop end?)", bytes);
}

namespace {

struct Entry {
  HostFn fn;
  std::vector<Type> types;
};

std::mutex& registryMutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::deque<Entry>& registry() {
  static auto* r = new std::deque<Entry>; // never destroyed: kernels may outlive static destruction
  return *r;
}

/// The first exception a callback threw during the current kernel call.
thread_local std::exception_ptr failure;
/// The first run-time error of the current kernel call: a while loop that ran
/// past its max_iterations, or a residual stack that could not grow.
thread_local std::optional<Error> runtimeError;
/// See stackBytesPushed.
thread_local int64_t stackBytes = 0;
/// How many threads hold a failure or run-time error (above) not yet
/// rethrown. rethrowCallbackFailure runs after every kernel call; when this is
/// 0 it reads no thread-local (from a shared library, each read is a call of
/// __tls_get_addr: 8% of a scalar function's call). A thread sees its own
/// increments, so a failure of its own kernel call is never missed.
std::atomic<int> pendingThreads{0};

/// After keeping a failure or run-time error on this thread, which held
/// `hadOne` before.
void countKept(bool hadOne) {
  if (!hadOne) pendingThreads.fetch_add(1, std::memory_order_relaxed);
}

/// Keeps the first run-time error of this kernel call.
void keepRuntimeError(const std::function<Error()>& make) noexcept {
  if (runtimeError) return;
  const bool hadOne = failure != nullptr;
  try {
    runtimeError = make();
  } catch (...) {
    failure = std::current_exception();
  }
  countKept(hadOne);
}

} // namespace

void rethrowCallbackFailure() {
  if (pendingThreads.load(std::memory_order_relaxed) == 0) return;
  if (!runtimeError && !failure) return; // another thread's
  pendingThreads.fetch_sub(1, std::memory_order_relaxed);
  if (runtimeError) {
    Error e = std::move(*runtimeError);
    runtimeError.reset();
    failure = nullptr;
    throw e;
  }
  if (!failure) return;
  std::exception_ptr e = std::exchange(failure, nullptr);
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    throw Error("host callback failed: " + err.message(), err.location());
  } catch (const std::exception& err) {
    throw Error(std::string("host callback failed: ") + err.what());
  } catch (...) {
    throw Error("host callback failed with an exception that is not a std::exception");
  }
}

int64_t stackBytesPushed() { return stackBytes; }

int64_t registerCallback(HostFn fn, std::vector<Type> types) {
  std::lock_guard lock(registryMutex());
  registry().push_back({std::move(fn), std::move(types)});
  return static_cast<int64_t>(registry().size() - 1);
}

std::optional<std::vector<Type>> callbackTypes(int64_t id) {
  std::lock_guard lock(registryMutex());
  if (id < 0 || static_cast<std::size_t>(id) >= registry().size()) return std::nullopt;
  return registry()[static_cast<std::size_t>(id)].types;
}

void runCallback(int64_t id, const std::vector<Array>& args) {
  HostFn fn;
  {
    std::lock_guard lock(registryMutex());
    ADJIT_ASSERT(id >= 0 && static_cast<std::size_t>(id) < registry().size(), "unknown host callback");
    fn = registry()[static_cast<std::size_t>(id)].fn;
  }
  fn(args);
}

} // namespace adjit::runtime

extern "C" void adjit_host_callback(int64_t id, int64_t n, void* const* buffers) noexcept {
  using namespace adjit;
  if (runtime::failure) return; // an earlier callback of this kernel call failed
  try {
    std::vector<Type> types = *runtime::callbackTypes(id);
    std::vector<Array> args;
    for (int64_t i = 0; i < n; ++i) {
      Array a = Array::uninitialized(types[static_cast<std::size_t>(i)]);
      std::memcpy(a.raw(), buffers[i], a.bytes());
      args.push_back(std::move(a));
    }
    runtime::runCallback(id, args);
  } catch (...) {
    const bool hadOne = runtime::runtimeError.has_value();
    runtime::failure = std::current_exception();
    runtime::countKept(hadOne);
  }
}

extern "C" void adjit_loop_limit(int64_t limit, const char* file, int64_t line, int64_t column) noexcept {
  using namespace adjit;
  runtime::keepRuntimeError([&] {
    return Error(adjit::runtime::loopLimitMessage(limit), Location{file, static_cast<uint32_t>(line), static_cast<uint32_t>(column)});
  });
}

extern "C" void adjit_out_of_memory(int64_t bytes, const char* file, int64_t line, int64_t column) noexcept {
  using namespace adjit;
  runtime::keepRuntimeError([&] {
    return Error(adjit::runtime::stackOverflowMessage(bytes), Location{file, static_cast<uint32_t>(line), static_cast<uint32_t>(column)});
  });
}

extern "C" void adjit_stack_pushed(int64_t bytes) noexcept { adjit::runtime::stackBytes += bytes; }
