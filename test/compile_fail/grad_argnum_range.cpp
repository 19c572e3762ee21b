// An argnum past the last argument.
// expect: grad: an argnum is not the index of an argument of this call
#include <adjit/adjit.h>
int main() {
  auto df = adjit::grad([](adjit::Tensor a) { return sum(a); }, adjit::argnums<1>);
  df(adjit::Array(1.0f)); // error-here
}
