// jit/Engine.cpp — the compile pipeline and the process-wide LLJIT.
#include "jit/Engine.h"
#include "runtime/ThreadPool.h"

#include <optional>

#include <llvm/IR/PassTimingInfo.h>
#include <llvm/Support/Timer.h>

#include "codegen/Codegen.h"
#include "runtime/Callbacks.h"
#include "jit/DiskCache.h"
#include "jit/Partition.h"
#include "codegen/Target.h"
#include "ir/Text.h"
#include "ir/Verifier.h"
#include "support/Assert.h"
#include "support/Hash.h"
#include "support/Log.h"
#include "transforms/Passes.h"

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/MC/MCAsmInfo.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
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
    if (auto err = jd.define(llvm::orc::absoluteSymbols(std::move(runtime))))
      throw Error("cannot start the JIT: " + llvm::toString(std::move(err)));
    auto g = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(prefix);
    if (!g) throw Error("cannot start the JIT: " + llvm::toString(g.takeError()));
    jd.addGenerator(std::move(*g));
    return j->release();
  }();
  return *jit;
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
/// The code loaded for each key. A kernel's weak_ptr expires before its
/// destructor takes the lock; a compile of the same key in between finds the
/// dying kernel's code here and removes it before loading its own (the
/// symbols would clash). Whoever takes a tracker out of this map removes it.
std::map<uint64_t, llvm::orc::ResourceTrackerSP>& loaded() {
  static auto* l = new std::map<uint64_t, llvm::orc::ResourceTrackerSP>;
  return *l;
}

std::string hex(uint64_t v) { return fmt::format("{:016x}", v); }

} // namespace

struct Kernel::Resources {
  llvm::orc::ResourceTrackerSP tracker;
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
  if (l != loaded().end() && l->second == resources->tracker) {
    loaded().erase(l);
    llvm::consumeError(resources->tracker->remove());
  }
}

