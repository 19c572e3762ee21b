// jit/Pipeline.cpp — the stages of a compilation (Pipeline.h), their timing,
// and the partitioned optimisation and code generation of large modules.
#include "jit/Pipeline.h"

#include "codegen/Codegen.h"
#include "codegen/Lowering.h"
#include "codegen/Target.h"
#include "ir/Text.h"
#include "ir/Verifier.h"
#include "jit/Partition.h"
#include "runtime/Lapack.h"
#include "support/Assert.h"
#include "support/Log.h"
#include "transforms/Passes.h"

#include <fmt/format.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace adjit::engine {
namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

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

/// How many parts to compile `lm` in: one unless it is large or holds a
/// plan's parts, and there are cores for more.
unsigned partitionsFor(const llvm::Module& lm) {
  std::size_t instructions = 0, functions = 0, parts = 0;
  for (const llvm::Function& f : lm)
    if (!f.isDeclaration()) {
      instructions += f.getInstructionCount();
      ++functions;
      parts += f.hasFnAttribute(codegen::kCompilePartAttribute);
    }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return instructions >= kParallelInstructions || parts > 1
             ? static_cast<unsigned>(std::min<std::size_t>({cores, kMaxPartitions, functions}))
             : 1;
}

/// Machine code for the optimised module `m` from LLVM's fast code
/// generator (-O0: FastISel and the fast register allocator), for the CPU
/// of `o`; `m` is left as it was.
std::string emitFast(const llvm::Module& m, const CompileOptions& o) {
  std::unique_ptr<llvm::Module> copy = llvm::CloneModule(m); // code generation changes its module
  return codegen::emitObject(*copy, *codegen::borrowTargetMachine({0, o.cpu}));
}

} // namespace

struct OptimizedModules::Part {
  std::unique_ptr<llvm::LLVMContext> context; ///< owns `module`'s types and constants
  std::unique_ptr<llvm::Module> module;       ///< null: `object` is final (a constant table)
  std::string object;
};

OptimizedModules::OptimizedModules() = default;
OptimizedModules::~OptimizedModules() = default;

