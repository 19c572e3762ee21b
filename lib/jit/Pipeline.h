// jit/Pipeline.h — the one compile pipeline, shared by the JIT (Engine.cpp),
// ahead-of-time objects (Aot.cpp) and everything built on them. Its stages,
// in order: traced → passes → plan → lower → optimise → codegen; the JIT then
// loads the objects, AOT writes them with a header. What watches a
// compilation (dumps, Jitted::lower()'s stages, logs) is an Instrumentation
// around the stages, as MLIR's PassInstrumentation, never a branch inside
// them: inspection runs the production path. The cache lookup wraps the
// pipeline (Engine.cpp, Aot.cpp).
#pragma once

#include "codegen/TargetPool.h"
#include "ir/IR.h"
#include "jit/DiskCache.h"

#include <adjit/jit.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace llvm {
class LLVMContext;
class Module;
class TargetMachine;
} // namespace llvm

namespace adjit::engine {

/// How code is generated.
struct CompileOptions {
  int optLevel = 2; ///< LLVM's optimisation level, 0 to 3
  std::string cpu = {}; ///< the CPU to generate code for ("" is the host; names as LLVM's -mcpu)
  /// Loops with enough work are split into chunks run on threads through
  /// adjit_parallel_for (runtime/ThreadPool.h); without, the code calls nothing.
  bool threads = true;
  /// Each lowered function gets a `<symbol>.packed(void**)` entry point, which
  /// the JIT calls, and no other; objects for C callers have the plain entry points only.
  bool packed = true;
  /// Large modules may be optimised and compiled in parts on threads of their
  /// own, one object per part (the JIT). Off: one object (AOT).
  bool partition = true;
  /// Large factorisations may call LAPACK, loaded at run time
  /// (runtime/Lapack.h), where it is faster; only where a library is found
  /// and $ADJIT_LAPACK is not 0, outside runtime::lapack::GeneratedOnlyHere
  /// (`lapackInUse`). Off for objects (AOT).
  bool lapack = true;
};

/// Whether code compiled from `m` with `o` may call LAPACK: o.lapack, an op
/// of `m` whose lowering may (codegen::Lowering::lapack), and a LAPACK
/// library loaded (looked for only then: loading it costs milliseconds).
/// Part of the cache key: the generated code differs. (No pass of the
/// pipeline makes such an op, so the traced module and the lowered one agree.)
bool lapackInUse(const ir::Module& m, const CompileOptions& o);

/// The key of a compilation in the process-wide and disk caches: the IR
/// (with the locations compiled code reports: a while loop's limit error
/// names its line), `what` is compiled from it (the JIT: "@f"; objects: their
/// exports and header), the options, the target and adjit's build. The JIT
/// and ahead-of-time compilation key through here: what one depends on, the
/// other does.
CacheKey compileKey(const ir::Module& m, std::string_view what, const CompileOptions& o);

/// The stages of a compilation, in order.
enum class Stage : uint8_t { traced, passes, plan, lower, optimize, codegen };
/// "traced", "passes", "plan", "lower", "optimize", "codegen".
std::string_view stageName(Stage s);

/// What a stage made, for instrumentation to read (never to change).
struct StageArtifact {
  Stage stage;
  double ms = 0;                      ///< the stage's time
  const ir::Module* module = nullptr; ///< traced, passes: the IR
  const std::string* plan = nullptr;  ///< plan: every lowered function's fusion plan, as text
  llvm::Module* llvm = nullptr;       ///< lower, optimize: the LLVM module
  llvm::TargetMachine* target = nullptr; ///< lower, optimize: the target (for assembly)
};

/// Watches the stages of a compilation.
class Instrumentation {
public:
  virtual ~Instrumentation() = default;
  /// Whether this instrument reads the stages' text (the fusion plans, the
  /// LLVM module after optimisation): plans are then rendered, and the module
  /// is compiled whole, in one part (the same passes on the same code, on one
  /// thread), so that there is one module to read.
  virtual bool inspects() const { return false; }
  /// After each stage, with what it made.
  virtual void after(const StageArtifact& a) = 0;
};

/// Fills `stages` with every stage's text (Jitted::lower(), `adjit dump`).
std::unique_ptr<Instrumentation> collectStages(CompiledStages& stages);
/// Writes every stage's text to ADJIT_DUMP's directory, as `<label>.1-traced.adj`
/// to `<label>.6-asm.s`, each opening with a comment naming `subject`.
std::unique_ptr<Instrumentation> dumpStages(std::string label, std::string subject);

/// The optimised LLVM modules of a compilation whose objects came from the
/// fast code generator (Compilation::emit with `later`, the JIT's first
/// tier): code generation at the options' level makes the optimised objects
/// from the same optimised IR, later, on any one thread. Code generation
/// only chooses instructions and registers: both sets of objects compute the
/// same bits (adjit's IR fixes the order of every floating-point operation
/// once LLVM's optimiser has run, and asks for each fused multiply-add
/// explicitly, so no contraction is left to the code generator).
class OptimizedModules {
public:
  OptimizedModules();
  ~OptimizedModules();
  OptimizedModules(const OptimizedModules&) = delete;
  OptimizedModules& operator=(const OptimizedModules&) = delete;
  /// The optimised objects, one for each fast one and in the same order
  /// (parts compiled on threads of their own). Runs once.
  std::vector<std::string> emit();
  /// One object's optimised module (Pipeline.cpp).
  struct Part;

private:
  friend class Compilation;
  std::vector<std::unique_ptr<Part>> parts_;
  CompileOptions options_;
};

/// One compilation: a module's functions lowered into one LLVM module, then
/// optimised and compiled to objects. Stages run in order: passes (optional),
/// lower (once per exported function), emit.
class Compilation {
public:
  /// `name` names the LLVM module and the objects; `symbol` prefixes the
  /// symbols the pipeline makes itself (large constant tables).
  /// With ADJIT_VERIFY=1 (and in debug builds), an instrument of its own
  /// verifies every stage's artifact.
  Compilation(std::string name, std::string symbol, CompileOptions options, std::vector<Instrumentation*> instruments = {});
  ~Compilation();
  Compilation(const Compilation&) = delete;
  Compilation& operator=(const Compilation&) = delete;

