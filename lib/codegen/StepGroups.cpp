// codegen/StepGroups.cpp — the step groups of unrolled loops: periods of
// repeating code found by content, boundaries at one phase of each period,
// and the values carried across them. One pass; linear in the function.
#include "codegen/StepGroups.h"

#include "ir/OpInfo.h"
#include "codegen/Lowering.h"
#include "support/Hash.h"

#include <algorithm>
#include <string>
#include <unordered_map>

namespace adjit::codegen {
namespace {

using ir::ValueId;

std::size_t at(ValueId v) { return static_cast<std::size_t>(v); }

} // namespace

Users Users::of(const ir::Function& f) {
  const std::size_t n = f.types.size();
  Users u;
  u.begin.assign(n + 1, 0);
  for (const ir::Op& op : f.ops)
    for (ValueId o : op.operands) ++u.begin[at(o) + 1];
  for (std::size_t v = 0; v < n; ++v) u.begin[v + 1] += u.begin[v];
  u.ops.resize(u.begin[n]);
  std::vector<std::size_t> fill(u.begin.begin(), u.begin.end() - 1);
  for (const ir::Op& op : f.ops)
    for (ValueId o : op.operands) u.ops[fill[at(o)]++] = &op;
  return u;
}

StepGroups findStepGroups(const ir::Function& f, const Users& users, std::span<const int> position,
                        std::span<const char> storedBefore, int budget) {
  constexpr int kWindow = 16;    // ops per hashed window: unique within a step
  constexpr int kNear = 256;     // farther operands hash by type (or identity: kWidelyRead)
  constexpr int kMinCopies = 5;  // a few copies (the stages of a Runge-Kutta step) are not worth storing carries
  constexpr std::size_t kWidelyRead = 16; // a far operand read this often (a weight) hashes by identity
  constexpr int kMinGroups = 4;  // shorter regions cost LLVM little; the budget alone cuts them evenly
  constexpr uint64_t kBase = 0x100000001b3ull;
  const int n = static_cast<int>(f.ops.size());
  StepGroups out;
  if (n < 4 * kWindow) return out;
  std::vector<uint64_t> g(static_cast<std::size_t>(n));
  std::vector<int> d(static_cast<std::size_t>(n), 0);
  std::vector<uint64_t> h(static_cast<std::size_t>(n));
  std::vector<uint64_t> kind(static_cast<std::size_t>(n)); // h without the operands
  auto typeHash = [](const Type& t) {
    uint64_t x = hashCombine(0x7a, static_cast<uint64_t>(t.dtype));
    for (int64_t e : t.shape) x = hashCombine(x, static_cast<uint64_t>(e));
    return x;
  };
  uint64_t power = 1; // kBase^kWindow
  for (int j = 0; j < kWindow; ++j) power *= kBase;
  std::unordered_map<uint64_t, int> last;
  last.reserve(static_cast<std::size_t>(n));
  std::string key;
  for (int i = 0; i < n; ++i) {
    const ir::Op& op = f.ops[static_cast<std::size_t>(i)];
    // Attributes by name only: the steps of an unrolled loop differ in them
    // (the slice of step t starts at t).
    key.clear();
    for (const auto& entry : op.attrs.entries()) key += entry.first;
    uint64_t x = hashCombine(static_cast<uint64_t>(op.kind) + 1, hashBytes(key));
    for (ValueId r : op.results) x = hashCombine(x, typeHash(f.type(r)));
    kind[static_cast<std::size_t>(i)] = x;
    out.work += 1 + op.results.size() + op.operands.size();
    for (ValueId o : op.operands) {
      const int back = i - position[at(o)];
      uint64_t y = static_cast<uint64_t>(back);
      if (position[at(o)] < 0 || back > kNear)
        y = users.of(o).size() >= kWidelyRead ? hashCombine(0x1d, static_cast<uint64_t>(o)) : typeHash(f.type(o));
      x = hashCombine(x, y);
    }
    const std::size_t si = static_cast<std::size_t>(i);
    h[si] = x;
    g[si] = (i ? g[si - 1] : 0) * kBase + x - (i >= kWindow ? h[si - kWindow] * power : 0);
    if (i + 1 < kWindow) continue; // not a whole window yet
    auto [it, fresh] = last.try_emplace(g[si], i);
    if (!fresh) {
      d[si] = i - it->second;
      it->second = i;
    }
  }
  // crossing[c]: the values a boundary before op c would store, those made
  // before c and read (nearby) at or after it, not counting values stored
  // anyway. Within its period a boundary goes where this is least, so it
  // does not split what a loop would compute together (the add before a
  // tanh) but falls where the step hands over values already in memory (a
  // matmul's operand).
  // Stored anyway: materialised already, written whole by its op, viewed
  // by a stored value (a reshape a matmul reads), or a view of such a value.
  std::vector<uint8_t> stored(f.types.size(), 0);
  for (std::size_t v = 0; v < stored.size(); ++v) stored[v] = storedBefore[v];
  for (auto op = f.ops.rbegin(); op != f.ops.rend(); ++op) {
    for (ValueId r : op->results) stored[at(r)] = stored[at(r)] || codegen::lowering(op->kind).lower || codegen::lowering(op->kind).reduce;
    if (codegen::lowering(op->kind).view && op->results.size() == 1 && !op->operands.empty() && stored[at(op->results[0])])
      stored[at(op->operands[0])] = 1;
  }
  for (const ir::Op& op : f.ops)
    if (codegen::lowering(op.kind).view && op.results.size() == 1 && !op.operands.empty() && stored[at(op.operands[0])])
      stored[at(op.results[0])] = 1;
  std::vector<int> crossing(static_cast<std::size_t>(n) + 1, 0);
  std::vector<uint8_t> fusedOps(static_cast<std::size_t>(n), 0); // per op: it makes a value a loop may fuse
  for (int j = 0; j < n; ++j)
    for (ValueId r : f.ops[static_cast<std::size_t>(j)].results) {
      if (stored[at(r)]) continue;
      fusedOps[static_cast<std::size_t>(j)] = 1;
      int lastUse = j;
      out.work += 1 + users.of(r).size();
      for (const ir::Op* u : users.of(r))
        if (const int pos = static_cast<int>(u - f.ops.data()); pos - j <= kNear) lastUse = std::max(lastUse, pos);
      crossing[static_cast<std::size_t>(j) + 1] += 1;
      crossing[static_cast<std::size_t>(lastUse) + 1] -= 1;
    }
  for (int c = 1; c <= n; ++c) crossing[static_cast<std::size_t>(c)] += crossing[static_cast<std::size_t>(c) - 1];
  // Anchors: repeating positions whose g is less than the g of every other
  // position of their period. prev: the last earlier position with g <= g(i).
  // Only repeating positions count: an op that differs in every step (an
  // index computed on the host, say) makes a few windows that never repeat.
  // A region (repeating code without gaps of more than two windows) is cut
  // only when it makes kMinGroups groups or more: a short one costs LLVM
  // little, and the budget alone cuts it more evenly.
  struct Anchor {
    int at, period, spacing, region;
  };
  std::vector<Anchor> anchors;
  std::vector<int> regionEnd;
  std::vector<int> below; // repeating positions of increasing g
  int lastRepeat = -1;
  for (int i = 0; i < n; ++i) {
    const std::size_t si = static_cast<std::size_t>(i);
    const int period = d[si];
    bool repeats = period > 0;
    out.work += kMinCopies;
    for (int copy = 1; repeats && copy < kMinCopies - 1; ++copy)
      repeats = i >= copy * period && d[si - static_cast<std::size_t>(copy * period)] == period;
    if (!repeats) continue;
    if (lastRepeat < 0 || i - lastRepeat > 2 * kWindow) regionEnd.push_back(i);
    regionEnd.back() = lastRepeat = i;
    while (!below.empty() && g[static_cast<std::size_t>(below.back())] > g[si]) below.pop_back(); // amortised O(1)
    const int prev = below.empty() ? -1 : below.back();
    below.push_back(i);
    if (prev > i - period) continue; // not the least of its period
    // Groups of as many whole periods as a loop body holds (at least one).
    int fused = 0;
    out.work += static_cast<std::size_t>(period);
    for (int j = i - period; j < i; ++j) fused += fusedOps[static_cast<std::size_t>(j)];
    anchors.push_back({i, period, period * std::max(1, budget / std::max(fused, 1)), static_cast<int>(regionEnd.size()) - 1});
  }
  int lastCut = -1, lastAnchor = -1, region = -1;
  // Where in the period from `anchor` on crossing is least.
  auto least = [&](int anchor, int period) {
    int c = anchor;
    out.work += static_cast<std::size_t>(period);
    for (int j = c + 1; j < std::min(anchor + period, n); ++j)
      if (crossing[static_cast<std::size_t>(j)] < crossing[static_cast<std::size_t>(c)]) c = j;
    return c;
  };
  // A boundary before op c, in the period from `anchor` on; the group
  // before it starts at the last one.
  auto cutAt = [&](int anchor, int c, int period) {
    const int from = lastCut >= 0 ? lastCut : std::max(c - period, 0);
    const int until = c + (c - from); // the group after it (about as long)
    for (int j = from; j < c; ++j)
      for (ValueId r : f.ops[static_cast<std::size_t>(j)].results) {
        bool crosses = false;
        out.work += 1 + users.of(r).size();
        for (const ir::Op* u : users.of(r)) {
          const auto pos = u - f.ops.data();
          crosses = crosses || (pos >= c && pos < until);
        }
        if (crosses) out.carries.push_back(r);
      }
    out.cuts.push_back(c);
    lastCut = c;
    lastAnchor = anchor;
  };
  int period = 0; // of the anchors whose phase the cuts keep
  for (const Anchor& a : anchors) {
    if (a.region != region) { // the region's first anchor
      region = a.region;
      period = a.period;
      lastCut = -1;
      if (regionEnd[static_cast<std::size_t>(region)] - a.at < kMinGroups * a.spacing) continue;
      // The copies that made this position repeat repeat too, and so may
      // the steps before them, but for operands the hash told apart (a
      // residual read from near by in the last steps of a recurrence, which
      // the first steps of its backward read): the groups reach back a group
      // at a time while its ops are those of the group after it, up to the
      // end of the last region, and cut where the second copy does, so that
      // they plan alike. One group more sets the first step (its state the
      // initial one, folded) apart from the code before it: 2 fewer
      // distinct codes in an LSTM's forward.
      const int second = a.at - (kMinCopies - 2) * a.period;
      const int offset = least(second, a.period) - second;
      const int floor = region > 0 ? regionEnd[static_cast<std::size_t>(region) - 1] : 0;
      int b = second;
      auto alike = [&](int at, int len) { // ops [at - len, at) as [at, at + len), but for operands
        out.work += static_cast<std::size_t>(len);
        for (int j = 0; j < len; ++j)
          if (kind[static_cast<std::size_t>(at - len + j)] != kind[static_cast<std::size_t>(at + j)]) return false;
        return true;
      };
      while (b - a.spacing >= floor + a.period && b + a.spacing <= n && alike(b, a.spacing)) b -= a.spacing;
      if (b - a.spacing >= floor + a.period) b -= a.spacing;
      for (; b < a.at; b += a.spacing) cutAt(b, b <= second ? b + offset : least(b, a.period), a.period);
      if (lastCut >= 0 && a.at - lastAnchor < a.spacing) continue;
    } else if (lastCut < 0) {
      continue;
    } else if (a.period == period) {
      // The same period: the cuts keep their phase, one spacing apart,
      // wherever the least window of the period falls (it moves where
      // windows differ by an operand's distance, and a group twice as long
      // would plan unlike all others).
      while (lastAnchor + a.spacing <= a.at + a.period / 2)
        cutAt(lastAnchor + a.spacing, least(lastAnchor + a.spacing, a.period), a.period);
      continue;
    } else if (a.at - lastAnchor < a.spacing) {
      continue;
    }
    period = a.period;
    cutAt(a.at, least(a.at, a.period), a.period);
  }
  return out;
}

} // namespace adjit::codegen
