// A custom_jvp rule written like a grad_fn (one tangent) instead of taking
// (primals, tangents) tuples.
// expect: custom_jvp: the JVP rule must take (primals, tangents), each a std::tuple of the function's arguments
#include <adjit/adjit.h>
using adjit::Tensor;
int main() {
  auto f = adjit::custom_jvp([](Tensor x) { return x * x; },
                             [](Tensor x, Tensor dx) { return std::make_pair(x * x, 2.0 * x * dx); });
  auto g = adjit::grad([&](Tensor x) { return sum(f(x)); }); // error-here: the traced call of f
  g(adjit::Array(1.0f));
}
