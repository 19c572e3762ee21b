// An `if` on a traced value: the value is not known while tracing, so the
// one error points at cond (not at a failed conversion to bool).
// expect: branch with adjit::cond(pred, true_fn, false_fn, operands...)
#include <adjit/adjit.h>
int main() {
  auto f = [](adjit::Tensor x) {
    if (adjit::sum(x) > 0.0) return x; // error-here
    return x * 2.0;
  };
  (void)f;
}
