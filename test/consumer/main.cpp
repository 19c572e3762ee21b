// An outside program: jit-compiles a function with an installed adjit.
#include <adjit/adjit.h>

#include <cstdio>

int main() {
  auto f = adjit::jit([](adjit::Tensor x) { return adjit::sum(x * x); });
  std::printf("consumer: %g\n", f(adjit::Array(std::vector<double>{1, 2, 3})).item<double>());
}
