// The function given to grad called with the wrong number of arguments.
// expect: grad: the function cannot be called with these arguments
#include <adjit/adjit.h>
int main() {
  auto df = adjit::grad([](adjit::Tensor a, adjit::Tensor b) { return sum(a * b); });
  df(adjit::Array(1.0f)); // error-here
}
