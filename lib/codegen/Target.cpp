// codegen/Target.cpp — target machines, the optimisation pipeline and emission.
#include "codegen/Target.h"

#include "codegen/VectorMath.h"

#include <adjit/error.h>

#include <llvm/AsmParser/Parser.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/CodeGen/MachineModuleInfo.h>
#include <llvm/CodeGen/Passes.h>
#include <llvm/CodeGen/TargetPassConfig.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Passes/StandardInstrumentations.h>
#include <llvm/Transforms/Scalar/LoopUnrollPass.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Host.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>
#include <vector>

namespace adjit::codegen {

static void initializeLLVM() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
    const char* args = std::getenv("ADJIT_LLVM_ARGS");
    // Code generation at CodeGenOptLevel::None (the JIT's first tier, see
    // jit/Pipeline.h; opt_level 0) keeps -O0's fast instruction selection
    // but allocates registers as -O1 and up do: -O0's allocator spills every
    // value live across blocks, which left an MLP's value and gradient 4-5x
    // slower than the optimised code (the same in 1.0-1.1x with this), for
    // 0-2 ms more compile time (bench/compile_bench.cpp --tiers).
    // Register allocation never changes what the code computes. Global in
    // LLVM, so set once here, unless ADJIT_LLVM_ARGS names it.
    if (!args || std::string_view(args).find("optimize-regalloc") == std::string_view::npos) {
      llvm::StringMap<llvm::cl::Option*>& options = llvm::cl::getRegisteredOptions();
      if (auto it = options.find("optimize-regalloc"); it != options.end())
        it->second->addOccurrence(0, "optimize-regalloc", "true");
    }
    // ADJIT_LLVM_ARGS: LLVM's own command-line options, for experiments (as
    // Julia's JULIA_LLVM_ARGS or XLA_FLAGS), e.g. "-enable-post-misched=false".
    // A bad one is reported on stderr and ignored; it never ends the process.
    if (args) {
      std::vector<std::string> words{"adjit"};
      std::istringstream in(args);
      for (std::string w; in >> w;) words.push_back(w);
      std::vector<const char*> argv;
      for (const std::string& w : words) argv.push_back(w.c_str());
      std::string errors;
      llvm::raw_string_ostream os(errors);
      if (!llvm::cl::ParseCommandLineOptions(static_cast<int>(argv.size()), argv.data(), "adjit", &os)) {
        os.flush();
        std::fprintf(stderr, "adjit: warning: ADJIT_LLVM_ARGS ignored: %s", errors.c_str());
      }
    }
  });
}

static llvm::CodeGenOptLevel codegenLevel(int level) {
  switch (level) {
  case 0: return llvm::CodeGenOptLevel::None;
  case 1: return llvm::CodeGenOptLevel::Less;
  case 3: return llvm::CodeGenOptLevel::Aggressive;
  default: return llvm::CodeGenOptLevel::Default;
  }
}

/// The CPU asked for: the caller's, else ADJIT_CPU (x86-64-v2 to see what an
/// SSE4.2 machine computes, x86-64-v3 for AVX2), else "" (the host's).
static std::string requestedCpu(const TargetOptions& o) {
  if (!o.cpu.empty()) return o.cpu;
  const char* env = std::getenv("ADJIT_CPU");
  return env ? env : "";
}

std::unique_ptr<llvm::TargetMachine> createTargetMachine(const TargetOptions& o) {
  initializeLLVM();
  if (o.optLevel < 0 || o.optLevel > 3)
    throw Error("optimisation level must be 0, 1, 2 or 3, got " + std::to_string(o.optLevel));
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) throw Error("cannot target the host: " + llvm::toString(jtmb.takeError()));
  const std::string cpu = requestedCpu(o);
  if (!cpu.empty()) {
    const llvm::Triple& t = jtmb->getTargetTriple();
    std::string err;
    const llvm::Target* target = llvm::TargetRegistry::lookupTarget(t.str(), err);
    // Asked of the default CPU's subtarget: one made for an unknown CPU
    // prints LLVM's own warning before ours.
    std::unique_ptr<llvm::MCSubtargetInfo> sti(
        target ? target->createMCSubtargetInfo(t.str(), "", "") : nullptr);
    if (!sti || !sti->isCPUStringValid(cpu))
      throw Error("unknown target CPU '" + cpu + "' for " + t.str() + (o.cpu.empty() ? " (from ADJIT_CPU)" : ""));
    jtmb->setCPU(cpu);
    jtmb->getFeatures() = llvm::SubtargetFeatures();
  }
  jtmb->setCodeGenOptLevel(codegenLevel(o.optLevel));
  jtmb->setRelocationModel(llvm::Reloc::PIC_);
  jtmb->setCodeModel(llvm::CodeModel::Small);
  auto tm = jtmb->createTargetMachine();
  if (!tm) throw Error("cannot create a target machine: " + llvm::toString(tm.takeError()));
  return std::move(*tm);
}

