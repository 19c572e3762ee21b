// autodiff/HostVjp.cpp — vjp on Arrays: a compiled forward that returns its
// residuals, and a compiled backward that consumes them.
#include "autodiff/Reverse.h"
#include "jit/Engine.h"
#include "support/Log.h"
#include "trace/Tracer.h"

#include <fmt/format.h>

#include <adjit/autodiff.h>

namespace adjit {
namespace detail {

struct HostVjp {
  std::shared_ptr<engine::Kernel> backward;
  std::vector<Array> residuals;
  std::vector<bool> residualIsInput;
  std::vector<Type> primals;
  std::vector<bool> floating; ///< which primal leaves the backward returns a cotangent for
  Type output;
};

std::pair<Array, VjpBackward> hostVjp(const std::vector<Type>& types, std::span<const Leaf> leaves,
                                      const std::function<std::vector<Tensor>(std::span<const Tensor>)>& body) {
  TracedVariables vars;
  Module traced = traceModule("vjp", types, body, &vars);
  if (!vars.reads.empty())
    throw Error("vjp: functions using variables are not supported on Arrays yet (variable '" + vars.reads[0]->name + "')");
  auto m = std::shared_ptr<ir::Module>(traced.impl().clone());
  const autodiff::SplitVjp split = autodiff::splitVjp(m, "vjp");
  const std::vector<bool>& isInput = split.residualIsParam;
  const std::size_t nResiduals = isInput.size();
  auto forward = engine::compile({*m, split.fwd, 2, "", 0});
  auto state = std::make_shared<HostVjp>();
  state->backward = engine::compile({*m, split.bwd, 2, "", 0});
  state->primals = types;
  for (const Type& t : types) state->floating.push_back(is_floating(t.dtype));
  std::vector<Array> outs;
  engine::run(*forward, leaves, outs);
  state->output = outs.at(0).type();
  for (std::size_t i = 0; i < nResiduals; ++i) state->residuals.push_back(std::move(outs.at(1 + i)));
  state->residualIsInput = isInput;
  VjpBackward back(state);
  if (logEnabled("compile"))
    logLine("compile", fmt::format("vjp{}: the forward keeps {} bytes for the backward beyond its inputs",
                                   detail::describeArgs(types), back.residual_bytes()));
  return {std::move(outs.at(0)), std::move(back)};
}

} // namespace detail

std::vector<Array> VjpBackward::operator()(const Array& cotangent, std::source_location loc) const {
  const detail::HostVjp& s = *state_;
  if (cotangent.type() != s.output)
    throw Error("vjp: the cotangent must have the output's type " + s.output.str() + ", got " + cotangent.type().str(),
                Location::from(loc));
  std::vector<detail::Leaf> leaves;
  for (const Array& r : s.residuals) leaves.push_back({r.raw(), &r.type()});
  if (is_floating(s.output.dtype)) leaves.push_back({cotangent.raw(), &cotangent.type()});
  std::vector<Array> dx;
  engine::run(*s.backward, leaves, dx);
  std::vector<Array> out;
  std::size_t k = 0;
  for (std::size_t i = 0; i < s.primals.size(); ++i)
    out.push_back(s.floating[i] ? std::move(dx.at(k++)) : Array(s.primals[i]));
  return out;
}

std::size_t VjpBackward::residual_bytes() const {
  std::size_t n = 0;
  for (std::size_t i = 0; i < state_->residuals.size(); ++i)
    if (!state_->residualIsInput[i]) n += state_->residuals[i].bytes();
  return n;
}

} // namespace adjit
