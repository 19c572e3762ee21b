// ir/Effects.h — which ops have side effects. An op is effectful when its
// table entry is not kPure, or when it references a function that contains an
// effectful op, transitively (as MLIR's recursive memory effects): a call of a
// jitted function that runs a debug_callback is as effectful as the callback.
// Passes and the fusion planner never merge, drop or reorder effectful ops.
#pragma once

#include "ir/IR.h"

#include <unordered_map>

namespace adjit::ir {

class Effects {
public:
  /// Analyses every function of `m`; linear in the module's size. The module
  /// must outlive this object and keep its functions' names.
  explicit Effects(const ir::Module& m);
  bool effectful(const ir::Op& op) const;
  /// Whether calling function `name` has side effects (false if unknown).
  bool functionEffectful(const std::string& name) const;

private:
  std::unordered_map<std::string, bool> fn_;
};

} // namespace adjit::ir
