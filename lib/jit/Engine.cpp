// jit/Engine.cpp — the JIT: the cache lookup around the compile pipeline
// (Pipeline.h), the process-wide LLJIT that loads its objects, and calls.
#include "jit/Engine.h"
#include "runtime/ThreadPool.h"

#include <optional>

#include <llvm/IR/PassTimingInfo.h>
#include <llvm/Pass.h> // TimePassesIsEnabled
#include <llvm/Support/Timer.h>

#include "runtime/Callbacks.h"
#include "runtime/Lapack.h"
#include "jit/Background.h"
#include "jit/DiskCache.h"
#include "jit/Pipeline.h"
#include "codegen/Target.h"
#include "support/Assert.h"
#include "support/Hash.h"
#include "support/Log.h"

#include <llvm/ADT/SmallVector.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/MemoryBuffer.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <thread>

namespace adjit::engine {
namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

/// The process-wide JIT, created on first use and never destroyed: jitted
/// functions may be globals, whose kernels are freed during static destruction.
llvm::orc::LLJIT& engine() {
  static llvm::orc::LLJIT* jit = [] {
    codegen::createTargetMachine({}); // initialises the native target
    auto j = llvm::orc::LLJITBuilder().create();
    if (!j) throw Error("cannot start the JIT: " + llvm::toString(j.takeError()));
    char prefix = (*j)->getDataLayout().getGlobalPrefix();
    auto& jd = (*j)->getMainJITDylib();
    // libm and libmvec (vector math used by vectorised loops), then the process.
    if (auto g = llvm::orc::DynamicLibrarySearchGenerator::Load("libmvec.so.1", prefix)) jd.addGenerator(std::move(*g));
    else llvm::consumeError(g.takeError());
    if (auto g = llvm::orc::DynamicLibrarySearchGenerator::Load("libm.so.6", prefix)) jd.addGenerator(std::move(*g));
    else llvm::consumeError(g.takeError());
    // Host callbacks: defined explicitly, so they resolve however adjit was loaded.
    llvm::orc::SymbolMap runtime;
    runtime[(*j)->mangleAndIntern("adjit_host_callback")] =
        llvm::orc::ExecutorSymbolDef(llvm::orc::ExecutorAddr::fromPtr(&adjit_host_callback), llvm::JITSymbolFlags::Exported);
    runtime[(*j)->mangleAndIntern("adjit_loop_limit")] =
        llvm::orc::ExecutorSymbolDef(llvm::orc::ExecutorAddr::fromPtr(&adjit_loop_limit), llvm::JITSymbolFlags::Exported);
    runtime[(*j)->mangleAndIntern("adjit_out_of_memory")] =
        llvm::orc::ExecutorSymbolDef(llvm::orc::ExecutorAddr::fromPtr(&adjit_out_of_memory), llvm::JITSymbolFlags::Exported);
    runtime[(*j)->mangleAndIntern("adjit_stack_pushed")] =
        llvm::orc::ExecutorSymbolDef(llvm::orc::ExecutorAddr::fromPtr(&adjit_stack_pushed), llvm::JITSymbolFlags::Exported);
    runtime[(*j)->mangleAndIntern("adjit_parallel_for")] =
        llvm::orc::ExecutorSymbolDef(llvm::orc::ExecutorAddr::fromPtr(&adjit_parallel_for), llvm::JITSymbolFlags::Exported);
    runtime[(*j)->mangleAndIntern("adjit_parallel_threads")] =
        llvm::orc::ExecutorSymbolDef(llvm::orc::ExecutorAddr::fromPtr(&adjit_parallel_threads), llvm::JITSymbolFlags::Exported);
    // LAPACK's entry points (runtime/Lapack.h): code calls them only where
    // the library was loaded at compile time (CompileOptions::lapack).
    auto entry = [&](const char* name, auto* fn) {
      runtime[(*j)->mangleAndIntern(name)] =
          llvm::orc::ExecutorSymbolDef(llvm::orc::ExecutorAddr::fromPtr(fn), llvm::JITSymbolFlags::Exported);
    };
    entry("adjit_lapack_cholesky", &adjit_lapack_cholesky);
    entry("adjit_lapack_triangular_solve", &adjit_lapack_triangular_solve);
    entry("adjit_lapack_lu", &adjit_lapack_lu);
    entry("adjit_lapack_qr", &adjit_lapack_qr);
    entry("adjit_lapack_eigh", &adjit_lapack_eigh);
    entry("adjit_lapack_svd", &adjit_lapack_svd);
    if (auto err = jd.define(llvm::orc::absoluteSymbols(std::move(runtime))))
      throw Error("cannot start the JIT: " + llvm::toString(std::move(err)));
    auto g = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(prefix);
    if (!g) throw Error("cannot start the JIT: " + llvm::toString(g.takeError()));
    jd.addGenerator(std::move(*g));
    return j->release();
  }();
  return *jit;
}

/// Where tiered kernels' first tiers are loaded: the same symbols as their
/// optimised code in the main JITDylib, which it links against for the
/// runtime, libm and libmvec (its own symbols first).
llvm::orc::JITDylib& firstTierDylib() {
  static llvm::orc::JITDylib* jd = [] {
    llvm::orc::LLJIT& j = engine();
    llvm::orc::JITDylib& d = j.getExecutionSession().createBareJITDylib("adjit-tier1");
    d.addToLinkOrder(j.getMainJITDylib());
    return &d;
  }();
  return *jd;
}

/// Kernels by cache key; like the JIT, never destroyed.
std::mutex& cacheMutexRef() {
  static auto* m = new std::mutex;
  return *m;
}
std::map<uint64_t, std::weak_ptr<Kernel>>& cache() {
  static auto* c = new std::map<uint64_t, std::weak_ptr<Kernel>>;
  return *c;
}
/// The code of one kernel: what it was loaded with (optimised code in the
/// main JITDylib, or a first tier in firstTierDylib), and a tiered kernel's
/// optimised code once loaded.
struct LoadedCode {
  llvm::orc::ResourceTrackerSP code, optimized;
  void remove() {
    for (llvm::orc::ResourceTrackerSP* t : {&code, &optimized})
      if (*t) llvm::consumeError((*t)->remove());
  }
};

/// The code loaded for each key. A kernel's weak_ptr expires before its
/// destructor takes the lock; a compile of the same key in between finds the
/// dying kernel's code here and removes it before loading its own (the
/// symbols would clash). Whoever takes code out of this map removes it.
std::map<uint64_t, LoadedCode>& loaded() {
  static auto* l = new std::map<uint64_t, LoadedCode>;
  return *l;
}

std::string hex(uint64_t v) { return fmt::format("{:016x}", v); }

} // namespace

