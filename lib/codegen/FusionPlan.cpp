// codegen/FusionPlan.cpp — planning: which values are materialised, how
// loops are grouped and ordered, and where buffers live. Reads op traits and
// hooks from the op table, never op kinds. Every walk is iterative; walks
// through fused expressions are bounded by the body budget, so planning is
// linear in the function's size.
#include "codegen/FusionPlan.h"
#include "codegen/ScratchAllocator.h"
#include "codegen/StepGroups.h"
#include "ops/Effects.h"

#include "ir/Text.h"
#include "ops/OpTable.h"
#include "support/Assert.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <optional>
#include <thread>
#include <map>
#include <optional>
#include <tuple>
#include <queue>
#include <unordered_map>

namespace adjit::codegen {
namespace {

using ir::ValueId;

/// Buffers at most this large may live on the stack...
constexpr uint64_t kStackBufferLimit = 4096;
/// ...while the function's stack buffers stay under this (threads may have small stacks).
constexpr uint64_t kStackBudget = 16384;
/// A value used more than once whose fused expression is larger than this is
/// materialised rather than recomputed by each user.
constexpr int kRecomputeLimit = 8;
/// An op with a loop per operand (concatenate, pad_sum) computes at most this
/// many operands inline; more get buffers, read through one loop over a table.
constexpr std::size_t kMaxOperandLoops = 8;
/// What a kernel lowered by its op's `lower` hook weighs in a function's budget.
constexpr int kLowerWeight = 32;
/// A kernel doing fewer ops per call than this is worth sharing only in
/// large code (Planner::share): the call costs about what ~100 ops do.
constexpr int64_t kShareMinWork = 4096;
/// Loops of fewer ops (points × ops per point) or fewer points run on one
/// thread. Handing chunks to the pool costs a few microseconds, what some
/// 30,000 simple ops take; and a split loop is two functions for LLVM, which
/// matters to programs of many small loops (a 10,000-op chain over 1,000
/// elements took 60% longer to compile with its loops split).
constexpr int64_t kParallelWork = 1 << 17;
constexpr int64_t kParallelPoints = 1 << 14;
/// Code of at least two parts of this many ops per point is split into about
/// kCompileParts LLVM functions (FusionPlan::compileParts), which the JIT
/// compiles in parallel (jit/Engine.cpp). Measured on ADBench's GMM (objective
/// and gradient, 15 inputs): first calls 0.12-0.22 -> 0.10-0.16 s on two
/// cores. Smaller code, or code doing less than kPartMinWork ops per call (a
/// scan's step, called once per iteration), stays one function: a function
/// boundary costs a call and keeps in memory values that one function holds
/// in registers.
constexpr int kPartWeight = 40;
constexpr int64_t kPartMinWork = 1 << 16;
constexpr int kCompileParts = 4;
/// Ops per chunk: large enough that claiming a chunk (one atomic add) is
/// noise, small enough that two threads balance.
constexpr int64_t kChunkWork = 1 << 15;
constexpr int64_t kMaxChunks = 1024;
/// Row groups (RowGroup) are made of kernels over at least kGroupMinRows rows
/// that write kGroupMinKernelBytes or more each, where the values kept in
/// block buffers would take kGroupMinBytes or more: smaller data stays in
/// cache anyway. A kernel whose code repeats more than kGroupMaxRepeats times
/// stays out: in a group it would be compiled once per kernel (a long
/// chain's gradient: 12 distinct codes became 48).
constexpr int64_t kGroupMinRows = 256;
constexpr uint64_t kGroupMinKernelBytes = 64 << 10, kGroupMinBytes = 1 << 20;
constexpr int kGroupMaxRepeats = 4;
/// A group's block buffer takes about kBlockBytes: the size of a core's L1
/// data cache, so that the block's values never leave it. The buffer is on
/// the stack of the function running the block (bounded, for threads with
/// small stacks), its rows kMinBlockRows to kMaxBlockRows. Measured on
/// ADBench's BA Jacobian (ba3, 182,072 rows; 37 ms without groups): 16, 32,
/// 64 and 128 KB took 11.1, 10.7, 10.5 and 10.0 ms; the stack decides.
constexpr uint64_t kBlockBytes = 32 << 10;
constexpr int64_t kMinBlockRows = 8, kMaxBlockRows = 1024;
/// A tile epilogue (Kernel::epilogue) is the kernel reading a product at
/// most this many kernels after it: planning stays linear.
constexpr int kMaxEpilogueDistance = 16;
/// A row group's block calls a function per kernel: at most this many.
constexpr std::size_t kMaxGroupKernels = 64;
/// From this many ops on, planFusion drafts without step groups on a second
/// thread: a draft costs about 1 us per op, starting a thread some 50 us.
constexpr std::size_t kConcurrentDraftOps = 4096;

std::size_t at(ValueId v) { return static_cast<std::size_t>(v); }

/// An attribute as key text: exact, but large arrays by identity (their data
/// is not copied into every key; equal large constants are simply not shared).
void appendAttr(std::string& key, const ir::Attr& a) {
  if (const Array* arr = std::get_if<Array>(&a)) {
    key += arr->type().str();
    if (arr->bytes() <= 256) key.append(static_cast<const char*>(arr->raw()), arr->bytes());
    else key += fmt::format("@{}", arr->raw());
    return;
  }
  ir::appendAttrBytes(key, a);
}

uint64_t align64(uint64_t n) { return (n + 63) / 64 * 64; }

struct Unit {
  const ir::Op* op;
  int level;
  std::vector<LoopRoot> roots; ///< empty: a Lower or Reduction kernel
  Shape domain;
  std::size_t reduceFrom = 0;
  int size = 0;
};

/// A materialised value a kernel reads, and whether every read is at the
/// kernel's own index (through elementwise ops only).
struct Read {
  ValueId value;
  bool sameIndex;
};

class Planner {
public:
  Planner(const ir::Function& f, const PlanOptions& o)
      : f_(f), budget_(std::max(o.bodyBudget, 1)), functionBudget_(std::max(o.functionBudget, 1)), effects_(o.effects),
        parallel_(o.parallel), unit_(o.unit) {}

  /// Finds the step groups of unrolled loops (findSteps); true if any.
  bool findStepGroups() {
    init();
    findSteps();
    return !cuts_.empty();
  }

  /// What LLVM compiles for kernel k: its ops per point, or kLowerWeight for
  /// an op's own code.
  static int64_t codeOf(const Kernel& k) { return k.kind == Kernel::Kind::Loop ? std::max(k.bodySize, 1) : kLowerWeight; }

  /// Ops kernel k does per call (an op's own code: kLowerWeight per result element).
  int64_t workOf(const Kernel& k) const {
    if (k.kind == Kernel::Kind::Loop) return num_elements(k.domain) * std::max(k.bodySize, 1);
    int64_t elements = 0;
    for (ValueId r : k.op->results) elements += f_.type(r).size();
    return elements * kLowerWeight;
  }

