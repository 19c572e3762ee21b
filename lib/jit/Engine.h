// jit/Engine.h — compiles a function of an IR module to machine code in the
// process: adjit's passes, lowering, LLVM's pipeline, object emission, and
// ORC's LLJIT to link and load it. Identical compilations share one kernel.
#pragma once

#include "ir/IR.h"
#include "jit/Pipeline.h"

#include <adjit/jit.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>

namespace adjit::engine {

/// Loaded machine code for one function; freed (its ORC resources removed)
/// when the last reference goes.
struct Kernel {
  /// The entry point. A tiered kernel (CompileRequest::tiers) starts with
  /// its first tier's code, and the background compile of the optimised
  /// tier stores that one's here when it is loaded; calls load it once.
  /// Both tiers stay loaded until the kernel is freed (a call may still be
  /// running the first).
  std::atomic<void (*)(void**)> packed{nullptr};
  std::vector<Type> inputs, outputs;
  uint64_t key = 0;
  uint64_t scratchBytes = 0; ///< workspace the kernel needs per call
  struct Resources;
  std::unique_ptr<Resources> resources;
  /// A tiered kernel's progress towards its optimised tier; null when the
  /// kernel was optimised from the start.
  struct Tier;
  std::shared_ptr<Tier> tier;
  ~Kernel();
};

struct CompileRequest {
  const ir::Module& module; ///< as traced
  std::string function;
  /// How code is generated (the JIT's defaults: threads, packed entry
  /// points, large modules in parts). Part of the cache key.
  CompileOptions options = {};
  double traceMs = 0; ///< for the compile log
  /// `module` itself, when the caller has no further use for it: a
  /// compilation then takes its functions instead of copying them (a
  /// 200,000-op gradient: 35 ms). Left empty.
  ir::Module* spent = nullptr;
  /// With `stages`: CompiledStages::plan shows the plan after this planning
  /// step ("all": after each; codegen::planSteps) instead of the finished one.
  std::string planAfter = {};
  /// Tiered compilation (JitOptions::tiers): on a cache miss, the kernel
  /// starts with code from LLVM's fast code generator, and the optimised
  /// code is compiled on the background thread (Background.h) and swapped
  /// in (Kernel::packed); only that one goes to the disk cache. Off with
  /// ADJIT_TIERS=0, at optimisation level 0, and when inspecting or dumping.
  bool tiers = false;
};

/// Compiles the request's function, or finds it in the process-wide cache or
/// the disk cache (DiskCache.h), both keyed on the traced IR, target and
/// adjit's build. With `stages` (or ADJIT_DUMP), always compiles and fills in
/// the text of every stage.
std::shared_ptr<Kernel> compile(const CompileRequest& r, CompiledStages* stages = nullptr);

/// What compilations did in this process, for tests: hits skip work.
/// `optimizedTiers` counts tiered kernels whose optimised code was loaded.
struct Counters {
  uint64_t memoryHits, diskHits, passRuns, llvmRuns, optimizedTiers;
};
Counters counters();

/// Whether the kernel runs its optimised code: true unless it is tiered and
/// its optimised tier is not (yet, or ever: its compile failed) in place.
bool optimized(const Kernel& k);
/// Blocks until a tiered kernel's optimised tier is in place or has failed
/// (the kernel then keeps its first tier); returns at once for others.
void waitOptimized(const Kernel& k);

namespace testing {
/// Fault injection for tests: a freed kernel waits this long before it takes
/// the cache lock to unload its code (0 to stop).
void delayKernelTeardown(std::chrono::milliseconds delay);
/// Fault injection for tests: each background compile of an optimised tier
/// calls this first (a throw makes it fail; a sleep widens races); an empty
/// function removes it.
void onOptimizedTier(std::function<void()> hook);
} // namespace testing

/// Number of kernels currently loaded in the process-wide JIT.
std::size_t liveKernels();

/// Calls a kernel on arrays of its input types; outputs are allocated here.
/// With `threads` > 0, the kernel's split loops use at most that many threads
/// (0: ADJIT_NUM_THREADS or the hardware's concurrency).
void run(const Kernel& k, std::span<const detail::Leaf> args, std::vector<Array>& outs, int threads = 0);
/// The same, writing output i into `outs[i]` (a buffer of the kernel's
/// output type i, overlapping no argument and no other output).
void runInto(const Kernel& k, std::span<const detail::Leaf> args, std::span<void* const> outs, int threads = 0);
/// Runs the kernel `n` times (adjit::map): call i reads input j at
/// `args[j] + i * argStrides[j]` bytes (stride 0: the same buffer for every
/// call) and writes output j at `outs[j] + i * outStrides[j]`. With n > 1 the
/// calls are spread over up to `threads` threads (0: the default), each call's
/// own loops on the thread running it; n == 1 runs as runInto. Every call
/// computes what it would alone, so results do not depend on the threads.
/// Throws the error (a host callback's, a loop limit's) of the lowest-numbered
/// call that failed; calls after it may not have run.
void runMany(const Kernel& k, std::span<const void* const> args, std::span<const int64_t> argStrides,
             std::span<void* const> outs, std::span<const int64_t> outStrides, int64_t n, int threads = 0);

} // namespace adjit::engine
