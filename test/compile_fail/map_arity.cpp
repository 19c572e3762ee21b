// A mapped function called with one argument too few.
// expect: map: the function cannot be called with these arguments
#include <adjit/adjit.h>
int main() {
  auto f = adjit::map([](adjit::Tensor a, adjit::Tensor b) { return a + sum(b); });
  f(adjit::Array(adjit::DType::f32, {3, 2})); // error-here
}
