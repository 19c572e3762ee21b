// examples/autodiff — gradients as IR: grad, value_and_grad, higher order,
// GradientTape, tf.gradients-style symbolic gradients, and vjp.
#include <adjit/adjit.h>

#include <cstdio>

using namespace adjit;

int main() {
  // grad of a scalar function, compiled on first call; composes with itself.
  auto f = [](Tensor x) { return x * x * x; };
  std::printf("f'(2)   = %g\n", grad(f)(2.0).item<double>());          // 3x^2 = 12
  std::printf("f''(2)  = %g\n", grad(grad(f))(2.0).item<double>());    // 6x = 12
  std::printf("f'''(2) = %g\n", grad(grad(grad(f)))(2.0).item<double>()); // 6

  // value_and_grad with respect to several arguments.
  auto loss = [](Tensor w, Tensor x, Tensor y) { return mean((matmul(x, w) - y) * (matmul(x, w) - y)); };
  Array w(std::vector<double>{0.5, -0.25}), x(std::vector<double>{1, 2, 3, 4}, {2, 2}), y(std::vector<double>{1, 2});
  auto [value, grads] = value_and_grad(loss, argnums<0, 2>)(w, x, y);
  auto [dw, dy] = grads;
  std::printf("loss = %g, dloss/dw = [%g, %g], dloss/dy = [%g, %g]\n", value.item<double>(), dw.at(0), dw.at(1),
              dy.at(0), dy.at(1));

  // [snippet:tape-and-gradients]
  // Inside a trace: GradientTape and gradients(), as in TensorFlow.
  auto traced = jit([](Tensor a, Tensor b) {
    GradientTape tape;
    tape.watch(a);
    Tensor c = a * b + sin(a);
    Tensor dc_da = *tape.gradient(c, a);                         // b + cos(a)
    auto g = gradients({c}, {a, b}, {}, {b}, Unconnected::zero); // b is a constant: zeros
    return std::make_tuple(dc_da, *g[1]);
  });
  auto [dcda, dcdb] = traced(0.0, 3.0);
  std::printf("dc/da = %g, dc/db with b stopped = %g\n", dcda.item<double>(), dcdb.item<double>());
  // [/snippet:tape-and-gradients]

  // [snippet:vjp]
  // vjp on Arrays: the forward keeps only what the backward needs.
  auto [out, back] = vjp([](Tensor v) { return tanh(v) * 2.0; }, Array(std::vector<double>{0, 1}));
  std::vector<Array> cot = back(Array(std::vector<double>{1, 1}));
  std::printf("vjp: y = [%g, %.4f], dy/dv = [%g, %.4f], residuals %zu bytes\n", out.at(0), out.at(1), cot[0].at(0),
              cot[0].at(1), back.residual_bytes());
  // [/snippet:vjp]

  // The gradient is IR: print it.
  std::printf("%s", jit(grad([](Tensor v) { return sum(v * v); })).lower(Type{DType::f32, {3}}).optimized_adj.c_str());
  return 0;
}
