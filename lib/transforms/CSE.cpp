// transforms/CSE.cpp — common subexpression elimination of ops without side effects.
#include "ir/Text.h"
#include "ops/Effects.h"
#include "ops/OpTable.h"
#include "support/Assert.h"
#include "transforms/Passes.h"

#include <cstring>
#include <string>

namespace adjit::transforms {

namespace {

/// How many ops ahead the table slot is prefetched: enough to cover a miss
/// to memory at the pass's pace (measured: 4-16 alike).
constexpr std::size_t kLookahead = 8;

void appendRaw(std::string& key, const void* p, std::size_t n) { key.append(static_cast<const char*>(p), n); }

/// Replaces `key` with an op's identity as bytes: kind, operands (through
/// `map`; a commutative op's two in order), callees and attributes (exactly,
/// in binary: formatting them as text cost more than the lookups).
void makeKey(std::string& key, const ir::Op& op, const std::vector<ir::ValueId>& map) {
  key.clear();
  const auto kind = static_cast<uint32_t>(op.kind);
  appendRaw(key, &kind, sizeof kind);
  const auto count = static_cast<uint32_t>(op.operands.size());
  appendRaw(key, &count, sizeof count);
  const std::size_t at = key.size();
  for (ir::ValueId o : op.operands) appendRaw(key, &map[static_cast<std::size_t>(o)], sizeof(ir::ValueId));
  if (count == 2 && ops::info(op.kind).has(ops::kCommutative)) {
    ir::ValueId pair[2];
    std::memcpy(pair, key.data() + at, sizeof pair);
    if (pair[1] < pair[0]) {
      std::swap(pair[0], pair[1]);
      std::memcpy(key.data() + at, pair, sizeof pair);
    }
  }
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
  // The table is open addressing over (hash tag, op) slots of 8 bytes; an
  // op's key is made again only to confirm a match. Keeping every key (an
  // arena of tens of megabytes for 200,000 ops) and 32-byte slots cost
  // more in cache misses and fresh pages than the lookups.
  struct Slot {
    uint32_t tag = 0, kept = UINT32_MAX; ///< kept == UINT32_MAX: empty
  };
  std::vector<Slot> table;
  std::string key, other;
  for (auto& fp : m.functions) {
    ir::Function& f = *fp;
    std::vector<ir::ValueId> map(f.types.size());
    for (std::size_t v = 0; v < map.size(); ++v) map[v] = static_cast<ir::ValueId>(v);
    std::size_t capacity = 16;
    while (capacity < 2 * f.ops.size()) capacity *= 2;
    table.assign(capacity, Slot{});
    // Kept ops are compacted in place (f.ops[0, w)): no second op list.
    std::size_t w = 0;
    auto keep = [&](ir::Op& op) {
      if (&f.ops[w] != &op) f.ops[w] = std::move(op);
      ++w;
    };
    auto hashOf = [](const std::string& k) { return std::hash<std::string_view>()(k); };
    for (std::size_t at = 0; at < f.ops.size(); ++at) {
      // The table does not stay in cache while the ops stream through it:
      // fetch the slot of an op a few ahead (its key through the map as it
      // is now; a wrong guess costs only the prefetch).
      if (at + kLookahead < f.ops.size() && !effects.effectful(f.ops[at + kLookahead])) {
        makeKey(other, f.ops[at + kLookahead], map);
        __builtin_prefetch(&table[hashOf(other) & (capacity - 1)]);
      }
      ir::Op& op = f.ops[at];
      for (ir::ValueId& o : op.operands) o = map[o];
      if (effects.effectful(op)) {
        keep(op);
        continue;
      }
      makeKey(key, op, map);
      const uint64_t hash = hashOf(key);
      const auto tag = static_cast<uint32_t>(hash >> 32);
      std::size_t i = hash & (capacity - 1);
      for (; table[i].kept != UINT32_MAX; i = (i + 1) & (capacity - 1)) {
        if (table[i].tag != tag) continue;
        makeKey(other, f.ops[table[i].kept], map);
        if (other == key) break;
      }
      if (table[i].kept != UINT32_MAX) {
        const ir::Op& first = f.ops[table[i].kept];
        for (std::size_t r = 0; r < op.results.size(); ++r) map[op.results[r]] = first.results[r];
        continue;
      }
      ADJIT_ASSERT(w < UINT32_MAX, "cse: too many ops");
      table[i] = {tag, static_cast<uint32_t>(w)};
      keep(op);
    }
    f.ops.erase(f.ops.begin() + static_cast<std::ptrdiff_t>(w), f.ops.end());
    for (ir::ValueId& o : f.outputs) o = map[o];
  }
}

} // namespace adjit::transforms
