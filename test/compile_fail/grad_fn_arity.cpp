// A grad_fn that takes two cotangents for a function with one output.
// expect: custom_gradient: grad_fn must take one Tensor per output leaf of f
#include <adjit/adjit.h>
using adjit::Tensor;
int main() {
  auto f = adjit::custom_gradient([](Tensor x) {
    return std::make_pair(x * x, [x](Tensor dy, Tensor extra) { return dy * x + extra; });
  });
  auto g = adjit::grad([&](Tensor x) { return sum(f(x)); }); // error-here: the traced call of f
  g(adjit::Array(1.0f));
}
