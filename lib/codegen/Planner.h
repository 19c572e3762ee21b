// codegen/Planner.h — the fusion planner, internal to lib/codegen: its
// tuning constants, its state and the steps of a plan. FusionPlan.cpp drafts
// (which values get buffers, loops and their order, shared code) and holds
// planFusion; PlanGroups.cpp groups kernels over the same rows and pairs
// matmuls with the loops that produce and consume their tiles;
// PlanPlacement.cpp finds runs of repeated code, cuts LLVM functions and
// places every buffer. Only planFusion (FusionPlan.h) is used outside.
#pragma once

#include "codegen/FusionPlan.h"
#include "codegen/StepGroups.h"
#include "ir/Text.h"
#include "ir/Effects.h"
#include "codegen/Lowering.h"
#include "ir/OpInfo.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace adjit::codegen::planning {

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
/// An op that may update an operand in place (Lowering::inPlace) does so only
/// when at most this many ops read that operand (all before it): checking
/// them stays linear in the function's size.
constexpr std::size_t kMaxInPlaceUsers = 16;
/// A loop keeps at most about this many reductions. Each keeps its partial
/// sums in vector registers for the whole loop, and sibling sums off one
/// chain (a polynomial's gradient keeps one per coefficient) filled loops of
/// 96 ops with 24-48 of them, past the 32 registers. A function whose plan
/// has a loop with more is planned again with the body budget scaled down to
/// fit (planFusion), so its chains are cut (a link stored) more often.
/// Chosen on GradBench's llsq gradient, with the body budget forced for the
/// whole function (gradient/primal at n = 16, 64, 256, 1024, 4096, interleaved
/// rounds): 24-48 sums a loop 2.21-2.24, 3.44-3.51, 2.67-2.75, 2.61-2.72,
/// 2.55-2.58; 16 a loop 1.85-1.93, 2.20, 2.00-2.01, 1.99-2.01, 1.97-1.98; 12
/// a loop 1.66-1.67, 2.15-2.24, 1.94-1.96, 1.90, 1.88-1.89; 8 a loop 1.67,
/// 1.86, 1.96, 2.86, 2.00. With this rule (its inputs n = 16 to 16392, two
/// runs of each build in turn): 2.12-3.50 -> 1.62-2.23, first calls 0.23-0.87
/// -> 0.14-0.34 s.
constexpr int kMaxLoopReductions = 12;
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
/// Row groups (RowGroup) are made of kernels over at least kGroupMinRows rows,
/// where the values kept in block buffers would take kGroupMinBytes or more:
/// smaller data stays in cache anyway. A kernel writing less than
/// kGroupMinKernelBytes (a row's max, a row's reciprocal) joins or starts a group of its
/// rows when it can, and otherwise moves out of its way: between a softmax's
/// passes, such kernels ended the group, and exp(x - max) went through
/// memory. A kernel whose code repeats more than kGroupMaxRepeats times
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
/// A value takes at most kMaxBlockRowBytes of a block's row. Rows of other
/// buffers that two kernels of the group touch (softmax's x, read for the
/// max and again for exp; a result written in place of a value) count
/// against kBlockBytes too: a block of a 1000-column softmax gradient then
/// has 4 rows, not 8, and its rows stay in L1 from kernel to kernel
/// (G3 0.99x -> 0.85x of the hand-written loop, 2 rows alike). Blocks of
/// 8 rows or more have a multiple of 8 (per-row loops vectorise across
/// rows), fewer a power of two.
constexpr uint64_t kBlockBytes = 32 << 10;
constexpr int64_t kMinBlockRows = 2, kMaxBlockRows = 1024;
constexpr uint64_t kMaxBlockRowBytes = kBlockBytes / 8;
/// A tile epilogue (Kernel::epilogue) is the kernel reading a product at
/// most this many kernels after it: planning stays linear.
constexpr int kMaxEpilogueDistance = 16;
/// Widest tile a reducing epilogue folds (its tile function buffers a row of
/// values on its stack): the packed kernels' are 8-32 columns; plain loops
/// pass whole matrices.
constexpr int64_t kMaxTileColumns = 1024;
/// A row group's block calls a function per kernel: at most this many.
constexpr std::size_t kMaxGroupKernels = 64;
/// From this many ops on, planFusion drafts without step groups on a second
/// thread: a draft costs about 1 us per op, starting a thread some 50 us.
constexpr std::size_t kConcurrentDraftOps = 4096;