  /// What LLVM compiles: the ops per point of each distinct kernel code.
  static int64_t codeSize(const FusionPlan& p) {
    int64_t size = 0;
    for (std::size_t k = 0; k < p.kernels.size(); ++k)
      if (p.kernels[k].sameAs < 0 || p.kernels[k].sameAs == static_cast<int>(k)) size += codeOf(p.kernels[k]);
    return size;
  }

  /// Buffers, loops and their order, and which kernels share code.
  FusionPlan draft() {
    init();
    shared_.clear();
    for (ValueId v : carries_) mat_[at(v)] = 1;
    materialize();
    makeViews();
    std::vector<Unit> units = schedule();
    // A value left fused for loops that share it (see materialize) but
    // computed by several loops after all is stored instead, once.
    if (storeShared(units)) {
      // The budget cuts made while those values were thought fused are
      // stale: the stored values cut the same chains elsewhere. Planning again
      // with them stored places every cut where the final loops need it. A
      // chain differentiated in reverse then becomes a few kernels repeated
      // (10 distinct codes instead of 48 for a 10,000-op chain's gradient:
      // LLVM's time falls 2.3x), not loops shaped by leftovers.
      std::vector<ValueId> stored;
      for (ValueId v : shared_)
        if (mat_[at(v)]) stored.push_back(v);
      init();
      shared_.clear();
      for (ValueId v : stored) mat_[at(v)] = 1;
      for (ValueId v : carries_) mat_[at(v)] = 1;
      materialize();
      makeViews();
      units = schedule();
      storeShared(units);
    }
    std::stable_sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) { return a.level < b.level; });
    FusionPlan p;
    p.fn = &f_;
    for (Unit& u : units) p.kernels.push_back(kernelOf(std::move(u)));
    share(p);
    return p;
  }

  /// Threads, runs of repeated code, functions and the place of every value.
  /// The planner's state is that of the draft.
  FusionPlan finish(FusionPlan p) {
    group(p);
    tiles(p);
    if (parallel_) chunk(p);
    findRuns(p);
    split(p);
    place(p);
    return p;
  }

private:
  // ---- facts about the function ---------------------------------------------

  /// Resets the per-plan state; the facts about the function (producers,
  /// users, ...) are computed by the first call only.
  void init() {
    const std::size_t n = f_.types.size();
    if (producer_.size() != n) facts();
    mat_ = initialMat_;
    size_.assign(n, 0);
    expensive_.assign(n, 0);
    computes_.assign(n, 0);
    stamp_.assign(n, 0);
    gen_ = 0;
    keyMark_.assign(n, 0);
    keyState_.assign(n, 0);
    keyIndex_.assign(n, 0);
    keyGen_ = 0;
    state_.assign(n, 0);
    slot_.assign(n, 0);
  }

  void facts() {
    const std::size_t n = f_.types.size();
    producer_.assign(n, nullptr);
    position_.assign(n, -1);
    uses_.assign(n, 0);
    isOutput_.assign(n, 0);
    initialMat_.assign(n, 0);
    for (ValueId p : f_.params) initialMat_[at(p)] = 1;
    inMemory_.assign(n, 0);
    for (std::size_t i = 0; i < f_.ops.size(); ++i) {
      const ir::Op& op = f_.ops[i];
      // Data the op holds is read from memory, like a parameter (see Hooks::data).
      if (const auto data = ops::info(op.kind).hooks.data; data && op.results.size() == 1 && data(op.attrs))
        initialMat_[at(op.results[0])] = inMemory_[at(op.results[0])] = 1;
      for (ValueId r : op.results) {
        producer_[at(r)] = &op;
        position_[at(r)] = static_cast<int>(i);
      }
      for (ValueId o : op.operands) ++uses_[at(o)];
      if (ops::info(op.kind).has(ops::kMaterializesOperands))
        for (ValueId o : op.operands) initialMat_[at(o)] = 1;
    }
    users_ = Users::of(f_);
    for (ValueId o : f_.outputs) {
      ++uses_[at(o)];
      isOutput_[at(o)] = 1;
      initialMat_[at(o)] = 1;
    }
    // sameDomain_[v]: every use of v is a reduction of it, or an elementwise op
    // of v's shape whose result is an output or itself used only so. All such
    // users are loops over v's domain, which scheduling can join into one.
    // Users come after v, so one backward sweep decides every value.
    sameDomain_.assign(n, 0);
    for (auto op = f_.ops.rbegin(); op != f_.ops.rend(); ++op)
      for (ValueId r : op->results) {
        bool ok = !isOutput_[at(r)];
        for (const ir::Op* u : users_.of(r)) {
          if (!ok) break;
          const ops::OpInfo& info = ops::info(u->kind);
          if (info.hooks.reduce) continue;
          if (u->results.empty()) {
            ok = false;
            break;
          }
          const ValueId ur = u->results[0];
          ok = info.has(ops::kElementwise) && f_.type(ur).shape == f_.type(r).shape &&
               (isOutput_[at(ur)] || sameDomain_[at(ur)]);
        }
        sameDomain_[at(r)] = ok;
      }
  }

  // ---- unrolled loops ----------------------------------------------------------

  /// The step groups of unrolled loops (codegen/StepGroups.h), found with
  /// what is stored before planning.
  void findSteps() {
    StepGroups steps = codegen::findStepGroups(f_, users_, position_, initialMat_, budget_);
    carries_ = std::move(steps.carries);
    cuts_ = std::move(steps.cuts);
  }

  /// The step group of an op: how many group boundaries come before it.
  std::ptrdiff_t stepGroup(const ir::Op& op) const {
    return std::upper_bound(cuts_.begin(), cuts_.end(), static_cast<int>(&op - f_.ops.data())) - cuts_.begin();
  }

  bool fusedValue(ValueId v) const { return !mat_[at(v)] && producer_[at(v)]; }

  /// Distinct fused values reachable from `roots` through fused operands,
  /// counted up to `limit`.
  int dagSize(std::span<const ValueId> roots, int limit) {
    ++gen_;
    stack_.clear();
    for (ValueId o : roots)
      if (fusedValue(o) && stamp_[at(o)] != gen_) {
        stamp_[at(o)] = gen_;
        stack_.push_back(o);
      }
    int count = 0;
    while (!stack_.empty()) {
      const ValueId v = stack_.back();
      stack_.pop_back();
      if (++count >= limit) return limit;
      for (ValueId o : producer_[at(v)]->operands)
        if (fusedValue(o) && stamp_[at(o)] != gen_) {
          stamp_[at(o)] = gen_;
          stack_.push_back(o);
        }
    }
    return count;
  }

