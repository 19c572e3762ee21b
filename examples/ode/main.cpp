// examples/ode — a damped, driven pendulum integrated with RK4 over 1,000
// steps by `scan`, and the gradient of its final state with respect to the
// physical parameters, through the loop, checked against finite differences.
#include <adjit/adjit.h>

#include <cmath>
#include <cstdio>

using namespace adjit;

namespace {

constexpr int kSteps = 1000;
constexpr double kDt = 0.01;

/// d/dt (theta, omega) for parameters p = (damping, gravity / length, drive).
Tensor deriv(const Tensor& s, const Tensor& p) {
  Tensor theta = s[0], omega = s[1];
  Tensor domega = -p[0] * omega - p[1] * sin(theta) + p[2] * cos(theta);
  return stack({omega, domega});
}

// [snippet:integrate]
/// The state after kSteps RK4 steps from s0; `cp` says what the gradient keeps.
Tensor integrate(const Tensor& s0, const Tensor& p, Checkpoint cp = {}) {
  auto step = [&](Tensor s, std::tuple<>) {
    Tensor k1 = deriv(s, p);
    Tensor k2 = deriv(s + k1 * (kDt / 2), p);
    Tensor k3 = deriv(s + k2 * (kDt / 2), p);
    Tensor k4 = deriv(s + k3 * kDt, p);
    return std::pair{s + (k1 + k2 * 2.0 + k3 * 2.0 + k4) * (kDt / 6), std::tuple<>{}};
  };
  return scan(step, s0, std::tuple<>{}, {.length = kSteps, .checkpoint = cp}).first;
}
// [/snippet:integrate]

} // namespace

int main() {
  const Array s0(std::vector<double>{1.0, 0.0});
  const Array p(std::vector<double>{0.3, 9.81, 0.5});
  // The final angle, and its gradient with respect to the initial state and the parameters.
  auto final_angle = [](Tensor s0, Tensor p) { return integrate(s0, p)[0]; };
  Array theta = jit(final_angle)(s0, p);
  auto [ds0, dp] = grad(final_angle, argnums<0, 1>)(s0, p);
  std::printf("theta(%g s) = %.6f\n", kSteps * kDt, theta.item<double>());
  std::printf("d theta / d (theta0, omega0) = (%.6f, %.6f)\n", ds0.at(0), ds0.at(1));
  std::printf("d theta / d (damping, g/l, drive) = (%.6f, %.6f, %.6f)\n", dp.at(0), dp.at(1), dp.at(2));

  // Central differences of the compiled forward.
  auto forward = jit(final_angle);
  double worst = 0;
  for (int i = 0; i < 3; ++i) {
    const double h = 1e-6 * std::max(1.0, std::fabs(p.at(i)));
    Array plus = p, minus = p;
    plus.set(i, p.at(i) + h);
    minus.set(i, p.at(i) - h);
    const double fd = (forward(s0, plus).item<double>() - forward(s0, minus).item<double>()) / (2 * h);
    worst = std::max(worst, std::fabs(fd - dp.at(i)) / std::max(1.0, std::fabs(fd)));
  }
  std::printf("gradient matches finite differences to 1e-6: %s\n", worst < 1e-6 ? "yes" : "NO");

  // [snippet:checkpoint]
  // What the backward keeps: every step's residuals; with every(32) the state
  // at the start of each block of 32 steps (the blocks run again); with
  // binomial(8) at most 8 states, recomputing by the revolve schedule.
  for (Checkpoint cp : {Checkpoint{}, every(32), binomial(8)}) {
    auto [value, back] = vjp([cp](Tensor s0, Tensor p) { return integrate(s0, p, cp)[0]; }, s0, p);
    const Array g = back(Array(1.0))[1];
    double diff = 0;
    for (int i = 0; i < 3; ++i) diff = std::max(diff, std::fabs(g.at(i) - dp.at(i)));
    std::printf("%-13s residuals %7zu bytes for %d steps, same gradient: %s\n", (cp.str() + ":").c_str(), back.residual_bytes(), kSteps,
                diff < 1e-12 && value.item<double>() == theta.item<double>() ? "yes" : "NO");
  }
  // [/snippet:checkpoint]
  return 0;
}
