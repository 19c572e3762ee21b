// bench/gradbench/llsq.cpp — GradBench's `llsq` eval (cmpad's llsq_obj): the
// least-squares objective y(x) = 1/2 sum_i (s_i - sum_j x_j t_i^j)^2 with
// t_i = -1 + 2i/(n-1) and s_i = sign(t_i) (`primal`), and its gradient.
#include "tool.h"

using namespace adjit;

namespace {

/// The objective for n sample points, as a function of the coefficients x.
/// The polynomial is evaluated by Horner's rule: m fused multiply-adds per
/// point, no table of powers.
auto objective(int64_t n) {
  return [n](const Tensor& x) {
    const int64_t m = x.shape()[0];
    const Tensor t = iota({n}, 0, DType::f64) * 2.0 / double(n - 1) - 1.0;
    Tensor p = reshape(slice(x, {m - 1}, {m}), {});
    for (int64_t j = m - 2; j >= 0; --j) p = p * t + reshape(slice(x, {j}, {j + 1}), {});
    const Tensor r = sign(t) - p;
    return sum(r * r) * 0.5;
  };
}

gradbench::Prepare prepare(bool gradient) {
  return [gradient](const gradbench::json& in) -> std::unique_ptr<gradbench::Function> {
    Array x(in.at("x").get<std::vector<double>>());
    const int64_t n = in.at("n").get<int64_t>();
    if (gradient) return gradbench::call(jit(grad(objective(n)), gradbench::jitOptions("llsq_gradient")), gradbench::list, x);
    return gradbench::call(jit(objective(n), gradbench::jitOptions("llsq_primal")), gradbench::scalar, x);
  };
}

} // namespace

int main(int argc, char** argv) {
  return gradbench::main(argc, argv, {{"primal", prepare(false)}, {"gradient", prepare(true)}});
}