  /// Ops a loop body computes per point for these fused operands: the sum of
  /// their sizes, or, when that is over `limit`, the exact count of distinct ops
  /// (a value reused inside one body is computed once), bounded by limit + 1.
  int operandsSize(std::span<const ValueId> operands, int limit) {
    int sum = 0;
    ++gen_; // counts each operand once (a variadic op may repeat one)
    for (ValueId o : operands)
      if (fusedValue(o) && stamp_[at(o)] != gen_) {
        stamp_[at(o)] = gen_;
        sum = std::min(sum + size_[at(o)], limit + 1);
      }
    return sum <= limit ? sum : dagSize(operands, limit + 1);
  }

  /// Cuts the fused `operands` (of one op) at their largest until a loop body
  /// computing them needs at most `limit` ops per point.
  void boundOperands(std::span<const ValueId> operands, int limit) {
    while (operandsSize(operands, limit) > limit) {
      ValueId largest = -1;
      for (ValueId o : operands)
        if (fusedValue(o) && (largest < 0 || size_[at(o)] > size_[at(largest)])) largest = o;
      ADJIT_ASSERT(largest >= 0, "an op over budget without fused operands");
      mat_[at(largest)] = 1;
    }
  }

  // ---- which values get buffers ----------------------------------------------

  /// A value is materialised when it is a parameter or result of the
  /// function, when an op that writes whole results (a `lower` or `reduce`
  /// hook) produces it, when its consumer reads buffers
  /// (kMaterializesOperands), when a loop body computing it would exceed the
  /// budget, when an index-remapping op reads each of its elements several
  /// times (a broadcast: the einsum pattern), or when it is used more than once
  /// and recomputing it would be costly — unless every use reaches it through
  /// elementwise ops over the same domain: those consumers share one loop,
  /// where the value is computed once.
  void materialize() {
    for (const ir::Op& op : f_.ops) {
      const ops::OpInfo& info = ops::info(op.kind);
      const bool writesWhole = info.hooks.lower || info.hooks.reduce;
      // The op's own loops (or its consumers' loop) compute its fused operands.
      // An op with a loop per operand computes each in a loop of its own, up
      // to kMaxOperandLoops of them; past that its operands get buffers, which
      // its code reads through one loop over a table (a thousand loops in one
      // function take LLVM seconds).
      if (info.has(ops::kLoopPerOperand) && op.operands.size() > kMaxOperandLoops)
        for (ValueId o : op.operands) mat_[at(o)] = 1;
      else if (info.has(ops::kLoopPerOperand))
        for (ValueId o : op.operands) boundOperands(std::span<const ValueId>(&o, 1), budget_);
      else
        boundOperands(op.operands, writesWhole ? budget_ : budget_ - 1);
      if (!writesWhole && info.has(ops::kRemapsIndex) && !op.results.empty()) {
        // Each operand element is read size(result) / size(operand) times per
        // evaluation: recomputing a computed operand that often costs more than
        // one store and the loads. Cheap operands are still worth recomputing
        // at a reuse of 2 or 3.
        const int64_t out = f_.type(op.results[0]).size();
        for (ValueId o : op.operands) {
          const int64_t in = std::max<int64_t>(f_.type(o).size(), 1);
          const int64_t reuse = out / in;
          if (fusedValue(o) && computes_[at(o)] && (reuse >= 4 || (reuse >= 2 && expensive_[at(o)]))) mat_[at(o)] = 1;
        }
      }
      bool expensive = info.has(ops::kExpensive);
      bool computes = !op.operands.empty() && !info.has(ops::kElementsFromOperand);
      for (ValueId o : op.operands)
        if (fusedValue(o)) {
          expensive = expensive || expensive_[at(o)];
          computes = computes || computes_[at(o)];
        }
      const int size = 1 + operandsSize(op.operands, budget_);
      for (ValueId r : op.results) {
        size_[at(r)] = size;
        expensive_[at(r)] = expensive;
        computes_[at(r)] = computes;
        if (writesWhole) {
          mat_[at(r)] = 1;
        } else if (uses_[at(r)] > 1 && (expensive || size > kRecomputeLimit)) {
          if (sameDomain_[at(r)]) shared_.push_back(r);
          else mat_[at(r)] = 1;
        }
      }
    }
  }

  /// A value that is a contiguous run of a buffered value's elements (the
  /// op's `view` hook) is read from that buffer: no loop copies it, and a call
  /// or matmul given a row of a parameter reads it in place. Such a value
  /// that must have a buffer makes its operand have one instead. Users come
  /// after their operands, so one backward sweep finds chains of views.
  void makeViews() {
    viewOf_.assign(f_.types.size(), -1);
    viewOffset_.assign(f_.types.size(), 0);
    auto consider = [&](const ir::Op& op) {
      const ops::OpInfo& info = ops::info(op.kind);
      if (!info.hooks.view || op.results.size() != 1 || op.operands.empty()) return;
      const ValueId r = op.results[0], o = op.operands[0];
      if (isView(r) || isOutput_[at(r)] || (!mat_[at(r)] && !mat_[at(o)])) return;
      const std::optional<int64_t> offset = info.hooks.view(f_.type(o), f_.type(r), op.attrs);
      if (!offset) return;
      mat_[at(o)] = 1;
      mat_[at(r)] = 1;
      viewOf_[at(r)] = o;
      viewOffset_[at(r)] = *offset;
    };
    // Backwards, a view that must have a buffer gives its operand one (which
    // may be a view in turn); forwards, a view op over a buffer becomes a view.
    for (auto op = f_.ops.rbegin(); op != f_.ops.rend(); ++op) consider(*op);
    for (const ir::Op& op : f_.ops) consider(op);
    // Chains of views read the first buffer in the chain: operands come first.
    for (const ir::Op& op : f_.ops)
      for (ValueId r : op.results)
        if (const ValueId o = viewOf_[at(r)]; o >= 0 && viewOf_[at(o)] >= 0) {
          viewOffset_[at(r)] += viewOffset_[at(o)];
          viewOf_[at(r)] = viewOf_[at(o)];
        }
  }
  bool isView(ValueId v) const { return viewOf_[at(v)] >= 0; }

  // ---- loops and their order ------------------------------------------------

  /// The loop domain of a materialised value computed by a loop: an elementwise
  /// or element op iterates its result; a reduction over trailing axes iterates
  /// its operand. Other reductions are kernels of their own (nullopt).
  std::optional<Unit> loopOf(const ir::Op& op) {
    const ops::OpInfo& info = ops::info(op.kind);
    const ValueId r = op.results.at(0);
    // The ops a point of this root computes now that materialisation is
    // decided (size_ was estimated before operands were cut).
    const int size = 1 + dagSize(op.operands, budget_ + 1);
    if (!info.hooks.reduce) {
      const Shape& s = f_.type(r).shape;
      return Unit{&op, 0, {{&op, r, false}}, s, s.size(), size};
    }
    const Shape& in = f_.type(op.operands.at(0)).shape;
    std::vector<int64_t> axes = op.attrs.ints("axes");
    for (int64_t& x : axes)
      if (x < 0) x += static_cast<int64_t>(in.size());
    std::sort(axes.begin(), axes.end());
    const std::size_t from = in.size() - axes.size();
    for (std::size_t i = 0; i < axes.size(); ++i)
      if (axes[i] != static_cast<int64_t>(from + i)) return std::nullopt;
    return Unit{&op, 0, {{&op, r, true}}, in, from, size};
  }

