// trace/Variable.cpp — variables: shared state, reads as implicit parameters
// of the outermost trace, assignments written back after the call.
#include "trace/Tracer.h"

#include <adjit/variable.h>

#include <fmt/format.h>

#include <algorithm>

namespace adjit {
namespace detail {

TraceState& rootTrace(const Location& loc) {
  TraceState* s = currentTrace();
  if (!s) throw Error("variable: read or assigned outside of a trace (use value() outside)", loc);
  while (s->parent) s = s->parent;
  return *s;
}

VariableBinding& bindVariable(TraceState& root, const std::shared_ptr<VariableState>& var) {
  for (VariableBinding& b : root.variables)
    if (b.var == var) return b;
  Type t;
  {
    std::lock_guard lock(var->m);
    t = var->value.type();
  }
  ir::ValueId p = root.builder.param(t);
  root.variables.push_back({var, p, p, false, {}});
  return root.variables.back();
}

} // namespace detail

Variable::Variable(std::string name, Array initial, bool trainable)
    : state_(std::make_shared<detail::VariableState>()) {
  state_->name = std::move(name);
  state_->value = std::move(initial);
  state_->trainable = trainable;
}

const std::string& Variable::name() const { return state_->name; }
bool Variable::trainable() const { return state_->trainable; }
const Type& Variable::type() const { return state_->value.type(); }

Array Variable::value() const {
  std::lock_guard lock(state_->m);
  return state_->value;
}

Tensor Variable::read(std::source_location l) const {
  detail::TraceState& root = detail::rootTrace(Location::from(l));
  detail::VariableBinding& b = detail::bindVariable(root, state_);
  if (std::find(b.reads.begin(), b.reads.end(), b.current) == b.reads.end()) b.reads.push_back(b.current);
  return detail::wrap(root, b.current);
}

Tensor Variable::assign(const Tensor& t, std::source_location l) const {
  Location loc = Location::from(l);
  detail::TraceState& root = detail::rootTrace(loc);
  if (t.type() != type())
    throw Error(fmt::format("variable '{}': assign expected {}, got {}", state_->name, type().str(), t.type().str()), loc);
  detail::TraceState& cur = *detail::currentTrace();
  for (const detail::TraceState* s = &cur; s; s = s->parent)
    if (s->vmapBody)
      throw Error(fmt::format("variable '{}': assign inside vmap is not supported (every example would assign its own "
                              "value); return the values from the vmapped function and assign outside it",
                              state_->name), loc);
  if (&cur != &root && (!cur.exportsAssigns || cur.parent != &root))
    throw Error(fmt::format("variable '{}': assign inside a nested function (other than a custom gradient's "
                            "forward called from the outermost function) is not supported; assign outside it",
                            state_->name), loc);
  // As in TensorFlow, an assignment has no gradient: neither its result nor
  // later reads carry one to the assigned value (grad_pass_through(assign)
  // is how to pass it on). Reads stay sources for gradients by variable.
  Tensor value = stop_gradient(t, l);
  if (&cur != &root) {
    cur.pendingAssigns.push_back({state_, detail::valueOf(value, "assign", loc)});
    return value;
  }
  detail::VariableBinding& b = detail::bindVariable(root, state_);
  b.current = detail::valueOf(value, "assign", loc);
  b.assigned = true;
  return value;
}

} // namespace adjit
