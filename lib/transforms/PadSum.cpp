// transforms/PadSum.cpp — a sum of zero-padded tensors becomes one pad_sum.
// The gradient of a tensor read through many slices (an unrolled loop reading
// x[t], the gates an LSTM slices from one parameter block) is a chain of adds
// of pads, each zero outside its region. Fused into one loop, every element
// tests every pad: work and code grow as the number of pads times the
// tensor's size. The rewrite sums the addends that share a region (equal
// pads up to the padded value) where each was added, so they stay as short-
// lived as before, and places each group into its region once: one pad_sum,
// which adds each group in a loop over the group's own elements. A rewrite
// pattern names the ops it matches, unlike the generic drivers.
//
// Before: verified IR. After: the same sums in another order of additions
// (within a group, in program order); replaced adds and pads may be dead
// (run dce).
#include "ir/Builder.h"
#include "transforms/Passes.h"

#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

namespace adjit::transforms {
namespace {

using ir::OpKind;
using ir::ValueId;

/// With fewer regions than this the groups' pads stay a fused sum: a few
/// selects per element in the consumer's loop cost less than a buffer
/// written twice.
constexpr std::size_t kMinRegions = 4;

/// Where a pad places its operand: the operand's shape and the pad's
/// attributes (high follows from the result's shape).
using Region = std::tuple<Shape, std::vector<int64_t>, std::vector<int64_t>>;

struct Group {
  std::size_t pad; ///< the first pad of the group (its attributes), in the new op list
  ValueId sum;     ///< the group's addends summed so far
  ValueId first;   ///< the first addend
  bool bare;       ///< every addend is a reshape, and `sum` sums their operands
  std::size_t count = 1;
};

/// A sum being rewritten: its groups in order of appearance, and the addends
/// that are not pads.
struct Tree {
  std::map<Region, std::size_t> index;
  std::vector<Group> groups;
  ValueId rest = -1;
};

class Rewriter {
public:
  Rewriter(ir::Module& m, ir::Function& f) : b_(m, f), f_(f) {}

  /// Rewrites f if it holds a sum of at least two pads.
  void run() {
    const std::size_t nv = f_.types.size(), no = f_.ops.size();
    std::vector<int> uses(nv, 0);
    std::vector<int> producer(nv, -1), user(nv, -1);
    for (std::size_t i = 0; i < no; ++i) {
      for (ValueId r : f_.ops[i].results) producer[at(r)] = static_cast<int>(i);
      for (ValueId o : f_.ops[i].operands) {
        ++uses[at(o)];
        user[at(o)] = static_cast<int>(i);
      }
    }
    for (ValueId o : f_.outputs) uses[at(o)] += 2; // an output is never inside a sum
    // An add is inside a sum when its one use is an add of the same type;
    // its root is the add at the end of that chain of uses.
    interior_.assign(no, 0);
    std::vector<int> root(no, -1), pads(no, 0);
    for (std::size_t i = no; i-- > 0;) {
      const ir::Op& op = f_.ops[i];
      if (op.kind != OpKind::Add) continue;
      const ValueId r = op.results[0];
      const int u = user[at(r)];
      interior_[i] = uses[at(r)] == 1 && f_.ops[static_cast<std::size_t>(u)].kind == OpKind::Add &&
                     f_.type(f_.ops[static_cast<std::size_t>(u)].results[0]) == f_.type(r);
      root[i] = interior_[i] ? root[static_cast<std::size_t>(u)] : static_cast<int>(i);
    }
    producer_ = &producer;
    // A sum is rewritten when it has addends to group, or regions enough
    // for a pad_sum.
    std::map<int, std::set<Region>> regions;
    for (std::size_t i = 0; i < no; ++i)
      if (f_.ops[i].kind == OpKind::Add)
        for (ValueId o : f_.ops[i].operands)
          if (padLeaf(o)) {
            ++pads[static_cast<std::size_t>(root[i])];
            regions[root[i]].insert(regionOf(opAt(producer[at(o)])));
          }
    std::vector<char> rewrite(no, 0);
    moved_.assign(no, 0);
    bool any = false;
    for (const auto& [r, set] : regions) {
      const std::size_t n = static_cast<std::size_t>(pads[static_cast<std::size_t>(r)]);
      rewrite[static_cast<std::size_t>(r)] = n >= 2 && (set.size() < n || set.size() >= kMinRegions);
      any = any || rewrite[static_cast<std::size_t>(r)];
    }
    if (!any) return;

    // Rebuild the op list: each sum's new ops go where its adds stood.
    std::vector<ir::Op> old = std::move(f_.ops);
    f_.ops.clear();
    f_.ops.reserve(old.size() + old.size() / 16 + 64); // a few ops more than the adds replaced: no reallocation
    old_ = &old;
    map_.resize(nv);
    std::iota(map_.begin(), map_.end(), 0);
    std::unordered_map<int, Tree> open;
    for (std::size_t i = 0; i < old.size(); ++i) {
      ir::Op& op = old[i];
      const ir::ValueList orig = op.operands; // classified by the tables, which know only old values
      for (ValueId& o : op.operands) o = map_[at(o)];
      const int r = op.kind == OpKind::Add ? root[i] : -1;
      if (r < 0 || !rewrite[static_cast<std::size_t>(r)]) {
        // Of a moved op only the kind is read from `old`, which a move
        // leaves in place; a pad, read again as a sum's leaf, is read where
        // it went.
        moved_[i] = f_.ops.size();
        f_.ops.push_back(std::move(op));
        continue;
      }
      Tree& t = open[r];
      loc_ = op.loc;
      for (std::size_t k = 0; k < op.operands.size(); ++k) {
        const int p = producer[at(orig[k])];
        if (p >= 0 && interior_[static_cast<std::size_t>(p)]) continue; // already in t
        if (!padLeaf(orig[k])) {
          t.rest = t.rest < 0 ? op.operands[k] : add(t.rest, op.operands[k]);
          continue;
        }
        const std::size_t moved = moved_[static_cast<std::size_t>(p)];
        const ir::Op& pad = f_.ops[moved];
        const ValueId x = pad.operands[0]; // mapped when the pad was moved
        auto [it, fresh] = t.index.emplace(regionOf(pad), t.groups.size());
        // Addends reshaped from one type (a slice's cotangent given back its
        // sliced axis) are summed before the reshape: one reshape per group,
        // not one per addend.
        const ValueId bare = reshaped(x);
        if (fresh) {
          t.groups.push_back({moved, bare >= 0 ? bare : x, x, bare >= 0});
          continue;
        }
        Group& g = t.groups[it->second];
        if (g.bare && bare >= 0 && f_.type(bare) == f_.type(g.sum)) {
          ++g.count;
          g.sum = add(g.sum, bare);
          continue;
        }
        g.sum = groupSum(g, f_.type(x).shape); // from here on in the region's shape
        ++g.count;
        g.bare = false;
        g.sum = add(g.sum, x);
      }
      if (static_cast<std::size_t>(r) == i) {
        map_[at(op.results[0])] = finish(t, f_.type(op.results[0]).shape);
        open.erase(r);
      }
    }
    for (ValueId& o : f_.outputs) o = map_[at(o)];
  }

private:
  static std::size_t at(ValueId v) { return static_cast<std::size_t>(v); }

