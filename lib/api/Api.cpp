// autodiff/Api.cpp — gradients, GradientTape, ForwardAccumulator and the
// helpers behind grad/vjp.
#include "autodiff/Reverse.h"
#include "support/Assert.h"
#include "trace/Tracer.h"

#include <adjit/autodiff.h>

#include <fmt/format.h>

namespace adjit {
namespace {

detail::TraceState& current(const char* api, const Location& loc) {
  detail::TraceState* s = detail::currentTrace();
  if (!s) throw Error(std::string(api) + ": called outside of a trace (use it inside a function given to jit, grad or trace)", loc);
  return *s;
}

/// An Unconnected value other than none or zero (a cast from an integer) is an error.
void checkUnconnected(Unconnected u, const char* api, const Location& loc) {
  if (u != Unconnected::none && u != Unconnected::zero)
    throw Error(fmt::format("{}: unconnected_gradients must be Unconnected::none or Unconnected::zero, got {}", api,
                            static_cast<int>(u)), loc);
}

std::vector<std::optional<Tensor>> fill(std::vector<std::optional<Tensor>> g, const std::vector<Tensor>& xs,
                                        Unconnected u) {
  if (u == Unconnected::zero)
    for (std::size_t i = 0; i < g.size(); ++i)
      if (!g[i]) g[i] = zeros_like(xs[i]);
  return g;
}

/// Adds every value read from each (trainable, if `trainableOnly`) variable as
/// a source of `r`; returns each variable's [first, end) range of sources.
std::vector<std::pair<std::size_t, std::size_t>> addVariableSources(detail::TraceState& s,
                                                                      const std::vector<Variable>& vars,
                                                                      bool trainableOnly, autodiff::Request& r) {
  detail::TraceState* root = &s;
  while (root->parent) root = root->parent;
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  for (const Variable& v : vars) {
    const std::size_t first = r.sources.size();
    if (root == &s && (v.trainable() || !trainableOnly))
      for (const detail::VariableBinding& b : root->variables)
        if (b.var == v.state()) r.sources.insert(r.sources.end(), b.reads.begin(), b.reads.end());
    spans.push_back({first, r.sources.size()});
  }
  return spans;
}

/// Per variable: the sum of its sources' gradients (nullopt if none).
std::vector<std::optional<Tensor>> sumPerVariable(const std::vector<std::optional<Tensor>>& g,
                                                  const std::vector<std::pair<std::size_t, std::size_t>>& spans) {
  std::vector<std::optional<Tensor>> out;
  for (auto [first, end] : spans) {
    std::optional<Tensor> total;
    for (std::size_t i = first; i < end; ++i)
      if (g[i]) total = total ? add(*total, *g[i]) : *g[i];
    out.push_back(total);
  }
  return out;
}

/// A tensor differentiated (as a y or an x) must be traced in the current
/// function: one read from an enclosing trace (a custom_gradient forward's
/// tensor inside grad_fn) is a constant here, and its gradient would be a
/// silent none.
void checkTracedHere(const Tensor& t, const detail::TraceState& s, const char* api, const char* role, std::size_t i,
                     const Location& loc) {
  detail::traceOf(t, api, loc);
  if (t.trace() != s.id)
    throw Error(fmt::format("{}: {}[{}] was traced outside the function being traced (a tensor of a custom_gradient's "
                            "forward read inside its grad_fn is a constant there); take the gradient where it is "
                            "traced, or call grad or vjp of a function here",
                            api, role, i), loc);
}

} // namespace

std::vector<std::optional<Tensor>> gradients(const std::vector<Tensor>& ys, const std::vector<Tensor>& xs,
                                             const std::vector<Tensor>& grad_ys,
                                             const std::vector<Tensor>& stop_gradients, Unconnected unconnected,
                                             std::source_location l) {
  Location loc = Location::from(l);
  detail::TraceState& s = current("gradients", loc);
  checkUnconnected(unconnected, "gradients", loc);
  if (!grad_ys.empty() && grad_ys.size() != ys.size())
    throw Error(fmt::format("gradients: got {} grad_ys for {} ys", grad_ys.size(), ys.size()), loc);
  for (std::size_t i = 0; i < ys.size(); ++i) checkTracedHere(ys[i], s, "gradients", "ys", i, loc);
  for (std::size_t i = 0; i < xs.size(); ++i) checkTracedHere(xs[i], s, "gradients", "xs", i, loc);
  autodiff::Request r;
  r.end = s.fn->ops.size();
  for (std::size_t i = 0; i < ys.size(); ++i) {
    r.targets.push_back(detail::valueOf(ys[i], "gradients", loc));
    if (!grad_ys.empty()) {
      if (grad_ys[i].type() != ys[i].type())
        throw Error(fmt::format("gradients: grad_ys[{}] has type {}, but ys[{}] has type {}", i, grad_ys[i].type().str(), i,
                                ys[i].type().str()), loc);
      r.seeds.push_back(grad_ys[i]);
    }
  }
  for (const Tensor& x : xs) r.sources.push_back(detail::valueOf(x, "gradients", loc));
  for (const Tensor& t : stop_gradients) r.stops.push_back(detail::valueOf(t, "gradients", loc));
  return fill(autodiff::reverse(r), xs, unconnected);
}

GradientTape::GradientTape(bool persistent, std::source_location l) : persistent_(persistent) {
  detail::TraceState& s = current("GradientTape", Location::from(l));
  begin_ = s.fn->ops.size();
  trace_ = s.id;
}

void GradientTape::watch(const Tensor& t) {
  detail::traceOf(t, "GradientTape::watch", {});
  watched_.push_back(t);
}

std::optional<Tensor> GradientTape::gradient(const Tensor& target, const Tensor& source, std::optional<Tensor> og,
                                             Unconnected u, std::source_location l) {
  return gradientOfLeaves({target}, {og}, {source}, u, Location::from(l))[0];
}

std::vector<std::optional<Tensor>> GradientTape::gradient(const Tensor& target, const std::vector<Tensor>& sources,
                                                          std::optional<Tensor> og, Unconnected u,
                                                          std::source_location l) {
  return gradientOfLeaves({target}, {og}, {sources.begin(), sources.end()}, u, Location::from(l));
}

std::optional<Tensor> GradientTape::gradient(const Tensor& target, const Variable& v, std::optional<Tensor> og,
                                             Unconnected u, std::source_location l) {
  return gradientOfLeaves({target}, {og}, {v}, u, Location::from(l))[0];
}

std::vector<std::optional<Tensor>> GradientTape::gradient(const Tensor& target, const std::vector<Variable>& vars,
                                                          std::optional<Tensor> og, Unconnected u,
                                                          std::source_location l) {
  return gradientOfLeaves({target}, {og}, {vars.begin(), vars.end()}, u, Location::from(l));
}

void GradientTape::checkUse(const Location& loc) {
  detail::TraceState& s = current("GradientTape::gradient", loc);
  if (s.id != trace_) throw Error("GradientTape::gradient: the tape belongs to another trace", loc);
  if (used_ && !persistent_)
    throw Error("GradientTape::gradient: a non-persistent GradientTape can only be used to compute one set of "
                "gradients; create it with GradientTape(/*persistent=*/true) to call gradient more than once", loc);
  used_ = true;
}

std::vector<std::optional<Tensor>> GradientTape::gradientOfLeaves(const std::vector<Tensor>& targets,
                                                                  const std::vector<std::optional<Tensor>>& ogs,
                                                                  const std::vector<detail::SourceLeaf>& sources,
                                                                  Unconnected u, const Location& loc) {
  checkUse(loc);
  checkUnconnected(u, "GradientTape::gradient", loc);
  detail::TraceState& s = *detail::currentTrace();
  if (targets.empty()) throw Error("GradientTape::gradient: no targets", loc);
  if (!ogs.empty() && ogs.size() != targets.size())
    throw Error(fmt::format("GradientTape::gradient: got {} output gradients for {} targets", ogs.size(), targets.size()),
                loc);
  autodiff::Request r;
  r.begin = begin_;
  r.end = s.fn->ops.size();
  for (std::size_t i = 0; i < targets.size(); ++i) {
    checkTracedHere(targets[i], s, "GradientTape::gradient", "targets", i, loc);
    r.targets.push_back(detail::valueOf(targets[i], "GradientTape::gradient", loc));
    const std::optional<Tensor> og = i < ogs.size() ? ogs[i] : std::nullopt;
    if (og && og->type() != targets[i].type())
      throw Error(fmt::format("GradientTape::gradient: output_gradient has type {}, but the target has type {}",
                              og->type().str(), targets[i].type().str()), loc);
    r.seeds.push_back(og); // (targets are summed: each seeded with ones unless given)
  }
  // Per source leaf, its range of request sources: a watched tensor is one
  // source (an unwatched one none); a variable, every value its reads returned.
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  std::vector<Type> types;
  for (const detail::SourceLeaf& leaf : sources) {
    const std::size_t first = r.sources.size();
    if (const Tensor* t = std::get_if<Tensor>(&leaf)) {
      const ir::ValueId id = detail::valueOf(*t, "GradientTape::gradient", loc);
      if (std::any_of(watched_.begin(), watched_.end(),
                      [&](const Tensor& w) { return detail::valueOf(w, "GradientTape::gradient", loc) == id; }))
        r.sources.push_back(id);
      spans.push_back({first, r.sources.size()});
      types.push_back(t->type());
    } else {
      const Variable& v = std::get<Variable>(leaf);
      spans.push_back(addVariableSources(s, {v}, /*trainableOnly=*/true, r).at(0));
      types.push_back(v.type());
    }
  }
  std::vector<std::optional<Tensor>> out = sumPerVariable(autodiff::reverse(r), spans);
  if (u == Unconnected::zero)
    for (std::size_t k = 0; k < out.size(); ++k)
      if (!out[k]) out[k] = full(types[k].shape, 0, types[k].dtype);
  return out;
}

namespace detail {
struct AccumulatorState {
  uint64_t trace;
  std::size_t next; ///< the first op of the trace not walked yet
  std::unordered_map<ir::ValueId, Tensor> tangents;
};
} // namespace detail

ForwardAccumulator::ForwardAccumulator(const Tensor& primal, const Tensor& tangent, std::source_location l)
    : ForwardAccumulator(std::vector<Tensor>{primal}, std::vector<Tensor>{tangent}, l) {}

ForwardAccumulator::ForwardAccumulator(std::vector<Tensor> primals, std::vector<Tensor> tangents,
                                       std::source_location l) {
  const Location loc = Location::from(l);
  detail::TraceState& s = current("ForwardAccumulator", loc);
  if (primals.size() != tangents.size())
    throw Error(fmt::format("ForwardAccumulator: {} tangents for {} primals", tangents.size(), primals.size()), loc);
  state_ = std::make_shared<detail::AccumulatorState>(detail::AccumulatorState{s.id, s.fn->ops.size(), {}});
  for (std::size_t i = 0; i < primals.size(); ++i) {
    checkTracedHere(primals[i], s, "ForwardAccumulator", "primals", i, loc);
    checkTracedHere(tangents[i], s, "ForwardAccumulator", "tangents", i, loc);
    if (tangents[i].type() != primals[i].type())
      throw Error(fmt::format("ForwardAccumulator: tangent {} is {}, but its primal is {}", i,
                              tangents[i].type().str(), primals[i].type().str()), loc);
    if (is_floating(primals[i].dtype())) state_->tangents.insert_or_assign(primals[i].id(), tangents[i]);
  }
}

std::optional<Tensor> ForwardAccumulator::jvp(const Tensor& y, Unconnected u, std::source_location l) const {
  return jvp(std::vector<Tensor>{y}, u, l)[0];
}

std::vector<std::optional<Tensor>> ForwardAccumulator::jvp(const std::vector<Tensor>& ys, Unconnected u,
                                                           std::source_location l) const {
  const Location loc = Location::from(l);
  checkUnconnected(u, "ForwardAccumulator::jvp", loc);
  detail::TraceState& s = current("ForwardAccumulator::jvp", loc);
  if (s.id != state_->trace) throw Error("ForwardAccumulator::jvp: the accumulator belongs to another trace", loc);
  autodiff::ForwardRequest r;
  r.begin = state_->next;
  r.end = s.fn->ops.size();
  r.carried = &state_->tangents;
  for (std::size_t i = 0; i < ys.size(); ++i) {
    checkTracedHere(ys[i], s, "ForwardAccumulator::jvp", "ys", i, loc);
    r.targets.push_back(detail::valueOf(ys[i], "ForwardAccumulator::jvp", loc));
  }
  std::vector<std::optional<Tensor>> t = autodiff::forward(r);
  state_->next = s.fn->ops.size(); // past the ops just walked and those the walk added
  return fill(std::move(t), ys, u);
}

namespace detail {

Tensor alias(const Tensor& t) {
  TraceState& s = traceOf(t, "grad", {});
  ir::Attrs a;
  a.set("shape", t.shape());
  return wrap(s, s.builder.create1(ir::OpKind::Reshape, {valueOf(t, "grad", {})}, std::move(a),
                                   s.locOverride.value_or(Location{})));
}

TraceMark traceMark() {
  TraceState* s = currentTrace();
  if (!s) throw Error("grad: called with Tensors outside of a trace");
  return {s->id, s->fn->ops.size()};
}

bool inMarkedTrace(const TraceMark& mark) {
  const TraceState* s = currentTrace();
  return s && s->id == mark.trace;
}

// A derivative function made in one trace and called in a nested one (a
// vmap, loop or branch body) would otherwise read another function's ops.
std::size_t opsSince(const TraceMark& mark, const char* api, const Location& loc) {
  const TraceState* s = currentTrace();
  if (!s) throw Error(fmt::format("{}: called with Tensors outside of a trace", api), loc);
  if (s->id != mark.trace)
    throw Error(fmt::format("{}: this derivative function was made in an enclosing trace and is called inside a nested one "
                            "(a vmap, loop or branch body, or a custom gradient's rule); make it inside that body",
                            api),
                loc);
  ADJIT_ASSERT(mark.ops <= s->fn->ops.size(), "a trace mark past its function's end");
  return mark.ops;
}

// The reverse pass over the current trace's ops from `begin` (checked by opsSince).
static std::vector<std::optional<Tensor>> reverseSince(std::size_t begin, const std::vector<Tensor>& ys,
                                                       const std::vector<std::optional<Tensor>>& seeds,
                                                       const std::vector<Tensor>& xs) {
  ADJIT_ASSERT(ys.size() == seeds.size(), "reverseSince: one seed per output");
  TraceState& s = traceOf(ys.at(0), "grad", {});
  autodiff::Request r;
  r.begin = begin;
  r.end = s.fn->ops.size();
  for (const Tensor& y : ys) r.targets.push_back(valueOf(y, "grad", {}));
  r.seeds = seeds;
  for (const Tensor& x : xs) r.sources.push_back(valueOf(x, "grad", {}));
  return autodiff::reverse(r);
}

std::vector<std::optional<Tensor>> differentiate(const TraceMark& mark, const Tensor& y, std::optional<Tensor> seed,
                                                 const std::vector<Tensor>& xs, const Location& loc) {
  if (seed && seed->type() != y.type())
    throw Error(fmt::format("vjp: the cotangent must have the output's type {}, got {}", y.type().str(),
                            seed->type().str()), loc);
  return reverseSince(opsSince(mark, "vjp", loc), {y}, {std::move(seed)}, xs);
}

std::vector<std::optional<Tensor>> differentiateAll(const TraceMark& mark, const std::vector<Tensor>& ys,
                                                    const std::vector<std::optional<Tensor>>& seeds,
                                                    const std::vector<Tensor>& xs) {
  return reverseSince(opsSince(mark, "grad", {}), ys, seeds, xs);
}

std::vector<Tensor> variableGradients(const TraceMark& mark, const Tensor& y, const std::vector<Variable>& vars) {
  TraceState& s = traceOf(y, "grad", {});
  autodiff::Request r;
  r.begin = opsSince(mark, "grad", {});
  r.end = s.fn->ops.size();
  r.targets = {valueOf(y, "grad", {})};
  r.seeds = {std::nullopt};
  auto spans = addVariableSources(s, vars, /*trainableOnly=*/false, r);
  std::vector<std::optional<Tensor>> g = sumPerVariable(autodiff::reverse(r), spans);
  std::vector<Tensor> out;
  for (std::size_t k = 0; k < vars.size(); ++k) out.push_back(g[k] ? *g[k] : full(vars[k].type().shape, 0, vars[k].type().dtype));
  return out;
}

void checkGradOutput(const Tensor& y, const char* api, const Location& loc) {
  if (!is_floating(y.dtype()) || y.rank() != 0)
    throw Error(fmt::format("{}: the function must return a floating-point scalar, got {}", api, y.type().str()), loc);
}

void checkGradArg(const Tensor& x, int argnum, const char* api, const Location& loc) {
  if (!is_floating(x.dtype()))
    throw Error(fmt::format("{}: argument {} has dtype {}; only floating-point arguments can be differentiated", api,
                            argnum, name_of(x.dtype())), loc);
}

} // namespace detail
} // namespace adjit
