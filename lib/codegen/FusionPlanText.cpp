// codegen/FusionPlanText.cpp — a fusion plan as text (`adjit dump
// --emit=plan`, ADJIT_DUMP, FileCheck tests): one block per kernel with its
// fused ops and where each written value goes, then runs, views and globals.
#include "codegen/FusionPlan.h"
#include "codegen/Lowering.h"

#include "ir/OpInfo.h"

#include <fmt/format.h>

#include <algorithm>

namespace adjit::codegen {
namespace {

using ir::ValueId;

std::size_t at(ValueId v) { return static_cast<std::size_t>(v); }

std::string values(std::span<const ValueId> vs) {
  std::string s;
  for (ValueId v : vs) s += (s.empty() ? "%" : ", %") + std::to_string(v);
  return s;
}

std::string opText(const ir::Function& f, const ir::Op& op) {
  return fmt::format("{} = {}({})", values(op.results), ir::info(op.kind).name, values(op.operands));
}

std::string placeText(const Placement& p) {
  switch (p.where) {
  case Storage::Fused: return "fused";
  case Storage::Param: return fmt::format("param {}", p.index);
  case Storage::Output: return fmt::format("output {}", p.index);
  case Storage::Stack: return "stack";
  case Storage::Scratch: return fmt::format("scratch+{}", p.offset);
  case Storage::View: return fmt::format("view of %{}+{}", p.index, p.offset);
  case Storage::Constant: return "constant";
  case Storage::Block: return fmt::format("block+{}", p.offset);
  }
  return "?";
}

} // namespace

std::string FusionPlan::str() const {
  const ir::Function& f = *fn;
  std::vector<const ir::Op*> producer(f.types.size(), nullptr);
  std::vector<int> position(f.types.size(), -1);
  for (std::size_t i = 0; i < f.ops.size(); ++i)
    for (ValueId r : f.ops[i].results) {
      producer[at(r)] = &f.ops[i];
      position[at(r)] = static_cast<int>(i);
    }
  // Repeated code: emitted with its first kernel, called by the others.
  auto sharing = [&](std::size_t k) -> std::string {
    const int first = kernels[k].sameAs;
    if (first < 0) return "";
    return first == static_cast<int>(k) ? ", code shared" : fmt::format(", code of #{}", first);
  };
  auto where = [&](std::span<const ValueId> vs) {
    if (place.empty()) return std::string("(not placed yet)"); // a plan before its "place" step
    std::string w;
    for (ValueId v : vs) w += (w.empty() ? "" : ", ") + placeText(place[at(v)]);
    return w;
  };
  // The value whose buffer v is in: views at offset 0 read through.
  auto base = [&](ValueId v) {
    while (place[at(v)].where == Storage::View && place[at(v)].offset == 0) v = static_cast<ValueId>(place[at(v)].index);
    return v;
  };
  // An op lowered in place (codegen::InPlace) whose result shares its operand's buffer.
  auto updatesInPlace = [&](const Kernel& kn) {
    const InPlace& ip = lowering(kn.op->kind).inPlace;
    if (place.empty() || !ip.lower || lowering(kn.op->kind).lower || kn.op->results.size() != 1) return false;
    const ValueId r = base(kn.op->results[0]), x = base(kn.op->operands[ip.operand]);
    const Placement &a = place[at(r)], &b = place[at(x)];
    return r == x || (a.where == Storage::Output && b.where == Storage::Output && a.index == b.index);
  };
  std::string s = fmt::format("plan @{}: {} kernel{} in {} function{}{}, scratch {} bytes, stack {} bytes\n", f.name,
                              kernels.size(), kernels.size() == 1 ? "" : "s", functions, functions == 1 ? "" : "s",
                              compileParts ? " (compiled in parallel)" : "", scratchBytes, stackBytes);
  for (std::size_t k = 0; k < kernels.size(); ++k) {
    const Kernel& kn = kernels[k];
    if (functions > 1 && (k == 0 || kernels[k - 1].function != kn.function)) s += fmt::format("  function {}:\n", kn.function);
    // Fused values and the values the kernel writes, in op order.
    std::vector<std::pair<ValueId, const char*>> lines;
    for (ValueId v : kn.fused) lines.push_back({v, "fused"});
    if (kn.kind == Kernel::Kind::Loop) {
      Shape kept(kn.domain.begin(), kn.domain.begin() + static_cast<std::ptrdiff_t>(kn.reduceFrom));
      Shape reduced(kn.domain.begin() + static_cast<std::ptrdiff_t>(kn.reduceFrom), kn.domain.end());
      s += fmt::format("  #{} loop {}", k, shape_str(kept));
      if (!reduced.empty()) s += " reduce " + shape_str(reduced);
      s += fmt::format(" {}, {} ops per point, level {}{}", kn.flat ? "flat" : "nest", kn.bodySize, kn.level, sharing(k));
      if (kn.group >= 0) s += fmt::format(", row group {}", kn.group);
      if (kn.epilogueOf >= 0) s += fmt::format(", on each tile of #{}", kn.epilogueOf);
      if (reducesTiles(kn))
        s += fmt::format(" ({}x{} cells{}), {} partials each -> scratch+{}", kn.tileRows, kn.tileCols,
                         kn.reduceFrom + 1 == kn.domain.size() ? ", by rows" : "", tilePartialCount(kn), kn.tilePartials);
      if (kn.prologueOf >= 0) s += fmt::format(", on the tiles #{} reads", kn.prologueOf);
      if (kn.chunks > 1)
        s += fmt::format(", {} chunks of {} rows{}", kn.chunks, kn.chunkRows, kn.partials ? " with partials" : "");
      if (kn.swapped) s += ", last two axes' loops exchanged";
      if (!kn.peel.empty()) {
        s += kn.swapped ? ", inner axis in pieces" : ", last axis in pieces";
        int64_t from = 0;
        for (int64_t c : kn.peel) s += fmt::format(" [{},{})", std::exchange(from, c), c);
        s += fmt::format(" [{},{})", from, kn.swapped ? kn.domain[kn.domain.size() - 2] : kn.domain.back());
      }
      s += "\n";
      for (const LoopRoot& r : kn.roots) lines.push_back({r.value, r.reduction ? "reduce" : "store"});
    } else {
      s += fmt::format("  #{} {}, level {}{}", k, kn.kind == Kernel::Kind::Lower ? "lower" : "reduction", kn.level, sharing(k));
      if (kn.group >= 0) s += fmt::format(", row group {}", kn.group);
      for (std::size_t o = 0; o < kn.prologue.size(); ++o)
        if (kn.prologue[o] >= 0) s += fmt::format(", tile prologue #{} (operand {})", kn.prologue[o], o);
      if (kn.epilogue >= 0) s += fmt::format(", tile epilogue #{}", kn.epilogue);
      s += "\n";
      if (!kn.op->results.empty()) lines.push_back({kn.op->results[0], updatesInPlace(kn) ? "update in place" : "write"});
      else s += fmt::format("    run {}\n", opText(f, *kn.op));
    }
    std::stable_sort(lines.begin(), lines.end(),
                     [&](const auto& a, const auto& b) { return position[at(a.first)] < position[at(b.first)]; });
    for (const auto& [v, what] : lines) {
      const ir::Op& op = *producer[at(v)];
      s += fmt::format("    {} {}", what, opText(f, op));
      if (std::string_view(what) != "fused") s += " -> " + where(op.results);
      s += "\n";
    }
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const RowGroup& r = groups[g];
    s += fmt::format("  row group {} #{}..#{}: {} rows in {} blocks of {} rows, block buffer {} bytes{}\n", g, r.first,
                     r.first + r.count - 1, r.rows, r.blocks(), r.blockRows, r.blockBytes, r.threads ? ", on threads" : "");
  }
  for (const Run& r : runs)
    s += fmt::format("  run #{}..#{}: {} steps of {} kernel{}\n", r.first, r.first + static_cast<std::size_t>(r.period * r.count) - 1,
                     r.count, r.period, r.period == 1 ? "" : "s");
  if (steps.boundaries)
    s += fmt::format("  step groups: {} boundaries; code {} ops per point with them, {} without: planned {}\n", steps.boundaries,
                     steps.codeWith, steps.codeWithout, steps.codeWith < steps.codeWithout ? "with them" : "without");
  for (std::size_t v = 0; v < place.size(); ++v)
    if (place[v].where == Storage::View) s += fmt::format("  view {} -> {}\n", opText(f, *producer[v]), placeText(place[v]));
    else if (place[v].where == Storage::Constant) s += fmt::format("  global {}\n", opText(f, *producer[v]));
  for (auto [output, param] : sharedOutputs) s += fmt::format("  output {} may share the buffer of param {}\n", output, param);
  for (std::size_t i = 0; i < f.outputs.size() && !place.empty(); ++i) {
    const Placement& p = place[at(f.outputs[i])];
    if (p.where != Storage::Output || p.index != i) s += fmt::format("  output {} = copy of %{}\n", i, f.outputs[i]);
  }
  return s;
}

} // namespace adjit::codegen
