// transforms/DCE.cpp — dead code elimination of ops without side effects.
#include "ops/Effects.h"
#include "transforms/Passes.h"

namespace adjit::transforms {

void dce(ir::Module& m) {
  const ops::Effects effects(m);
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
    std::vector<ir::Op> kept;
    for (std::size_t i = 0; i < f.ops.size(); ++i)
      if (keep[i]) kept.push_back(std::move(f.ops[i]));
    f.ops = std::move(kept);
  }
}

} // namespace adjit::transforms
