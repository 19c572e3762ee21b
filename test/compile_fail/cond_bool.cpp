// cond with a C++ bool predicate: it is known while tracing, so an `if` is the tool.
// expect: cond: the predicate is a C++ bool, known while tracing: use an `if` instead
#include <adjit/adjit.h>
int main() {
  auto f = [](adjit::Tensor x) {
    return adjit::cond(true, [](adjit::Tensor a) { return a; }, [](adjit::Tensor a) { return a * 2.0; }, x); // error-here
  };
  (void)f;
}