namespace {
/// Idle target machines by level and CPU. Never destroyed, like the JIT:
/// background compiles may borrow during static destruction.
struct TargetMachinePool {
  std::mutex m;
  std::map<std::string, std::vector<std::unique_ptr<llvm::TargetMachine>>> idle;
};
TargetMachinePool& targetMachinePool() {
  static auto* pool = new TargetMachinePool;
  return *pool;
}
} // namespace

void ReturnTargetMachine::operator()(llvm::TargetMachine* tm) const {
  if (!tm) return;
  TargetMachinePool& pool = targetMachinePool();
  std::lock_guard lock(pool.m);
  pool.idle[key].emplace_back(tm);
}

PooledTargetMachine borrowTargetMachine(const TargetOptions& o) {
  // Keyed as createTargetMachine resolves the CPU (ADJIT_CPU may change).
  std::string key = std::to_string(o.optLevel) + " " + requestedCpu(o);
  TargetMachinePool& pool = targetMachinePool();
  {
    std::lock_guard lock(pool.m);
    auto it = pool.idle.find(key);
    if (it != pool.idle.end() && !it->second.empty()) {
      llvm::TargetMachine* tm = it->second.back().release();
      it->second.pop_back();
      return PooledTargetMachine(tm, ReturnTargetMachine{std::move(key)});
    }
  }
  return PooledTargetMachine(createTargetMachine(o).release(), ReturnTargetMachine{std::move(key)});
}

std::string targetKey(const llvm::TargetMachine& tm) {
  return tm.getTargetTriple().str() + " " + tm.getTargetCPU().str() + " " + tm.getTargetFeatureString().str();
}

VectorUnit vectorUnit(const llvm::TargetMachine& tm) {
  const llvm::MCSubtargetInfo& sti = *tm.getMCSubtargetInfo();
  if (sti.checkFeatures("+avx512f")) return {512, 32};
  if (sti.checkFeatures("+avx")) return {256, 16};
  return {128, 16};
}

void configureModule(llvm::Module& m, const llvm::TargetMachine& tm) {
  m.setTargetTriple(tm.getTargetTriple().str());
  m.setDataLayout(tm.createDataLayout());
  for (llvm::Function& f : m) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", tm.getTargetCPU());
    // Spill slots aligned to the vector width. Without this, LLVM decides
    // whether to realign the stack before register allocation, from the
    // allocas alone (SROA leaves none): the 64-byte spills of a loop's
    // vectors around libmvec calls then land at whatever the caller's rsp
    // gives, mostly across two cache lines. Measured on B2 (AVX-512, one
    // thread): 1.25-1.35x the hand-written loop before, 1.0x after.
    f.addFnAttr("stackrealign");
    if (!tm.getTargetFeatureString().empty()) f.addFnAttr("target-features", tm.getTargetFeatureString());
  }
}