  /// The materialised values that computing `operands` (through fused values)
  /// reads; `sameIndex` for a value only if every path to it keeps the index.
  const std::vector<Read>& readsOf(const std::vector<ValueId>& operands, bool pointwise) {
    ++gen_;
    reads_.clear();
    walk_.clear();
    for (ValueId o : operands) walk_.push_back({o, pointwise});
    while (!walk_.empty()) {
      const auto [v, same] = walk_.back();
      walk_.pop_back();
      const bool seen = stamp_[at(v)] == gen_;
      if (seen && (state_[at(v)] == 2 || same)) continue; // nothing new on this path
      stamp_[at(v)] = gen_;
      state_[at(v)] = same ? 1 : 2;
      if (!fusedValue(v)) {
        if (seen) reads_[slot_[at(v)]].sameIndex = false;
        else {
          slot_[at(v)] = reads_.size();
          reads_.push_back({v, same});
        }
        continue;
      }
      const ir::Op& p = *producer_[at(v)];
      const bool keeps = same && ops::info(p.kind).has(ops::kElementwise);
      for (ValueId o : p.operands) walk_.push_back({o, keeps});
    }
    return reads_;
  }

  /// Whether root `r` may join loop `u`. Loops do not span a step-group
  /// boundary (findSteps), so the groups of an unrolled loop get alike loops.
  bool compatible(const Unit& u, const Unit& r) const {
    if (u.roots.empty() || u.domain != r.domain || u.size + r.size > budget_) return false;
    if (stepGroup(*u.op) != stepGroup(*r.op)) return false;
    if (r.roots[0].reduction && u.reduceFrom != u.domain.size() && u.reduceFrom != r.reduceFrom) return false;
    return true;
  }

  /// Every op that writes memory becomes a unit at a level one above the
  /// levels of the materialised values it reads. Loop roots of one level and
  /// domain cannot read each other's results at other indices, so each such
  /// set becomes one loop nest (up to the body budget). A root that reads an
  /// elementwise root's value at its own index may share that root's loop (and
  /// level): in the loop body the value is computed before it is used.
  std::vector<Unit> schedule() {
    std::vector<Unit> units;
    // Units by level and step group: a root joins only a unit of its own group.
    std::map<std::pair<int, std::ptrdiff_t>, std::vector<int>> byLevel;
    std::vector<int> levelOf(f_.types.size(), -1), unitOf(f_.types.size(), -1);
    int lastEffect = -1; // ops with side effects run in program order
    for (const ir::Op& op : f_.ops) {
      const ops::OpInfo& info = ops::info(op.kind);
      if (!info.hooks.lower && (op.results.empty() || !mat_[at(op.results[0])])) continue; // fused into its users
      if (!op.results.empty() && inMemory_[at(op.results[0])]) continue;                   // no code, like a parameter
      if (!op.results.empty() && isView(op.results[0])) { // no code: ready when the viewed buffer is
        levelOf[at(op.results[0])] = levelOf[at(viewOf_[at(op.results[0])])];
        continue;
      }
      std::optional<Unit> root = info.hooks.lower ? std::nullopt : loopOf(op);
      const bool pointwise = root && (root->roots[0].reduction || info.has(ops::kElementwise));
      int level = 0;
      std::vector<int> shareUnits; // units this root may join: it reads them at its own index
      for (const Read& r : readsOf(op.operands, pointwise)) {
        const int u = unitOf[at(r.value)];
        const bool share = root && r.sameIndex && u >= 0 && !units[static_cast<std::size_t>(u)].roots.empty() &&
                           f_.type(r.value).shape == root->domain && !ops::info(producer_[at(r.value)]->kind).hooks.reduce;
        if (share) {
          level = std::max(level, levelOf[at(r.value)]);
          if (std::find(shareUnits.begin(), shareUnits.end(), u) == shareUnits.end()) shareUnits.push_back(u);
        } else {
          level = std::max(level, levelOf[at(r.value)] + 1);
        }
      }
      // A root sharing a unit's loop must join that very unit; otherwise it goes one level up.
      int target = -1;
      for (int u : shareUnits)
        if (units[static_cast<std::size_t>(u)].level == level) {
          if (target < 0 && compatible(units[static_cast<std::size_t>(u)], *root)) target = u;
          else if (target != u) level += 1, target = -2;
        }
      if (target == -2) target = -1;
      if (root && target < 0)
        for (int u : byLevel[{level, stepGroup(op)}]) {
          if (!compatible(units[static_cast<std::size_t>(u)], *root)) continue;
          // Joining an unrelated unit is fine unless it shares a level with a unit we read.
          bool clash = false;
          for (int su : shareUnits) clash = clash || (units[static_cast<std::size_t>(su)].level == level && su != u);
          if (!clash) {
            target = u;
            break;
          }
        }
      if (effectful(op)) {
        level = std::max(level, lastEffect + 1);
        lastEffect = level;
        if (target >= 0 && units[static_cast<std::size_t>(target)].level != level) target = -1;
      }
      for (ValueId r : op.results) levelOf[at(r)] = level;
      if (!root) {
        units.push_back({&op, level, {}, {}, 0, 0});
        continue;
      }
      if (target >= 0) {
        Unit& u = units[static_cast<std::size_t>(target)];
        u.roots.push_back(root->roots[0]);
        u.size += root->size;
        if (root->roots[0].reduction) u.reduceFrom = root->reduceFrom;
      } else {
        root->level = level;
        units.push_back(std::move(*root));
        target = static_cast<int>(units.size() - 1);
        byLevel[{level, stepGroup(op)}].push_back(target);
      }
      unitOf[at(op.results[0])] = target;
    }
    return units;
  }

  /// Stores the shared values several of `units` compute, and schedules
  /// `units` again. Storing values changes the loops, so this repeats until
  /// nothing changes; past kMaxRounds every shared value is stored, which
  /// needs no further round. True if any value was stored.
  bool storeShared(std::vector<Unit>& units) {
    constexpr int kMaxRounds = 8;
    bool any = false;
    for (int round = 0; storeSharedComputedTwice(units); ++round) {
      any = true;
      if (round == kMaxRounds)
        for (ValueId v : shared_) mat_[at(v)] = 1;
      units = schedule();
    }
    return any;
  }

