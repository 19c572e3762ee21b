// ir/Interpreter.h — the reference interpreter: runs any function of a module
// on host arrays, op by op through each op's `eval` hook, without LLVM. It is
// the oracle the tests compare compiled code against.
#pragma once

#include "ir/IR.h"

#include <span>

namespace adjit::ir {

/// Runs function `name`; arguments must match its parameter types exactly.
std::vector<Array> interpret(const Module& m, std::string_view name, std::span<const Array> args);

} // namespace adjit::ir
