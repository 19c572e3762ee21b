// The control: the same calls, written correctly, compile without a diagnostic.
#include <adjit/adjit.h>
using adjit::Tensor;
int main() {
  auto f = adjit::jit([](Tensor a, Tensor b) { return a + b; });
  f(adjit::Array(1.0f), adjit::Array(2.0f));
  auto df = adjit::grad([](Tensor a, Tensor b) { return sum(a * b); }, adjit::argnums<0, 1>);
  df(adjit::Array(1.0f), adjit::Array(2.0f));
  auto c = adjit::custom_gradient([](Tensor x) { return std::make_pair(x * x, [x](Tensor dy) { return dy * x; }); });
  adjit::grad([&](Tensor x) { return sum(c(x)); })(adjit::Array(1.0f));
}