  /// Materialises the shared values that several units compute; true if any.
  bool storeSharedComputedTwice(const std::vector<Unit>& units) {
    if (shared_.empty()) return false;
    std::vector<int> lastUnit(f_.types.size(), -1), count(f_.types.size(), 0);
    for (std::size_t u = 0; u < units.size(); ++u) {
      ++gen_;
      stack_.clear();
      for (const LoopRoot& r : units[u].roots)
        for (ValueId o : r.op->operands) stack_.push_back(o);
      while (!stack_.empty()) {
        const ValueId v = stack_.back();
        stack_.pop_back();
        if (!fusedValue(v) || stamp_[at(v)] == gen_) continue;
        stamp_[at(v)] = gen_;
        if (lastUnit[at(v)] != static_cast<int>(u)) {
          lastUnit[at(v)] = static_cast<int>(u);
          ++count[at(v)];
        }
        for (ValueId o : producer_[at(v)]->operands) stack_.push_back(o);
      }
    }
    bool changed = false;
    for (ValueId v : shared_)
      if (!mat_[at(v)] && count[at(v)] > 1) mat_[at(v)] = changed = true;
    return changed;
  }

  /// The fused values computed from `operands`, in op order.
  std::vector<ValueId> fusedFrom(const std::vector<ValueId>& operands) {
    ++gen_;
    std::vector<ValueId> out;
    stack_.assign(operands.begin(), operands.end());
    while (!stack_.empty()) {
      const ValueId v = stack_.back();
      stack_.pop_back();
      if (!fusedValue(v) || stamp_[at(v)] == gen_) continue;
      stamp_[at(v)] = gen_;
      out.push_back(v);
      for (ValueId o : producer_[at(v)]->operands) stack_.push_back(o);
    }
    std::sort(out.begin(), out.end(), [&](ValueId a, ValueId b) { return position_[at(a)] < position_[at(b)]; });
    return out;
  }

  Kernel kernelOf(Unit u) {
    Kernel k;
    k.op = u.op;
    k.level = u.level;
    k.bodySize = u.size;
    if (u.roots.empty()) {
      k.kind = ops::info(u.op->kind).hooks.lower ? Kernel::Kind::Lower : Kernel::Kind::Reduction;
      k.fused = fusedFrom(u.op->operands);
      return k;
    }
    k.kind = Kernel::Kind::Loop;
    k.domain = std::move(u.domain);
    k.reduceFrom = u.reduceFrom;
    std::vector<ValueId> operands;
    for (const LoopRoot& r : u.roots) {
      operands.insert(operands.end(), r.op->operands.begin(), r.op->operands.end());
      // An elementwise root computes its own op at the loop's index; an
      // `element` root remaps it.
      if (!r.reduction && ops::info(r.op->kind).has(ops::kRemapsIndex)) k.flat = false;
    }
    k.fused = fusedFrom(operands);
    // One linear loop unless something computed inline needs a multi-dimensional index.
    for (ValueId v : k.fused)
      if (ops::info(producer_[at(v)]->kind).has(ops::kRemapsIndex)) k.flat = false;
    k.roots = std::move(u.roots);
    return k;
  }

  /// The code of kernel k as text, equal for kernels that compile to the
  /// same code up to which buffers they use; `buffers` gets those buffers in
  /// the order the text numbers them. Empty for kernels never shared (those
  /// with side effects).
  std::string kernelKey(const Kernel& k, std::vector<ValueId>& buffers) const {
    buffers.clear();
    // The ops the kernel computes, in op order: fused values, then what it writes.
    std::vector<const ir::Op*>& ops = keyOps_;
    std::vector<ValueId>& written = keyWritten_;
    ops.clear();
    written.clear();
    for (ValueId v : k.fused) ops.push_back(producer_[at(v)]);
    if (k.kind == Kernel::Kind::Loop)
      for (const LoopRoot& r : k.roots) {
        ops.push_back(r.op);
        written.push_back(r.value);
      }
    else {
      ops.push_back(k.op);
      written.assign(k.op->results.begin(), k.op->results.end());
    }
    for (const ir::Op* op : ops)
      if (effectful(*op)) return {};
    std::stable_sort(ops.begin(), ops.end(), [](const ir::Op* a, const ir::Op* b) { return a < b; });
    ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
    // Values are named by their place in the kernel: node i (the i-th result
    // computed) or buffer j (the j-th buffer read). keyMark_ tells which one
    // a value has in this key; keyIndex_ holds the index.
    ++keyGen_;
    auto number = [](std::string& key, uint64_t x) { key.append(reinterpret_cast<const char*>(&x), sizeof x); };
    auto type = [&](std::string& key, ValueId v) {
      const Type& t = f_.type(v);
      key += static_cast<char>(t.dtype);
      number(key, t.shape.size());
      for (int64_t d : t.shape) number(key, static_cast<uint64_t>(d));
    };
    auto buffer = [&](std::string& key, ValueId v) {
      if (keyMark_[at(v)] != keyGen_ || keyState_[at(v)] != 2) {
        keyMark_[at(v)] = keyGen_;
        keyState_[at(v)] = 2;
        keyIndex_[at(v)] = buffers.size();
        buffers.push_back(v);
      }
      key += 'b';
      number(key, keyIndex_[at(v)]);
    };
    auto ref = [&](std::string& key, ValueId v) {
      if (keyMark_[at(v)] == keyGen_ && keyState_[at(v)] == 1) {
        key += 'n';
        number(key, keyIndex_[at(v)]);
        return;
      }
      buffer(key, v);
      type(key, v);
    };
    std::string key;
    key += static_cast<char>(k.kind);
    number(key, k.domain.size());
    for (int64_t d : k.domain) number(key, static_cast<uint64_t>(d));
    number(key, k.reduceFrom);
    key += static_cast<char>(k.flat);
    std::size_t next = 0;
    for (const ir::Op* op : ops) {
      number(key, static_cast<uint64_t>(op->kind));
      key += '(';
      for (ValueId o : op->operands) ref(key, o);
      key += '{';
      for (const auto& [name, a] : op->attrs.entries()) {
        key += name;
        key += '=';
        appendAttr(key, a);
        key += ';';
      }
      for (const std::string& c : op->callees) {
        key += '@';
        key += c;
        key += ';';
      }
      key += "}->";
      for (ValueId r : op->results) {
        type(key, r);
        keyMark_[at(r)] = keyGen_;
        keyState_[at(r)] = 1;
        keyIndex_[at(r)] = next++;
      }
      key += ')';
    }
    key += "writes";
    for (ValueId w : written) {
      ADJIT_ASSERT(keyMark_[at(w)] == keyGen_ && keyState_[at(w)] == 1, "a kernel writes a value it does not compute");
      key += 'n';
      number(key, keyIndex_[at(w)]);
      buffer(key, w);
    }
    if (k.kind == Kernel::Kind::Loop)
      for (const LoopRoot& r : k.roots) key += r.reduction ? 'r' : 's';
    return key;
  }

