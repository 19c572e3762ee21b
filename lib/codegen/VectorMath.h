// codegen/VectorMath.h — glibc libmvec variants for the loop vectorizer.
#pragma once

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <fmt/format.h>
#include <mutex>

namespace adjit::codegen {

/// Registers libmvec's vector variants of exp, log, log1p, expm1, sin, cos,
/// tanh and pow for every ISA that `features` (a target feature string) allows.
void addVectorMath(llvm::TargetLibraryInfoImpl& tlii, const llvm::Triple& triple, llvm::StringRef features);

} // namespace adjit::codegen
