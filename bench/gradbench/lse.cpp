// bench/gradbench/lse.cpp — GradBench's `lse` eval: log-sum-exp written with
// a max and a sum (`primal`) and its gradient (`gradient`).
#include "tool.h"

using namespace adjit;

namespace {

/// log(sum(exp(x))), shifted by max(x) against overflow.
Tensor logSumExp(const Tensor& x) {
  const Tensor a = max(x);
  return a + log(sum(exp(x - a)));
}

gradbench::Prepare prepare(bool gradient) {
  return [gradient](const gradbench::json& in) -> std::unique_ptr<gradbench::Function> {
    Array x(in.at("x").get<std::vector<double>>());
    if (gradient) return gradbench::call(jit(grad(logSumExp), gradbench::jitOptions("lse_gradient")), gradbench::list, x);
    return gradbench::call(jit(logSumExp, gradbench::jitOptions("lse_primal")), gradbench::scalar, x);
  };
}

} // namespace

int main(int argc, char** argv) {
  return gradbench::main(argc, argv, {{"primal", prepare(false)}, {"gradient", prepare(true)}});
}