namespace {

std::atomic<uint64_t> memoryHits{0}, diskHits{0}, passRuns{0}, llvmRuns{0};
/// Compilations dumped so far (ADJIT_DUMP): each one's files carry its number.
std::atomic<uint64_t> dumps{0};

/// The target part of cache keys for a CPU name (empty: the host), computed once.
std::string targetKeyFor(const std::string& cpu) {
  static std::mutex m;
  static std::map<std::string, std::string> keys;
  std::lock_guard lock(m);
  auto it = keys.find(cpu);
  if (it == keys.end()) it = keys.emplace(cpu, codegen::targetKey(*codegen::createTargetMachine({2, cpu}))).first;
  return it->second;
}

/// Links `object` into the JIT and makes it the cached kernel for `key`; if
/// another thread loaded that key first, returns its kernel instead.
std::shared_ptr<Kernel> load(const std::vector<std::string>& objects, const std::string& symbol, const std::string& label,
                             uint64_t key, uint64_t scratch, const ir::Function& fn) {
  auto kernel = std::make_shared<Kernel>();
  kernel->key = key;
  kernel->inputs = fn.paramTypes();
  kernel->outputs = fn.resultTypes();
  kernel->scratchBytes = scratch;
  std::lock_guard lock(cacheMutexRef());
  auto it = cache().find(key);
  if (it != cache().end())
    if (auto k = it->second.lock()) return k; // another thread finished first
  llvm::orc::LLJIT& j = engine();
  if (auto dying = loaded().find(key); dying != loaded().end()) { // its kernel is being destroyed
    llvm::consumeError(dying->second->remove());
    loaded().erase(dying);
  }
  auto tracker = j.getMainJITDylib().createResourceTracker();
  for (const std::string& object : objects)
    if (auto err = j.addObjectFile(tracker, llvm::MemoryBuffer::getMemBufferCopy(object, label))) {
      llvm::consumeError(tracker->remove());
      throw Error("jit: cannot load compiled code: " + llvm::toString(std::move(err)));
    }
  auto addr = j.lookup(symbol + ".packed");
  if (!addr) {
    llvm::consumeError(tracker->remove());
    throw Error("jit: cannot link compiled code: " + llvm::toString(addr.takeError()));
  }
  kernel->packed = addr->toPtr<void (*)(void**)>();
  kernel->resources = std::make_unique<Kernel::Resources>(Kernel::Resources{tracker});
  cache()[key] = kernel;
  loaded()[key] = tracker;
  return kernel;
}

/// Modules with at least this many instructions are compiled in partitions,
/// one per core (up to kMaxPartitions): below it, the bitcode hand-off and
/// thread start cost more than they save. A loop's callee stays with its
/// caller (partsOf), so calls between parts cost no run time (before that
/// rule, a threshold of 600 cut a scan's step from its loop: the ODE's value
/// and gradient, 0.13 -> 0.18-0.26 ms). Measured against 2,000 on two cores:
/// B4's first call 70-72 -> 41-43 ms, an unrolled LSTM's forward over 64 steps
/// (1,590 instructions) 36-37 -> 24 ms, no program slower, every run time the
/// same; 500 gained nothing more.
/// A module holding functions a fusion plan cut out of large code to compile
/// in parallel (kCompilePartAttribute) is partitioned whatever its size: the
/// plan cuts only code doing enough work per call that calls between parts
/// cost nothing measurable. (A 100-op chain's gradient, 456 instructions:
/// 36 -> 23 ms in LLVM; cut but compiled on one core it took 36 ms, against
/// 32 ms uncut.)
constexpr std::size_t kParallelInstructions = 1000;
constexpr unsigned kMaxPartitions = 4;

/// Constant tables of at least this many bytes are compiled into an object
/// of their own (separateLargeConstants).
constexpr uint64_t kSeparateConstantBytes = 4096;

/// Moves the large constant tables of `lm` (a gather's index table, a
/// program's data) into a module of their own and leaves declarations in
/// `lm`. Returns null when there are none. Loads from such tables are at
/// indices known only at run time, so the optimiser loses nothing, and the
/// tables skip the bitcode hand-off of module partitions, which writes and
/// reads a record element per byte (20-30 ms for a 200k-row problem).
std::unique_ptr<llvm::Module> separateLargeConstants(llvm::Module& lm, const std::string& symbol) {
  std::unique_ptr<llvm::Module> data;
  int count = 0;
  for (llvm::GlobalVariable& g : lm.globals()) {
    if (!g.isConstant() || !g.hasInitializer()) continue;
    const auto* table = llvm::dyn_cast<llvm::ConstantDataSequential>(g.getInitializer());
    if (!table || table->getRawDataValues().size() < kSeparateConstantBytes) continue;
    if (!data) {
      data = std::make_unique<llvm::Module>(lm.getName().str() + ".data", lm.getContext());
      data->setDataLayout(lm.getDataLayout());
      data->setTargetTriple(lm.getTargetTriple());
    }
    // The same initializer (the emitter writes tables as bytes): one context.
    const std::string name = symbol + ".data" + std::to_string(count++);
    auto* def = new llvm::GlobalVariable(*data, g.getValueType(), true, llvm::GlobalValue::ExternalLinkage,
                                         g.getInitializer(), name);
    def->setAlignment(g.getAlign());
    g.setInitializer(nullptr);
    g.setLinkage(llvm::GlobalValue::ExternalLinkage);
    g.setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::None);
    g.setName(name);
  }
  return data;
}

