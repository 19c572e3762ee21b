// runtime/ThreadPool.h — the persistent thread pool compiled kernels split their
// large loops over (adjit_parallel_for), and how many threads a call may use.
#pragma once

#include <cstdint>

namespace adjit::runtime {

/// ADJIT_NUM_THREADS if set (a positive integer), else how many CPUs the
/// process may run on (its affinity mask; the hardware's concurrency elsewhere).
int defaultThreads();

/// Sets how many threads (the caller included) kernels called from this
/// thread may use until the scope ends; 1 runs every chunk in the caller.
class CallThreads {
public:
  explicit CallThreads(int threads);
  ~CallThreads();
  CallThreads(const CallThreads&) = delete;
  CallThreads& operator=(const CallThreads&) = delete;

private:
  int saved_;
};

} // namespace adjit::runtime

/// Runs fn(ctx, c) for every chunk c < chunks, on the pool's threads and the
/// caller's, and returns when all are done. Which thread runs which chunk
/// varies; the chunks themselves (and so the results) do not. Runs them in
/// order in the caller when it may use one thread, when called from a pool
/// thread (nested), or when another call holds the pool.
extern "C" void adjit_parallel_for(void (*fn)(void*, int64_t), void* ctx, int64_t chunks) noexcept;

/// How many threads (the caller's included) an adjit_parallel_for issued now
/// from this thread may use: 1 in a pool thread. Kernels that give each
/// thread one chunk of its own (packed matmul) size their chunks by it.
extern "C" int64_t adjit_parallel_threads() noexcept;
