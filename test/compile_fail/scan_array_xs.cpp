// scan over an Array of inputs: one clear error naming scan.
// expect: scan: init and xs must be Tensors, or tuples, pairs, vectors, arrays or ADJIT_TREE structs of them (make an Array a Tensor with constant(a))
#include <adjit/adjit.h>
int main() {
  auto f = [](adjit::Tensor h) {
    adjit::Array xs(std::vector<double>{1, 2, 3});
    auto step = [](adjit::Tensor c, adjit::Tensor x) { return std::pair{c + x, c}; };
    return adjit::scan(step, h, xs).first; // error-here
  };
  (void)f;
}
