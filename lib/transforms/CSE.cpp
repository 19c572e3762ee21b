// transforms/CSE.cpp — common subexpression elimination of ops without side effects.
#include "ir/Text.h"
#include "ops/Effects.h"
#include "ops/OpTable.h"
#include "transforms/Passes.h"

#include <span>
#include <string>

namespace adjit::transforms {

namespace {

void appendRaw(std::string& key, const void* p, std::size_t n) { key.append(static_cast<const char*>(p), n); }

/// An op's identity as bytes: kind, operands, callees and attributes (exactly,
/// in binary: formatting them as text cost more than the lookups).
void appendKey(std::string& key, const ir::Op& op, std::span<const ir::ValueId> operands) {
  const auto kind = static_cast<uint32_t>(op.kind);
  appendRaw(key, &kind, sizeof kind);
  const auto count = static_cast<uint32_t>(operands.size());
  appendRaw(key, &count, sizeof count);
  appendRaw(key, operands.data(), operands.size() * sizeof(ir::ValueId));
  for (const auto& c : op.callees) {
    key += '@';
    key += c;
    key += '\0';
  }
  for (const auto& [k, v] : op.attrs.entries()) {
    key += k;
    key += '=';
    ir::appendAttrBytes(key, v);
  }
}

} // namespace

void cse(ir::Module& m) {
  const ops::Effects effects(m);
  // Keys live in one arena, referred to by offset and length: one allocation
  // for all of them, not one per op (freeing 100,000 small strings cost more
  // than the lookups). The table is open addressing over (hash, op) slots: a
  // node-based map spent half of the pass allocating nodes and chasing them.
  std::string arena;
  struct Slot {
    uint64_t hash = 0;
    std::size_t offset = 0, length = 0, kept = SIZE_MAX; ///< kept == SIZE_MAX: empty
  };
  std::vector<Slot> table;
  for (auto& fp : m.functions) {
    ir::Function& f = *fp;
    std::vector<ir::ValueId> map(f.types.size());
    for (std::size_t v = 0; v < map.size(); ++v) map[v] = static_cast<ir::ValueId>(v);
    arena.clear();
    std::size_t capacity = 16;
    while (capacity < 2 * f.ops.size()) capacity *= 2;
    table.assign(capacity, Slot{});
    // Kept ops are compacted in place (f.ops[0, w)): no second op list.
    std::size_t w = 0;
    auto keep = [&](ir::Op& op) {
      if (&f.ops[w] != &op) f.ops[w] = std::move(op);
      ++w;
    };
    for (ir::Op& op : f.ops) {
      for (ir::ValueId& o : op.operands) o = map[o];
      const ops::OpInfo& info = ops::info(op.kind);
      if (effects.effectful(op)) {
        keep(op);
        continue;
      }
      ir::ValueId pair[2];
      std::span<const ir::ValueId> operands = op.operands;
      if (info.has(ops::kCommutative) && operands.size() == 2 && operands[1] < operands[0]) {
        pair[0] = operands[1];
        pair[1] = operands[0];
        operands = pair;
      }
      const std::size_t offset = arena.size();
      appendKey(arena, op, operands);
      const std::string_view key = std::string_view(arena).substr(offset);
      const uint64_t hash = std::hash<std::string_view>()(key);
      std::size_t i = hash & (capacity - 1);
      while (table[i].kept != SIZE_MAX &&
             (table[i].hash != hash || std::string_view(arena).substr(table[i].offset, table[i].length) != key))
        i = (i + 1) & (capacity - 1);
      if (table[i].kept != SIZE_MAX) {
        arena.resize(offset); // the key is known: drop its copy
        const ir::Op& first = f.ops[table[i].kept];
        for (std::size_t r = 0; r < op.results.size(); ++r) map[op.results[r]] = first.results[r];
        continue;
      }
      table[i] = {hash, offset, key.size(), w};
      keep(op);
    }
    f.ops.erase(f.ops.begin() + static_cast<std::ptrdiff_t>(w), f.ops.end());
    for (ir::ValueId& o : f.outputs) o = map[o];
  }
}

} // namespace adjit::transforms