/// adjit's -O2: the passes of LLVM's default -O2 pipeline that pay off on the
/// code adjit emits, in the same order. That code is loops over buffers with
/// scalar bodies, already fused, memoised and free of redundant loads (the
/// planner's work); what it needs from LLVM is inlining of control flow's
/// bodies, scalar clean-up, loop canonicalisation, full unrolling of short
/// loops, vectorisation and the clean-up after it. Left out, measured together
/// to change no benchmark (bench/: B1-B4, G1-G4, F, H4, ODE, ADBench, matmul):
/// GVN, jump threading, correlated-value propagation, reassociation, DSE,
/// memcpy optimisation, loop idiom recognition and unswitching, and the
/// interprocedural passes (IPSCCP, globalopt, attribute inference beyond
/// function-attrs); and the SLP vectoriser, for correctness (see optimize).
/// Also left out: loop load elimination after vectorisation (it forwards a
/// value stored in one iteration to a load of a later one). The planner does
/// not reload what a loop stored, so it finds next to nothing: with and
/// without it, the assembly of B1-B3, G1-G3 and the MLP is byte for byte the
/// same; of the unit tests' compilations, 3,194 were compared with it and
/// three other candidates left out, and the 488 that differed and 493 others
/// compiled again with only it left out: one differed, in the register of one
/// scalar addition. It was costly for that, since it builds each loop's
/// memory dependences again: 10% of the instructions LLVM spent on the MLP's
/// value and gradient, 5% of G3's (callgrind, on valgrind's AVX2 CPU).
/// The candidates kept, each changing some test's assembly: vector-combine
/// (around gathers) and the loop rotation and deletion after float2int.
/// On the unrolled LSTM's gradient (bench/compile) the
/// optimiser takes ~55 instead of ~85 ms per part, for the same machine code
/// speed. Levels 1 and 3 keep LLVM's own pipelines.
static std::string adjitO2Pipeline() {
  const std::string simplify = "simplifycfg<bonus-inst-threshold=1;switch-range-to-icmp;keep-loops;"
                               "speculate-blocks;simplify-cond-branch>";
  const std::string simplifyLate = "simplifycfg<bonus-inst-threshold=1;forward-switch-cond;switch-range-to-icmp;"
                                   "switch-to-lookup;no-keep-loops;hoist-common-insts;sink-common-insts;"
                                   "speculate-blocks;simplify-cond-branch>";
  const std::string combine = "instcombine<max-iterations=1;no-verify-fixpoint>";
  return "cgscc(devirt<4>(inline,function-attrs<skip-non-recursive-function-attrs>)),"
         "function(" +
         simplify + ",sroa<modify-cfg>,early-cse<memssa>," + combine + "," + simplify +
         // Loop canonicalisation and invariant code motion, then full unrolling
         // of short loops (the default pipeline's unrolling is off, see below).
         ",loop-mssa(licm<no-allowspeculation>,loop-rotate<header-duplication>,licm<allowspeculation>)," + simplify +
         "," + combine + ",loop(indvars,loop-deletion,loop-unroll-full),sroa<modify-cfg>," + combine +
         ",loop-mssa(licm<allowspeculation>)," + simplify +
         // Vectorisation (with the vector math mappings) and its clean-up.
         ",float2int,loop(loop-rotate<header-duplication>,loop-deletion),inject-tli-mappings,loop-vectorize,"
         "infer-alignment," +
         combine + "," + simplifyLate + ",vector-combine," + combine +
         ",loop-mssa(licm<allowspeculation>),instsimplify," + simplify + "),globaldce";
}

/// The C library's functions for `triple`, with the vector math variants
/// of `tm`'s CPU (addVectorMath): built once per triple, CPU and features,
/// then copied by each compile (building took 2% of a small tier-1 compile,
/// and kept a new copy of every variant's name each time).
static const llvm::TargetLibraryInfoImpl& libraryInfo(const llvm::Triple& triple, const llvm::TargetMachine& tm) {
  static std::mutex m;
  static auto* known = new std::map<std::string, std::unique_ptr<llvm::TargetLibraryInfoImpl>>;
  const std::string key = triple.str() + " " + targetKey(tm);
  std::lock_guard lock(m);
  std::unique_ptr<llvm::TargetLibraryInfoImpl>& info = (*known)[key];
  if (!info) {
    info = std::make_unique<llvm::TargetLibraryInfoImpl>(triple);
    addVectorMath(*info, triple, *tm.getMCSubtargetInfo());
  }
  return *info;
}

void optimize(llvm::Module& m, llvm::TargetMachine& tm, int level) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = level >= 2;
  // No SLP vectorisation, at any level: LLVM 19's SLP vectoriser builds
  // shuffles that drop lanes of gathered operands (the known miscompiles
  // llvm/llvm-project#117170, #125259, #135113, fixed after 19.1.7). adjit
  // met one: a 4x4 matmul fully unrolled before a switch had lanes of its
  // result built from poison at -O2 on AVX-512 (test_codegen, "the SLP
  // vectoriser"). adjit's loops are vectorised by the loop vectoriser; SLP
  // only packed what full unrolling left straight-line. Measured without it
  // (adjit_adbench and adjit_bench, one thread, old and new builds taking
  // turns): BA's derivative 5-10% slower, everything else unchanged. Worth
  // trying again with an LLVM that has the fixes.
  pto.SLPVectorization = false;
  // No late unrolling: after vectorisation, LLVM's LoopUnrollPass unrolls
  // loops of known trip count again (partially, by 4-8 on Zen 4) to fill the
  // core's loop buffer. Our loops are already vectorised and interleaved, so
  // that doubled the code the code generator sees (GMM's gradient: 315 ->
  // 213 ms in opt + llc without it) for no measured run-time gain (bench/:
  // B1-B4, G1-G4, ADBench, matmul unchanged). Small loops are still unrolled
  // completely, before vectorisation, by the pass added below (the default
  // pipeline's copy of it is off with LoopUnrolling). These options shape
  // LLVM's own pipelines (levels 1 and 3); adjit's level-2 list follows them.
  pto.LoopUnrolling = false;
  // Instrumented like opt's pipeline, so ADJIT_LLVM_ARGS=-time-passes also
  // times the optimiser's passes, not only the code generator's.
  llvm::PassInstrumentationCallbacks pic;
  llvm::StandardInstrumentations si(m.getContext(), /*DebugLogging=*/false);
  si.registerCallbacks(pic, &mam);
  llvm::PassBuilder pb(&tm, pto, std::nullopt, &pic);
  if (level >= 2)
    pb.registerLoopOptimizerEndEPCallback([](llvm::LoopPassManager& lpm, llvm::OptimizationLevel ol) {
      lpm.addPass(llvm::LoopFullUnrollPass(static_cast<int>(ol.getSpeedupLevel()), /*OnlyWhenForced=*/false,
                                           /*ForgetSCEV=*/false));
    });
  llvm::TargetLibraryInfoImpl tlii(libraryInfo(llvm::Triple(m.getTargetTriple()), tm));
  fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::OptimizationLevel ol = level <= 0   ? llvm::OptimizationLevel::O0
                               : level == 1 ? llvm::OptimizationLevel::O1
                               : level == 2 ? llvm::OptimizationLevel::O2
                                            : llvm::OptimizationLevel::O3;
  llvm::ModulePassManager mpm;
  if (level == 2) {
    static const std::string pipeline = adjitO2Pipeline();
    if (llvm::Error e = pb.parsePassPipeline(mpm, pipeline))
      throw InternalError("codegen: adjit's pass pipeline does not parse: " + llvm::toString(std::move(e)));
  } else {
    mpm = level <= 0 ? pb.buildO0DefaultPipeline(ol) : pb.buildPerModuleDefaultPipeline(ol);
  }
  mpm.run(m, mam);
}

