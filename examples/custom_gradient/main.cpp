// examples/custom_gradient — a region whose gradient you write yourself.
#include <adjit/adjit.h>

#include <cstdio>

using namespace adjit;

int main() {
  // [snippet:log1pexp]
  // log(1 + e^x) with a gradient that stays finite for large x.
  auto log1pexp = custom_gradient([](Tensor x) {
    Tensor e = exp(x);
    auto grad_fn = [e](Tensor dy) { return dy * (1 - 1 / (1 + e)); }; // e is kept as a residual
    return std::make_pair(log(1 + e), grad_fn);
  });
  auto plain = [](Tensor x) { return log(1 + exp(x)); };
  std::printf("custom gradient at 100: %g\n", grad(log1pexp)(100.0f).item<double>());
  std::printf("plain gradient at 100:  %g\n", grad(plain)(100.0f).item<double>());
  // [/snippet:log1pexp]

  // z = x * y with a hand-written gradient, through one persistent tape.
  auto mul = custom_gradient([](Tensor x, Tensor y) {
    auto grad_fn = [x, y](Tensor upstream) { return std::make_tuple(upstream * y, upstream * x); };
    return std::make_pair(x * y, grad_fn);
  });
  auto f = jit([mul](Tensor x, Tensor y) {
    GradientTape tape(/*persistent=*/true);
    tape.watch(x);
    tape.watch(y);
    Tensor z = mul(x, y);
    return std::make_tuple(z, *tape.gradient(z, x), *tape.gradient(z, y));
  });
  auto [z, dx, dy] = f(2.0, 3.0);
  std::printf("z = %g, dz/dx = %g, dz/dy = %g\n", z.item<double>(), dx.item<double>(), dy.item<double>());

  // [snippet:call-site]
  // The call site is one op naming the forward and the VJP function.
  Module m = trace([log1pexp](Tensor x) { return grad([log1pexp](Tensor t) { return sum(log1pexp(t)); })(x); },
                   Type{DType::f32, {2}});
  std::printf("%s", m.str().c_str());
  // [/snippet:call-site]
  return 0;
}
