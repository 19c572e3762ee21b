// trace/Tracer.cpp — trace state, scopes, and tracing a function into a module.
#include "trace/Tracer.h"

#include <adjit/trace.h>

#include <algorithm>
#include <atomic>

namespace adjit::detail {

static thread_local TraceState* tlsCurrent = nullptr;
static std::atomic<uint64_t> nextTraceId{1};

TraceState::TraceState(std::shared_ptr<ir::Module> m, ir::Function& f, TraceState* p)
    : id(nextTraceId++), module(std::move(m)), fn(&f), builder(*module, f), parent(p) {}

TraceState* currentTrace() { return tlsCurrent; }

TraceScope::TraceScope(std::shared_ptr<ir::Module> module, const std::string& name) {
  ir::Function& f = module->add(name);
  state_ = std::make_unique<TraceState>(std::move(module), f, tlsCurrent);
  tlsCurrent = state_.get();
}

TraceScope::~TraceScope() { tlsCurrent = state_->parent; }

Tensor TraceScope::param(const Type& t) { return wrap(*state_, state_->builder.param(t)); }

void TraceScope::finish(const std::vector<Tensor>& outputs) {
  std::vector<ir::ValueId> ids;
  for (const Tensor& t : outputs) ids.push_back(valueOf(t, "return", {}));
  state_->builder.ret(std::move(ids));
}

TraceState& traceOf(const Tensor& t, std::string_view op, const Location& loc) {
  if (!t.valid()) throw Error(std::string(op) + ": use of an empty (default-constructed) Tensor", loc);
  TraceState* s = tlsCurrent;
  if (!s) throw Error(std::string(op) + ": a Tensor was used outside of a trace (call the function through adjit::jit or adjit::trace)", loc);
  if (t.trace() != s->id) {
    if (s->captures && s->captures->typeOf(t)) return *s;
    for (TraceState* p = s->parent; p; p = p->parent)
      if (p->id == t.trace())
        throw Error(std::string(op) + ": a Tensor of an enclosing trace was captured by a nested jitted function; pass it as an argument", loc);
    throw Error(std::string(op) + ": a Tensor was used after the trace that created it ended", loc);
  }
  return *s;
}

Tensor wrap(TraceState& s, ir::ValueId v) { return Tensor(s.id, v); }

OuterCaptures::OuterCaptures(TraceState* o) : outer(o), outerId(o->id), outerFn(o->fn), outerHook(o->captures) {}

std::optional<Type> OuterCaptures::typeOf(const Tensor& t) {
  if (t.trace() == outerId) return outerFn->type(t.id());
  if (outerHook) return outerHook->typeOf(t);
  return std::nullopt;
}

ir::ValueId OuterCaptures::capture(const Tensor& t) {
  const ir::ValueId v = t.trace() == outer->id ? t.id() : outer->captures->capture(t);
  auto it = mapped.find(v);
  if (it != mapped.end()) return it->second;
  ir::ValueId p = self->builder.param(outer->fn->type(v));
  outerValues.push_back(v);
  return mapped[v] = p;
}

std::optional<ir::ValueId> OuterCaptures::find(const Tensor& t) const {
  std::optional<ir::ValueId> v;
  if (t.trace() == outerId) v = t.id();
  else if (outerHook) v = outerHook->find(t);
  if (!v) return std::nullopt;
  auto it = mapped.find(*v);
  if (it == mapped.end()) return std::nullopt;
  return it->second;
}

ir::ValueId valueOf(const Tensor& t, std::string_view op, const Location& loc) {
  TraceState& s = traceOf(t, op, loc);
  return t.trace() == s.id ? t.id() : s.captures->capture(t);
}

Module traceModule(const std::string& name, const std::vector<Type>& params,
                   const std::function<std::vector<Tensor>(std::span<const Tensor>)>& body, TracedVariables* variables) {
  auto m = std::make_shared<ir::Module>();
  {
    TraceScope scope(m, name);
    std::vector<Tensor> ps;
    for (const Type& t : params) ps.push_back(scope.param(t));
    std::vector<Tensor> outs = body(ps);
    TraceState& st = scope.state();
    if (!st.variables.empty() && !variables)
      throw Error("trace: the function uses variable '" + st.variables[0].var->name +
                  "'; variables are supported by jit, grad and the other transforms that run compiled code");
    for (const VariableBinding& b : st.variables) {
      variables->reads.push_back(b.var);
      if (b.assigned) {
        variables->writes.push_back(b.var);
        outs.push_back(wrap(st, b.current));
      }
    }
    scope.finish(outs);
  }
  return Module(std::move(m));
}

Location madeAt(const ir::Function& f, ir::ValueId v) {
  for (auto op = f.ops.rbegin(); op != f.ops.rend(); ++op)
    if (std::find(op->results.begin(), op->results.end(), v) != op->results.end()) return op->loc;
  return {};
}

std::string describeArgs(const std::vector<Type>& types) {
  std::string s = "(";
  for (std::size_t i = 0; i < types.size(); ++i) s += (i ? ", " : "") + types[i].str();
  return s + ")";
}

} // namespace adjit::detail

namespace adjit {

Type Tensor::type() const {
  detail::TraceState& s = detail::traceOf(*this, "Tensor::type", {});
  if (trace_ != s.id) return *s.captures->typeOf(*this);
  return s.fn->type(id_);
}

} // namespace adjit
