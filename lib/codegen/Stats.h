// codegen/Stats.h — sizes of the LLVM IR a function lowers to, before LLVM's
// passes: how tests check that code generation grows linearly with programs.
#pragma once

#include "ir/IR.h"

#include <cstddef>
#include <string>

namespace adjit::codegen {

struct LoweringStats {
  std::size_t instructions = 0;           ///< in all emitted functions
  std::size_t functions = 0;              ///< function definitions emitted
  std::size_t maxFunctionInstructions = 0; ///< in the largest one
  std::size_t aliasOperands = 0;          ///< scopes listed in all !alias.scope and !noalias nodes
};

/// Lowers `entry` of `m` (already optimised) into a throwaway LLVM module and measures it.
LoweringStats measureLowering(const ir::Module& m, const std::string& entry);

} // namespace adjit::codegen
