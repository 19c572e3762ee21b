// examples/newton — Newton's method as a `while_loop` that runs until it
// converges, and the derivative of its result with respect to a parameter,
// through the iterations, against the implicit-function-theorem value. The
// loop has no bound: reverse mode keeps each iteration's residuals on a stack
// that grows at run time (TensorFlow's semantics, which JAX refuses), and so
// does the second derivative.
#include <adjit/adjit.h>

#include <cmath>
#include <cstdio>

using namespace adjit;

int main() {
  // [snippet:solve]
  // The real root of F(x, p) = x^3 + p x - 1.
  auto solve = [](Tensor p) {
    auto F = [&](const Tensor& x) { return x * x * x + p * x - 1.0; };
    auto [x, iterations] = while_loop(
        [&](const std::pair<Tensor, Tensor>& s) { return gt(abs(F(s.first)), 1e-13); },
        [&](const std::pair<Tensor, Tensor>& s) {
          const Tensor& x = s.first;
          return std::pair{x - F(x) / (x * x * 3.0 + p), s.second + full({}, 1, DType::i32)};
        },
        std::pair{full({}, 1.0, DType::f64), full({}, 0, DType::i32)});
    return std::pair{x, iterations};
  };
  // [/snippet:solve]
  for (double p : {0.5, 2.0, 10.0}) {
    auto [x, n] = jit(solve)(p);
    const double dx = grad([&](Tensor q) { return solve(q).first; })(p).item<double>();
    // Implicit function theorem: dx/dp = -(dF/dp) / (dF/dx) = -x / (3 x^2 + p).
    const double r = x.item<double>(), ift = -r / (3 * r * r + p);
    std::printf("p = %4.1f: root %.10f after %d iterations; dx/dp through the loop %.8f, implicit %.8f, agree: %s\n", p, r,
                n.item<int32_t>(), dx, ift, std::fabs(dx - ift) < 1e-8 ? "yes" : "NO");
    // The second derivative: reverse mode through the loop's reverse, again
    // without a bound. Differentiating F(x(p), p) = 0 twice:
    // x'' = -(x' (3 x^2 + p) - x (6 x x' + 1)) / (3 x^2 + p)^2.
    const double ddx = grad(grad([&](Tensor q) { return solve(q).first; }))(p).item<double>();
    const double d = 3 * r * r + p, ift2 = -(ift * d - r * (6 * r * ift + 1)) / (d * d);
    std::printf("          d2x/dp2 through the loop %.8f, implicit %.8f, agree: %s\n", ddx, ift2,
                std::fabs(ddx - ift2) < 1e-8 ? "yes" : "NO");
  }
  // [snippet:max-iterations]
  // With max_iterations, a loop that does not end within it is an error, not a wrong answer.
  try {
    jit([](Tensor x) { return while_loop([](Tensor v) { return gt(v, 0.0); }, [](Tensor v) { return v - 1.0; }, x,
                                         {.max_iterations = 10}); })(100.0);
  } catch (const Error& e) {
    std::printf("error: %s\n", e.message().c_str());
  }
  // [/snippet:max-iterations]
  return 0;
}