  /// Marks kernels whose code repeats (the steps of an unrolled recurrence,
  /// one matmul in every layer): LLVM's work then follows the distinct code,
  /// not the program's length. Keys are compared whole, never by hash.
  ///
  /// In code that fits in one LLVM function (functionBudget_ ops per point in
  /// all), which costs LLVM little, only kernels doing kShareMinWork ops or
  /// more per call are shared: a call to a small one costs more than its
  /// code saves LLVM. In a scan's RK4 step (scalar kernels) the calls, their
  /// argument tables and the lost inlining cost a third of the run time.
  void share(FusionPlan& p) const {
    int64_t code = 0;
    for (const Kernel& k : p.kernels) code += codeOf(k);
    const bool small = code <= functionBudget_;
    std::unordered_map<std::string, int> first;
    std::vector<ValueId> buffers;
    for (std::size_t i = 0; i < p.kernels.size(); ++i) {
      Kernel& k = p.kernels[i];
      if (small && workOf(k) < kShareMinWork) continue;
      std::string key = kernelKey(k, buffers);
      if (key.empty()) continue;
      auto [it, fresh] = first.try_emplace(std::move(key), static_cast<int>(i));
      if (fresh) {
        k.buffers = buffers; // kept in case a later kernel repeats it
        continue;
      }
      Kernel& f = p.kernels[static_cast<std::size_t>(it->second)];
      f.sameAs = it->second;
      k.sameAs = it->second;
      k.buffers = buffers;
    }
    for (Kernel& k : p.kernels)
      if (k.sameAs < 0) k.buffers.clear();
  }

  /// Splits loops with enough work into chunks (Kernel::chunks) along axis 0
  /// of the domain; when the loop reduces that axis too (a reduction over
  /// everything), each chunk reduces into a partial result. Kernels with side
  /// effects stay whole. A chunk gets about kChunkWork ops.
  void chunk(FusionPlan& p) const {
    std::vector<ValueId> buffers;
    for (Kernel& k : p.kernels) {
      if (k.kind != Kernel::Kind::Loop || k.domain.empty() || k.group >= 0 || k.epilogueOf >= 0 || k.prologueOf >= 0) continue;
      const int64_t points = num_elements(k.domain), ops = std::max(k.bodySize, 1);
      if (points < kParallelPoints || points * ops < kParallelWork) continue;
      if (k.buffers.empty() && kernelKey(k, buffers).empty()) continue; // side effects
      if (k.buffers.empty()) k.buffers = buffers;
      const bool partials = k.reduceFrom == 0;
      const int64_t rows = k.domain[0];
      const int64_t perRow = points / rows * ops;
      // At most kMaxChunks: partial results live on the stack.
      const int64_t chunkRows = std::max({int64_t{1}, kChunkWork / perRow, (rows + kMaxChunks - 1) / kMaxChunks});
      const int64_t chunks = (rows + chunkRows - 1) / chunkRows;
      if (chunks < 2) {
        if (k.sameAs < 0) k.buffers.clear();
        continue;
      }
      k.chunks = chunks;
      k.chunkRows = chunkRows;
      k.partials = partials;
    }
  }

  /// Whether result elements [r, ...] of `op` read operand i at elements
  /// [r, ...] only: elementwise ops, reductions that keep axis 0, ops whose
  /// keepsRows hook says so; operand and result of one extent on axis 0.
  bool keepsRows(const ir::Op& op, std::size_t i) const {
    const Type &in = f_.type(op.operands[i]), &out = f_.type(op.results.at(0));
    if (in.shape.empty() || out.shape.empty() || in.shape[0] != out.shape[0]) return false;
    const ops::OpInfo& info = ops::info(op.kind);
    if (info.has(ops::kElementwise)) return true;
    if (info.hooks.reduce) {
      for (int64_t a : op.attrs.ints("axes"))
        if (a == 0 || a == -static_cast<int64_t>(in.shape.size())) return false;
      return true;
    }
    return info.hooks.keepsRows && info.hooks.keepsRows(in, i, out, op.attrs);
  }

