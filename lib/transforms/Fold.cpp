// transforms/Fold.cpp — constant folding through each op's reference `eval`,
// and algebraic identities through each op's `fold` hook.
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
    std::vector<std::optional<double>> splat(f.types.size()); // values whose elements are all one value
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
    std::vector<std::optional<double>> splats;
    for (; at < f.ops.size(); ++at) {
      ir::Op& op = f.ops[at];
      for (ir::ValueId& o : op.operands) o = map[o];
      const ir::OpInfo& info = ir::info(op.kind);
      args.clear();
      vals.clear();
      splats.clear();
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
          if (uniformValue(a)) splat[op.results[i]] = a.at(0);
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
      for (ir::ValueId o : op.operands) splats.push_back(splat[o]);
      if (info.has(ir::kElementsFromOperand) && splat[op.operands[0]])
        for (ir::ValueId r : op.results) splat[r] = splat[op.operands[0]];
      ir::FoldCtx fc{op, f, args, splats};
      if (auto r = info.fold(fc)) {
        ir::ValueId res = op.results[0];
        if (auto* v = std::get_if<ir::ValueId>(&*r)) {
          map[res] = *v;
          continue;
        }
        constant[res] = &values.emplace_back(std::get<Array>(*r));
        if (constant[res]->size() == 1) splat[res] = constant[res]->at(0);
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