inline std::size_t at(ValueId v) { return static_cast<std::size_t>(v); }

/// An attribute as key text: exact, but large arrays by identity (their data
/// is not copied into every key; equal large constants are simply not shared).
inline void appendAttr(std::string& key, const ir::Attr& a) {
  if (const Array* arr = std::get_if<Array>(&a)) {
    key += arr->type().str();
    if (arr->bytes() <= 256) key.append(static_cast<const char*>(arr->raw()), arr->bytes());
    else key += fmt::format("@{}", arr->raw());
    return;
  }
  ir::appendAttrBytes(key, a);
}

inline uint64_t align64(uint64_t n) { return (n + 63) / 64 * 64; }

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
        parallel_(o.parallel), options_(o), unit_(o.unit) {}

  /// Finds the step groups of unrolled loops (findSteps); true if any.
  bool findStepGroups();
  /// How many step-group boundaries findStepGroups placed.
  std::size_t boundaries() const { return cuts_.size(); }

  /// What LLVM compiles for kernel k: its ops per point, or kLowerWeight for
  /// an op's own code.
  static int64_t codeOf(const Kernel& k) { return k.kind == Kernel::Kind::Loop ? std::max(k.bodySize, 1) : kLowerWeight; }

  /// Ops kernel k does per call (an op's own code: kLowerWeight per result element).
  int64_t workOf(const Kernel& k) const;

  /// What LLVM compiles: the ops per point of each distinct kernel code.
  static int64_t codeSize(const FusionPlan& p);

  /// Buffers, loops and their order, and which kernels share code.
  FusionPlan draft();

  /// Threads, runs of repeated code, functions and the place of every value.
  /// The planner's state is that of the draft.
  FusionPlan finish(FusionPlan p);

