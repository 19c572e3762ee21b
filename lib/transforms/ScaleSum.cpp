// transforms/ScaleSum.cpp — the sum of a scaled array is the scaled sum.
// reduce_sum(c * x), c one number broadcast (negations between them
// allowed), becomes c * reduce_sum(x). Gradients make these: the cotangent
// of a broadcast scalar is the sum of the products it was multiplied into
// (log-sum-exp's gradient sums g = e / s, e = exp(x - max x), for the max's
// cotangent 1 - sum(g)). As the scaled sum, the reduction reads x itself,
// often a sum computed already (cse merges them: sum(e) is the primal's), and
// the loop storing g for it goes. A rewrite pattern names the ops it matches.
//
// Before: verified IR. After: the same sums, scaled after summing instead of
// before (rounding may differ in the last bits); the scaled operands may be
// dead (run dce), and the new sums may repeat earlier ones (run cse).
#include "ir/Builder.h"
#include "transforms/Passes.h"
#include "transforms/RebuildSums.h"

#include <numeric>

namespace adjit::transforms {
namespace {

using ir::OpKind;
using ir::ValueId;

class Rewriter {
public:
  Rewriter(ir::Module& m, ir::Function& f, const std::vector<const ir::Op*>& producer)
      : b_(m, f), f_(f), producer_(producer) {}

  /// The scaled sum computing `r` (a reduce_sum), appended to the function,
  /// or -1 when its operand is no scaled or negated array.
  ValueId rewrite(const ir::Op& r) {
    if (!is_floating(f_.type(r.results[0]).dtype)) return -1;
    bool negate = false;
    std::vector<ValueId> scales; // single-element values
    ValueId x = r.operands[0];
    for (;;) {
      const ir::Op* p = producerOf(x);
      if (!p) break;
      if (p->kind == OpKind::Neg) {
        negate = !negate;
        x = p->operands[0];
        continue;
      }
      if (p->kind != OpKind::Mul) break;
      const ValueId s0 = scalarBroadcast(p->operands[0]), s1 = scalarBroadcast(p->operands[1]);
      if (s0 >= 0) {
        scales.push_back(s0);
        x = p->operands[1];
      } else if (s1 >= 0) {
        scales.push_back(s1);
        x = p->operands[0];
      } else {
        break;
      }
    }
    // A negation alone costs nothing in the sum's loop; moving it out would
    // only add a scalar op after the sum.
    if (scales.empty()) return -1;
    const Location loc = r.loc;
    const Shape resultShape = f_.type(r.results[0]).shape;
    ir::Attrs attrs = r.attrs; // a copy: creating ops appends to f_.ops
    attrs.set("keepdims", false);
    ValueId sum = b_.create1(OpKind::ReduceSum, {x}, std::move(attrs), loc);
    const Shape sumShape = f_.type(sum).shape;
    for (ValueId s : scales) {
      ValueId c = reshape(s, Shape(sumShape.size(), 1), loc);
      if (!sumShape.empty()) {
        ir::Attrs a;
        a.set("shape", std::vector<int64_t>(sumShape));
        c = b_.create1(OpKind::BroadcastTo, {c}, std::move(a), loc);
      }
      sum = b_.create1(OpKind::Mul, {c, sum}, {}, loc);
    }
    if (negate) sum = b_.create1(OpKind::Neg, {sum}, {}, loc);
    return reshape(sum, resultShape, loc);
  }

private:
  const ir::Op* producerOf(ValueId v) const {
    // Values made by an earlier rewrite are past the table.
    return static_cast<std::size_t>(v) < producer_.size() ? producer_[static_cast<std::size_t>(v)] : nullptr;
  }

  /// The single-element value `v` broadcasts, or -1.
  ValueId scalarBroadcast(ValueId v) const {
    const ir::Op* p = producerOf(v);
    if (!p || p->kind != OpKind::BroadcastTo) return -1;
    return f_.type(p->operands[0]).size() == 1 ? p->operands[0] : -1;
  }

  ValueId reshape(ValueId v, const Shape& shape, const Location& loc) {
    if (f_.type(v).shape == shape) return v;
    ir::Attrs a;
    a.set("shape", std::vector<int64_t>(shape));
    return b_.create1(OpKind::Reshape, {v}, std::move(a), loc);
  }

  ir::Builder b_;
  ir::Function& f_;
  const std::vector<const ir::Op*>& producer_;
};

} // namespace

void scaleSum(ir::Module& m) {
  for (auto& fp : m.functions) {
    ir::Function& f = *fp;
    bool candidate = false;
    for (const ir::Op& op : f.ops) candidate = candidate || op.kind == OpKind::ReduceSum;
    if (!candidate) continue;
    // New ops are appended where the reduction stood. The rewriter reads
    // negations, products and broadcasts through the old list: those are copied.
    rebuildSums<Rewriter>(
        m, f, [](Rewriter& rw, const ir::Op& op) { return rw.rewrite(op); },
        [](OpKind k) { return k == OpKind::Neg || k == OpKind::Mul || k == OpKind::BroadcastTo; });
  }
}

} // namespace adjit::transforms
