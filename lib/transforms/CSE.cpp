// transforms/CSE.cpp — common subexpression elimination of ops without side effects.
#include "ir/Text.h"
#include "ops/Effects.h"
#include "ops/OpTable.h"
#include "transforms/Passes.h"

#include <map>

namespace adjit::transforms {

void cse(ir::Module& m) {
  const ops::Effects effects(m);
  for (auto& fp : m.functions) {
    ir::Function& f = *fp;
    std::vector<ir::ValueId> map(f.types.size());
    for (std::size_t v = 0; v < map.size(); ++v) map[v] = static_cast<ir::ValueId>(v);
    std::map<std::string, std::vector<ir::ValueId>> seen;
    std::vector<ir::Op> kept;
    kept.reserve(f.ops.size());
    for (ir::Op& op : f.ops) {
      for (ir::ValueId& o : op.operands) o = map[o];
      const ops::OpInfo& info = ops::info(op.kind);
      if (effects.effectful(op)) {
        kept.push_back(std::move(op));
        continue;
      }
      std::vector<ir::ValueId> operands = op.operands;
      if (info.has(ops::kCommutative) && operands.size() == 2 && operands[1] < operands[0])
        std::swap(operands[0], operands[1]);
      std::string key = std::string(info.name);
      for (ir::ValueId o : operands) key += " %" + std::to_string(o);
      for (const auto& c : op.callees) key += " @" + c;
      for (const auto& [k, v] : op.attrs.entries()) key += " " + k + "=" + ir::printAttr(v);
      auto it = seen.find(key);
      if (it != seen.end()) {
        for (std::size_t i = 0; i < op.results.size(); ++i) map[op.results[i]] = it->second[i];
        continue;
      }
      seen[key] = op.results;
      kept.push_back(std::move(op));
    }
    f.ops = std::move(kept);
    for (ir::ValueId& o : f.outputs) o = map[o];
  }
}

} // namespace adjit::transforms