struct Kernel::Resources {
  llvm::orc::ResourceTrackerSP tracker; ///< LoadedCode::code of the kernel's key while it is loaded
};

struct Kernel::Tier {
  std::mutex m;
  std::condition_variable cv;
  bool settled = false;              ///< the optimised tier is in place, or will never be
  std::atomic<bool> optimized{false}; ///< the optimised tier is in place
  /// Wakes waitOptimized's callers.
  void settle() {
    {
      std::lock_guard lock(m);
      settled = true;
    }
    cv.notify_all();
  }
};

namespace {
std::atomic<int64_t> teardownDelayMs{0};
} // namespace

void testing::delayKernelTeardown(std::chrono::milliseconds delay) { teardownDelayMs = delay.count(); }

Kernel::~Kernel() {
  if (!resources || !resources->tracker) return;
  if (const int64_t ms = teardownDelayMs.load()) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  std::lock_guard lock(cacheMutexRef());
  auto it = cache().find(key);
  if (it != cache().end() && it->second.expired()) cache().erase(it);
  // Removed here unless a new load of this key removed it already.
  auto l = loaded().find(key);
  if (l != loaded().end() && l->second.code == resources->tracker) {
    l->second.remove();
    loaded().erase(l);
  }
}

namespace {

std::atomic<uint64_t> memoryHits{0}, diskHits{0}, passRuns{0}, llvmRuns{0}, optimizedTiers{0};
/// Compilations dumped so far (ADJIT_DUMP): each one's files carry its number.
std::atomic<uint64_t> dumps{0};


/// Links `objects` into `jd` under a new tracker; returns the tracker and
/// the address of `<symbol>.packed`. Call with the cache lock held.
std::pair<llvm::orc::ResourceTrackerSP, void (*)(void**)> link(llvm::orc::JITDylib& jd, const std::vector<std::string>& objects,
                                                              const std::string& symbol, const std::string& label) {
  llvm::orc::LLJIT& j = engine();
  auto tracker = jd.createResourceTracker();
  for (const std::string& object : objects)
    if (auto err = j.addObjectFile(tracker, llvm::MemoryBuffer::getMemBufferCopy(object, label))) {
      llvm::consumeError(tracker->remove());
      throw Error("jit: cannot load compiled code: " + llvm::toString(std::move(err)));
    }
  auto addr = j.lookup(jd, symbol + ".packed");
  if (!addr) {
    llvm::consumeError(tracker->remove());
    throw Error("jit: cannot link compiled code: " + llvm::toString(addr.takeError()));
  }
  return {tracker, addr->toPtr<void (*)(void**)>()};
}

/// Links `objects` into the JIT and makes them the cached kernel for `key`:
/// optimised code, or with `firstTier` a tiered kernel's first tier. If
/// another thread loaded that key first, returns its kernel instead, and
/// `fresh` false.
std::shared_ptr<Kernel> load(const std::vector<std::string>& objects, const std::string& symbol, const std::string& label,
                             uint64_t key, uint64_t scratch, const ir::Function& fn, bool firstTier = false,
                             bool* fresh = nullptr) {
  auto kernel = std::make_shared<Kernel>();
  kernel->key = key;
  kernel->inputs = fn.paramTypes();
  kernel->outputs = fn.resultTypes();
  kernel->scratchBytes = scratch;
  if (firstTier) kernel->tier = std::make_shared<Kernel::Tier>();
  if (fresh) *fresh = false;
  std::lock_guard lock(cacheMutexRef());
  auto it = cache().find(key);
  if (it != cache().end())
    if (auto k = it->second.lock()) return k; // another thread finished first
  if (auto dying = loaded().find(key); dying != loaded().end()) { // its kernel is being destroyed
    dying->second.remove();
    loaded().erase(dying);
  }
  auto [tracker, entry] = link(firstTier ? firstTierDylib() : engine().getMainJITDylib(), objects, symbol, label);
  kernel->packed.store(entry, std::memory_order_release);
  kernel->resources = std::make_unique<Kernel::Resources>(Kernel::Resources{tracker});
  cache()[key] = kernel;
  loaded()[key] = {tracker, nullptr};
  if (fresh) *fresh = true;
  return kernel;
}

/// Loads a tiered kernel's optimised code and makes it the kernel's entry
/// point, unless the kernel has been freed. Returns whether it did.
bool swapIn(const std::weak_ptr<Kernel>& weak, const std::vector<std::string>& objects, const std::string& symbol,
            const std::string& label) {
  std::shared_ptr<Kernel> k; // released after the lock: the last reference frees the kernel, which takes it
  std::lock_guard lock(cacheMutexRef());
  k = weak.lock();
  if (!k) return false;
  // While the kernel lives its code is in `loaded` (only a new load of its
  // key, after it died, takes it out), and nothing of its key is in the main
  // JITDylib: no clash with the optimised code.
  auto l = loaded().find(k->key);
  ADJIT_ASSERT(l != loaded().end() && l->second.code == k->resources->tracker && !l->second.optimized,
               "jit: a live tiered kernel's code is not loaded");
  auto [tracker, entry] = link(engine().getMainJITDylib(), objects, symbol, label);
  l->second.optimized = tracker;
  k->packed.store(entry, std::memory_order_release);
  k->tier->optimized.store(true, std::memory_order_release);
  return true;
}

std::mutex hookMutex;
std::function<void()> optimizedTierHook;

/// ADJIT_TIERS=0 turns tiered compilation off for the process.
bool tiersEnabled() {
  static const bool on = [] {
    const char* v = std::getenv("ADJIT_TIERS");
    return !v || std::string_view(v) != "0";
  }();
  return on;
}

/// The code generator's warm-up (codegen::warmUpCodeGenerator) for the
/// first tiered compile of the process: it runs on a thread of its own while
/// this compile traces and lowers, and is waited for before the background
/// thread starts, and before an error leaves the compile, so the process
/// never exits during it: its statics are then destroyed after the
/// background thread is joined (Background.cpp). Later compiles find it done.
class WarmUpGuard {
public:
  explicit WarmUpGuard(bool needed) {
    if (!needed) return;
    static std::shared_future<void> done = std::async(std::launch::async, [] {
      try {
        codegen::warmUpCodeGenerator();
      } catch (const std::exception& e) { // the tiers still work; only exit may be unsafe
        logLine("compile", std::string("warm-up of the code generator failed: ") + e.what());
      }
    });
    done_ = &done;
  }
  WarmUpGuard(const WarmUpGuard&) = delete;
  WarmUpGuard& operator=(const WarmUpGuard&) = delete;
  ~WarmUpGuard() { wait(); }
  void wait() {
    if (done_) done_->wait();
  }

private:
  const std::shared_future<void>* done_ = nullptr;
};

/// What the background compile of a tiered kernel's optimised code needs.
struct OptimizedTierJob {
  std::weak_ptr<Kernel> kernel;
  std::shared_ptr<Kernel::Tier> tier;
  OptimizedModules modules;
  std::string symbol, label, subject; // subject: the function and signature, for the log
  CacheKey diskKey;
  uint64_t scratch = 0;
  bool disk = false; ///< store the optimised objects in the disk cache
  Clock::time_point start; ///< when the first call began compiling