std::vector<std::string> OptimizedModules::emit() {
  // Parts (each in its own context) are compiled on threads of their own,
  // as Compilation::emit compiles them: the optimised code is then in place
  // about when compiling it alone would have finished.
  std::vector<Part*> todo;
  for (const std::unique_ptr<Part>& p : parts_)
    if (p->module) todo.push_back(p.get());
  std::vector<std::exception_ptr> errors(todo.size());
  auto work = [&](std::size_t i) {
    try {
      Part& p = *todo[i];
      p.object = codegen::emitObject(*p.module, *codegen::borrowTargetMachine({options_.optLevel, options_.cpu}));
      p.module.reset();
      p.context.reset();
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < todo.size(); ++i) threads.emplace_back(work, i);
  if (!todo.empty()) work(0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  std::vector<std::string> objects;
  for (const std::unique_ptr<Part>& p : parts_) objects.push_back(std::move(p->object));
  parts_.clear();
  return objects;
}

namespace {

/// Optimises and compiles each part of `bitcode` in its own LLVM context on
/// its own thread, into objects[first + i]; with `later`, compiles them with
/// the fast code generator and keeps the optimised parts in later->parts_[first + i].
void compileParts(const std::vector<std::string>& bitcode, const CompileOptions& o, std::vector<std::string>& objects,
                  std::size_t first, std::vector<std::unique_ptr<OptimizedModules::Part>>* later) {
  std::vector<std::exception_ptr> errors(bitcode.size());
  auto work = [&](std::size_t i) {
    try {
      auto ctx = std::make_unique<llvm::LLVMContext>();
      auto part = llvm::parseBitcodeFile(llvm::MemoryBufferRef(bitcode[i], "partition"), *ctx);
      if (!part) throw InternalError("jit: cannot read a partition back: " + llvm::toString(part.takeError()));
      auto ptm = codegen::borrowTargetMachine({o.optLevel, o.cpu});
      codegen::optimize(**part, *ptm, o.optLevel);
      if (later) {
        objects[first + i] = emitFast(**part, o);
        (*later)[first + i] = std::make_unique<OptimizedModules::Part>(
            OptimizedModules::Part{std::move(ctx), std::move(*part), {}});
      } else {
        objects[first + i] = codegen::emitObject(**part, *ptm);
      }
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
}

/// The target part of cache keys for a CPU name (empty: the host), computed once.
std::string targetKeyFor(const std::string& cpu) {
  static std::mutex m;
  static std::map<std::string, std::string> keys;
  std::lock_guard lock(m);
  auto it = keys.find(cpu);
  if (it == keys.end()) it = keys.emplace(cpu, codegen::targetKey(*codegen::createTargetMachine({2, cpu}))).first;
  return it->second;
}

} // namespace

bool lapackInUse(const ir::Module& m, const CompileOptions& o) {
  if (!o.lapack || runtime::lapack::generatedOnlyHere()) return false;
  auto mayCall = [](const auto& f) {
    return std::any_of(f->ops.begin(), f->ops.end(), [](const ir::Op& op) { return codegen::lowering(op.kind).lapack; });
  };
  return std::any_of(m.functions.begin(), m.functions.end(), mayCall) && runtime::lapack::available();
}

CacheKey compileKey(const ir::Module& m, std::string_view what, const CompileOptions& o) {
  LongHash h;
  ir::fingerprint(m, {.codeLocations = true}, h);
  h.update(fmt::format("\n{}\n{} O{} threads {} packed {} partition {} lapack {}\n{}", what, targetKeyFor(o.cpu), o.optLevel,
                       o.threads, o.packed, o.partition, lapackInUse(m, o), buildIdentity()));
  return CacheKey::of(h);
}

namespace {

/// Every stage of a compilation as text, for a sink. The optimised LLVM
/// module is also rendered as assembly, from a copy (code generation changes
/// the module).
class StageText final : public Instrumentation {
public:
  using Sink = std::function<void(Stage, const std::string& text)>;
  /// `locations`: the IR after the passes keeps its source locations (dumps).
  StageText(Sink sink, bool locations) : sink_(std::move(sink)), locations_(locations) {}
  bool inspects() const override { return true; }
  void after(const StageArtifact& a) override {
    if (a.module) sink_(a.stage, ir::print(*a.module, {.locations = a.stage == Stage::traced || locations_}));
    if (a.plan) sink_(a.stage, *a.plan);
    if (a.llvm) sink_(a.stage, codegen::printLLVM(*a.llvm));
    if (a.llvm && a.stage == Stage::optimize) {
      auto copy = llvm::CloneModule(*a.llvm);
      sink_(Stage::codegen, codegen::emitAssembly(*copy, *a.target));
    }
  }

private:
  Sink sink_;
  bool locations_;
};

/// Verifies what each stage made (ADJIT_VERIFY=1, and debug builds): the IR as
/// it enters the pipeline and after the passes, the LLVM module after lowering
/// and after LLVM's optimiser.
class VerifyStages final : public Instrumentation {
public:
  void after(const StageArtifact& a) override {
    if (a.module) ir::verify(*a.module);
    if (a.llvm) {
      std::string err;
      llvm::raw_string_ostream os(err);
      ADJIT_ASSERT(!llvm::verifyModule(*a.llvm, &os),
                   fmt::format("the {} stage made invalid LLVM IR: {}", stageName(a.stage), err));
    }
  }
};

} // namespace

std::unique_ptr<Instrumentation> collectStages(CompiledStages& stages) {
  return std::make_unique<StageText>(
      [&stages](Stage s, const std::string& text) {
        std::string* field[] = {&stages.traced_adj, &stages.optimized_adj,     &stages.plan,
                                &stages.llvm_ir,    &stages.optimized_llvm_ir, &stages.assembly};
        *field[static_cast<std::size_t>(s)] = text;
      },
      false);
}

std::unique_ptr<Instrumentation> dumpStages(std::string label, std::string subject) {
  return std::make_unique<StageText>(
      [label = std::move(label), subject = std::move(subject)](Stage s, const std::string& text) {
        static constexpr const char* kFiles[] = {"1-traced.adj", "2-optimized.adj", "3-plan.txt", "4-llvm.ll", "5-llvm-opt.ll", "6-asm.s"};
        const char* comment = s <= Stage::plan ? "//" : s == Stage::codegen ? "#" : ";";
        dumpFile(fmt::format("{}.{}", label, kFiles[static_cast<std::size_t>(s)]),
                 fmt::format("{} adjit dump {}: {}\n{}", comment, label, subject, text));
      },
      true);
}

std::string_view stageName(Stage s) {
  switch (s) {
  case Stage::traced: return "traced";
  case Stage::passes: return "passes";
  case Stage::plan: return "plan";
  case Stage::lower: return "lower";
  case Stage::optimize: return "optimize";
  case Stage::codegen: return "codegen";
  }
  ADJIT_UNREACHABLE("bad stage");
}

Compilation::Compilation(std::string name, std::string symbol, CompileOptions options, std::vector<Instrumentation*> instruments)
    : name_(std::move(name)), symbol_(std::move(symbol)), options_(std::move(options)), instruments_(std::move(instruments)),
      target_(codegen::borrowTargetMachine({options_.optLevel, options_.cpu})),
      context_(std::make_unique<llvm::LLVMContext>()), module_(std::make_unique<llvm::Module>(name_, *context_)) {
  if (ir::verifyAfterPasses()) {
    verifier_ = std::make_unique<VerifyStages>();
    instruments_.insert(instruments_.begin(), verifier_.get());
  }
}

Compilation::~Compilation() = default;

void Compilation::report(const StageArtifact& a) {
  for (Instrumentation* i : instruments_) i->after(a);
}

bool Compilation::inspected() const {
  return std::any_of(instruments_.begin(), instruments_.end(), [](const Instrumentation* i) { return i->inspects(); });
}

void Compilation::runPasses(ir::Module& m, const std::string& subject) {
  report({.stage = Stage::traced, .module = &m});
  const auto t0 = Clock::now();
  transforms::PipelineOptions passes;
  passes.subject = subject;
  transforms::runPipeline(m, transforms::defaultPipeline(), passes);
  times_.passes += msSince(t0);
  report({.stage = Stage::passes, .ms = times_.passes, .module = &m});
}

uint64_t Compilation::lower(const ir::Module& m, const std::string& function, const std::string& symbol, bool work) {
  const auto t0 = Clock::now();
  double planMs = 0;
  const uint64_t scratch =
      codegen::lowerFunction(m, function, symbol, *module_, codegen::vectorUnit(*target_),
                             {.packed = options_.packed, .work = work, .parallel = options_.threads, .lapack = lapackInUse(m, options_), .plans = inspected() ? &plans_ : nullptr,
                              .planAfter = planAfter_, .planMs = &planMs});
  times_.plan += planMs;
  times_.lower += msSince(t0) - planMs;
  return scratch;
}

std::vector<std::string> Compilation::emit(OptimizedModules* later) {
  if (later) later->options_ = options_;
  // A finished object (constant tables) serves both tiers.
  auto keepObject = [&](const std::string& object) {
    if (later) later->parts_.push_back(std::make_unique<OptimizedModules::Part>(OptimizedModules::Part{nullptr, nullptr, object}));
  };
  auto t0 = Clock::now();
  codegen::configureModule(*module_, *target_);
  times_.lower += msSince(t0);
  report({.stage = Stage::plan, .ms = times_.plan, .plan = &plans_});
  report({.stage = Stage::lower, .ms = times_.lower, .llvm = module_.get(), .target = target_.get()});

  t0 = Clock::now();
  std::vector<std::string> objects;
  const unsigned parts = options_.partition && !inspected() ? partitionsFor(*module_) : 1;
  if (parts > 1) {
    if (std::unique_ptr<llvm::Module> data = separateLargeConstants(*module_, symbol_)) {
      objects.push_back(codegen::emitObject(*data, *target_));
      keepObject(objects.back());
    }
    std::vector<std::string> bitcode = splitModule(*module_, parts, symbol_);
    if (!bitcode.empty()) {
      // Each part is optimised and compiled on its thread: one time for both.
      times_.partitions = static_cast<unsigned>(bitcode.size());
      const std::size_t first = objects.size();
      objects.resize(first + bitcode.size());
      if (later) later->parts_.resize(first + bitcode.size());
      compileParts(bitcode, options_, objects, first, later ? &later->parts_ : nullptr);
      times_.optimize += msSince(t0);
      report({.stage = Stage::optimize, .ms = times_.optimize});
      report({.stage = Stage::codegen});
      return objects;
    }
  }
  codegen::optimize(*module_, *target_, options_.optLevel);
  times_.optimize += msSince(t0);
  report({.stage = Stage::optimize, .ms = times_.optimize, .llvm = module_.get(), .target = target_.get()});
  t0 = Clock::now();
  if (later) {
    objects.push_back(emitFast(*module_, options_));
    // The optimised module moves out, with the context that owns its parts.
    later->parts_.push_back(std::make_unique<OptimizedModules::Part>(
        OptimizedModules::Part{std::move(context_), std::move(module_), {}}));
  } else {
    objects.push_back(codegen::emitObject(*module_, *target_));
  }
  times_.codegen += msSince(t0);
  report({.stage = Stage::codegen, .ms = times_.codegen});
  return objects;
}

} // namespace adjit::engine
