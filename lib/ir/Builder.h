// ir/Builder.h — creating ops with their types checked by the op table's type
// rules. Used by the tracer, the parser, passes and VJP rules alike.
#pragma once

#include "ir/IR.h"

#include <span>

namespace adjit::ir {

/// Result types of an op of kind `k`, or the user error "<op>: ..." at `loc`.
/// Checks arity and that callees exist, then runs the op's type rule.
std::vector<Type> inferTypes(const Module& m, const Function& f, OpKind k, std::span<const ValueId> operands,
                             const Attrs& attrs, const std::vector<std::string>& callees, const Location& loc);

/// Appends type-checked ops to one function of a module.
class Builder {
public:
  Builder(Module& m, Function& f) : m_(m), f_(f) {}

  Module& module() { return m_; }
  Function& function() { return f_; }
  const Type& type(ValueId v) const { return f_.type(v); }

  ValueId param(Type t);
  /// Creates the op and returns its results.
  ValueList create(OpKind k, ValueList operands, Attrs attrs = {}, std::vector<std::string> callees = {},
                   Location loc = {});
  /// Creates a single-result op.
  ValueId create1(OpKind k, ValueList operands, Attrs attrs = {}, Location loc = {});
  ValueId constant(Array value, Location loc = {});
  void ret(std::vector<ValueId> outputs) { f_.outputs = std::move(outputs); }

private:
  Module& m_;
  Function& f_;
};

} // namespace adjit::ir