  /// Compiles, stores and swaps in the optimised code. On exit, or when the
  /// kernel was freed before this started, compiles only for the disk cache.
  /// Never throws: on failure the kernel keeps its first tier.
  void run(bool exiting) noexcept {
    const bool log = logEnabled("compile");
    try {
      if (!disk && (exiting || kernel.expired())) return tier->settle();
      std::function<void()> hook;
      {
        std::lock_guard lock(hookMutex);
        hook = optimizedTierHook;
      }
      if (hook) hook();
      const auto t0 = Clock::now();
      const std::vector<std::string> objects = modules.emit();
      const double codegenMs = msSince(t0);
      if (disk) {
        std::vector<std::string> parts{symbol, std::to_string(scratch)};
        parts.insert(parts.end(), objects.begin(), objects.end());
        diskStore(diskKey, parts);
      }
      const auto t1 = Clock::now();
      const bool swapped = !exiting && swapIn(kernel, objects, symbol, label);
      optimizedTiers += swapped;
      if (log)
        logLine("compile", fmt::format("{}: tier 2 (optimised) {} {:.2f} ms after the first call: codegen {:.2f} ms, link {:.2f} ms{}",
                                       subject, swapped ? "live" : exiting ? "compiled at exit" : "compiled after its kernel was freed",
                                       msSince(start), codegenMs, swapped ? msSince(t1) : 0.0, disk ? ", stored to disk" : ""));
    } catch (const std::exception& e) {
      if (log) logLine("compile", fmt::format("{}: tier 2 (optimised) failed, tier 1 stays: {}", subject, e.what()));
    } catch (...) {
      if (log) logLine("compile", fmt::format("{}: tier 2 (optimised) failed, tier 1 stays", subject));
    }
    tier->settle();
  }
};

} // namespace