  /// Whether `v` is a pad added into a sum (not a value inside it).
  bool padLeaf(ValueId v) const {
    const int p = (*producer_)[at(v)];
    return p >= 0 && opAt(p).kind == OpKind::Pad;
  }
  const ir::Op& opAt(int i) const {
    return old_ ? (*old_)[static_cast<std::size_t>(i)] : f_.ops[static_cast<std::size_t>(i)];
  }

  Region regionOf(const ir::Op& pad) const {
    return {f_.type(pad.operands[0]).shape, pad.attrs.ints("low"), pad.attrs.ints("interior")};
  }

  ValueId add(ValueId a, ValueId b) { return b_.create1(OpKind::Add, {a, b}, {}, loc_); }

  ValueId reshape(ValueId v, const Shape& shape) {
    ir::Attrs a;
    a.set("shape", shape);
    return b_.create1(OpKind::Reshape, {v}, std::move(a), loc_);
  }

  /// The operand of the reshape that made v (an op of the old list, moved
  /// already), or -1.
  ValueId reshaped(ValueId v) const {
    if (at(v) >= producer_->size()) return -1; // made by this rewrite
    const int p = (*producer_)[at(v)];
    if (p < 0 || opAt(p).kind != OpKind::Reshape) return -1;
    return f_.ops[moved_[static_cast<std::size_t>(p)]].operands[0];
  }

  /// The group's sum in its region's shape.
  ValueId groupSum(const Group& g, const Shape& shape) {
    if (g.count == 1) return g.first;
    return g.bare ? reshape(g.sum, shape) : g.sum;
  }

  /// The sum's value: its groups placed in their regions, plus the rest.
  ValueId finish(const Tree& t, const Shape& shape) {
    ValueId placed = -1;
    if (t.groups.size() >= kMinRegions) {
      std::vector<ValueId> xs;
      std::vector<int64_t> low, interior;
      for (const Group& g : t.groups) {
        xs.push_back(groupSum(g, f_.type(f_.ops[g.pad].operands[0]).shape));
        const ir::Attrs& pa = f_.ops[g.pad].attrs;
        const auto &l = pa.ints("low"), &it = pa.ints("interior");
        low.insert(low.end(), l.begin(), l.end());
        interior.insert(interior.end(), it.begin(), it.end());
      }
      ir::Attrs a;
      a.set("shape", shape);
      a.set("low", std::move(low));
      a.set("interior", std::move(interior));
      placed = b_.create1(OpKind::PadSum, std::move(xs), std::move(a), loc_);
    } else {
      for (const Group& g : t.groups) {
        const ValueId x = groupSum(g, f_.type(f_.ops[g.pad].operands[0]).shape);
        ir::Attrs pa = f_.ops[g.pad].attrs; // a copy: creating the pad appends to f_.ops
        const ValueId p = b_.create1(OpKind::Pad, {x}, std::move(pa), loc_);
        placed = placed < 0 ? p : add(placed, p);
      }
    }
    return t.rest < 0 ? placed : add(t.rest, placed);
  }

  ir::Builder b_;
  ir::Function& f_;
  const std::vector<int>* producer_ = nullptr;
  const std::vector<ir::Op>* old_ = nullptr;
  std::vector<char> interior_;
  std::vector<std::size_t> moved_; ///< where each op of `old` went in the new list
  std::vector<ValueId> map_;
  Location loc_;
};

} // namespace

void padSum(ir::Module& m) {
  for (auto& fp : m.functions) Rewriter(m, *fp).run();
}

} // namespace adjit::transforms