  /// Whether kernel k reads the values group candidate g writes (groupOf_)
  /// at the row of its own point only. Walks the kernel's ops from its roots
  /// back in op order: a fused value is read at its point's row when every
  /// op reading it in the kernel keeps rows.
  bool readsOwnRows(const Kernel& k, int g) {
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

  /// Whether kernel k reads a buffer `mark` has `id` for (through views too).
  bool readsMarked(const Kernel& k, const std::vector<int>& mark, int id) {
    for (const Read& r : readsOf(operandsOf(k, stack_), false)) {
      const ValueId base = viewOf_[at(r.value)];
      if (mark[at(r.value)] == id || (base >= 0 && mark[at(base)] == id)) return true;
    }
    return false;
  }

  /// The rows of kernel k's code (axis 0 of its domain or result) when it
  /// may be part of a row group, else 0: loops that do not reduce everything,
  /// and ops that can lower a range of rows (kRowRanges) reading every
  /// operand at their own rows; writing enough, whose code does not repeat
  /// much (kGroupMaxRepeats). (Kernels with side effects stay out too.)
  int64_t groupRows(const Kernel& k, std::span<const int> repeats) {
    if (k.sameAs >= 0 && repeats[static_cast<std::size_t>(k.sameAs)] > kGroupMaxRepeats) return 0;
    std::vector<ValueId>& written = stack_;
    uint64_t bytes = 0;
    for (ValueId v : writtenBy(k, written)) bytes += static_cast<uint64_t>(f_.type(v).bytes());
    if (bytes < kGroupMinKernelBytes) return 0;
    if (k.kind == Kernel::Kind::Loop) return k.reduceFrom >= 1 ? k.domain[0] : 0;
    if (k.kind != Kernel::Kind::Lower || !ops::info(k.op->kind).has(ops::kRowRanges) || k.op->results.size() != 1) return 0;
    for (std::size_t i = 0; i < k.op->operands.size(); ++i)
      if (!keepsRows(*k.op, i)) return 0;
    return f_.type(k.op->results[0]).shape[0];
  }

  /// Finds row groups (RowGroup): runs of kernels over the same rows that
  /// read each other's values at their own rows only. Other kernels met while
  /// a group grows move out of its way when they have no side effects: before
  /// it when they read nothing it writes, else after it (and the group ends
  /// before a kernel that reads what they write). A group is kept where its
  /// block buffer saves a round trip through memory (sizeGroup).
  void group(FusionPlan& p) {
    blocks_.clear();
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
      const int64_t rows = groupRows(k, repeats);
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
        } else if (pure && !fits) {
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
    std::vector<char> viewed(f_.types.size(), 0);
    for (std::size_t v = 0; v < viewOf_.size(); ++v)
      if (const ValueId base = viewOf_[v]; base >= 0) {
        lastRead[at(base)] = std::max(lastRead[at(base)], lastRead[v]);
        const Shape &vs = f_.type(static_cast<ValueId>(v)).shape, &bs = f_.type(base).shape;
        if (viewOffset_[v] != 0 || vs.empty() || bs.empty() || vs[0] != bs[0]) viewed[at(base)] = 1;
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
      return;
    }
    // A kernel of a row group has code of its own (a function of the block's rows).
    for (Kernel& k : p.kernels)
      if (k.group >= 0) k.sameAs = -1;
    reshare(p);
  }

  /// After some kernels left their classes of shared code (sameAs = -1), the
  /// others of each class still share theirs, if two or more, the code
  /// emitted with the first of them in the plan's order (sameAs names a class
  /// by any kernel index, as after a reordering).
  static void reshare(FusionPlan& p) {
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

  /// Runs loops inside the code of ops that work tile by tile. An op that
  /// writes its result by tiles (kTileEpilogue) takes the kernel reading that
  /// result as its epilogue (Kernel::epilogue) when that kernel can run on the
  /// tiles: a loop over the result's points, no reduction, reading the result
  /// at its own point only, its only reader, at most kMaxEpilogueDistance
  /// kernels later, none of the kernels between writing what it reads. An op
  /// that reads operands by tiles (kTilePrologue) takes the kernel computing an
  /// operand as its prologue (Kernel::prologue) when that kernel is a loop over
  /// the operand's points computing it alone, elementwise, the op being its
  /// only reader, at most kMaxEpilogueDistance kernels earlier. Neither code
  /// may repeat more than kGroupMaxRepeats times (each is code of its own: an
  /// unrolled LSTM's 1,024 shared products stay shared). The loops move next
  /// to their op, and a product is written in place of a result of its
  /// epilogue of the same type.
  void tiles(FusionPlan& p) {
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
      const ops::OpInfo& info = ops::info(k.op->kind);
      const bool epilogue = info.has(ops::kTileEpilogue) && k.op->results.size() == 1 && f_.type(k.op->results[0]).rank() >= 2 &&
                            !isOutput_[at(k.op->results[0])];
      if (!epilogue && !info.has(ops::kTilePrologue)) continue;
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
      // A loop that may run on tiles of value v of `type`, read or written by k only.
      auto tileLoop = [&](int j, ValueId v) {
        const Kernel& e = p.kernels[static_cast<std::size_t>(j)];
        return !taken[static_cast<std::size_t>(j)] && e.kind == Kernel::Kind::Loop && e.group < 0 && e.domain == f_.type(v).shape &&
               e.reduceFrom == e.domain.size() && readers[at(v)] == 1 && !viewed[at(v)] && ownCode(e) &&
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
      if (info.has(ops::kTilePrologue) && unit_) {
        std::vector<Type> types;
        for (ValueId o : k.op->operands) types.push_back(f_.type(o));
        for (std::size_t o = 0; o < k.op->operands.size(); ++o) {
          const ValueId a = k.op->operands[o];
          if (!info.hooks.tilesOperand(types, o, k.op->attrs, *unit_)) continue;
          const int j = writer[at(a)];
          if (std::count(k.op->operands.begin(), k.op->operands.end(), a) != 1 || isOutput_[at(a)] || f_.type(a).rank() < 2 || j < 0 ||
              j >= static_cast<int>(i) || static_cast<int>(i) - j > kMaxEpilogueDistance || !tileLoop(j, a) ||
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
      if (j <= static_cast<int>(i) || j - static_cast<int>(i) > kMaxEpilogueDistance || !tileLoop(j, c)) continue;
      bool ownPoint = true;
      for (const LoopRoot& r : p.kernels[static_cast<std::size_t>(j)].roots)
        for (const Read& read : readsOf(r.op->operands, ops::info(r.op->kind).has(ops::kElementwise)))
          ownPoint = ownPoint && (read.value != c || read.sameIndex);
      if (!ownPoint || writesReadBy(i + 1, static_cast<std::size_t>(j), static_cast<std::size_t>(j))) continue;
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

  /// Finds runs: at each kernel, the period (up to kMaxPeriod kernels) whose
  /// pattern of shared code repeats most, if at least kMinRepeats times.
  /// Each kernel is scanned once per period: linear in the plan.
  static void findRuns(FusionPlan& p) {
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

  /// Consecutive kernels are grouped into LLVM functions of bounded size: no
  /// function pass ever sees a whole large program, and a large module splits
  /// into parts that compile in parallel (jit/Engine.cpp). Measured on a
  /// 3,000-op chain, splitting alone took LLVM from 262 to 224 ms.
  void split(FusionPlan& p) const {
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

  // ---- where buffers live -----------------------------------------------------

  /// The operands of the ops kernel k computes (its roots', or its op's).
  static const std::vector<ValueId>& operandsOf(const Kernel& k, std::vector<ValueId>& out) {
    if (k.kind != Kernel::Kind::Loop) return k.op->operands;
    out.clear();
    for (const LoopRoot& r : k.roots) out.insert(out.end(), r.op->operands.begin(), r.op->operands.end());
    return out;
  }

  /// The values kernel k writes.
  static std::span<const ValueId> writtenBy(const Kernel& k, std::vector<ValueId>& out) {
    out.clear();
    if (k.kind != Kernel::Kind::Loop) return k.op->results;
    for (const LoopRoot& r : k.roots) out.push_back(r.value);
    return out;
  }

  /// The values each kernel writes (writer) and the last kernel reading each
  /// (lastRead: -1 when none; a view's reads count for the value it views).
  void readers(const FusionPlan& p, std::vector<int>& writer, std::vector<int>& lastRead) {
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

  /// Sizes row group g, or returns false when it would not pay. Its values
  /// read only inside it (not results; viewed, if at all, at their own rows)
  /// get rows of the block buffer, sharing bytes when their live ranges in
  /// the group do not overlap, up to a row size that still leaves
  /// kMinBlockRows rows in kBlockBytes; the block gets as many rows as fit.
  /// It pays when those values would take kGroupMinBytes or more in memory,
  /// in two blocks or more.
  bool sizeGroup(FusionPlan& p, std::size_t gi, const std::vector<int>& lastRead, const std::vector<char>& viewed,
                 std::vector<std::pair<ValueId, uint64_t>>& local) {
    RowGroup& g = p.groups[gi];
    const int first = static_cast<int>(g.first), last = first + static_cast<int>(g.count) - 1;
    constexpr uint64_t kMaxRowBytes = kBlockBytes / kMinBlockRows;
    ScratchAllocator rows; // in bytes per row
    uint64_t rowBytes = 0;
    using Live = std::tuple<int, uint64_t, uint64_t>; // last reader, row offset, bytes per row
    std::priority_queue<Live, std::vector<Live>, std::greater<>> live;
    std::vector<ValueId> written;
    local.clear();
    for (int k = first; k <= last; ++k) {
      for (; !live.empty() && std::get<0>(live.top()) < k; live.pop()) rows.release(std::get<1>(live.top()), std::get<2>(live.top()));
      for (ValueId v : writtenBy(p.kernels[static_cast<std::size_t>(k)], written)) {
        if (isOutput_[at(v)] || lastRead[at(v)] > last || viewed[at(v)]) continue;
        const uint64_t bytes = (static_cast<uint64_t>(f_.type(v).bytes() / g.rows) + 7) / 8 * 8;
        const uint64_t offset = rows.allocate(bytes);
        if (offset + bytes > kMaxRowBytes) { // too wide: it stays in memory
          rows.release(offset, bytes);
          continue;
        }
        rowBytes = std::max(rowBytes, offset + bytes);
        live.push({std::max(lastRead[at(v)], k), offset, bytes});
        local.push_back({v, offset});
      }
    }
    const int64_t fit = rowBytes ? static_cast<int64_t>(kBlockBytes / rowBytes) / kMinBlockRows * kMinBlockRows : kMaxBlockRows;
    g.blockRows = std::clamp<int64_t>(fit, kMinBlockRows, kMaxBlockRows);
    g.blockBytes = rowBytes * static_cast<uint64_t>(g.blockRows);
    if (g.blocks() < 2 || rowBytes * static_cast<uint64_t>(g.rows) < kGroupMinBytes) return false;
    for (auto& [v, offset] : local) offset *= static_cast<uint64_t>(g.blockRows);
    for (const auto& [v, offset] : local) blockOf_[at(v)] = static_cast<int>(gi);
    std::erase_if(g.buffers, [&](ValueId v) {
      const ValueId base = viewOf_[at(v)];
      return blockOf_[at(base >= 0 ? base : v)] == static_cast<int>(gi);
    });
    int64_t work = 0;
    for (int k = first; k <= last; ++k) work += workOf(p.kernels[static_cast<std::size_t>(k)]);
    g.threads = parallel_ && work >= kParallelWork;
    return true;
  }

  /// Parameters and results use the caller's buffers; other materialised
  /// values go on the stack while small, else into the scratch region, where
  /// values whose live ranges (first write to last read, in kernel order) do
  /// not overlap share bytes.
  void place(FusionPlan& p) {
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
    // A view is read from its buffer: that buffer lives as long as the view is read.
    for (std::size_t v = 0; v < n; ++v)
      if (const ValueId base = viewOf_[v]; base >= 0) {
        lastRead[at(base)] = std::max(lastRead[at(base)], lastRead[v]);
        const uint64_t bytes = static_cast<uint64_t>(viewOffset_[v]) * size_of(f_.type(static_cast<ValueId>(v)).dtype);
        p.place[v] = {Storage::View, static_cast<uint32_t>(base), bytes};
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

  const ir::Function& f_;
  const int budget_, functionBudget_;
  const ops::Effects* effects_;
  const bool parallel_;
  const VectorUnit* unit_;
  bool effectful(const ir::Op& op) const { return effects_ ? effects_->effectful(op) : !ops::info(op.kind).has(ops::kPure); }
  std::vector<const ir::Op*> producer_;
  std::vector<int> position_; ///< index of the producing op
  Users users_;
  std::vector<int> uses_, size_;
  std::vector<char> isOutput_, mat_, expensive_, computes_, sameDomain_;
  std::vector<char> initialMat_; ///< mat_ before planning: parameters, outputs, data, operands read from memory
  std::vector<ValueId> shared_; ///< reused values left fused for loops that share them
  std::vector<ValueId> carries_; ///< values stored at the group boundaries of unrolled loops (findSteps)
  std::vector<int> cuts_;        ///< the positions of those boundaries, ascending
  std::vector<uint8_t> inMemory_; ///< per value: data its op holds (Storage::Constant)
  std::vector<ValueId> viewOf_;  ///< per value: the buffered value it is a view of (-1: none)
  std::vector<int> groupOf_;     ///< per value: the row-group candidate whose kernel writes it (group())
  std::vector<int> blockOf_;     ///< per value: the group sized (sizeGroup) whose block buffer holds it
  /// The values in block buffers: value, group, offset in the block (Storage::Block).
  std::vector<std::tuple<ValueId, uint32_t, uint64_t>> blocks_;
  std::vector<int64_t> viewOffset_; ///< per view: the element offset into that value
  // Scratch state of the walks: a visit stamp per value, reused across walks.
  std::vector<uint32_t> stamp_;
  std::vector<uint8_t> state_;
  std::vector<std::size_t> slot_;
  uint32_t gen_ = 0;
  std::vector<ValueId> stack_;
  std::vector<std::pair<ValueId, bool>> walk_;
  std::vector<Read> reads_;
  // Scratch state of kernelKey: per value, in the current key (keyMark_ ==
  // keyGen_), a node (keyState_ 1) or buffer (2), and its index.
  mutable std::vector<uint32_t> keyMark_;
  mutable std::vector<uint8_t> keyState_;
  mutable std::vector<std::size_t> keyIndex_;
  mutable uint32_t keyGen_ = 0;
  mutable std::vector<const ir::Op*> keyOps_;
  mutable std::vector<ValueId> keyWritten_;
};

} // namespace

FusionPlan planFusion(const ir::Function& f, const PlanOptions& o) {
  // Step groups pay off where the budget's cuts drift against the steps (an
  // LSTM's gradient: 82 distinct loop bodies without them, 54 with); where
  // the budget already cuts in step (a chain of one op kind) they only add
  // leftovers. Draft both ways; finish the one with less code.
  //
  // The draft without step groups is what a function without them gets, so
  // on a large function it starts on a thread of its own while this one
  // looks for step groups and drafts with them: the two planners share only
  // `f` and `o`, which they read. (An unrolled LSTM's gradient, 145,000 ops:
  // 100 ms of its 290 ms of planning.)
  Planner grouped(f, o), free(f, o);
  std::optional<FusionPlan> a;
  std::exception_ptr error;
  std::thread helper;
  if (o.concurrent && f.ops.size() >= kConcurrentDraftOps && std::thread::hardware_concurrency() > 1)
    helper = std::thread([&] {
      try {
        a = free.draft();
      } catch (...) {
        error = std::current_exception();
      }
    });
  std::optional<FusionPlan> b;
  try {
    if (grouped.findStepGroups()) b = grouped.draft();
  } catch (...) {
    if (helper.joinable()) helper.join();
    throw;
  }
  if (helper.joinable()) helper.join();
  if (error) std::rethrow_exception(error);
  if (!a) a = free.draft();
  return b && Planner::codeSize(*b) < Planner::codeSize(*a) ? grouped.finish(std::move(*b)) : free.finish(std::move(*a));
}

} // namespace adjit::codegen
