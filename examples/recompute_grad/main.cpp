// examples/recompute_grad — trade computation for memory: a block's forward
// keeps only its inputs, and its backward runs it again.
#include <adjit/adjit.h>

#include <cstdio>

using namespace adjit;

int main() {
  constexpr int kLayers = 16, kBlock = 4, kN = 64;
  std::vector<Array> ws;
  for (int l = 0; l < kLayers; ++l) {
    std::vector<float> w(kN * kN);
    for (int i = 0; i < kN * kN; ++i) w[i] = 0.1f * static_cast<float>(((i * 31 + l * 17) % 13) - 6) / 6.0f;
    ws.emplace_back(w, Shape{kN, kN});
  }
  Array h(std::vector<float>(kN * kN, 0.5f), {kN, kN});

  int runs = 0;
  // [snippet:block]
  auto block = [&runs](Tensor x, std::vector<Tensor> w) {
    debug_callback([&runs](const std::vector<Array>&) { ++runs; }, {x}); // counts executions
    for (const Tensor& wi : w) x = tanh(matmul(wi, x));
    return x;
  };
  auto net = [&](Tensor x, std::vector<Tensor> w, bool recompute) {
    for (int b = 0; b < kLayers / kBlock; ++b) {
      std::vector<Tensor> wb(w.begin() + b * kBlock, w.begin() + (b + 1) * kBlock);
      x = recompute ? recompute_grad(block)(x, wb) : block(x, wb);
    }
    return sum(x);
  };
  // [/snippet:block]
  for (bool recompute : {false, true}) {
    runs = 0;
    auto [y, back] = vjp([&](Tensor x, std::vector<Tensor> w) { return net(x, w, recompute); }, h, ws);
    std::vector<Array> g = back(Array(1.0f));
    std::printf("%-15s loss %.4f, residuals kept %7zu bytes, block runs %d, dW0[0] %.5f\n",
                recompute ? "recompute_grad:" : "plain:", y.item<double>(), back.residual_bytes(), runs, g[1].at(0));
  }
  return 0;
}
