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
    const int64_t n = k.domain.back();
    if (n < 2 * kMinPeelPiece) continue;
    for (ValueId v : k.fused) computed[at(v)] = 1;
    for (const LoopRoot& r : k.roots)
      if (!r.reduction) computed[at(r.value)] = 1;
    // From the roots down through what the loop computes, each value with
    // the shift at which it is read along the last axis (element j + shift
    // at the loop's point j); each pad met says where it reads its operand.
    std::vector<std::pair<ValueId, int64_t>> work;
    std::unordered_set<std::pair<ValueId, int64_t>, PairHash> seen;
    std::vector<int64_t> cuts{0, n};
    auto reach = [&](ValueId v, int64_t shift) {
      if (computed[at(v)] && seen.insert({v, shift}).second) work.push_back({v, shift});
    };
    for (const LoopRoot& r : k.roots) reach(r.reduction ? r.op->operands[0] : r.value, 0);
    bool gaveUp = false;
    while (!work.empty()) {
      if (seen.size() > kMaxPeelVisits) {
        gaveUp = true;
        break;
      }
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
    for (ValueId v : k.fused) computed[at(v)] = 0;
    for (const LoopRoot& r : k.roots) computed[at(r.value)] = 0;
    if (gaveUp) continue;
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
