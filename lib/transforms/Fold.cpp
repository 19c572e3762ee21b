// transforms/Fold.cpp — constant folding through each op's reference `eval`,
// and algebraic identities through each op's `fold` hook, which may also put
// another op in an op's place or tell what is known of its result's elements
// (a splat, a ramp, identity matrices) for the folds of the ops that read it.
#include "ir/Builder.h"
#include "ir/OpInfo.h"
#include "support/Assert.h"
#include "transforms/Passes.h"

#include <algorithm>
#include <deque>

namespace adjit::transforms {

/// Constants larger than this are not produced by folding: they would bloat
/// the IR, and a broadcast of a scalar costs nothing in fused loops.
constexpr int64_t kMaxFoldedElements = 64;

void replaceUses(ir::Function& f, const std::vector<ir::ValueId>& map) {
  for (ir::Op& op : f.ops)
    for (ir::ValueId& o : op.operands) o = map[o];
  for (ir::ValueId& o : f.outputs) o = map[o];
}

namespace {

/// True when `a` has elements and they are all one value.
bool uniformValue(const Array& a) {
  bool uniform = a.size() > 0;
  for (int64_t k = 1; k < a.size() && uniform; ++k) uniform = a.at(k) == a.at(0);
  return uniform;
}

/// How many times one op may be rewritten and folded again: rewrites that
/// undo each other stop here instead of cycling.
constexpr int kMaxRewrites = 4;

ir::Op makeConstant(ir::ValueId result, Array value, const Location& loc) {
  ir::Attrs attrs;
  attrs.set("value", std::move(value));
  return ir::Op{ir::OpKind::Constant, {}, {result}, std::move(attrs), {}, loc};
}

} // namespace

void fold(ir::Module& m) {
  for (auto& fp : m.functions) {
    ir::Function& f = *fp;
    std::vector<ir::ValueId> map(f.types.size());
    for (std::size_t v = 0; v < map.size(); ++v) map[v] = static_cast<ir::ValueId>(v);
    std::vector<const Array*> constant(f.types.size(), nullptr);
    std::vector<ir::Known> known(f.types.size()); // what is known of each value's elements
    std::deque<Array> values; // known constant values, at stable addresses
    // The ops kept or made are written over the list in place (a second list
    // of a 200,000-op function faulted in tens of megabytes), unless an op
    // could fold into several constants, which may need more room than it
    // leaves.
    const bool inPlace = std::none_of(f.ops.begin(), f.ops.end(), [](const ir::Op& op) {
      return op.results.size() > 1 && ir::info(op.kind).has(ir::kPure) && !ir::info(op.kind).has(ir::kHasCallee);
    });
    std::vector<ir::Op> out;
    if (!inPlace) out.reserve(f.ops.size());
    std::size_t w = 0, at = 0; // ops written, op being read
    auto emit = [&](ir::Op&& op) {
      if (!inPlace) out.push_back(std::move(op));
      else {
        ADJIT_ASSERT(w <= at, "fold: an op in place overwrote one not yet read");
        if (&f.ops[w] != &op) f.ops[w] = std::move(op);
        ++w;
      }
    };
    // Per-op scratch, reused: three allocations per op cost more than folding.
    std::vector<const Array*> args;
    std::vector<Array> vals;
    std::vector<ir::Known> knowns;
    bool again = false; // the op at `at` was rewritten: fold the new one
    int rewrites = 0;   // of the op at `at`
    for (; at < f.ops.size(); at += again ? 0 : 1) {
      rewrites = again ? rewrites + 1 : 0;
      again = false;
      ir::Op& op = f.ops[at];
      for (ir::ValueId& o : op.operands) o = map[o];
      const ir::OpInfo& info = ir::info(op.kind);
      args.clear();
      vals.clear();
      knowns.clear();
      bool allConst = true;
      for (ir::ValueId o : op.operands) {
        args.push_back(constant[o]);
        allConst = allConst && constant[o];
      }
      bool small = true;
      for (ir::ValueId r : op.results) small = small && f.type(r).size() <= kMaxFoldedElements;
      if (allConst && small && info.has(ir::kPure) && !info.has(ir::kHasCallee)) {
        std::vector<Array> in;
        for (const Array* a : args) in.push_back(*a);
        ir::EvalCtx ec{op, f, in, nullptr};
        vals = info.eval(ec);
        // Folding never makes code larger: a result with more elements than
        // its constant operands together is kept as the op (a broadcast of a
        // scalar costs nothing in a fused loop) unless all its elements are one.
        int64_t operandElements = 0;
        for (const Array* a : args) operandElements += a->size();
        for (const Array& v : vals)
          if (!op.operands.empty() && v.size() > std::max<int64_t>(operandElements, 1) && !uniformValue(v)) vals.clear();
      }
      if (!vals.empty()) {
        for (std::size_t i = 0; i < vals.size(); ++i) {
          const Array& a = values.emplace_back(std::move(vals[i]));
          constant[op.results[i]] = &a;
          known[op.results[i]] = ir::knownOf(a);
        }
        if (op.operands.empty()) { // already a leaf (a constant, an iota): keep it
          emit(std::move(op));
          continue;
        }
        const ir::Op folded = std::move(op); // op's place may be written below
        for (std::size_t i = 0; i < folded.results.size(); ++i)
          emit(makeConstant(folded.results[i], *constant[folded.results[i]], folded.loc));
        continue;
      }
      for (ir::ValueId o : op.operands) knowns.push_back(known[o]);
      if (info.has(ir::kElementsFromOperand) && known[op.operands[0]].splat)
        for (ir::ValueId r : op.results) known[r].splat = known[op.operands[0]].splat;
      ir::FoldCtx fc{op, f, args, knowns};
      if (auto r = info.fold(fc)) {
        ir::ValueId res = op.results[0];
        if (auto* v = std::get_if<ir::ValueId>(&*r)) {
          map[res] = *v;
          continue;
        }
        if (auto* k = std::get_if<ir::Known>(&*r)) {
          if (!k->splat) k->splat = known[res].splat;
          known[res] = *k;
          emit(std::move(op));
          continue;
        }
        if (auto* rw = std::get_if<ir::Rewrite>(&*r)) {
          ADJIT_ASSERT(op.results.size() == 1, "fold: a rewrite of an op of several results");
          ADJIT_ASSERT(ir::inferTypes(m, f, rw->kind, rw->operands, rw->attrs, {}, op.loc) == std::vector<Type>{f.type(res)},
                       "fold: a rewrite of a different type");
          // The new op in the old one's place, folded in turn (a rewrite
          // may meet an identity of its own).
          op = ir::Op{rw->kind, std::move(rw->operands), {res}, std::move(rw->attrs), {}, op.loc};
          known[res] = {};
          again = rewrites < kMaxRewrites;
          if (!again) emit(std::move(op));
          continue;
        }
        constant[res] = &values.emplace_back(std::get<Array>(*r));
        known[res] = ir::knownOf(*constant[res]);
        emit(makeConstant(res, std::get<Array>(std::move(*r)), op.loc));
        continue;
      }
      emit(std::move(op));
    }
    if (inPlace) f.ops.erase(f.ops.begin() + static_cast<std::ptrdiff_t>(w), f.ops.end());
    else f.ops = std::move(out);
    for (ir::ValueId& o : f.outputs) o = map[o];
  }
}

} // namespace adjit::transforms
