// bench/gradbench/hello.cpp — GradBench's `hello` eval: the square of a
// number (`square`) and its derivative (`double`), both compiled by adjit.
#include "tool.h"

using namespace adjit;

namespace {

/// The eval's function.
Tensor squared(Tensor x) { return x * x; }

/// `square` or its derivative at the input number, compiled on first use.
template <class Compiled> class Hello : public gradbench::Function {
public:
  Hello(const gradbench::json& input, Compiled compiled) : x_(input.get<double>()), compiled_(std::move(compiled)) {}
  void evaluate() override { result_ = compiled_(x_).template item<double>(); }
  gradbench::json output() const override { return result_; }

private:
  Array x_;
  Compiled compiled_;
  double result_ = 0;
};

template <class Compiled> std::unique_ptr<gradbench::Function> make(const gradbench::json& input, Compiled compiled) {
  return std::make_unique<Hello<Compiled>>(input, std::move(compiled));
}

} // namespace

int main(int argc, char** argv) {
  const std::map<std::string, gradbench::Prepare> functions = {
      {"square", [](const gradbench::json& in) { return make(in, jit(squared, gradbench::jitOptions("square"))); }},
      {"double", [](const gradbench::json& in) { return make(in, jit(grad(squared), gradbench::jitOptions("double"))); }},
  };
  return gradbench::main(argc, argv, functions);
}
