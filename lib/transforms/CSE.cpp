// transforms/CSE.cpp — common subexpression elimination of ops without side effects.
#include "ir/Effects.h"
#include "ir/OpInfo.h"
#include "support/Assert.h"
#include "transforms/Passes.h"

#include <string>

namespace adjit::transforms {

namespace {

/// How many ops ahead the table slot is prefetched: enough to cover a miss
/// to memory at the pass's pace (measured: 4-16 alike).
constexpr std::size_t kLookahead = 8;

} // namespace

void cse(ir::Module& m) {
  const ir::Effects effects(m);
  for (auto& fp : m.functions) {
    ir::Function& f = *fp;
    std::vector<ir::ValueId> map(f.types.size());
    for (std::size_t v = 0; v < map.size(); ++v) map[v] = static_cast<ir::ValueId>(v);
    ir::IdentityTable table(f.ops.size());
    // Kept ops are compacted in place (f.ops[0, w)): no second op list. An
    // op's number in the table is its place there.
    std::size_t w = 0;
    auto keep = [&](ir::Op& op) {
      if (&f.ops[w] != &op) f.ops[w] = std::move(op);
      ++w;
    };
    for (std::size_t at = 0; at < f.ops.size(); ++at) {
      // The slot of an op a few ahead, through the map as it is now (a wrong
      // guess costs only the prefetch).
      if (at + kLookahead < f.ops.size() && !effects.effectful(f.ops[at + kLookahead])) table.prefetch(f.ops[at + kLookahead], map);
      ir::Op& op = f.ops[at];
      for (ir::ValueId& o : op.operands) o = map[o];
      if (effects.effectful(op)) {
        keep(op);
        continue;
      }
      ADJIT_ASSERT(w < UINT32_MAX, "cse: too many ops");
      if (auto first = table.findOrAdd(op, static_cast<uint32_t>(w), map, [&](uint32_t k) -> const ir::Op& { return f.ops[k]; })) {
        const ir::Op& kept = f.ops[*first];
        for (std::size_t r = 0; r < op.results.size(); ++r) map[op.results[r]] = kept.results[r];
        continue;
      }
      keep(op);
    }
    f.ops.erase(f.ops.begin() + static_cast<std::ptrdiff_t>(w), f.ops.end());
    for (ir::ValueId& o : f.outputs) o = map[o];
  }
}

} // namespace adjit::transforms
