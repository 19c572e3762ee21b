// transforms/CSE.cpp — common subexpression elimination of ops without side effects.
#include "ir/Text.h"
#include "ops/Effects.h"
#include "ops/OpTable.h"
#include "transforms/Passes.h"

#include <span>
#include <string>
#include <unordered_map>

namespace adjit::transforms {

namespace {

void appendRaw(std::string& key, const void* p, std::size_t n) { key.append(static_cast<const char*>(p), n); }

/// An op's identity as bytes: kind, operands, callees and attributes (arrays
/// by their type and bytes, exactly).
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
    if (const Array* a = std::get_if<Array>(&v)) {
      key += a->type().str();
      appendRaw(key, a->raw(), a->bytes());
    } else {
      key += ir::printAttr(v);
    }
    key += '\0';
  }
}

} // namespace

void cse(ir::Module& m) {
  const ops::Effects effects(m);
  // Keys live in one arena, referred to by offset and length: one allocation
  // for all of them, not one per op (freeing 100,000 small strings cost more
  // than the lookups).
  std::string arena;
  struct KeyRef {
    std::size_t offset, length;
  };
  auto text = [&](const KeyRef& k) { return std::string_view(arena).substr(k.offset, k.length); };
  auto hash = [&](const KeyRef& k) { return std::hash<std::string_view>()(text(k)); };
  auto equal = [&](const KeyRef& a, const KeyRef& b) { return text(a) == text(b); };
  for (auto& fp : m.functions) {
    ir::Function& f = *fp;
    std::vector<ir::ValueId> map(f.types.size());
    for (std::size_t v = 0; v < map.size(); ++v) map[v] = static_cast<ir::ValueId>(v);
    arena.clear();
    std::unordered_map<KeyRef, std::size_t, decltype(hash), decltype(equal)> seen(f.ops.size(), hash, equal);
    std::vector<ir::Op> kept;
    kept.reserve(f.ops.size());
    for (ir::Op& op : f.ops) {
      for (ir::ValueId& o : op.operands) o = map[o];
      const ops::OpInfo& info = ops::info(op.kind);
      if (effects.effectful(op)) {
        kept.push_back(std::move(op));
        continue;
      }
      ir::ValueId pair[2];
      std::span<const ir::ValueId> operands = op.operands;
      if (info.has(ops::kCommutative) && operands.size() == 2 && operands[1] < operands[0]) {
        pair[0] = operands[1];
        pair[1] = operands[0];
        operands = pair;
      }
      const KeyRef key{arena.size(), 0};
      appendKey(arena, op, operands);
      const KeyRef whole{key.offset, arena.size() - key.offset};
      auto [it, fresh] = seen.try_emplace(whole, kept.size());
      if (!fresh) {
        arena.resize(key.offset); // the key is known: drop its copy
        const ir::Op& first = kept[it->second];
        for (std::size_t i = 0; i < op.results.size(); ++i) map[op.results[i]] = first.results[i];
        continue;
      }
      kept.push_back(std::move(op));
    }
    f.ops = std::move(kept);
    for (ir::ValueId& o : f.outputs) o = map[o];
  }
}

} // namespace adjit::transforms
