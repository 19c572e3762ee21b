// examples/variables — state that outlives calls, and gradients with respect to it.
#include <adjit/adjit.h>

#include <cstdio>

using namespace adjit;

int main() {
  // [snippet:train]
  // A linear model trained by gradient descent: the weights are variables,
  // read as implicit inputs of the compiled step and written back after it.
  Variable w("w", Array(std::vector<double>{0.0, 0.0}));
  Variable b("b", Array(0.0));
  Variable steps("steps", Array(0.0), /*trainable=*/false);
  Array x(std::vector<double>{1, 2, 3, 4, 0, 1, 2, 1}, {4, 2});
  Array y(std::vector<double>{3, 5, 4, 4});

  auto train = jit([w, b, steps](Tensor xs, Tensor ys) {
    GradientTape tape;
    Tensor err = matmul(xs, w.read()) + b.read() - ys;
    Tensor loss = mean(err * err);
    std::vector<std::optional<Tensor>> g = tape.gradient(loss, std::vector<Variable>{w, b});
    w.assign(w.read() - 0.05 * *g[0]);
    b.assign(b.read() - 0.05 * *g[1]);
    steps.assign(steps.read() + 1.0);
    return loss;
  });
  double first = train(x, y).item<double>(), last = first;
  for (int i = 0; i < 500; ++i) last = train(x, y).item<double>();
  Array wv = w.value();
  std::printf("loss %.4f -> %.6f after %g steps\n", first, last, steps.value().item<double>());
  std::printf("w = [%.4f, %.4f], b = %.4f\n", wv.at(0), wv.at(1), b.value().item<double>());
  // [/snippet:train]

  // [snippet:custom-gradient-variables]
  // A custom gradient that reads a variable takes `variables` too.
  Variable weights("weights", Array(std::vector<float>{1, 1}));
  auto linearPoly = custom_gradient([weights](Tensor t) {
    Tensor ww = weights.read();
    auto gradFn = [t, ww](Tensor dpoly, const std::vector<Variable>&) {
      Tensor gradVars = sum(reshape(dpoly * stack({t, ones_like(t)}), {2, -1}), {1});
      return std::make_pair(dpoly * ww[1], std::vector<Tensor>{gradVars});
    };
    return std::make_pair(ww[1] * t + ww[0], gradFn);
  });
  auto poly = jit([linearPoly, weights](Tensor t) {
    GradientTape tape;
    Tensor p = linearPoly(t);
    return std::make_pair(p, *tape.gradient(p, weights));
  });
  auto [p, dw] = poly(Array(std::vector<float>{1, 2, 3}));
  // [/snippet:custom-gradient-variables]
  std::printf("poly = [%g, %g, %g], d/dweights = [%g, %g]\n", p.at(0), p.at(1), p.at(2), dw.at(0), dw.at(1));
  return 0;
}