  const CompileOptions& options() const { return options_; }
  llvm::TargetMachine& target() { return *target_; }
  llvm::LLVMContext& context() { return *context_; }
  /// The LLVM module lowered functions go to (callers may add their own
  /// wrappers to it before emit).
  llvm::Module& module() { return *module_; }

  /// Stage "traced" (reports `m` as it is) then "passes": adjit's default
  /// pipeline on `m`, in place. `subject` starts each ADJIT_LOG=passes line.
  void runPasses(ir::Module& m, const std::string& subject);
  /// Stages "plan" and "lower" for `function` of `m` (and the functions it
  /// calls): its code joins module() under the external name `symbol`.
  /// Returns the scratch bytes a call needs.
  /// With `work`, also `<symbol>_work`, whose caller gives the scratch.
  uint64_t lower(const ir::Module& m, const std::string& function, const std::string& symbol, bool work = false);
  /// Stages "optimize" and "codegen": the object files (one unless the
  /// options allow partitions and the module is large). Reports "plan" and
  /// "lower" first, for every function lowered. With `later`, the objects
  /// come from LLVM's fast code generator (-O0's instruction selection and
  /// register allocation, on the IR optimised as always), and `later` keeps
  /// the optimised IR for the optimised objects.
  std::vector<std::string> emit(OptimizedModules* later = nullptr);

  /// Milliseconds per stage so far, and how many parts were compiled.
  struct Times {
    double passes = 0, plan = 0, lower = 0, optimize = 0, codegen = 0;
    unsigned partitions = 1;
    double llvm() const { return plan + lower + optimize + codegen; }
  };
  const Times& times() const { return times_; }

  /// The "plan" stage shows each plan as it stands after this planning step
  /// ("all": after each; codegen::planSteps), not finished: for inspection
  /// (`adjit dump --emit=plan --print-plan-after=STEP`); the code is the same.
  void showPlanAfter(std::string step) { planAfter_ = std::move(step); }

private:
  void report(const StageArtifact& a);
  bool inspected() const;

  std::string name_, symbol_;
  CompileOptions options_;
  std::vector<Instrumentation*> instruments_;
  std::unique_ptr<Instrumentation> verifier_; ///< ADJIT_VERIFY: checks every stage's artifact
  codegen::PooledTargetMachine target_;
  std::unique_ptr<llvm::LLVMContext> context_;
  std::unique_ptr<llvm::Module> module_;
  std::string plans_, planAfter_;
  Times times_;
};

} // namespace adjit::engine
