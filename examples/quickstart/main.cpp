// examples/quickstart — trace a C++ lambda, print its IR, compile it, run it.
#include <adjit/adjit.h>

#include <cstdio>

int main() {
  using namespace adjit;

  // [snippet:quickstart]
  // softplus summed: sum(log(1 + exp(x))), plus a broadcast scale.
  auto f = [](Tensor x, Tensor scale) { return sum(log1p(exp(x)) * scale); };

  // 1. Trace it for x: f32[4], scale: f32[] and look at the IR.
  Module m = trace(f, Type{DType::f32, {4}}, Type{DType::f32, {}});
  std::printf("%s\n", m.str().c_str());

  // 2. Compile and run it (compiled once per argument signature, then cached).
  auto jf = jit(f);
  Array x(std::vector<float>{-1.0f, 0.0f, 1.0f, 2.0f});
  Array y = jf(x, 2.0f);
  std::printf("f(x) = %.6f\n", y.item<double>());

  // 3. The reference interpreter agrees.
  Array ref = m.interpret("f", {x, Array(2.0f)})[0];
  std::printf("interpreter = %.6f\n", ref.item<double>());
  // [/snippet:quickstart]

  // 4. Mistakes are reported at your source line.
  try {
    jit([](Tensor a, Tensor b) { return a + b; })(Array(std::vector<float>{1, 2, 3}), Array(std::vector<float>{1, 2}));
  } catch (const Error& e) {
    std::printf("caught: %s\n", e.message().c_str());
  }
  return 0;
}
