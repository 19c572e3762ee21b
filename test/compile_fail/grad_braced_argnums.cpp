// argnums given as a braced list.
// expect: grad: argnums are written adjit::argnums<0, 1>, not {0, 1}
#include <adjit/adjit.h>
int main() {
  auto df = adjit::grad([](adjit::Tensor a, adjit::Tensor b) { return sum(a * b); }, {0, 1}); // error-here
  df(adjit::Array(1.0f), adjit::Array(2.0f));
  (void)df;
}
