// bench/gradbench/particle.cpp — GradBench's `particle` eval: the control w
// that makes a charged particle, accelerated by two charges at (10, 10 - w)
// and (10, 0), cross the x axis at the origin. The particle's path is naive
// Euler integration (a while_loop until it would cross the axis) whose
// acceleration is minus the gradient of the potential (the inner derivative);
// w minimises x0(t_f)^2 by the descent of descent.h, whose gradient
// differentiates the whole integration, inner derivative and loop included
// (the outer derivative). Functions `ff`, `fr`, `rf`, `rr`: outer mode, then
// inner mode (f = forward, jacfwd; r = reverse, grad). Everything, the descent
// included, is one compiled function of w0.
#include "descent.h"
#include "tool.h"

using namespace adjit;

namespace {

/// x0(t_f)^2 for the control w ([1]): where the Euler path crosses the x
/// axis, by linear interpolation over the last step.
Tensor naiveEuler(const Tensor& w, bool innerForward) {
  const Tensor c1 = concatenate({full({1}, 10.0, DType::f64), 10.0 - w}, 0);
  const Tensor c2 = constant(Array(std::vector<double>{10.0, 0.0}, {2}));
  auto potential = [&](const Tensor& x) {
    auto dist = [](const Tensor& u, const Tensor& v) { return sqrt(sum((u - v) * (u - v))); };
    return 1.0 / dist(x, c1) + 1.0 / dist(x, c2);
  };
  const double dt = 0.1;
  using State = std::pair<Tensor, Tensor>; // x, xdot
  auto crossing = [&](const State& s) { return gt(slice(s.first + dt * s.second, {1}, {2}), 0.0); };
  auto step = [&](const State& s) {
    Tensor xddot = -gradbench::gradientOf(innerForward, potential, s.first);
    return State{s.first + dt * s.second, s.second + dt * xddot};
  };
  State init{constant(Array(std::vector<double>{0.0, 8.0}, {2})), constant(Array(std::vector<double>{0.75, 0.0}, {2}))};
  auto [x, xdot] = while_loop(crossing, step, init);
  Tensor dtf = -slice(x, {1}, {2}) / slice(xdot, {1}, {2});
  Tensor xtf = x + dtf * xdot;
  Tensor x0 = reshape(slice(xtf, {0}, {1}), {});
  return x0 * x0;
}

/// The final w from w0 ([1]), outer and inner derivatives in the modes named.
Tensor particle(const Tensor& w0, bool outerForward, bool innerForward) {
  auto objective = [innerForward](const Tensor& w) { return naiveEuler(w, innerForward); };
  auto gradient = [&](const Tensor& w) { return gradbench::gradientOf(outerForward, objective, w); };
  return gradbench::argmin(objective, gradient, w0);
}

class Particle : public gradbench::Function {
public:
  Particle(const gradbench::json& input, bool outerForward, bool innerForward)
      : w0_(std::vector<double>{input.at("w").get<double>()}, {1}),
        compiled_(jit(std::function<Tensor(Tensor)>([outerForward, innerForward](Tensor w0) { return particle(w0, outerForward, innerForward); }),
                      gradbench::jitOptions(std::string("particle.") + (outerForward ? "f" : "r") + (innerForward ? "f" : "r")))) {}
  void evaluate() override { result_ = compiled_(w0_).at(0); }
  gradbench::json output() const override { return result_; }

private:
  Array w0_;
  Jitted<std::function<Tensor(Tensor)>> compiled_;
  double result_ = 0;
};

gradbench::Prepare variant(bool outerForward, bool innerForward) {
  return [=](const gradbench::json& in) { return std::make_unique<Particle>(in, outerForward, innerForward); };
}

} // namespace

int main(int argc, char** argv) {
  return gradbench::main(argc, argv, {{"ff", variant(true, true)}, {"fr", variant(true, false)}, {"rf", variant(false, true)}, {"rr", variant(false, false)}});
}
