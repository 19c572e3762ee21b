// ir/Dot.h — Graphviz for a function: ops as nodes, values as edges labelled
// with their types; ops that reference functions (calls, custom-gradient call
// sites) are clusters showing the functions they reference.
#pragma once

#include "ir/IR.h"

#include <string>

namespace adjit::ir {

std::string toDot(const Module& m, const std::string& function);

} // namespace adjit::ir