/// Optimises and compiles `lm` into object files. With several cores and a
/// large module, or one holding a plan's parts, the module is split
/// (jit/Partition.h) and each part is optimised and compiled in its own LLVM
/// context on its own thread; `partitions` says how many. `optMs` and
/// `emitMs` time the optimiser and code generator (partitioned: both in `optMs`).
std::vector<std::string> compileObjects(llvm::Module& lm, const CompileRequest& r, llvm::TargetMachine& tm,
                                        const std::string& symbol, unsigned& partitions, double& optMs, double& emitMs) {
  std::size_t instructions = 0, functions = 0, parts = 0;
  for (const llvm::Function& f : lm)
    if (!f.isDeclaration()) {
      instructions += f.getInstructionCount();
      ++functions;
      parts += f.hasFnAttribute(codegen::kCompilePartAttribute);
    }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  partitions = instructions >= kParallelInstructions || parts > 1
                   ? static_cast<unsigned>(std::min<std::size_t>({cores, kMaxPartitions, functions}))
                   : 1;
  auto t0 = Clock::now();
  std::vector<std::string> objects;
  if (std::unique_ptr<llvm::Module> data = separateLargeConstants(lm, symbol)) objects.push_back(codegen::emitObject(*data, tm));
  std::vector<std::string> bitcode;
  if (partitions > 1) bitcode = splitModule(lm, partitions, symbol);
  partitions = std::max<unsigned>(1, static_cast<unsigned>(bitcode.size()));
  if (bitcode.empty()) {
    codegen::optimize(lm, tm, r.optLevel);
    optMs = msSince(t0);
    t0 = Clock::now();
    objects.push_back(codegen::emitObject(lm, tm));
    emitMs = msSince(t0);
    return objects;
  }
  const std::size_t first = objects.size();
  objects.resize(first + bitcode.size());
  std::vector<std::exception_ptr> errors(bitcode.size());
  auto work = [&](std::size_t i) {
    try {
      llvm::LLVMContext ctx;
      auto part = llvm::parseBitcodeFile(llvm::MemoryBufferRef(bitcode[i], "partition"), ctx);
      if (!part) throw InternalError("jit: cannot read a partition back: " + llvm::toString(part.takeError()));
      auto ptm = codegen::createTargetMachine({r.optLevel, r.cpu});
      codegen::optimize(**part, *ptm, r.optLevel);
      objects[first + i] = codegen::emitObject(**part, *ptm);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < bitcode.size(); ++i) threads.emplace_back(work, i);
  work(0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  optMs = msSince(t0);
  return objects;
}

} // namespace

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

Counters counters() { return {memoryHits.load(), diskHits.load(), passRuns.load(), llvmRuns.load()}; }

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
  LongHash material;
  ir::fingerprint(r.module, {.codeLocations = true}, material);
  material.update(fmt::format("\n@{}\n{} O{}\n{}", r.function, targetKeyFor(r.cpu), r.optLevel, buildIdentity()));
  const CacheKey ck = CacheKey::of(material);
  const uint64_t key = ck.hash;
  const std::string symbol = "adjit_" + hex(key) + "_" + r.function;
  // Each dump file opens with a comment (in its own syntax) naming what was compiled.
  auto dumpStage = [&](const std::string& stage, std::string_view comment, const std::string& text) {
    dumpFile(dumpLabel + "." + stage, fmt::format("{} adjit dump {}: {}{}, kernel {}\n{}", comment, dumpLabel, r.function, sig, symbol, text));
  };
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
          notify({r.function, sig, CompileEvent::Cache::memory_hit, r.traceMs, keyMs, 0, 0, 0});
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
        notify({r.function, sig, CompileEvent::Cache::disk_hit, r.traceMs, keyMs, 0, 0, loadMs});
        return k;
      }
    }
  }

  const double keyMs = msSince(t0);
  // The traced text is printed before the passes run on what may be the
  // traced module itself.
  if (stages) stages->traced_adj = ir::print(r.module, {.locations = true});
  if (dump) dumpStage("1-traced.adj", "//", ir::print(r.module, {.locations = true}));
  t0 = Clock::now();
  std::unique_ptr<ir::Module> m = r.spent ? std::make_unique<ir::Module>(std::move(*r.spent)) : r.module.clone();
  if (ir::verifyAfterPasses()) ir::verify(*m);
  transforms::PipelineOptions passes;
  passes.subject = r.function + sig; // names the function in ADJIT_LOG=passes lines
  transforms::runPipeline(*m, transforms::defaultPipeline(), passes);
  ++passRuns;
  fn = m->lookup(r.function); // r.module's may be gone; the passes keep its signature
  ADJIT_ASSERT(fn, "compile: the passes removed @" + r.function);
  double passMs = msSince(t0);
  if (stages) stages->optimized_adj = ir::print(*m);
  if (dump) dumpStage("2-optimized.adj", "//", ir::print(*m, {.locations = true}));

  auto t1 = Clock::now();
  auto tm = codegen::createTargetMachine({r.optLevel, r.cpu});
  llvm::LLVMContext ctx;
  llvm::Module lm(label, ctx);
  std::string plans;
  double planMs = 0;
  const uint64_t scratch = codegen::lowerFunction(*m, r.function, symbol, lm, codegen::vectorUnit(*tm), true, (stages || dump) ? &plans : nullptr,
                                                  /*parallel=*/true, &planMs);
  if (stages) stages->plan = plans;
  if (dump) dumpStage("3-plan.txt", "//", plans);
  codegen::configureModule(lm, *tm);
  const double lowerMs = msSince(t1);
  if (stages) stages->llvm_ir = codegen::printLLVM(lm);
  if (dump) dumpStage("4-llvm.ll", ";", codegen::printLLVM(lm));
  ++llvmRuns;
  std::vector<std::string> objects;
  double optMs = 0, emitMs = 0;
  unsigned partitions = 1;
  if (stages || dump) { // every stage's text, from one module
    auto tOpt = Clock::now();
    codegen::optimize(lm, *tm, r.optLevel);
    optMs = msSince(tOpt);
    if (stages) stages->optimized_llvm_ir = codegen::printLLVM(lm);
    if (dump) dumpStage("5-llvm-opt.ll", ";", codegen::printLLVM(lm));
    auto clone = llvm::CloneModule(lm);
    std::string s = codegen::emitAssembly(*clone, *tm);
    if (stages) stages->assembly = s;
    if (dump) dumpStage("6-asm.s", tm->getMCAsmInfo()->getCommentString(), s);
    auto tEmit = Clock::now();
    objects.push_back(codegen::emitObject(lm, *tm));
    emitMs = msSince(tEmit);
  } else {
    objects = compileObjects(lm, r, *tm, symbol, partitions, optMs, emitMs);
  }
  double llvmMs = msSince(t1);
  // ADJIT_LLVM_ARGS=-time-passes: LLVM's per-pass times of this compilation, on stderr.
  if (llvm::TimePassesIsEnabled) llvm::reportAndResetTimings(&llvm::errs());
  if (cached) {
    std::vector<std::string> parts{symbol, std::to_string(scratch)};
    parts.insert(parts.end(), objects.begin(), objects.end());
    diskStore(ck, parts);
  }

  auto t2 = Clock::now();
  std::shared_ptr<Kernel> kernel = load(objects, symbol, label, key, scratch, *fn);
  const double linkMs = msSince(t2);
  notify({r.function, sig, CompileEvent::Cache::miss, r.traceMs, keyMs, passMs, llvmMs, linkMs});
  if (log)
    logLine("compile", fmt::format("{}{}: trace {:.2f} ms, key {:.2f} ms, passes {:.2f} ms, llvm {:.2f} ms (plan {:.2f}, lower {:.2f}, {}), "
                                   "link {:.2f} ms, cache miss{}{}",
                                   r.function, sig, r.traceMs, keyMs, passMs, llvmMs, planMs, lowerMs - planMs,
                                   partitions > 1 ? fmt::format("optimise and codegen {:.2f} in {} threads", optMs, partitions)
                                                  : fmt::format("optimise {:.2f}, codegen {:.2f}", optMs, emitMs),
                                   linkMs, disk, dump ? ", dump " + dumpLabel : ""));
  return kernel;
}

} // namespace adjit::engine

void adjit::set_compile_listener(std::function<void(const CompileEvent&)> l) {
  using namespace adjit::engine;
  std::lock_guard lock(listenerMutex);
  listener = l ? std::make_shared<const std::function<void(const CompileEvent&)>>(std::move(l)) : nullptr;
}

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
  if (k.scratchBytes == 0) {
    ptrs[n - 1] = nullptr;
    k.packed(ptrs);
  } else {
    ArenaSlice scratch(k.scratchBytes);
    ptrs[n - 1] = scratch.ptr;
    k.packed(ptrs);
  }
  runtime::rethrowCallbackFailure(); // a host callback that threw: its error, now that compiled code has returned
}

} // namespace adjit::engine
