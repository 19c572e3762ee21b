// bench/gradbench/hello.cpp — GradBench's `hello` eval: the square of a
// number (`square`) and its derivative (`double`), both compiled by adjit.
#include "tool.h"

using namespace adjit;

namespace {

/// The eval's function.
Tensor squared(Tensor x) { return x * x; }

} // namespace

int main(int argc, char** argv) {
  const std::map<std::string, gradbench::Prepare> functions = {
      {"square", [](const gradbench::json& in) { return gradbench::call(jit(squared, gradbench::jitOptions("square")), gradbench::scalar, Array(in.get<double>())); }},
      {"double", [](const gradbench::json& in) { return gradbench::call(jit(grad(squared), gradbench::jitOptions("double")), gradbench::scalar, Array(in.get<double>())); }},
  };
  return gradbench::main(argc, argv, functions);
}
