// A jitted function called inside another trace with one argument too many.
// expect: jit: the function cannot be called with these arguments
#include <adjit/adjit.h>
int main() {
  auto g = adjit::jit([](adjit::Tensor a) { return a * a; });
  auto f = adjit::jit([&](adjit::Tensor a) { return g(a, a); }); // error-here
  f(adjit::Array(1.0f));
}
