// codegen/PlanPeel.cpp — the plan's "peel" step: where a loop's last axis is
// cut so that the pads it computes inline read their operand (or their
// zeros) throughout a piece, and need neither a select nor a clamped index
// there (Kernel::peel). The emitter runs each piece as a loop of its own.
#include "codegen/Planner.h"

#include <unordered_set>

namespace adjit::codegen::planning {
namespace {

/// A loop cut into pieces this narrow gains nothing: it is a vector or two.
constexpr int64_t kMinPeelPiece = 16;
/// The walk gives up past this many (value, shift) pairs: shifts of shifts
/// could multiply them, and the emitter computes each once anyway.
constexpr std::size_t kMaxPeelVisits = 4096;

struct PairHash {
  std::size_t operator()(const std::pair<ValueId, int64_t>& p) const {
    return std::hash<int64_t>()(p.second) * 0x9e3779b97f4a7c15ull ^ static_cast<std::size_t>(p.first);
  }
};

} // namespace

void Planner::peel(FusionPlan& p) const {
  std::vector<char> computed(f_.types.size(), 0);
  for (Kernel& k : p.kernels) {
    if (k.kind != Kernel::Kind::Loop || k.flat || k.domain.empty() || k.epilogueOf >= 0 || k.prologueOf >= 0) continue;
    for (ValueId v : k.fused) computed[at(v)] = 1;
    for (const LoopRoot& r : k.roots)
      if (!r.reduction) computed[at(r.value)] = 1;
    // From the values `from` down through what the loop computes, each value with the
    // shift at which it is read along the inner loop's axis (element j +
    // shift at the loop's point j, for an inner loop of n points); each pad
    // met says where it reads its operand (`cuts`), and each buffer of two
    // or more axes met, at each shift, is one read along its rows (`rowReads`).
    // False when the walk gave up.
    auto walk = [&](const std::vector<ValueId>& from, int64_t n, std::vector<int64_t>& cuts, int& rowReads) {
      std::vector<std::pair<ValueId, int64_t>> work;
      std::unordered_set<std::pair<ValueId, int64_t>, PairHash> seen;
      auto reach = [&](ValueId v, int64_t shift) {
        if (!seen.insert({v, shift}).second) return;
        if (computed[at(v)]) {
          work.push_back({v, shift});
          return;
        }
        const Shape& s = f_.type(v).shape;
        if (s.size() >= 2 && s[s.size() - 1] > 1 && s[s.size() - 2] > 1) ++rowReads;
      };
      for (ValueId v : from) reach(v, 0);
      while (!work.empty()) {
        if (seen.size() > kMaxPeelVisits) return false;
        const auto [v, shift] = work.back();
        work.pop_back();
        const ir::Op& op = *producer_[at(v)];
        const Lowering& l = lowering(op.kind);
        if (f_.type(v).shape.empty()) continue; // no last axis to follow
        if (l.scalar) {
          for (ValueId o : op.operands) reach(o, shift);
          continue;
        }
        if (!l.element || !l.lastAxisShift) continue; // read elsewhere: not followed
        for (std::size_t i = 0; i < op.operands.size(); ++i) {
          const auto s = l.lastAxisShift(f_.type(op.operands[i]), i, f_.type(v), op.attrs);
          if (!s) continue;
          if (s->first > 0 || s->end < f_.type(v).shape.back()) // reads the operand at loop points [first - shift, end - shift) only
            for (int64_t c : {s->first - shift, s->end - shift}) cuts.push_back(std::clamp<int64_t>(c, 0, n));
          reach(op.operands[i], shift + s->shift);
        }
      }
      return true;
    };
    // A root exchanging the last two axes of what the loop computes: run the
    // loop in its operand's order when the operand's cone reads more buffer
    // rows than the one store that order sends down a column (Kernel::swapped).
    const std::size_t rank = k.domain.size();
    std::vector<int64_t> cuts;
    bool walked = false;
    if (k.roots.size() == 1 && !k.roots[0].reduction && k.reduceFrom == rank && rank >= 2 && k.chunks <= 1 && k.group < 0) {
      const ir::Op& op = *k.roots[0].op;
      const Lowering& l = lowering(op.kind);
      if (l.swapsLastAxes && l.swapsLastAxes(f_.type(op.operands[0]), f_.type(k.roots[0].value), op.attrs) &&
          computed[at(op.operands[0])]) {
        const int64_t n = k.domain[rank - 2];
        int rowReads = 0;
        cuts = {0, n};
        const bool done = walk({op.operands[0]}, n, cuts, rowReads);
        if (done && rowReads > 1) {
          k.swapped = true;
          walked = true;
        }
      }
    }
    if (!walked) {
      int rowReads = 0;
      cuts = {0, k.domain.back()};
      std::vector<ValueId> from;
      for (const LoopRoot& r : k.roots) from.push_back(r.reduction ? r.op->operands[0] : r.value);
      walked = walk(from, k.domain.back(), cuts, rowReads);
    }
    for (ValueId v : k.fused) computed[at(v)] = 0;
    for (const LoopRoot& r : k.roots) computed[at(r.value)] = 0;
    if (!walked) continue;
    const int64_t n = k.swapped ? k.domain[rank - 2] : k.domain.back(); // the inner loop's extent
    if (n < 2 * kMinPeelPiece) continue;
    // Between two consecutive cuts every pad met reads its operand or its
    // zeros throughout; the widest such piece becomes a loop of its own, and
    // what lies on either side of it one loop each.
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::size_t widest = 0;
    for (std::size_t i = 1; i + 1 < cuts.size(); ++i)
      if (cuts[i + 1] - cuts[i] > cuts[widest + 1] - cuts[widest]) widest = i;
    const int64_t a = cuts[widest], b = cuts[widest + 1];
    if (b - a < kMinPeelPiece || (a == 0 && b == n)) continue;
    if (a > 0) k.peel.push_back(a);
    if (b < n) k.peel.push_back(b);
  }
}

} // namespace adjit::codegen::planning
