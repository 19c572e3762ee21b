// adjit/variable.h — state that outlives calls: TensorFlow's variables.
#pragma once

#include <adjit/tensor.h>

#include <memory>
#include <string>

namespace adjit {
namespace detail { struct VariableState; }

/// A named, typed value that outlives calls of compiled functions. Copies
/// refer to the same variable (== compares identity). In a trace, read()
/// makes it an implicit input of the compiled function (passed without
/// copying) and assign(t) writes t back when the call ends.
class Variable {
public:
  Variable(std::string name, Array initial, bool trainable = true);
  /// Internal: a handle to existing state.
  explicit Variable(std::shared_ptr<detail::VariableState> s) : state_(std::move(s)) {}

  /// The name given at construction (used in messages and IR).
  const std::string& name() const;
  /// Whether GradientTape watches it when read.
  bool trainable() const;
  /// Its dtype and shape, fixed for its lifetime.
  const Type& type() const;
  /// The current value (outside a trace).
  Array value() const;

  /// The variable's value in the current trace (its latest assignment, if any).
  Tensor read(std::source_location loc = std::source_location::current()) const;
  /// Sets the variable to `t` from here on in this trace; written back when the
  /// compiled call ends. Returns t. Its type must be the variable's.
  Tensor assign(const Tensor& t, std::source_location loc = std::source_location::current()) const;

  friend bool operator==(const Variable& a, const Variable& b) { return a.state_ == b.state_; }
  /// Internal: the shared state.
  const std::shared_ptr<detail::VariableState>& state() const { return state_; }

private:
  std::shared_ptr<detail::VariableState> state_;
};

} // namespace adjit
