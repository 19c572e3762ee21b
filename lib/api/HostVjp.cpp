// autodiff/HostVjp.cpp — vjp and linearize on Arrays: a compiled first half
// that returns its residuals, and a compiled second half that consumes them
// (the VJP's backward; linearize's linear function).
#include "autodiff/Reverse.h"
#include "runtime/Callbacks.h"
#include "jit/Engine.h"
#include "support/Assert.h"
#include "support/Log.h"
#include "trace/Tracer.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>

#include <adjit/autodiff.h>

namespace adjit {
namespace detail {

/// What the second half of a split (vjp's backward, linearize's linear
/// function) needs: its kernel and the residuals the first half kept.
struct HostVjp {
  std::shared_ptr<engine::Kernel> backward;
  std::vector<Array> residuals;
  std::vector<bool> residualIsInput;
  std::vector<Type> primals;
  std::vector<bool> floating; ///< which primal leaves the backward returns a cotangent for
  std::vector<Type> outputs;  ///< f's output leaves
  /// Bytes the residual stacks of while loops without max_iterations pushed
  /// in the last backward call (they live within that call).
  std::atomic<int64_t> lastStackBytes{0};
};

namespace {

/// Traces `body` as @<api>, splits it in two (splitVjp or splitJvp), compiles
/// both halves and runs the first on `leaves`: f's output leaves and the
/// state the second half needs.
std::pair<std::vector<Array>, std::shared_ptr<HostVjp>>
runFirstHalf(const char* api, const std::vector<Type>& types, std::span<const Leaf> leaves,
             const std::function<std::vector<Tensor>(std::span<const Tensor>)>& body,
             autodiff::SplitVjp (*split)(const std::shared_ptr<ir::Module>&, const std::string&)) {
  TracedVariables vars;
  Module traced = traceModule(api, types, body, &vars);
  if (!vars.reads.empty())
    throw Error(fmt::format("{}: functions using variables are not supported on Arrays yet (variable '{}')", api,
                            vars.reads[0]->name));
  auto m = std::shared_ptr<ir::Module>(traced.impl().clone());
  const autodiff::SplitVjp halves = split(m, api);
  auto first = engine::compile({.module = *m, .function = halves.fwd});
  auto state = std::make_shared<HostVjp>();
  state->backward = engine::compile({.module = *m, .function = halves.bwd});
  state->primals = types;
  for (const Type& t : types) state->floating.push_back(is_floating(t.dtype));
  std::vector<Array> outs;
  engine::run(*first, leaves, outs);
  const std::size_t nY = outs.size() - halves.residualIsParam.size();
  for (std::size_t i = 0; i < halves.residualIsParam.size(); ++i) state->residuals.push_back(std::move(outs.at(nY + i)));
  outs.resize(nY);
  for (const Array& y : outs) state->outputs.push_back(y.type());
  state->residualIsInput = halves.residualIsParam;
  return {std::move(outs), std::move(state)};
}

} // namespace

std::size_t residualBytes(const HostVjp& s) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.residuals.size(); ++i)
    if (!s.residualIsInput[i]) n += s.residuals[i].bytes();
  return n;
}

std::pair<Array, VjpBackward> hostVjp(const std::vector<Type>& types, std::span<const Leaf> leaves,
                                      const std::function<std::vector<Tensor>(std::span<const Tensor>)>& body) {
  auto [ys, state] = runFirstHalf("vjp", types, leaves, body, autodiff::splitVjp);
  ADJIT_ASSERT(ys.size() == 1, "hostVjp: f returns one Tensor");
  VjpBackward back(state);
  if (logEnabled("compile"))
    logLine("compile", fmt::format("vjp{}: the forward keeps {} bytes for the backward beyond its inputs",
                                   detail::describeArgs(types), back.residual_bytes()));
  return {std::move(ys[0]), std::move(back)};
}

std::pair<std::vector<Array>, std::shared_ptr<HostVjp>>
hostLinearize(const std::vector<Type>& types, std::span<const Leaf> leaves,
              const std::function<std::vector<Tensor>(std::span<const Tensor>)>& body) {
  auto r = runFirstHalf("linearize", types, leaves, body, autodiff::splitJvp);
  if (logEnabled("compile"))
    logLine("compile", fmt::format("linearize{}: the primal keeps {} bytes for the linear function beyond its inputs",
                                   detail::describeArgs(types), residualBytes(*r.second)));
  return r;
}

} // namespace detail

std::vector<Array> VjpBackward::operator()(const Array& cotangent, std::source_location loc) const {
  const detail::HostVjp& s = *state_;
  const Type& output = s.outputs.at(0);
  if (cotangent.type() != output)
    throw Error("vjp: the cotangent must have the output's type " + output.str() + ", got " + cotangent.type().str(),
                Location::from(loc));
  std::vector<detail::Leaf> leaves;
  for (const Array& r : s.residuals) leaves.push_back({r.raw(), &r.type()});
  if (is_floating(output.dtype)) leaves.push_back({cotangent.raw(), &cotangent.type()});
  std::vector<Array> dx;
  const int64_t before = runtime::stackBytesPushed();
  engine::run(*s.backward, leaves, dx);
  state_->lastStackBytes = runtime::stackBytesPushed() - before;
  std::vector<Array> out;
  std::size_t k = 0;
  for (std::size_t i = 0; i < s.primals.size(); ++i)
    out.push_back(s.floating[i] ? std::move(dx.at(k++)) : Array(s.primals[i]));
  return out;
}

std::size_t VjpBackward::residual_bytes() const {
  return detail::residualBytes(*state_) + static_cast<std::size_t>(state_->lastStackBytes.load());
}

namespace detail {

std::vector<Array> applyLinear(const HostVjp& s, const std::vector<Array>& tangents, const Location& loc) {
  if (tangents.size() != s.primals.size())
    throw Error(fmt::format("linearize: the linear function takes {} tangents (one per primal leaf), got {}",
                            s.primals.size(), tangents.size()), loc);
  std::vector<Leaf> leaves;
  for (const Array& r : s.residuals) leaves.push_back({r.raw(), &r.type()});
  for (std::size_t i = 0; i < tangents.size(); ++i) {
    if (tangents[i].type() != s.primals[i])
      throw Error(fmt::format("linearize: tangent {} must have its primal's type {}, got {}", i, s.primals[i].str(),
                              tangents[i].type().str()), loc);
    if (s.floating[i]) leaves.push_back({tangents[i].raw(), &tangents[i].type()});
  }
  // The linear half returns a tangent per floating output; integer outputs' are zeros.
  std::vector<Array> dy;
  if (std::any_of(s.outputs.begin(), s.outputs.end(), [](const Type& t) { return is_floating(t.dtype); }))
    engine::run(*s.backward, leaves, dy);
  std::vector<Array> out;
  std::size_t k = 0;
  for (const Type& t : s.outputs) out.push_back(is_floating(t.dtype) ? std::move(dy.at(k++)) : Array(t));
  return out;
}

} // namespace detail



} // namespace adjit
