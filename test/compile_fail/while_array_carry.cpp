// A while_loop carry that is an Array (data, not a traced value): one clear
// error, not a wall of template errors.
// expect: while_loop: the carry must be Tensors, or tuples, pairs, vectors, arrays or ADJIT_TREE structs of them (make an Array a Tensor with constant(a))
#include <adjit/adjit.h>
int main() {
  auto f = [](adjit::Tensor x) {
    adjit::Array a(1.0);
    return adjit::while_loop([](adjit::Tensor c) { return c < 10.0; }, [](adjit::Tensor c) { return c * 2.0; }, a); // error-here
  };
  (void)f;
}
