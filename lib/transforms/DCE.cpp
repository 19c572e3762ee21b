// transforms/DCE.cpp — dead code elimination of ops without side effects.
#include "ir/Effects.h"
#include "transforms/Passes.h"

namespace adjit::transforms {

void dce(ir::Module& m) {
  const ir::Effects effects(m);
  for (auto& fp : m.functions) {
    ir::Function& f = *fp;
    std::vector<bool> live(f.types.size());
    for (ir::ValueId v : f.outputs) live[v] = true;
    std::vector<bool> keep(f.ops.size());
    for (std::size_t i = f.ops.size(); i-- > 0;) {
      const ir::Op& op = f.ops[i];
      bool used = effects.effectful(op);
      for (ir::ValueId r : op.results) used = used || live[r];
      keep[i] = used;
      if (used)
        for (ir::ValueId o : op.operands) live[o] = true;
    }
    // Compacted in place: a second op list of 100,000 ops cost more (its
    // allocation and page faults) than finding the dead ones.
    std::size_t w = 0;
    for (std::size_t i = 0; i < f.ops.size(); ++i)
      if (keep[i]) {
        if (w != i) f.ops[w] = std::move(f.ops[i]);
        ++w;
      }
    f.ops.erase(f.ops.begin() + static_cast<std::ptrdiff_t>(w), f.ops.end());
  }
}

} // namespace adjit::transforms
