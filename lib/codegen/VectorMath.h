// codegen/VectorMath.h — glibc libmvec variants for the loop vectorizer.
#pragma once

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <fmt/format.h>
#include <mutex>

namespace adjit::codegen {

/// Registers libmvec's vector variants of the libm functions the ops declare
/// (`Hooks::libm`) for every ISA the subtarget `sti` has.
void addVectorMath(llvm::TargetLibraryInfoImpl& tlii, const llvm::Triple& triple, const llvm::MCSubtargetInfo& sti);

} // namespace adjit::codegen