void testing::onOptimizedTier(std::function<void()> hook) {
  std::lock_guard lock(hookMutex);
  optimizedTierHook = std::move(hook);
}

bool optimized(const Kernel& k) { return !k.tier || k.tier->optimized.load(std::memory_order_acquire); }

void waitOptimized(const Kernel& k) {
  if (!k.tier) return;
  std::unique_lock lock(k.tier->m);
  k.tier->cv.wait(lock, [&] { return k.tier->settled; });
}

std::mutex listenerMutex;
std::shared_ptr<const std::function<void(const CompileEvent&)>> listener;

void notify(const CompileEvent& e) {
  std::shared_ptr<const std::function<void(const CompileEvent&)>> l;
  {
    std::lock_guard lock(listenerMutex);
    l = listener;
  }
  if (l) (*l)(e);
}

Counters counters() { return {memoryHits.load(), diskHits.load(), passRuns.load(), llvmRuns.load(), optimizedTiers.load()}; }

std::shared_ptr<Kernel> compile(const CompileRequest& r, CompiledStages* stages) {
  const ir::Function* fn = r.module.lookup(r.function);
  ADJIT_ASSERT(fn, "compile: no function @" + r.function);
  const std::string sig = fn->signature();
  const std::string sigHash = hex(hashBytes(sig)).substr(0, 8);
  const std::string label = r.function + "." + sigHash;
  const bool dump = !dumpDirectory().empty();
  // Numbered in the order compilations start, so that kernels of one name and
  // signature (the grads of several functions, say) do not overwrite each other.
  const std::string dumpLabel = dump ? fmt::format("{}.{}.{}", r.function, ++dumps, sigHash) : "";
  const bool cached = !stages && !dump; // inspection always compiles
  const bool log = logEnabled("compile");

  // The key is the traced IR (with the locations that compiled code reports:
  // a while loop's limit error names its line), the target and adjit's
  // build: a hit skips adjit's passes and LLVM entirely.
  auto t0 = Clock::now();
  const CacheKey ck = compileKey(r.module, "@" + r.function, r.options);
  const uint64_t key = ck.hash;
  const std::string symbol = "adjit_" + hex(key) + "_" + r.function;

  std::string disk;
  if (cached) {
    {
      std::lock_guard lock(cacheMutexRef());
      auto it = cache().find(key);
      if (it != cache().end())
        if (auto k = it->second.lock()) {
          ++memoryHits;
          const double keyMs = msSince(t0);
          if (log) logLine("compile", fmt::format("{}{}: trace {:.2f} ms, key {:.2f} ms, cache hit", r.function, sig, r.traceMs, keyMs));
          notify({r.function, sig, CompileEvent::Cache::memory_hit, r.traceMs, keyMs, 0, 0, 0, optimized(*k) ? 2 : 1});
          return k;
        }
    }
    if (!cacheDirectory().empty()) {
      disk = ", disk miss";
      // Parts: symbol, scratch bytes, then the object files.
      if (auto parts = diskLoad(ck); parts && parts->size() >= 3 && (*parts)[0] == symbol) {
        const double keyMs = msSince(t0);
        auto t1 = Clock::now();
        const std::vector<std::string> objects(parts->begin() + 2, parts->end());
        std::shared_ptr<Kernel> k = load(objects, symbol, label, key, std::stoull((*parts)[1]), *fn);
        ++diskHits;
        const double loadMs = msSince(t1);
        if (log)
          logLine("compile", fmt::format("{}{}: trace {:.2f} ms, key {:.2f} ms, load {:.2f} ms, cache miss, disk hit", r.function,
                                         sig, r.traceMs, keyMs, loadMs));
        notify({r.function, sig, CompileEvent::Cache::disk_hit, r.traceMs, keyMs, 0, 0, loadMs, 2});
        return k;
      }
    }
  }

  const double keyMs = msSince(t0);
  // What watches the stages: Jitted::lower() and ADJIT_DUMP read their text.
  std::vector<std::unique_ptr<Instrumentation>> watching;
  if (stages) watching.push_back(collectStages(*stages));
  if (dump) watching.push_back(dumpStages(dumpLabel, fmt::format("{}{}, kernel {}", r.function, sig, symbol)));
  std::vector<Instrumentation*> instruments;
  for (auto& w : watching) instruments.push_back(w.get());

  // Tiered: the objects come from the fast code generator, and `later`
  // keeps the optimised IR for the background compile.
  const bool tiered = r.tiers && cached && r.options.optLevel > 0 && tiersEnabled();
  WarmUpGuard warmUp(tiered);
  Compilation c(label, symbol, r.options, instruments);
  if (stages) c.showPlanAfter(r.planAfter);
  std::unique_ptr<ir::Module> m = r.spent ? std::make_unique<ir::Module>(std::move(*r.spent)) : r.module.clone();
  c.runPasses(*m, r.function + sig); // the subject names the function in ADJIT_LOG=passes lines
  ++passRuns;
  fn = m->lookup(r.function); // r.module's may be gone; the passes keep its signature
  ADJIT_ASSERT(fn, "compile: the passes removed @" + r.function);
  const uint64_t scratch = c.lower(*m, r.function, symbol);
  ++llvmRuns;
  auto job = tiered ? std::make_shared<OptimizedTierJob>() : nullptr;
  const std::vector<std::string> objects = c.emit(tiered ? &job->modules : nullptr);
  // ADJIT_LLVM_ARGS=-time-passes: LLVM's per-pass times of this compilation, on stderr.
  if (llvm::TimePassesIsEnabled) llvm::reportAndResetTimings(&llvm::errs());
  if (cached && !tiered) {
    std::vector<std::string> parts{symbol, std::to_string(scratch)};
    parts.insert(parts.end(), objects.begin(), objects.end());
    diskStore(ck, parts);
  }

  auto t2 = Clock::now();
  bool fresh = false;
  std::shared_ptr<Kernel> kernel = load(objects, symbol, label, key, scratch, *fn, tiered, &fresh);
  const double linkMs = msSince(t2);
  if (tiered && fresh) { // (else another thread's kernel came first, with its own job)
    job->kernel = kernel;
    job->tier = kernel->tier;
    job->symbol = symbol;
    job->label = label;
    job->subject = r.function + sig;
    job->diskKey = ck;
    job->scratch = scratch;
    job->disk = !cacheDirectory().empty();
    job->start = t0 - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(r.traceMs));
    warmUp.wait();
    background::submit([job](bool exiting) { job->run(exiting); });
  }
  const Compilation::Times& t = c.times();
  notify({r.function, sig, CompileEvent::Cache::miss, r.traceMs, keyMs, t.passes, t.llvm(), linkMs, tiered ? 1 : 2});
  if (log)
    logLine("compile", fmt::format("{}{}: trace {:.2f} ms, key {:.2f} ms, passes {:.2f} ms, llvm {:.2f} ms (plan {:.2f}, lower {:.2f}, {}{}), "
                                   "link {:.2f} ms, {}cache miss{}{}",
                                   r.function, sig, r.traceMs, keyMs, t.passes, t.llvm(), t.plan, t.lower,
                                   t.partitions > 1 ? fmt::format("optimise and codegen {:.2f} in {} threads", t.optimize, t.partitions)
                                                    : fmt::format("optimise {:.2f}, codegen {:.2f}", t.optimize, t.codegen),
                                   tiered ? " fast" : "", linkMs, tiered ? "tier 1 (tier 2 compiling), " : "", disk,
                                   dump ? ", dump " + dumpLabel : ""));
  return kernel;
}

} // namespace adjit::engine

