// bench/gradbench/ode.cpp — GradBench's `ode` eval (cmpad's an_ode): s steps
// of classical Runge-Kutta on [0, 2] for y_0' = x_0, y_i' = x_i y_{i-1},
// y(0) = 0 (`primal`: y(2)), and the gradient of the last element of y(2)
// with respect to x (`gradient`).
#include "tool.h"

using namespace adjit;

namespace {

/// The right-hand side: x_0 for i = 0, x_i y_{i-1} after.
Tensor rhs(const Tensor& x, const Tensor& y, const Tensor& first) {
  const int64_t n = x.shape()[0];
  // [1, y_0, ..., y_{n-2}]: y shifted one place, the 1 making z_0 = x_0.
  return x * (pad(slice(y, {0}, {n - 1}), {1}, {0}) + first);
}

/// y(2) after s steps, as a function of x.
auto solve(int64_t s) {
  return [s](const Tensor& x) {
    const int64_t n = x.shape()[0];
    const double h = 2.0 / double(s);
    const Tensor first = pad(full({1}, 1.0, DType::f64), {0}, {n - 1});
    auto step = [&](const Tensor&, const Tensor& y) {
      const Tensor k1 = rhs(x, y, first);
      const Tensor k2 = rhs(x, y + k1 * (h / 2), first);
      const Tensor k3 = rhs(x, y + k2 * (h / 2), first);
      const Tensor k4 = rhs(x, y + k3 * h, first);
      return y + (k1 + k2 * 2.0 + k3 * 2.0 + k4) * (h / 6);
    };
    return fori_loop(0, s, step, zeros_like(x));
  };
}

/// The last element of y(2), whose gradient the eval asks for.
auto last(int64_t s) {
  return [s](const Tensor& x) {
    const int64_t n = x.shape()[0];
    return reshape(slice(solve(s)(x), {n - 1}, {n}), {});
  };
}

gradbench::Prepare prepare(bool gradient) {
  return [gradient](const gradbench::json& in) -> std::unique_ptr<gradbench::Function> {
    Array x(in.at("x").get<std::vector<double>>());
    const int64_t s = in.at("s").get<int64_t>();
    if (gradient) return gradbench::call(jit(grad(last(s)), gradbench::jitOptions("ode_gradient")), gradbench::list, x);
    return gradbench::call(jit(solve(s), gradbench::jitOptions("ode_primal")), gradbench::list, x);
  };
}

} // namespace

int main(int argc, char** argv) {
  return gradbench::main(argc, argv, {{"primal", prepare(false)}, {"gradient", prepare(true)}});
}
