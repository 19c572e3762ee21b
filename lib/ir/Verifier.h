// ir/Verifier.h — checks a module is well formed: every value defined once and
// before use (SSA dominance in straight-line code), arity, attributes and types
// by each op's type rule, existing callees, no recursion, outputs defined.
#pragma once

#include "ir/IR.h"

namespace adjit::ir {

/// Throws adjit::Error naming the function and printing the offending op.
void verify(const Module& m);

/// True in debug builds or when ADJIT_VERIFY=1: passes verify after each run.
bool verifyAfterPasses();

} // namespace adjit::ir
