// A jitted function called with one argument too few.
// expect: jit: the function cannot be called with these arguments
#include <adjit/adjit.h>
int main() {
  auto f = adjit::jit([](adjit::Tensor a, adjit::Tensor b) { return a + b; });
  f(adjit::Array(1.0f)); // error-here
}
