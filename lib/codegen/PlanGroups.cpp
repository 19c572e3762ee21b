// codegen/PlanGroups.cpp — the planner's row groups (kernels over the same
// rows that read each other's values at their own rows, run block by block
// through a cache-sized buffer) and tile pairs (a matmul with the loop that
// consumes each tile of its product, or produces the tiles it packs).
#include "codegen/Planner.h"
#include "codegen/ScratchAllocator.h"
#include "support/Assert.h"

#include <algorithm>
#include <bit>
#include <queue>
#include <unordered_map>
#include <unordered_set>

namespace adjit::codegen::planning {

bool Planner::keepsRows(const ir::Op& op, std::size_t i) const {
  const Type &in = f_.type(op.operands[i]), &out = f_.type(op.results.at(0));
  if (in.shape.empty() || out.shape.empty() || in.shape[0] != out.shape[0]) return false;
  const ir::OpInfo& info = ir::info(op.kind);
  if (info.has(ir::kElementwise)) return true;
  if (codegen::lowering(op.kind).reduce) {
    for (int64_t a : op.attrs.ints("axes"))
      if (a == 0 || a == -static_cast<int64_t>(in.shape.size())) return false;
    return true;
  }
  return codegen::lowering(op.kind).keepsRows && codegen::lowering(op.kind).keepsRows(in, i, out, op.attrs);
}

bool Planner::readsOwnRows(const Kernel& k, int g) {
  ++gen_;
  auto readBy = [&](const ir::Op& op, bool aligned) {
    for (std::size_t i = 0; i < op.operands.size(); ++i) {
      ValueId o = op.operands[i];
      bool keeps = aligned && keepsRows(op, i);
      if (const ValueId base = viewOf_[at(o)]; base >= 0) { // a view reads its base through its chain of ops
        for (ValueId x = o; x != base; x = producer_[at(x)]->operands[0])
          if (!producer_[at(x)] || !keepsRows(*producer_[at(x)], 0)) {
            keeps = false;
            break;
          }
        o = base;
      }
      if (!keeps && groupOf_[at(o)] == g) return false;
      if (stamp_[at(o)] != gen_) {
        stamp_[at(o)] = gen_;
        state_[at(o)] = keeps ? 1 : 2;
      } else if (!keeps) {
        state_[at(o)] = 2;
      }
    }
    return true;
  };
  for (const LoopRoot& r : k.roots)
    if (!readBy(*r.op, true)) return false;
  if (k.kind != Kernel::Kind::Loop && !readBy(*k.op, true)) return false;
  for (auto v = k.fused.rbegin(); v != k.fused.rend(); ++v)
    if (!readBy(*producer_[at(*v)], stamp_[at(*v)] == gen_ && state_[at(*v)] == 1)) return false;
  return true;
}

bool Planner::readsMarked(const Kernel& k, const std::vector<int>& mark, int id) {
  for (const Read& r : readsOf(operandsOf(k, stack_), false)) {
    const ValueId base = viewOf_[at(r.value)];
    if (mark[at(r.value)] == id || (base >= 0 && mark[at(base)] == id)) return true;
  }
  return false;
}

int64_t Planner::groupRows(const Kernel& k, std::span<const int> repeats, bool& small) {
  if (k.sameAs >= 0 && repeats[static_cast<std::size_t>(k.sameAs)] > kGroupMaxRepeats) return 0;
  std::vector<ValueId>& written = stack_;
  uint64_t bytes = 0;
  for (ValueId v : writtenBy(k, written)) bytes += static_cast<uint64_t>(f_.type(v).bytes());
  small = bytes < kGroupMinKernelBytes;
  if (k.kind == Kernel::Kind::Loop) return k.reduceFrom >= 1 ? k.domain[0] : 0;
  if (k.kind != Kernel::Kind::Lower || !codegen::lowering(k.op->kind).has(codegen::kRowRanges) || k.op->results.size() != 1) return 0;
  for (std::size_t i = 0; i < k.op->operands.size(); ++i)
    if (!keepsRows(*k.op, i)) return 0;
  return f_.type(k.op->results[0]).shape[0];
}

void Planner::group(FusionPlan& p) {
  blocks_.clear();
  inOutput_.clear();
  const std::size_t n = p.kernels.size();
  groupOf_.assign(f_.types.size(), -1);
  std::vector<int> pendingOf(f_.types.size(), -1);
  std::vector<ValueId> buffers, written;
  std::vector<uint32_t> listed(f_.types.size(), 0);
  std::vector<std::size_t> order; // the new kernel order
  std::vector<int> groupOfKernel(n, -1);
  std::vector<RowGroup> groups;
  std::vector<int> repeats(n, 0); // per class of shared code, its kernels
  for (const Kernel& k : p.kernels)
    if (k.sameAs >= 0) ++repeats[static_cast<std::size_t>(k.sameAs)];
  // The group being grown: it opened at kernel `begin`; since then each
  // kernel is a member, or moved before or after it.
  int candidate = -1;
  bool open = false;
  std::size_t begin = 0;
  std::vector<std::size_t> before, members, after;
  RowGroup g;
  auto close = [&](std::size_t end) {
    if (!open) return;
    open = false;
    if (members.size() < 2) { // nothing to group: the kernels keep their order
      for (std::size_t j = begin; j < end; ++j) order.push_back(j);
      return;
    }
    order.insert(order.end(), before.begin(), before.end());
    g.first = order.size();
    g.count = members.size();
    for (std::size_t j : members) {
      groupOfKernel[j] = static_cast<int>(groups.size());
      order.push_back(j);
    }
    order.insert(order.end(), after.begin(), after.end());
    groups.push_back(std::move(g));
  };
  for (std::size_t i = 0; i < n; ++i) {
    const Kernel& k = p.kernels[i];
    bool small = false;
    const int64_t rows = groupRows(k, repeats, small);
    if (!open && rows < kGroupMinRows) { // the common case: no group near, nothing to decide
      order.push_back(i);
      continue;
    }
    const bool pure = !kernelKey(k, buffers).empty(); // side effects stay in program order
    const bool fits = pure && rows >= kGroupMinRows;
    if (open) {
      if (fits && rows == g.rows && members.size() < kMaxGroupKernels && readsOwnRows(k, candidate) &&
          !readsMarked(k, pendingOf, candidate)) {
        members.push_back(i);
      } else if (pure && (!fits || small)) { // a small kernel that cannot join moves, it never ends a group
        const bool late = readsMarked(k, groupOf_, candidate) || readsMarked(k, pendingOf, candidate);
        (late ? after : before).push_back(i);
        if (late)
          for (ValueId v : writtenBy(k, written)) pendingOf[at(v)] = candidate;
        continue;
      } else {
        close(i);
      }
    }
    if (!open && fits) {
      open = true;
      ++candidate;
      begin = i;
      before.clear();
      members = {i};
      after.clear();
      g = RowGroup{};
      g.rows = rows;
    } else if (!open) {
      order.push_back(i);
      continue;
    }
    for (ValueId b : buffers)
      if (listed[at(b)] != static_cast<uint32_t>(candidate) + 1) {
        listed[at(b)] = static_cast<uint32_t>(candidate) + 1;
        g.buffers.push_back(b);
      }
    for (ValueId v : writtenBy(k, written)) groupOf_[at(v)] = candidate;
  }
  close(n);
  if (groups.empty()) return;
  // The kernels in their new order (sameAs still names a class by its old
  // first kernel; renumbered below). If no group pays, the old order stays.
  std::vector<Kernel> original = p.kernels;
  std::vector<Kernel> kernels;
  kernels.reserve(n);
  for (std::size_t j : order) {
    kernels.push_back(std::move(p.kernels[j]));
    kernels.back().group = groupOfKernel[j];
  }
  p.kernels = std::move(kernels);
  p.groups = std::move(groups);
  // Block buffers, where they pay; other groups are dissolved.
  std::vector<int> writer, lastRead;
  readers(p, writer, lastRead);
  // A view of a block value reads the block at its rows when it starts at
  // row 0 and has the same rows (a reshape keeping axis 0).
  // viewed: 1 when such a view does not, 2 when all views of it do.
  std::vector<char> viewed(f_.types.size(), 0);
  for (std::size_t v = 0; v < viewOf_.size(); ++v)
    if (const ValueId base = viewOf_[v]; base >= 0) {
      lastRead[at(base)] = std::max(lastRead[at(base)], lastRead[v]);
      const Shape &vs = f_.type(static_cast<ValueId>(v)).shape, &bs = f_.type(base).shape;
      if (viewOffset_[v] != 0 || vs.empty() || bs.empty() || vs[0] != bs[0]) viewed[at(base)] = 1;
      else if (!viewed[at(base)]) viewed[at(base)] = 2;
    }
  blockOf_.assign(f_.types.size(), -1);
  std::vector<RowGroup> kept;
  std::vector<std::pair<ValueId, uint64_t>> local;
  for (std::size_t gi = 0; gi < p.groups.size(); ++gi) {
    RowGroup& r = p.groups[gi];
    const bool pays = sizeGroup(p, gi, lastRead, viewed, local);
    for (std::size_t j = r.first; j < r.first + r.count; ++j) p.kernels[j].group = pays ? static_cast<int>(kept.size()) : -1;
    if (!pays) continue;
    for (const auto& [v, offset] : local) blocks_.push_back({v, static_cast<uint32_t>(kept.size()), offset});
    kept.push_back(std::move(r));
  }
  p.groups = std::move(kept);
  if (p.groups.empty()) {
    p.kernels = std::move(original);
    blocks_.clear();
    inOutput_.clear();
    return;
  }
  // A kernel of a row group has code of its own (a function of the block's rows).
  for (Kernel& k : p.kernels)
    if (k.group >= 0) k.sameAs = -1;
  reshare(p);
}

void Planner::reshare(FusionPlan& p) {
  const std::size_t n = p.kernels.size();
  std::vector<int> sharing(n, 0), first(n, -1);
  for (const Kernel& k : p.kernels)
    if (k.sameAs >= 0) ++sharing[static_cast<std::size_t>(k.sameAs)];
  for (std::size_t i = 0; i < n; ++i) {
    Kernel& k = p.kernels[i];
    if (k.sameAs < 0) continue;
    const std::size_t c = static_cast<std::size_t>(k.sameAs);
    if (sharing[c] < 2) {
      k.sameAs = -1;
      k.buffers.clear();
      continue;
    }
    if (first[c] < 0) first[c] = static_cast<int>(i);
    k.sameAs = first[c];
  }
}

void Planner::tiles(FusionPlan& p) {
  const std::size_t n = p.kernels.size();
  std::vector<int> after(n, -1), readers, lastRead, writer, repeats;
  std::vector<std::vector<int>> before(n);
  std::vector<char> taken(n, 0), viewed;
  std::vector<ValueId> operands, written, buffers;
  bool known = false, paired = false;
  auto ownCode = [&](const Kernel& x) { return x.sameAs < 0 || repeats[static_cast<std::size_t>(x.sameAs)] <= kGroupMaxRepeats; };
  for (std::size_t i = 0; i < n; ++i) {
    const Kernel& k = p.kernels[i];
    if (k.kind != Kernel::Kind::Lower || k.group >= 0) continue;
    const bool epilogue = codegen::lowering(k.op->kind).has(codegen::kTileEpilogue) && k.op->results.size() == 1 && f_.type(k.op->results[0]).rank() >= 2 &&
                          !isOutput_[at(k.op->results[0])];
    if (!epilogue && !codegen::lowering(k.op->kind).has(codegen::kTilePrologue)) continue;
    if (!known) { // facts about the whole plan, once a candidate is met
      known = true;
      readers.assign(f_.types.size(), 0);
      lastRead.assign(f_.types.size(), -1);
      writer.assign(f_.types.size(), -1);
      for (std::size_t j = 0; j < n; ++j) {
        for (const Read& r : readsOf(operandsOf(p.kernels[j], operands), false)) {
          ++readers[at(r.value)];
          lastRead[at(r.value)] = static_cast<int>(j);
        }
        for (ValueId w : writtenBy(p.kernels[j], written)) writer[at(w)] = static_cast<int>(j);
      }
      repeats.assign(n, 0);
      for (const Kernel& x : p.kernels)
        if (x.sameAs >= 0) ++repeats[static_cast<std::size_t>(x.sameAs)];
      viewed.assign(f_.types.size(), 0);
      for (ValueId base : viewOf_)
        if (base >= 0) viewed[at(base)] = 1;
    }
    if (!ownCode(k)) continue;
    // A loop that may run on tiles of value v of `type`, read or written by k
    // only; it may reduce when `reduces` (an epilogue on a grid of tiles).
    auto tileLoop = [&](int j, ValueId v, bool reduces) {
      const Kernel& e = p.kernels[static_cast<std::size_t>(j)];
      return !taken[static_cast<std::size_t>(j)] && e.kind == Kernel::Kind::Loop && e.group < 0 && e.domain == f_.type(v).shape &&
             (e.reduceFrom == e.domain.size() || reduces) && readers[at(v)] == 1 && !viewed[at(v)] && ownCode(e) &&
             !kernelKey(e, buffers).empty(); // (side effects stay where they are)
    };
    // Whether kernels [from, to) write what kernel j reads.
    auto writesReadBy = [&](std::size_t from, std::size_t to, std::size_t j) {
      ++gen_;
      for (const Read& r : readsOf(operandsOf(p.kernels[j], operands), false)) {
        stamp_[at(r.value)] = gen_;
        if (const ValueId base = viewOf_[at(r.value)]; base >= 0) stamp_[at(base)] = gen_;
      }
      for (std::size_t x = from; x < to; ++x)
        for (ValueId v : writtenBy(p.kernels[x], written))
          if (stamp_[at(v)] == gen_) return true;
      return false;
    };
    if (codegen::lowering(k.op->kind).has(codegen::kTilePrologue) && unit_) {
      std::vector<Type> types;
      for (ValueId o : k.op->operands) types.push_back(f_.type(o));
      for (std::size_t o = 0; o < k.op->operands.size(); ++o) {
        const ValueId a = k.op->operands[o];
        if (!codegen::lowering(k.op->kind).tilesOperand(types, o, k.op->attrs, *unit_)) continue;
        const int j = writer[at(a)];
        if (std::count(k.op->operands.begin(), k.op->operands.end(), a) != 1 || isOutput_[at(a)] || f_.type(a).rank() < 2 || j < 0 ||
            j >= static_cast<int>(i) || static_cast<int>(i) - j > kMaxEpilogueDistance || !tileLoop(j, a, false) ||
            p.kernels[static_cast<std::size_t>(j)].roots.size() != 1 || writesReadBy(static_cast<std::size_t>(j) + 1, i, static_cast<std::size_t>(j)))
          continue;
        before[i].resize(k.op->operands.size(), -1);
        before[i][o] = j;
        taken[static_cast<std::size_t>(j)] = 1;
        paired = true;
      }
    }
    if (!epilogue) continue;
    const ValueId c = k.op->results[0];
    const int j = lastRead[at(c)];
    // A reducing epilogue folds tiles of the op's grid, buffering a tile's
    // values a row (of at most kMaxTileColumns) or a small cell at a time.
    std::pair<int64_t, int64_t> grid{0, 0};
    if (unit_) {
      std::vector<Type> types;
      for (ValueId o : k.op->operands) types.push_back(f_.type(o));
      grid = codegen::lowering(k.op->kind).tileGrid(types, k.op->attrs, *unit_);
    }
    const bool reduces = grid.first > 0 && grid.second > 0 && grid.second <= kMaxTileColumns;
    if (j <= static_cast<int>(i) || j - static_cast<int>(i) > kMaxEpilogueDistance || !tileLoop(j, c, reduces)) continue;
    bool ownPoint = true;
    for (const LoopRoot& r : p.kernels[static_cast<std::size_t>(j)].roots) // (a reduction's loop runs over its operand's points)
      for (const Read& read : readsOf(r.op->operands, r.reduction || ir::info(r.op->kind).has(ir::kElementwise)))
        ownPoint = ownPoint && (read.value != c || read.sameIndex);
    if (!ownPoint || writesReadBy(i + 1, static_cast<std::size_t>(j), static_cast<std::size_t>(j))) continue;
    p.kernels[static_cast<std::size_t>(j)].tileRows = grid.first;
    p.kernels[static_cast<std::size_t>(j)].tileCols = grid.second;
    after[i] = j;
    taken[static_cast<std::size_t>(j)] = 1;
    paired = true;
  }
  if (!paired) return;
  // The new order: each op's prologues right before it, its epilogue right after.
  std::vector<Kernel> kernels;
  std::vector<std::size_t> newIndex(n);
  kernels.reserve(n);
  // Paired kernels have code of their own; a loop run on tiles reads and
  // writes `buffers` through its context.
  auto move = [&](std::size_t x, bool paired) {
    newIndex[x] = kernels.size();
    kernels.push_back(std::move(p.kernels[x]));
    if (paired) kernels.back().sameAs = -1;
    return kernels.size() - 1;
  };
  for (std::size_t i = 0; i < n; ++i) {
    if (taken[i]) continue;
    if (before[i].empty() && after[i] < 0) {
      move(i, false);
      continue;
    }
    for (int j : before[i])
      if (j >= 0) move(static_cast<std::size_t>(j), true);
    const std::size_t ki = move(i, true);
    kernels[ki].buffers.clear();
    kernels[ki].prologue.assign(before[i].size(), -1);
    for (std::size_t o = 0; o < before[i].size(); ++o) {
      if (before[i][o] < 0) continue;
      Kernel& x = kernels[newIndex[static_cast<std::size_t>(before[i][o])]];
      x.prologueOf = static_cast<int>(ki);
      kernelKey(x, x.buffers);
      kernels[ki].prologue[o] = static_cast<int>(newIndex[static_cast<std::size_t>(before[i][o])]);
    }
    if (after[i] < 0) continue;
    const std::size_t e = move(static_cast<std::size_t>(after[i]), true);
    kernels[ki].epilogue = static_cast<int>(e);
    kernels[e].epilogueOf = static_cast<int>(ki);
    kernelKey(kernels[e], kernels[e].buffers);
    const ValueId c = kernels[ki].op->results[0];
    for (const LoopRoot& r : kernels[e].roots)
      if (f_.type(r.value) == f_.type(c) && viewOf_[at(r.value)] < 0) {
        viewOf_[at(c)] = r.value;
        viewOffset_[at(c)] = 0;
        break;
      }
  }
  p.kernels = std::move(kernels);
  for (RowGroup& g : p.groups) g.first = newIndex[g.first];
  reshare(p);
}

ValueId Planner::outputFor(const FusionPlan& p, ValueId v, int lastReader, std::vector<ValueId>& taken) {
  const Kernel& k = p.kernels[static_cast<std::size_t>(lastReader)];
  if (k.kind != Kernel::Kind::Loop || viewOf_[at(v)] >= 0 || f_.type(v).shape != k.domain) return -1;
  ValueId out = -1;
  for (const LoopRoot& r : k.roots)
    if (!r.reduction && isOutput_[at(r.value)] && viewOf_[at(r.value)] < 0 && f_.type(r.value) == f_.type(v) &&
        std::find(taken.begin(), taken.end(), r.value) == taken.end()) {
      out = r.value;
      break;
    }
  if (out < 0) return -1;
  for (const LoopRoot& r : k.roots) // (a reduction's loop runs over its operand's points)
    for (const Read& read : readsOf(r.op->operands, r.reduction || ir::info(r.op->kind).has(ir::kElementwise)))
      if (read.value == v && !read.sameIndex) return -1;
  taken.push_back(out);
  return out;
}

bool Planner::sizeGroup(FusionPlan& p, std::size_t gi, const std::vector<int>& lastRead, const std::vector<char>& viewed,
               std::vector<std::pair<ValueId, uint64_t>>& local) {
  RowGroup& g = p.groups[gi];
  const int first = static_cast<int>(g.first), last = first + static_cast<int>(g.count) - 1;
  ScratchAllocator rows; // in bytes per row
  uint64_t rowBytes = 0;
  // Values in place of a result (value, result), and their bytes per row.
  std::vector<std::pair<ValueId, ValueId>> inOutput;
  std::vector<ValueId> taken;
  uint64_t outputRowBytes = 0;
  using Live = std::tuple<int, uint64_t, uint64_t>; // last reader, row offset, bytes per row
  std::priority_queue<Live, std::vector<Live>, std::greater<>> live;
  std::vector<ValueId> written;
  local.clear();
  for (int k = first; k <= last; ++k) {
    for (; !live.empty() && std::get<0>(live.top()) < k; live.pop()) rows.release(std::get<1>(live.top()), std::get<2>(live.top()));
    for (ValueId v : writtenBy(p.kernels[static_cast<std::size_t>(k)], written)) {
      if (isOutput_[at(v)] || lastRead[at(v)] > last || viewed[at(v)] == 1) continue;
      const uint64_t bytes = (static_cast<uint64_t>(f_.type(v).bytes() / g.rows) + 7) / 8 * 8;
      if (!viewed[at(v)] && lastRead[at(v)] > k) {
        if (const ValueId out = outputFor(p, v, lastRead[at(v)], taken); out >= 0) {
          inOutput.push_back({v, out});
          outputRowBytes += bytes;
          continue;
        }
      }
      const uint64_t offset = rows.allocate(bytes);
      if (offset + bytes > kMaxBlockRowBytes) { // too wide: it stays in memory
        rows.release(offset, bytes);
        continue;
      }
      rowBytes = std::max(rowBytes, offset + bytes);
      live.push({std::max(lastRead[at(v)], k), offset, bytes});
      local.push_back({v, offset});
    }
  }
  // Values in place of results stay in cache while the block runs, like the
  // block's; so do the rows of buffers two of the group's kernels touch
  // (those of values in place of results counted already).
  const uint64_t saved = rowBytes + outputRowBytes;
  uint64_t footprint = saved;
  std::unordered_map<ValueId, std::pair<int, int>> touched; // buffer: kernels touching it, the last of them
  std::unordered_set<ValueId> counted;
  for (const auto& [v, offset] : local) counted.insert(v);
  for (const auto& [v, out] : inOutput) counted.insert({v, out});
  std::vector<ValueId> operands;
  for (int k = first; k <= last; ++k) {
    const Kernel& kn = p.kernels[static_cast<std::size_t>(k)];
    auto touch = [&](ValueId v) {
      const ValueId base = viewOf_[at(v)] >= 0 ? viewOf_[at(v)] : v;
      if (counted.count(base) || f_.type(base).rank() == 0 || f_.type(base).shape[0] != g.rows) return;
      auto& [kernels, lastKernel] = touched[base];
      if (kernels && lastKernel == k) return;
      ++kernels;
      lastKernel = k;
      if (kernels == 2) footprint += static_cast<uint64_t>(f_.type(base).bytes() / g.rows);
    };
    for (const Read& r : readsOf(operandsOf(kn, operands), false)) touch(r.value);
    for (ValueId v : writtenBy(kn, written)) touch(v);
  }
  const int64_t fit = footprint ? static_cast<int64_t>(kBlockBytes / footprint) : kMaxBlockRows;
  g.blockRows = std::clamp<int64_t>(fit >= 8 ? fit / 8 * 8 : int64_t(1) << std::bit_width(static_cast<uint64_t>(fit)) >> 1, kMinBlockRows, kMaxBlockRows);
  g.blockBytes = rowBytes * static_cast<uint64_t>(g.blockRows);
  if (g.blocks() < 2 || saved * static_cast<uint64_t>(g.rows) < kGroupMinBytes) return false;
  for (auto& [v, offset] : local) offset *= static_cast<uint64_t>(g.blockRows);
  for (const auto& [v, offset] : local) blockOf_[at(v)] = static_cast<int>(gi);
  for (const auto& [v, out] : inOutput) inOutput_.push_back({v, out});
  std::erase_if(g.buffers, [&](ValueId v) {
    const ValueId base = viewOf_[at(v)];
    return blockOf_[at(base >= 0 ? base : v)] == static_cast<int>(gi);
  });
  int64_t work = 0;
  for (int k = first; k <= last; ++k) work += workOf(p.kernels[static_cast<std::size_t>(k)]);
  g.threads = parallel_ && work >= kParallelWork;
  return true;
}

} // namespace adjit::codegen::planning