void adjit::set_compile_listener(std::function<void(const CompileEvent&)> l) {
  using namespace adjit::engine;
  std::lock_guard lock(listenerMutex);
  listener = l ? std::make_shared<const std::function<void(const CompileEvent&)>>(std::move(l)) : nullptr;
}

void adjit::wait_all_optimized() { adjit::engine::background::drain(); }

namespace adjit::engine {

std::size_t liveKernels() {
  std::lock_guard lock(cacheMutexRef());
  std::size_t n = 0;
  for (const auto& [key, k] : cache()) n += !k.expired();
  return n;
}

namespace {

/// A per-thread workspace reused across kernel calls (so large intermediates
/// do not fault in fresh pages every call). Nested calls on one thread take
/// the space above their caller's; what does not fit gets a fresh block.
struct Arena {
  char* base = nullptr;
  std::size_t size = 0, top = 0;
  ~Arena() { std::free(base); }
};
thread_local Arena arena;

struct ArenaSlice {
  char* ptr = nullptr;
  std::size_t savedTop = 0;
  bool owned = false;
  explicit ArenaSlice(std::size_t bytes) {
    bytes = (bytes + 63) / 64 * 64;
    savedTop = arena.top;
    if (bytes == 0) return;
    if (arena.top == 0 && bytes > arena.size) { // grow only when nothing is using it
      std::free(arena.base);
      arena.size = std::max<std::size_t>(bytes, 2 * arena.size);
      arena.base = static_cast<char*>(std::aligned_alloc(64, arena.size));
      if (!arena.base) throw std::bad_alloc();
    }
    if (arena.top + bytes <= arena.size) {
      ptr = arena.base + arena.top;
      arena.top += bytes;
    } else {
      ptr = static_cast<char*>(std::aligned_alloc(64, bytes));
      if (!ptr) throw std::bad_alloc();
      owned = true;
    }
  }
  ~ArenaSlice() {
    if (owned) std::free(ptr);
    arena.top = savedTop;
  }
};

} // namespace

void run(const Kernel& k, std::span<const detail::Leaf> args, std::vector<Array>& outs, int threads) {
  outs.clear();
  outs.reserve(k.outputs.size());
  for (const Type& t : k.outputs) outs.push_back(Array::uninitialized(t));
  constexpr std::size_t kInline = 16;
  void* inlinePtrs[kInline];
  std::vector<void*> heapPtrs;
  void** ptrs = inlinePtrs;
  if (outs.size() > kInline) {
    heapPtrs.resize(outs.size());
    ptrs = heapPtrs.data();
  }
  for (std::size_t i = 0; i < outs.size(); ++i) ptrs[i] = outs[i].raw();
  runInto(k, args, {ptrs, outs.size()}, threads);
}

void runInto(const Kernel& k, std::span<const detail::Leaf> args, std::span<void* const> outs, int threads) {
  ADJIT_ASSERT(outs.size() == k.outputs.size(), "runInto: one buffer per output");
  std::optional<runtime::CallThreads> scope;
  if (threads > 0) scope.emplace(threads);
  constexpr std::size_t kInline = 16;
  void* inlinePtrs[kInline];
  std::vector<void*> heapPtrs;
  const std::size_t n = args.size() + k.outputs.size() + 1;
  void** ptrs = inlinePtrs;
  if (n > kInline) {
    heapPtrs.resize(n);
    ptrs = heapPtrs.data();
  }
  for (std::size_t i = 0; i < args.size(); ++i) ptrs[i] = const_cast<void*>(args[i].data);
  for (std::size_t i = 0; i < outs.size(); ++i) ptrs[args.size() + i] = outs[i];
  void (*const entry)(void**) = k.packed.load(std::memory_order_acquire); // either tier: they compute the same
  if (k.scratchBytes == 0) {
    ptrs[n - 1] = nullptr;
    entry(ptrs);
  } else {
    ArenaSlice scratch(k.scratchBytes);
    ptrs[n - 1] = scratch.ptr;
    entry(ptrs);
  }
  runtime::rethrowCallbackFailure(); // a host callback that threw: its error, now that compiled code has returned
}

namespace {

/// One adjit::map call spread over the pool: the calls, cut into chunks of
/// consecutive instances, and the first failure.
struct ManyCalls {
  const Kernel* k;
  std::span<const void* const> args;
  std::span<const int64_t> argStrides;
  std::span<void* const> outs;
  std::span<const int64_t> outStrides;
  int64_t n = 0, chunks = 1;
  /// The lowest instance that failed so far (n: none); later ones are skipped.
  std::atomic<int64_t> failedAt{0};
  std::mutex m;
  std::exception_ptr error;

