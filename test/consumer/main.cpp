// An outside program: jit-compiles a function with an installed adjit.
#include <adjit/adjit.h>

#include <cstdio>

int main() {
  try {
    auto f = adjit::jit([](adjit::Tensor x) { return adjit::sum(x * x); });
    std::printf("consumer: %g\n", f(adjit::Array(std::vector<double>{1, 2, 3})).item<double>());
  } catch (const adjit::Error& e) { // a mistake of ours
    std::printf("error: %s\n", e.what());
  } catch (const adjit::InternalError& e) { // a bug in adjit: the installed headers name it
    std::printf("adjit bug: %s\n", e.what());
  }
}
