// codegen/Codegen.h — lowers IR functions to LLVM IR over flat row-major buffers.
//
// For an IR function @f the generated code is, for C callers (AOT),
//   void <symbol>(const void* in0, ..., void* out0, ...)   // buffers must not overlap
// or, for the JIT (LowerOptions::packed),
//   void <symbol>.packed(void** args)                      // args = {in..., out..., scratch}
// Large intermediates live in a scratch region whose size is known at compile
// time: <symbol> mallocs it per call; callers of .packed (the JIT) pass a
// reusable one, so repeated calls touch no fresh pages.
// Elementwise and index-mapping ops fuse into the loops of their consumers
// (a reduction at the end of a chain included), so their intermediates are
// never stored; FusionPlan.h decides what is materialised and which loops
// exist, Codegen.cpp renders that plan.
#pragma once

#include "codegen/Emitter.h"
#include "ir/IR.h"

#include <llvm/IR/Module.h>

namespace adjit::codegen {

/// Marks the LLVM functions a fusion plan cut large code into so that they
/// compile in parallel (FusionPlan::compileParts): the JIT partitions a module
/// holding them whatever its size (jit/Engine.cpp).
inline constexpr const char* kCompilePartAttribute = "adjit-compile-part";

/// How lowerFunction lowers, and what it reports.
struct LowerOptions {
  /// A `<symbol>.packed(void**)` entry point (the JIT's) instead of the plain
  /// `<symbol>(ptr in..., ptr out...)` of objects for C callers.
  bool packed = true;
  /// A `<symbol>_work(ptr in..., ptr out..., ptr scratch)` entry point taking
  /// its scratch from the caller (AOT code that must not allocate).
  bool work = false;
  /// Loops with enough work are split into chunks run through
  /// adjit_parallel_for (runtime/ThreadPool.h); without, the code calls nothing.
  bool parallel = false;
  /// Large factorisations may call LAPACK (runtime/Lapack.h) instead of
  /// generated loops: for the JIT when a LAPACK library is loaded; objects
  /// stay self-contained without.
  bool lapack = false;
  /// Where the fusion plan of every lowered function is appended, if anywhere.
  std::string* plans = nullptr;
  /// With `plans`: the plan as it stands after this step ("all": after each;
  /// see planSteps in FusionPlan.h), in place of the finished plan.
  std::string planAfter;
  /// Where the milliseconds spent planning are added, if anywhere (the rest
  /// is emission; ADJIT_LOG=compile shows both).
  double* planMs = nullptr;
};

/// Adds the lowering of `m`'s function `entry` (and the functions it calls) to
/// `out` under the external name `symbol`; returns the scratch bytes it needs.
/// Register-blocked kernels are sized for `unit` (see vectorUnit in Target.h).
uint64_t lowerFunction(const ir::Module& m, const std::string& entry, const std::string& symbol, llvm::Module& out,
                       const VectorUnit& unit, const LowerOptions& o = {});

} // namespace adjit::codegen
