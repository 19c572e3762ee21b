// A compiled call cannot return a struct registered with ADJIT_TREE: its
// members are Tensors, and the call returns Arrays.
// expect: jit: the function returns a struct registered with ADJIT_TREE, whose members are Tensors
#include <adjit/adjit.h>
struct Params {
  adjit::Tensor w, b;
};
ADJIT_TREE(Params, w, b)
int main() {
  auto f = adjit::jit([](adjit::Tensor w) { return Params{w, w * 2.0f}; });
  f(adjit::Array(1.0f)); // error-here
}
