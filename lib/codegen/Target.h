// codegen/Target.h — target machines, LLVM's optimisation pipeline with glibc's
// vector math library, and object/assembly emission. Shared by the JIT and the
// ahead-of-time compiler.
#pragma once

#include "codegen/Emitter.h"
#include "codegen/TargetPool.h"

#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include <memory>
#include <string>

namespace adjit::codegen {

struct TargetOptions {
  int optLevel = 2;   ///< 0-3
  std::string cpu;    ///< empty: the host CPU
};

/// A target machine for the host (or `o.cpu`, else $ADJIT_CPU, on the host's architecture).
/// Throws adjit::Error for an unknown CPU or unusable target.
std::unique_ptr<llvm::TargetMachine> createTargetMachine(const TargetOptions& o);

/// A target machine as createTargetMachine makes it, lent from a pool of
/// machines for the same level and CPU, or made when every such machine is
/// in use. A machine keeps the subtargets (instruction, register and
/// lowering tables, 1-2 ms to build) it made for earlier modules; a machine
/// is not safe to share between threads, so each is used by one borrower.
PooledTargetMachine borrowTargetMachine(const TargetOptions& o);
/// "<triple> <cpu> <features>": identifies generated code for cache keys.
std::string targetKey(const llvm::TargetMachine& tm);
/// The vector unit of the machine's CPU features (AVX-512F, AVX, or SSE's 128 bits).
VectorUnit vectorUnit(const llvm::TargetMachine& tm);
/// Sets the module's triple and data layout, and per-function target attributes.
void configureModule(llvm::Module& m, const llvm::TargetMachine& tm);
/// Runs LLVM's default pipeline for `optLevel`, with libmvec known to the vectorizer.
void optimize(llvm::Module& m, llvm::TargetMachine& tm, int optLevel);
/// Machine code for the module as an ELF relocatable object (or assembly text).
std::string emitObject(llvm::Module& m, llvm::TargetMachine& tm);
std::string emitAssembly(llvm::Module& m, llvm::TargetMachine& tm);

/// Runs LLVM's optimising code generator once on a small module of the kinds
/// of code adjit emits (vector loops, odd vector widths, compares and
/// selects, reductions, math calls), so the function-local statics it sets up
/// lazily exist before a background thread can use them. Such statics are
/// destroyed at exit in the reverse order of their construction: built first
/// by a background compile, they would be destroyed while that compile still
/// runs (jit/Background.cpp waits for it). Safe to call from many threads;
/// runs once.
void warmUpCodeGenerator();
/// Printed LLVM IR of the module.
std::string printLLVM(const llvm::Module& m);

} // namespace adjit::codegen
