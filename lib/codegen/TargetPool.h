// codegen/TargetPool.h — the handle of a target machine lent by
// borrowTargetMachine (Target.h), light enough for headers that only hold one.
#pragma once

#include <memory>
#include <string>

namespace llvm {
class TargetMachine;
} // namespace llvm

namespace adjit::codegen {

/// Gives a borrowed target machine back to its pool.
struct ReturnTargetMachine {
  std::string key; ///< level and CPU
  void operator()(llvm::TargetMachine* tm) const;
};
/// A target machine that one borrower (one thread at a time) uses.
using PooledTargetMachine = std::unique_ptr<llvm::TargetMachine, ReturnTargetMachine>;

} // namespace adjit::codegen
