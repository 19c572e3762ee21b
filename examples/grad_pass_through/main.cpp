// examples/grad_pass_through — a forward you do not differentiate through.
#include <adjit/adjit.h>

#include <cstdio>

using namespace adjit;

int main() {
  // [snippet:quantize]
  // Quantisation: the forward rounds to a grid, the gradient passes straight through.
  auto quantize = grad_pass_through([](Tensor x) { return floor(x * 4.0 + 0.5) / 4.0; });
  auto loss = [quantize](Tensor x) { return sum(quantize(x) * quantize(x)); };
  Array x(std::vector<double>{0.3, -0.6, 1.1});
  Array q = jit([quantize](Tensor t) { return quantize(t); })(x);
  Array g = grad(loss)(x);
  // [/snippet:quantize]
  std::printf("quantized: [%g, %g, %g]\n", q.at(0), q.at(1), q.at(2));
  std::printf("gradient:  [%g, %g, %g]  (2 * quantized, as if quantize were the identity)\n", g.at(0), g.at(1), g.at(2));
  return 0;
}
