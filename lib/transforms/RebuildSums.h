// transforms/RebuildSums.h — the walk shared by the passes that replace
// reductions by ops appended in their place (contract, scale-sum).
#pragma once

#include "ir/IR.h"

#include <numeric>
#include <vector>

namespace adjit::transforms {

/// Rebuilds f's op list in order, renaming operands as replacements are
/// made. A `Rewriter(m, f, producer)` is made once, `producer[v]` being the op
/// of the old list that made value v; for each reduce_sum, `rewrite(rw, op)`
/// may append ops computing its result and return their value (else -1),
/// which then stands for the reduction's result. Ops of the kinds `keep`
/// accepts are copied, since the rewriter may still read them through
/// `producer`; every other op is moved.
template <class Rewriter, class Rewrite, class Keep>
void rebuildSums(ir::Module& m, ir::Function& f, Rewrite rewrite, Keep keep) {
  std::vector<ir::Op> old = std::move(f.ops);
  f.ops.clear();
  f.ops.reserve(old.size());
  std::vector<ir::ValueId> map(f.types.size());
  std::iota(map.begin(), map.end(), 0);
  std::vector<const ir::Op*> producer(f.types.size(), nullptr);
  for (const ir::Op& op : old)
    for (ir::ValueId r : op.results) producer[static_cast<std::size_t>(r)] = &op;
  Rewriter rw(m, f, producer);
  for (ir::Op& op : old) {
    for (ir::ValueId& o : op.operands) o = map[static_cast<std::size_t>(o)];
    if (op.kind == ir::OpKind::ReduceSum) {
      const ir::ValueId v = rewrite(rw, op);
      if (v >= 0) {
        map[static_cast<std::size_t>(op.results[0])] = v;
        continue;
      }
    }
    if (keep(op.kind)) f.ops.push_back(op);
    else f.ops.push_back(std::move(op));
  }
  for (ir::ValueId& o : f.outputs) o = map[static_cast<std::size_t>(o)];
}

} // namespace adjit::transforms
