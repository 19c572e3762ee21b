// codegen/PlanPlacement.cpp — the planner's last steps: runs of repeated
// kernels, the cut into LLVM functions, and the place of every value
// (scratch, stack, block buffers, views).
#include "codegen/Planner.h"
#include "codegen/ScratchAllocator.h"
#include "support/Assert.h"

#include <queue>

namespace adjit::codegen::planning {

void Planner::findRuns(FusionPlan& p) {
  constexpr int kMaxPeriod = 16, kMinRepeats = 4;
  const std::size_t n = p.kernels.size();
  auto same = [&](std::size_t a, std::size_t b) { return p.kernels[a].sameAs >= 0 && p.kernels[a].sameAs == p.kernels[b].sameAs; };
  for (std::size_t i = 0; i < n;) {
    int bestPeriod = 0, bestCount = 0;
    for (int period = 1; period <= kMaxPeriod && i + 2 * static_cast<std::size_t>(period) <= n; ++period) {
      const std::size_t per = static_cast<std::size_t>(period);
      std::size_t k = i + per; // first kernel not yet matched against the pattern
      while (k < n && same(k, k - per)) ++k;
      const int count = static_cast<int>((k - i) / per);
      if (count >= kMinRepeats && count * period > bestCount * bestPeriod) {
        bestPeriod = period;
        bestCount = count;
      }
    }
    if (!bestPeriod) {
      ++i;
      continue;
    }
    const int run = static_cast<int>(p.runs.size());
    p.runs.push_back({i, bestPeriod, bestCount});
    const std::size_t end = i + static_cast<std::size_t>(bestPeriod * bestCount);
    for (; i < end; ++i) p.kernels[i].run = run;
  }
}

void Planner::split(FusionPlan& p) const {
  // An op's own `lower` code is loop nests of its own (a matmul is four):
  // it weighs like a loop body of kLowerWeight ops. A kernel whose code is
  // shared is a call here: three arguments when its buffers come from the
  // argument table.
  auto weight = [&](const Kernel& k) {
    if (k.sameAs >= 0) return k.buffers.size() > kDirectCallArgs ? 4 : static_cast<int>(k.buffers.size()) + 1;
    return k.kind == Kernel::Kind::Lower ? kLowerWeight : std::max(k.bodySize, 1);
  };
  // Units of code: a kernel, or a run (one loop of calls, weighing as its
  // first period, kept in one function).
  struct Unit {
    std::size_t end;
    int weight;
  };
  std::vector<Unit> units;
  int total = 0;
  int64_t work = 0;
  for (std::size_t i = 0; i < p.kernels.size();) {
    std::size_t end = i + 1;
    int s = weight(p.kernels[i]);
    work += workOf(p.kernels[i]);
    if (const int r = p.kernels[i].run; r >= 0) {
      const Run& run = p.runs[static_cast<std::size_t>(r)];
      end = i + static_cast<std::size_t>(run.period * run.count);
      for (std::size_t j = i + 1; j < i + static_cast<std::size_t>(run.period); ++j) s += weight(p.kernels[j]);
    } else if (const int op = p.kernels[i].prologueOf >= 0 ? p.kernels[i].prologueOf : static_cast<int>(i);
               p.kernels[static_cast<std::size_t>(op)].epilogue >= 0 || !p.kernels[static_cast<std::size_t>(op)].prologue.empty()) {
      // an op with the loops that run inside its code: its prologues, it, its epilogue
      const Kernel& o = p.kernels[static_cast<std::size_t>(op)];
      end = static_cast<std::size_t>(o.epilogue >= 0 ? o.epilogue : op) + 1;
      for (std::size_t j = i + 1; j < end; ++j) {
        s += weight(p.kernels[j]);
        work += workOf(p.kernels[j]);
      }
    } else if (const int g = p.kernels[i].group; g >= 0) { // a group runs from one place
      end = i + p.groups[static_cast<std::size_t>(g)].count;
      for (std::size_t j = i + 1; j < end; ++j) {
        s += weight(p.kernels[j]);
        work += workOf(p.kernels[j]);
      }
    }
    units.push_back({end, s});
    total += s;
    i = end;
  }
  // Code worth two parts or more, doing enough work per call, is cut into
  // about kCompileParts functions, so that the compiler's partitions get
  // similar shares of it.
  p.compileParts = total >= 2 * kPartWeight && work >= kPartMinWork;
  const int budget = p.compileParts ? std::clamp(total / kCompileParts, kPartWeight, functionBudget_) : functionBudget_;
  int size = 0;
  std::size_t i = 0;
  for (const Unit& u : units) {
    if (size > 0 && size + u.weight > budget) {
      ++p.functions;
      size = 0;
    }
    size += u.weight;
    for (; i < u.end; ++i) p.kernels[i].function = p.functions - 1;
  }
  p.compileParts = p.compileParts && p.functions > 1;
}

std::span<const ValueId> Planner::operandsOf(const Kernel& k, std::vector<ValueId>& out) {
  if (k.kind != Kernel::Kind::Loop) return k.op->operands;
  out.clear();
  for (const LoopRoot& r : k.roots) out.insert(out.end(), r.op->operands.begin(), r.op->operands.end());
  return out;
}

std::span<const ValueId> Planner::writtenBy(const Kernel& k, std::vector<ValueId>& out) {
  out.clear();
  if (k.kind != Kernel::Kind::Loop) return k.op->results;
  for (const LoopRoot& r : k.roots) out.push_back(r.value);
  return out;
}

void Planner::readers(const FusionPlan& p, std::vector<int>& writer, std::vector<int>& lastRead) {
  const std::size_t n = f_.types.size();
  writer.assign(n, -1);
  lastRead.assign(n, -1);
  std::vector<ValueId> operands, written;
  for (std::size_t k = 0; k < p.kernels.size(); ++k) {
    const Kernel& kn = p.kernels[k];
    for (ValueId w : writtenBy(kn, written)) writer[at(w)] = static_cast<int>(k);
    for (const Read& r : readsOf(operandsOf(kn, operands), false)) lastRead[at(r.value)] = static_cast<int>(k);
  }
}

void Planner::place(FusionPlan& p) {
  const std::size_t n = f_.types.size();
  p.place.assign(n, {});
  const int kEnd = static_cast<int>(p.kernels.size());
  for (std::size_t i = 0; i < f_.params.size(); ++i) p.place[at(f_.params[i])] = {Storage::Param, static_cast<uint32_t>(i), 0};
  for (std::size_t v = 0; v < n; ++v)
    if (inMemory_[v]) p.place[v] = {Storage::Constant, 0, 0};
  std::vector<int> writer, lastRead;
  readers(p, writer, lastRead);
  for (const auto& [v, g, offset] : blocks_) p.place[at(v)] = {Storage::Block, g, offset};
  // An epilogue writes while its op still reads: what the op reads lives
  // until the epilogue is done. A prologue reads while its op runs: what it
  // reads lives until the op is done.
  std::vector<ValueId> operands;
  for (std::size_t k = 0; k < p.kernels.size(); ++k) {
    const Kernel& kn = p.kernels[k];
    if (kn.epilogue >= 0)
      for (const Read& r : readsOf(operandsOf(kn, operands), false)) lastRead[at(r.value)] = std::max(lastRead[at(r.value)], kn.epilogue);
    if (kn.prologueOf >= 0)
      for (const Read& r : readsOf(operandsOf(kn, operands), false)) lastRead[at(r.value)] = std::max(lastRead[at(r.value)], kn.prologueOf);
  }
  for (std::size_t i = 0; i < f_.outputs.size(); ++i) {
    const ValueId v = f_.outputs[i];
    if (p.place[at(v)].where == Storage::Fused && writer[at(v)] >= 0) p.place[at(v)] = {Storage::Output, static_cast<uint32_t>(i), 0};
    else lastRead[at(v)] = kEnd; // copied into the result after the last kernel
  }
  // A value of a row group in place of a result (sizeGroup) is in the caller's buffer for it.
  for (const auto& [v, out] : inOutput_)
    if (p.place[at(out)].where == Storage::Output && f_.outputs[p.place[at(out)].index] == out) p.place[at(v)] = p.place[at(out)];
  // A view is read from its buffer: that buffer lives as long as the view is read.
  for (std::size_t v = 0; v < n; ++v)
    if (const ValueId base = viewOf_[v]; base >= 0) {
      lastRead[at(base)] = std::max(lastRead[at(base)], lastRead[v]);
      const uint64_t bytes = static_cast<uint64_t>(viewOffset_[v]) * size_of(f_.type(static_cast<ValueId>(v)).dtype);
      p.place[v] = {Storage::View, static_cast<uint32_t>(base), bytes};
    }
  // An op lowered in place (Lowering::inPlace) writes its result into its
  // operand's buffer when nothing reads that buffer afterwards: the operand
  // is the function's own (neither a parameter, a constant, an output nor a
  // view, in no block buffer; or the result of another update in place,
  // whose buffer it then shares), this kernel is its last reader (views of
  // it included), and the op's other operands read neither it nor a view of
  // it (an update computed from the operand at other indices would see its
  // own writes). The result is then a view of that buffer at offset 0, which
  // lives as long as the result is read; or, when the result is an output
  // of the function, the operand is computed into the caller's buffer for
  // it. Otherwise the result gets a buffer of its own, into which the op's
  // code copies the operand first.
  std::vector<char> updated(n, 0); // values placed in their operand's buffer
  std::vector<ValueId> others;
  for (std::size_t k = 0; k < p.kernels.size(); ++k) {
    const Kernel& kn = p.kernels[k];
    if (kn.kind != Kernel::Kind::Lower || !lowersWhole(*kn.op)) continue;
    const std::size_t operand = codegen::lowering(kn.op->kind).inPlace.operand;
    const ValueId r = kn.op->results[0], x = kn.op->operands[operand];
    const ValueId base = updated[at(x)] ? static_cast<ValueId>(p.place[at(x)].index) : x;
    const bool output = p.place[at(r)].where == Storage::Output && f_.outputs[p.place[at(r)].index] == r;
    // A parameter updated into an output: a caller may pass one buffer as
    // both (FusionPlan::sharedOutputs) when no later kernel reads it.
    if (output && p.place[at(x)].where == Storage::Param && lastRead[at(x)] == static_cast<int>(k)) {
      others.clear();
      for (std::size_t i = 0; i < kn.op->operands.size(); ++i)
        if (i != operand) others.push_back(kn.op->operands[i]);
      bool reads = false;
      for (const Read& rd : readsOf(others, false)) reads = reads || rd.value == x || viewOf_[at(rd.value)] == x;
      if (!reads) p.sharedOutputs.push_back({p.place[at(r)].index, p.place[at(x)].index});
      continue;
    }
    if ((p.place[at(r)].where != Storage::Fused && !output) || p.place[at(base)].where != Storage::Fused || isView(base) || isView(r) ||
        !mat_[at(base)] || !producer_[at(base)] || lastRead[at(x)] != static_cast<int>(k) || lastRead[at(base)] != static_cast<int>(k))
      continue;
    others.clear();
    for (std::size_t i = 0; i < kn.op->operands.size(); ++i)
      if (i != operand) others.push_back(kn.op->operands[i]);
    bool reads = false;
    for (const Read& rd : readsOf(others, false))
      reads = reads || rd.value == x || rd.value == base || viewOf_[at(rd.value)] == x || viewOf_[at(rd.value)] == base;
    if (reads) continue;
    if (output) { // the operand is computed into the caller's buffer for the result
      p.place[at(base)] = p.place[at(r)];
      continue;
    }
    lastRead[at(base)] = std::max(lastRead[at(base)], lastRead[at(r)]);
    p.place[at(r)] = {Storage::View, static_cast<uint32_t>(base), 0};
    updated[at(r)] = 1;
  }
  // The kernels of a row group run interleaved, block by block: what one of
  // them reads or writes lives from the group's first kernel to its last.
  auto groupEnd = [&](int k) {
    if (k >= kEnd || p.kernels[static_cast<std::size_t>(k)].group < 0) return k;
    const RowGroup& g = p.groups[static_cast<std::size_t>(p.kernels[static_cast<std::size_t>(k)].group)];
    return static_cast<int>(g.first + g.count) - 1;
  };
  ScratchAllocator scratch;
  std::vector<ValueId> written;
  // Live buffers by the last kernel that reads them: freed before later kernels.
  using Live = std::tuple<int, uint64_t, uint64_t>; // end, offset, bytes
  std::priority_queue<Live, std::vector<Live>, std::greater<>> live;
  for (int k = 0; k < kEnd; ++k) {
    for (; !live.empty() && std::get<0>(live.top()) < k; live.pop()) scratch.release(std::get<1>(live.top()), std::get<2>(live.top()));
    const Kernel& kn = p.kernels[static_cast<std::size_t>(k)];
    if (kn.epilogue >= 0) // the partial results of a reducing epilogue, from its op to its combine
      if (Kernel& e = p.kernels[static_cast<std::size_t>(kn.epilogue)]; reducesTiles(e)) {
        uint64_t bytes = 0;
        for (const LoopRoot& r : e.roots)
          if (r.reduction) bytes += tilePartialBytes(e, f_.type(r.value).dtype);
        bytes = align64(std::max<uint64_t>(bytes, 1));
        e.tilePartials = scratch.allocate(bytes);
        live.push({kn.epilogue, e.tilePartials, bytes});
      }
    for (ValueId v : writtenBy(kn, written)) {
      Placement& pl = p.place[at(v)];
      if (pl.where != Storage::Fused) continue;
      const uint64_t bytes = align64(std::max<uint64_t>(static_cast<uint64_t>(f_.type(v).bytes()), 1));
      // On the stack of the LLVM function that writes it, when no other
      // function reads it; not in plans with runs: a run steps through
      // buffers at one base.
      const int last = groupEnd(std::max(lastRead[at(v)], k));
      const bool local = last < kEnd && p.kernels[static_cast<std::size_t>(last)].function == kn.function;
      if (local && p.runs.empty() && bytes <= kStackBufferLimit && p.stackBytes + bytes <= kStackBudget) {
        pl.where = Storage::Stack;
        p.stackBytes += bytes;
        continue;
      }
      const uint64_t offset = scratch.allocate(bytes);
      live.push({last, offset, bytes});
      pl = {Storage::Scratch, 0, offset};
    }
  }
  p.scratchBytes = scratch.size();
  for (std::size_t v = 0; v < n; ++v)
    ADJIT_ASSERT(!mat_[v] || !producer_[v] || p.place[v].where != Storage::Fused,
                 fmt::format("materialised value %{} is written by no kernel", v));
}

} // namespace adjit::codegen::planning