/// Adds the code generator's passes to `pm`, as LLVMTargetMachine::addPassesToEmitFile
/// does, less the machine instruction scheduler at CodeGenOptLevel::None.
/// That level (the first tier) allocates registers as -O1 does (see
/// initializeLLVM), and LLVM's pipeline then schedules before allocation
/// too, which only shortens the code's critical paths. Without it, tier-1
/// compiles of B2 and G3 take 6% fewer instructions (callgrind); their
/// code computes the same (scheduling reorders, never changes, operations).
static bool addCodeGenPasses(llvm::legacy::PassManager& pm, llvm::TargetMachine& tm, llvm::raw_pwrite_stream& os,
                             llvm::CodeGenFileType kind) {
  auto& ltm = static_cast<llvm::LLVMTargetMachine&>(tm);
  if (tm.getOptLevel() != llvm::CodeGenOptLevel::None || !llvm::TargetPassConfig::willCompleteCodeGenPipeline())
    return ltm.addPassesToEmitFile(pm, os, nullptr, kind);
  auto* mmi = new llvm::MachineModuleInfoWrapperPass(&ltm);
  llvm::TargetPassConfig* config = ltm.createPassConfig(pm);
  config->setDisableVerify(true);
  config->disablePass(&llvm::MachineSchedulerID);
  pm.add(config);
  pm.add(mmi);
  if (config->addISelPasses()) return true;
  config->addMachinePasses();
  config->setInitialized();
  if (ltm.addAsmPrinter(pm, os, nullptr, kind, mmi->getMMI().getContext())) return true;
  pm.add(llvm::createFreeMachineFunctionPass());
  return false;
}

static std::string emit(llvm::Module& m, llvm::TargetMachine& tm, llvm::CodeGenFileType kind) {
  llvm::SmallVector<char, 0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  llvm::TargetLibraryInfoImpl tlii(llvm::Triple(m.getTargetTriple()));
  pm.add(new llvm::TargetLibraryInfoWrapperPass(tlii));
  if (addCodeGenPasses(pm, tm, os, kind)) throw Error("the target cannot emit this file type");
  pm.run(m);
  return std::string(buf.begin(), buf.end());
}

std::string emitObject(llvm::Module& m, llvm::TargetMachine& tm) {
  return emit(m, tm, llvm::CodeGenFileType::ObjectFile);
}

std::string emitAssembly(llvm::Module& m, llvm::TargetMachine& tm) {
  return emit(m, tm, llvm::CodeGenFileType::AssemblyFile);
}

void warmUpCodeGenerator() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Instruction selection builds its tables of value types on first use:
    // one for machine value types, one for the others (<13 x double> here,
    // which FastISel leaves to SelectionDAG even at -O0).
    static const char* text = R"(
define void @warm(ptr %p) {
  %v = load <13 x double>, ptr %p, align 8
  %w = fmul <13 x double> %v, %v
  store <13 x double> %w, ptr %p, align 8
  ret void
}
)";
    llvm::LLVMContext ctx;
    llvm::SMDiagnostic err;
    std::unique_ptr<llvm::Module> m = llvm::parseAssemblyString(text, err, ctx);
    if (!m) throw InternalError("codegen: the warm-up module does not parse: " + err.getMessage().str());
    auto tm = createTargetMachine({0, ""});
    configureModule(*m, *tm);
    emitObject(*m, *tm);
  });
}

std::string printLLVM(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return s;
}

} // namespace adjit::codegen