private:
  // ---- facts about the function ---------------------------------------------

  /// Resets the per-plan state; the facts about the function (producers,
  /// users, ...) are computed by the first call only.
  void init();

  void facts();

  // ---- unrolled loops ----------------------------------------------------------

  /// The step groups of unrolled loops (codegen/StepGroups.h), found with
  /// what is stored before planning.
  void findSteps();

  /// The step group of an op: how many group boundaries come before it.
  std::ptrdiff_t stepGroup(const ir::Op& op) const;

  bool fusedValue(ValueId v) const { return !mat_[at(v)] && producer_[at(v)]; }

  /// Whether every path from `operands` through fused values to `target`
  /// keeps the last axis at a constant shift (elementwise ops, and ops whose
  /// `lastAxisShift` hook answers): a loop reading `target` so may compute it
  /// again at those points (a Runge-Kutta stage reading the previous one a
  /// point back) instead of reading it from memory in a loop of its own.
  bool shiftedOnly(std::span<const ValueId> operands, ValueId target);

  /// Distinct fused values reachable from `roots` through fused operands,
  /// counted up to `limit`.
  int dagSize(std::span<const ValueId> roots, int limit);

  /// Ops a loop body computes per point for these fused operands: the sum of
  /// their sizes, or, when that is over `limit`, the exact count of distinct ops
  /// (a value reused inside one body is computed once), bounded by limit + 1.
  int operandsSize(std::span<const ValueId> operands, int limit);

  /// Cuts the fused `operands` (of one op) at their largest until a loop body
  /// computing them needs at most `limit` ops per point.
  void boundOperands(std::span<const ValueId> operands, int limit);

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
  void materialize();

  /// A value that is a contiguous run of a buffered value's elements (the
  /// op's `view` hook) is read from that buffer: no loop copies it, and a call
  /// or matmul given a row of a parameter reads it in place. Such a value
  /// that must have a buffer makes its operand have one instead. Users come
  /// after their operands, so one backward sweep finds chains of views.
  void makeViews();
  bool isView(ValueId v) const { return viewOf_[at(v)] >= 0; }
  /// Whether `op` (with an `element` hook) is lowered by Lowering::inPlace
  /// instead, as a kernel of its own (decided by materialize()).
  bool lowersWhole(const ir::Op& op) const { return op.results.size() == 1 && inPlace_[at(op.results[0])]; }

  // ---- loops and their order ------------------------------------------------

  /// The loop domain of a materialised value computed by a loop: an elementwise
  /// or element op iterates its result; a reduction over trailing axes iterates
  /// its operand. Other reductions are kernels of their own (nullopt).
  std::optional<Unit> loopOf(const ir::Op& op);

  /// The materialised values that computing `operands` (through fused values)
  /// reads; `sameIndex` for a value only if every path to it keeps the index.
  const std::vector<Read>& readsOf(std::span<const ValueId> operands, bool pointwise);

  /// Whether root `r` may join loop `u`. Loops do not span a step-group
  /// boundary (findSteps), so the groups of an unrolled loop get alike loops.
  /// `shared`: how many of r's fused values u computes already (they are
  /// computed once in the loop body).
  bool compatible(const Unit& u, const Unit& r, int shared) const;

  /// Every op that writes memory becomes a unit at a level one above the
  /// levels of the materialised values it reads. Loop roots of one level and
  /// domain cannot read each other's results at other indices, so each such
  /// set becomes one loop nest (up to the body budget). A root that reads an
  /// elementwise root's value at its own index may share that root's loop (and
  /// level): in the loop body the value is computed before it is used.
  std::vector<Unit> schedule();

  /// Stores shared values several of `units` compute (where a later unit
  /// first meets them: storeSharedComputedTwice), and schedules `units` again. Storing values changes the loops, so this repeats until
  /// nothing changes; past kMaxRounds every shared value is stored, which
  /// needs no further round. True if any value was stored.
  bool storeShared(std::vector<Unit>& units);

  /// Materialises shared values that several units compute, where a later
  /// unit's walk first meets one an earlier unit computes (the frontier);
  /// true if any. Repeated with scheduling until none is left.
  bool storeSharedComputedTwice(const std::vector<Unit>& units);

  /// The fused values computed from `operands`, in op order.
  std::vector<ValueId> fusedFrom(std::span<const ValueId> operands);

  Kernel kernelOf(Unit u);

  /// The code of kernel k as text, equal for kernels that compile to the
  /// same code up to which buffers they use; `buffers` gets those buffers in
  /// the order the text numbers them. Empty for kernels never shared (those
  /// with side effects).
  std::string kernelKey(const Kernel& k, std::vector<ValueId>& buffers) const;

  /// Marks kernels whose code repeats (the steps of an unrolled recurrence,
  /// one matmul in every layer): LLVM's work then follows the distinct code,
  /// not the program's length. Keys are compared whole, never by hash.
  ///
  /// In code that fits in one LLVM function (functionBudget_ ops per point in
  /// all), which costs LLVM little, only kernels doing kShareMinWork ops or
  /// more per call are shared: a call to a small one costs more than its
  /// code saves LLVM. In a scan's RK4 step (scalar kernels) the calls, their
  /// argument tables and the lost inlining cost a third of the run time.
  void share(FusionPlan& p) const;

  /// Splits loops with enough work into chunks (Kernel::chunks) along axis 0
  /// of the domain; when the loop reduces that axis too (a reduction over
  /// everything), each chunk reduces into a partial result. Kernels with side
  /// effects stay whole. A chunk gets about kChunkWork ops.
  void chunk(FusionPlan& p) const;

  /// Whether result elements [r, ...] of `op` read operand i at elements
  /// [r, ...] only: elementwise ops, reductions that keep axis 0, ops whose
  /// keepsRows hook says so; operand and result of one extent on axis 0.
  bool keepsRows(const ir::Op& op, std::size_t i) const;

  /// Whether kernel k reads the values group candidate g writes (groupOf_)
  /// at the row of its own point only. Walks the kernel's ops from its roots
  /// back in op order: a fused value is read at its point's row when every
  /// op reading it in the kernel keeps rows.
  bool readsOwnRows(const Kernel& k, int g);

  /// Whether kernel k reads a buffer `mark` has `id` for (through views too).
  bool readsMarked(const Kernel& k, const std::vector<int>& mark, int id);

  /// The rows of kernel k's code (axis 0 of its domain or result) when it
  /// may be part of a row group, else 0: loops that do not reduce everything,
  /// and ops that can lower a range of rows (kRowRanges) reading every
  /// operand at their own rows, whose code does not repeat much
  /// (kGroupMaxRepeats). (Kernels with side effects stay out too.) `small`:
  /// it writes less than kGroupMinKernelBytes.
  int64_t groupRows(const Kernel& k, std::span<const int> repeats, bool& small);

  /// Finds row groups (RowGroup): runs of kernels over the same rows that
  /// read each other's values at their own rows only. Other kernels met while
  /// a group grows move out of its way when they have no side effects: before
  /// it when they read nothing it writes, else after it (and the group ends
  /// before a kernel that reads what they write). A group is kept where its
  /// block buffer saves a round trip through memory (sizeGroup).
  void group(FusionPlan& p);

  /// After some kernels left their classes of shared code (sameAs = -1), the
  /// others of each class still share theirs, if two or more, the code
  /// emitted with the first of them in the plan's order (sameAs names a class
  /// by any kernel index, as after a reordering).
  static void reshare(FusionPlan& p);

  /// Runs loops inside the code of ops that work tile by tile. An op that
  /// writes its result by tiles (kTileEpilogue) takes the kernel reading that
  /// result as its epilogue (Kernel::epilogue) when that kernel can run on the
  /// tiles: a loop over the result's points (reducing over trailing axes only
  /// if the op's tile grid is known: Kernel::tileRows), reading the result
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
  void tiles(FusionPlan& p);

  /// Cuts the last axis of each loop that computes pads inline where they
  /// change between reading their operand and their zeros (Kernel::peel),
  /// following its values through elementwise ops and the ops with a
  /// `lastAxisShift` hook: the widest piece where every pad met does one or
  /// the other throughout, if at least kMinPeelPiece points, runs as a loop
  /// of its own. First, a loop whose one root exchanges the last two axes of
  /// what it computes (Lowering::swapsLastAxes), and whose operand reads more
  /// buffer rows than that one store, runs in the operand's order
  /// (Kernel::swapped), and its inner axis (the operand's last) is the one
  /// cut. Linear in the loops' bodies (capped per loop).
  void peel(FusionPlan& p) const;

  /// Finds runs: at each kernel, the period (up to kMaxPeriod kernels) whose
  /// pattern of shared code repeats most, if at least kMinRepeats times.
  /// Each kernel is scanned once per period: linear in the plan.
  static void findRuns(FusionPlan& p);

  /// Consecutive kernels are grouped into LLVM functions of bounded size: no
  /// function pass ever sees a whole large program, and a large module splits
  /// into parts that compile in parallel (jit/Engine.cpp). Measured on a
  /// 3,000-op chain, splitting alone took LLVM from 262 to 224 ms.
  void split(FusionPlan& p) const;

  // ---- where buffers live -----------------------------------------------------

  /// The operands of the ops kernel k computes (its roots', or its op's).
  static std::span<const ValueId> operandsOf(const Kernel& k, std::vector<ValueId>& out);

  /// The values kernel k writes.
  static std::span<const ValueId> writtenBy(const Kernel& k, std::vector<ValueId>& out);

  /// The values each kernel writes (writer) and the last kernel reading each
  /// (lastRead: -1 when none; a view's reads count for the value it views).
  void readers(const FusionPlan& p, std::vector<int>& writer, std::vector<int>& lastRead);

  /// A result of loop kernel `lastReader`, v's last reader, that may be
  /// computed in place of v (v then lives in that result's buffer, rather
  /// than in a block buffer): not a reduction, of v's type and the loop's
  /// domain, the kernel reading v at each point's own index only (its roots'
  /// values at a point are computed before any is stored), neither of them
  /// a view, the result not in `taken` (one value per result; added). -1: none.
  /// The kernel writing v then makes the result's cache misses, amid its own
  /// work, and the block buffer leaves the cache to the rows (softmax's
  /// gradient: exp(x - max) written into the result, then scaled in place).
  ValueId outputFor(const FusionPlan& p, ValueId v, int lastReader, std::vector<ValueId>& taken);

  /// Sizes row group g, or returns false when it would not pay. Its values
  /// read only inside it (not results; viewed, if at all, at their own rows)
  /// get rows of the block buffer, sharing bytes when their live ranges in
  /// the group do not overlap, up to kMaxBlockRowBytes; or, when the kernel
  /// reading one last writes a result of its type in place of it
  /// (outputFor), that result's rows (inOutput_). The block gets as many
  /// rows as fit in kBlockBytes with both and the rows of the buffers two of
  /// its kernels touch. It pays when those values would take kGroupMinBytes
  /// or more in memory, in two blocks or more.
  bool sizeGroup(FusionPlan& p, std::size_t gi, const std::vector<int>& lastRead, const std::vector<char>& viewed,
                 std::vector<std::pair<ValueId, uint64_t>>& local);

  /// Parameters and results use the caller's buffers; other materialised
  /// values go on the stack while small, else into the scratch region, where
  /// values whose live ranges (first write to last read, in kernel order) do
  /// not overlap share bytes.
  void place(FusionPlan& p);

  const ir::Function& f_;
  const int budget_, functionBudget_;
  const ir::Effects* effects_;
  const bool parallel_;
  const PlanOptions& options_; ///< planFusion's, which outlive the planner
  const VectorUnit* unit_;
  bool effectful(const ir::Op& op) const { return effects_ ? effects_->effectful(op) : !ir::info(op.kind).has(ir::kPure); }
  std::vector<const ir::Op*> producer_;
  std::vector<int> position_; ///< index of the producing op
  /// Per value, its type's number among the function's distinct types: what
  /// kernel keys name (reading each value's shape from the heap, 145,000
  /// scattered vectors in an unrolled LSTM's gradient, was most of their cost).
  std::vector<uint32_t> typeId_;
  Users users_;
  std::vector<int> uses_, size_;
  std::vector<char> isOutput_, mat_, expensive_, computes_, sameDomain_;
  std::vector<char> initialMat_; ///< mat_ before planning: parameters, outputs, data, operands read from memory
  std::vector<ValueId> shared_; ///< reused values left fused for loops that share them
  std::vector<ValueId> carries_; ///< values stored at the group boundaries of unrolled loops (findSteps)
  std::vector<int> cuts_;        ///< the positions of those boundaries, ascending
  std::vector<uint8_t> inMemory_; ///< per value: data its op holds (Storage::Constant)
  std::vector<ValueId> viewOf_;  ///< per value: the buffered value it is a view of (-1: none)
  std::vector<char> inPlace_;    ///< per value: computed by its op's Lowering::inPlace (materialize())
  std::vector<int> groupOf_;     ///< per value: the row-group candidate whose kernel writes it (group())
  std::vector<int> blockOf_;     ///< per value: the group sized (sizeGroup) whose block buffer holds it
  /// Values of row groups computed in a result's buffer (sizeGroup): value, result.
  std::vector<std::pair<ValueId, ValueId>> inOutput_;
  /// The values in block buffers: value, group, offset in the block (Storage::Block).
  std::vector<std::tuple<ValueId, uint32_t, uint64_t>> blocks_;
  std::vector<int64_t> viewOffset_; ///< per view: the element offset into that value
  // Scratch state of the walks: a visit stamp per value, reused across walks.
  std::vector<uint32_t> stamp_;
  std::vector<uint8_t> state_;
  std::vector<std::size_t> slot_;
  uint32_t gen_ = 0;
  std::vector<ValueId> stack_;
  /// Per loop root (schedule()): the ops a loop computing it again at other
  /// points adds per point, its own and those of the roots it computes again.
  std::vector<int> recomputeCost_;
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

} // namespace adjit::codegen::planning