  /// Instances [from, to) in order, on the calling thread, their own loops on it too.
  void run(int64_t from, int64_t to) noexcept {
    runtime::CallThreads one(1);
    const std::size_t nArgs = args.size(), nPtrs = nArgs + outs.size() + 1;
    constexpr std::size_t kInline = 16;
    void* inlinePtrs[kInline];
    std::vector<void*> heapPtrs;
    void** ptrs = inlinePtrs;
    try {
      if (nPtrs > kInline) {
        heapPtrs.resize(nPtrs);
        ptrs = heapPtrs.data();
      }
      ArenaSlice scratch(k->scratchBytes); // one workspace serves the chunk's calls, one after another
      ptrs[nPtrs - 1] = scratch.ptr;
      void (*const entry)(void**) = k->packed.load(std::memory_order_acquire);
      for (int64_t i = from; i < to; ++i) {
        if (failedAt.load(std::memory_order_relaxed) < i) return;
        for (std::size_t j = 0; j < nArgs; ++j) ptrs[j] = const_cast<char*>(static_cast<const char*>(args[j])) + i * argStrides[j];
        for (std::size_t j = 0; j < outs.size(); ++j) ptrs[nArgs + j] = static_cast<char*>(outs[j]) + i * outStrides[j];
        entry(ptrs);
        try {
          runtime::rethrowCallbackFailure();
        } catch (...) {
          fail(i, std::current_exception());
          return;
        }
      }
    } catch (...) { // the workspace could not be allocated
      fail(from, std::current_exception());
    }
  }
  void fail(int64_t i, std::exception_ptr e) {
    std::lock_guard lock(m);
    if (i < failedAt.load(std::memory_order_relaxed)) {
      failedAt.store(i, std::memory_order_relaxed);
      error = std::move(e);
    }
  }
};

/// Chunks per thread: small enough pieces that threads finishing early take
/// work from the others, few enough that claiming one costs nothing.
constexpr int64_t kChunksPerThread = 8;

} // namespace

void runMany(const Kernel& k, std::span<const void* const> args, std::span<const int64_t> argStrides,
             std::span<void* const> outs, std::span<const int64_t> outStrides, int64_t n, int threads) {
  ADJIT_ASSERT(args.size() == k.inputs.size() && argStrides.size() == args.size(), "runMany: one buffer and stride per input");
  ADJIT_ASSERT(outs.size() == k.outputs.size() && outStrides.size() == outs.size(), "runMany: one buffer and stride per output");
  if (n <= 0) return;
  if (n == 1) { // one call: its loops may use the threads, as a jitted call's do
    llvm::SmallVector<detail::Leaf, 16> leaves;
    for (std::size_t j = 0; j < args.size(); ++j) leaves.push_back({args[j], &k.inputs[j]});
    return runInto(k, leaves, outs, threads);
  }
  ManyCalls calls;
  calls.k = &k;
  calls.args = args;
  calls.argStrides = argStrides;
  calls.outs = outs;
  calls.outStrides = outStrides;
  calls.n = n;
  calls.failedAt.store(n, std::memory_order_relaxed);
  const int64_t t = threads > 0 ? threads : runtime::defaultThreads();
  if (t <= 1) {
    calls.run(0, n);
  } else {
    runtime::CallThreads scope(static_cast<int>(t));
    calls.chunks = std::min(n, t * kChunksPerThread);
    adjit_parallel_for(
        [](void* ctx, int64_t c) {
          auto& m = *static_cast<ManyCalls*>(ctx);
          m.run(c * m.n / m.chunks, (c + 1) * m.n / m.chunks);
        },
        &calls, calls.chunks);
  }
  if (calls.error) std::rethrow_exception(calls.error);
}

} // namespace adjit::engine
