// codegen/FusionPlan.h — the fusion plan of one IR function: which values get
// buffers (and where), which ops share a loop, loop domains and their order.
// Planning is pure and linear in the function's size; the emitter
// (Codegen.cpp) renders a plan to LLVM IR, and `str()` prints it for tests and
// debugging (`adjit dump --emit=plan`, ADJIT_DUMP).
//
// Before: verified IR. After: every op is either fused (computed inside the
// loops that read it, at most `PlanOptions::bodyBudget` ops per loop body) or
// written by exactly one kernel; kernels are ordered so that every buffer is
// written before it is read.
#pragma once

#include "ir/IR.h"

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace adjit::ir { class Effects; }
namespace adjit::codegen { struct VectorUnit; }

namespace adjit::codegen {

/// Where a value lives during one call of the function.
enum class Storage : uint8_t {
  Fused,   ///< no buffer: computed inside the loops that read it
  Param,   ///< the caller's input buffer
  Output,  ///< written in place into the caller's output buffer
  Stack,   ///< a stack buffer of the function
  Scratch, ///< bytes of the scratch region, shared with values not live at the same time
  View,    ///< no buffer of its own: elements of another value's buffer (a reshape, a slice of whole rows)
  Constant, ///< data held by the op (its `data` hook), in a read-only global
  Block,    ///< rows of a row group's block buffer (RowGroup), written and read inside the group only
};

struct Placement {
  Storage where = Storage::Fused;
  uint32_t index = 0;  ///< Param / Output: the position among parameters / results; View: the value viewed; Block: the group
  uint64_t offset = 0; ///< Scratch: the byte offset in the function's scratch region; View: into the viewed buffer; Block: into the block buffer
};

/// A value a loop writes: an elementwise or element op stored at every point
/// of the domain, or a reduction accumulated over the domain's trailing axes.
struct LoopRoot {
  const ir::Op* op;
  ir::ValueId value;
  bool reduction;
};

/// One unit of emitted code.
struct Kernel {
  enum class Kind : uint8_t {
    Loop,      ///< one loop nest over `domain` computing `roots`
    Lower,     ///< `op` writes whole results through its `lower` hook
    Reduction, ///< `op` reduces over axes that are not trailing, in its own loops
  };
  Kind kind = Kind::Loop;
  const ir::Op* op = nullptr; ///< Lower / Reduction; Loop: the first root's op
  Shape domain;               ///< Loop: the iteration space
  std::size_t reduceFrom = 0; ///< Loop: first reduced (trailing) axis; domain.size() when none
  bool flat = true;           ///< Loop: one linear loop over the points, no multi-dimensional index
  std::vector<LoopRoot> roots;
  std::vector<ir::ValueId> fused; ///< values computed inline by this kernel, in op order
  int level = 0;                  ///< kernels of one level do not read each other's buffers
  int bodySize = 0;               ///< estimated ops per point (the roots and their fused operands)
  int function = 0;               ///< the LLVM function (chunk) the kernel is emitted into
  /// The first kernel with the same code up to which buffers it uses (itself
  /// when a later one repeats it), or -1 when the code occurs once. Repeated
  /// code is emitted once, as a function of `buffers`, and called.
  int sameAs = -1;
  std::vector<ir::ValueId> buffers; ///< sameAs >= 0: the buffers the code reads and writes, in a fixed order
  int run = -1;                     ///< the Run this kernel is part of, if any
  int group = -1;                   ///< the RowGroup this kernel is part of, if any
  /// Tile epilogues. A Lower kernel whose op writes its result tile by tile
  /// (kTileEpilogue, a matmul) and the next kernel, a loop over that result's
  /// points reading it at its own point only, and the only reader of it: the
  /// loop runs on each tile as soon as the op has written it, while the tile
  /// is in cache (`tanh(X @ W + b)` passes over its product once). The
  /// product is written in place of a result of the loop of its type, when
  /// there is one (a View of it). `epilogue` is the loop's index, on the op's
  /// kernel; `epilogueOf` the op kernel's, on the loop; -1 otherwise. The
  /// loop's `buffers` are those its code reads and writes.
  int epilogue = -1;
  int epilogueOf = -1;
  /// A tile epilogue that reduces (reduceFrom < domain.size(): `sum((X @ W
  /// - Y)^2)` never stores the product). Each tile folds its elements into
  /// partial results, one per cell of the op's tile grid (OpHooks::tileGrid,
  /// `tileRows` × `tileCols`), or one per row of a cell when the loop keeps
  /// rows (reduceFrom == rank - 1), in scratch at `tilePartials`, an array
  /// per reduction root (tilePartialCount each, 64-byte aligned). The loop's
  /// own place in the kernel order, right after its op, combines each
  /// result's partials in order: the same sums whichever threads made them.
  int64_t tileRows = 0, tileCols = 0;
  uint64_t tilePartials = 0;
  /// Tile prologues. A Lower kernel whose op reads operands tile by tile
  /// (kTilePrologue, a matmul's packing) and a loop computing one of them
  /// alone, elementwise, for that op only, that loop running just before it:
  /// the op's code runs the loop on the tiles it reads (`matmul(tanh(X), W)`
  /// never stores tanh(X)), or on the whole operand first where it reads
  /// operands in place. `prologue[i]` is the loop's index for operand i (-1
  /// none; empty: no prologues), on the op's kernel; `prologueOf` the op
  /// kernel's, on the loop, whose `buffers` are those its code reads and writes.
  std::vector<int> prologue;
  int prologueOf = -1;
  /// Loop: > 1 when the loop is split into this many chunks that may run on
  /// several threads (PlanOptions::parallel): chunk c covers rows
  /// [c·chunkRows, (c+1)·chunkRows) of axis 0 of the domain; with `partials`
  /// (a reduction over the whole domain) each chunk reduces into a partial
  /// result, and the partials are combined in chunk order.
  /// The partition depends on the program only, never on the thread count.
  int64_t chunks = 0;
  int64_t chunkRows = 0;
  bool partials = false;
  /// Loop: where the last axis of the domain is cut (points 0 < c < extent,
  /// ascending): each piece runs as a loop of its own, in which the pads the
  /// loop computes inline read either their operand or their zeros at every
  /// point, so they need no select or clamped index and their reads stay
  /// consecutive (Planner::peel). Empty: one loop.
  std::vector<int64_t> peel;
  /// Loop: runs with the loops of the domain's last two axes exchanged. Its
  /// one root exchanges those axes of what the loop computes (a transpose,
  /// Lowering::swapsLastAxes), and that operand's cone reads rows of more
  /// buffers than the one root stores: in the root's order those reads go
  /// down columns (gathers), in the operand's order they are consecutive and
  /// only the store goes down a column (Planner::peel decides; `peel` then
  /// cuts the operand's last axis, the inner loop).
  bool swapped = false;
};

/// Whether k is a tile epilogue that reduces (Kernel::tileRows).
inline bool reducesTiles(const Kernel& k) { return k.epilogueOf >= 0 && k.reduceFrom < k.domain.size(); }

/// The partial results per reduction root of such a kernel: per matrix (the
/// leading axes), rows or cells of rows, times cells of columns.
inline int64_t tilePartialCount(const Kernel& k) {
  const std::size_t rank = k.domain.size();
  const int64_t m = k.domain[rank - 2], n = k.domain[rank - 1];
  if (m == 0 || n == 0) return 0;
  const int64_t rows = k.reduceFrom == rank - 1 ? m : (m + k.tileRows - 1) / k.tileRows;
  return num_elements(k.domain) / (m * n) * rows * ((n + k.tileCols - 1) / k.tileCols);
}

/// The bytes of one root's array of partial results (dtype t), 64-byte aligned.
inline uint64_t tilePartialBytes(const Kernel& k, DType t) {
  return (static_cast<uint64_t>(tilePartialCount(k)) * size_of(t) + 63) / 64 * 64;
}

/// Consecutive kernels repeating one pattern of shared code: kernels
/// first + j + period * r (j < period, r < count) have the code of kernel
/// first + j. The emitter makes it a loop of `period` calls when each call's
/// buffers step through memory regularly (or through a table of offsets).
struct Run {
  std::size_t first;
  int period, count;
};

/// Consecutive loops over the same rows (axis 0 of each domain), kernels
/// [first, first + count), that run block by block: for each block of
/// `blockRows` rows, each kernel over those rows, in order. A kernel of the
/// group reads values that earlier kernels of the group write at its own row
/// only, so this computes what running the kernels one after another does;
/// but a value written and read inside the group only (Storage::Block) lives
/// in a block buffer of `blockBytes` that stays in cache, instead of making a
/// round trip through memory (ADBench's BA Jacobian: some 80 intermediate
/// vectors of 200,000 rows). Blocks are the chunks that threads share.
struct RowGroup {
  std::size_t first = 0, count = 0;
  int64_t rows = 0, blockRows = 0;
  uint64_t blockBytes = 0;
  /// Whether the blocks run on threads (PlanOptions::parallel and enough work).
  bool threads = false;
  /// The buffers (not Storage::Block) the group's kernels read and write.
  std::vector<ir::ValueId> buffers;
  int64_t blocks() const { return (rows + blockRows - 1) / blockRows; }
};

struct FusionPlan {
  const ir::Function* fn = nullptr;
  std::vector<Placement> place; ///< per value
  std::vector<Kernel> kernels;  ///< in emission order
  std::vector<Run> runs;
  std::vector<RowGroup> groups;
  uint64_t scratchBytes = 0;    ///< this function's own scratch; callees' goes after it
  /// Pairs (output i, parameter j): the function computes the same results
  /// when a caller passes parameter j's buffer as output i's. Output i is
  /// then an update in place of parameter j (Lowering::inPlace) that runs
  /// after every other read of it, so a loop may hand its carry's buffer to
  /// its body as both (a ring buffer costs its window per step). The function
  /// does not declare those two buffers noalias, nor parameter j read-only.
  std::vector<std::pair<uint32_t, uint32_t>> sharedOutputs;
  uint64_t stackBytes = 0;
  /// Kernels are emitted into this many LLVM functions, consecutive kernels
  /// per function (Kernel::function). A buffer lives on a function's stack
  /// only when no other function reads it: buffers pass from function to
  /// function in the scratch region.
  int functions = 1;
  /// The functions were cut to compile in parallel (large code doing much
  /// work per call), not only to bound each function's size: the JIT then
  /// partitions even a small module (jit/Engine.cpp).
  bool compileParts = false;
  /// The step groups of unrolled loops (StepGroups.h): how many boundaries
  /// the finder placed, and the code (ops per point of distinct kernels) of
  /// the drafts with and without them. The plan is the draft with less.
  struct Steps {
    std::size_t boundaries = 0;
    int64_t codeWith = 0, codeWithout = 0;
  } steps;

  bool fused(ir::ValueId v) const { return place[static_cast<std::size_t>(v)].where == Storage::Fused; }
  /// The plan as text: one block per kernel with its fused ops and where each
  /// written value goes.
  std::string str() const;
};

/// Planning limits. The defaults were chosen by measurement (Planner.h).
/// A shared kernel with more buffers than this reads them from the argument
/// table: a call site then costs LLVM a few instructions instead of one
/// pointer per buffer (an unrolled LSTM's gradient step reads ~100 residuals,
/// and the call sites made 90% of the module).
constexpr std::size_t kDirectCallArgs = 6;

struct PlanOptions {
  /// A loop body computes at most this many ops per point; a larger fused
  /// expression is cut into several loops at its largest operands.
  int bodyBudget = 96;
  /// The kernels of one LLVM function compute at most about this many ops per
  /// point in all (a single larger kernel gets a function of its own).
  int functionBudget = 384;
  /// Which ops have side effects (kept in program order); null: those not kPure.
  const ir::Effects* effects = nullptr;
  /// Split loops with enough work into chunks for threads (Kernel::chunks).
  bool parallel = false;
  /// The target's vector unit, which decides how some ops read their
  /// operands (OpHooks::tilesOperand); null: no tile prologues.
  const VectorUnit* unit = nullptr;
  /// A large function may be drafted on two threads (see planFusion); the
  /// plan is the same either way.
  bool concurrent = true;
  /// Called with the plan as text after the step named `observeAfter` ("all":
  /// after every step; see planSteps): `adjit dump --emit=plan
  /// --print-plan-after=STEP`.
  std::string observeAfter;
  std::function<void(std::string_view step, const std::string& plan)> observe;
};

/// Plans `f`. Linear in the number of ops (times the body budget).
FusionPlan planFusion(const ir::Function& f, const PlanOptions& o = {});
/// The steps that make a plan, in order: "draft" (the kernels, fused values
/// and buffers, drafted with and without step groups, the one with less
/// code kept), then the steps that finish it: "group" (row groups), "tiles"
/// (tile epilogues and prologues), "chunk" (chunks for threads), "runs"
/// (repeated kernels), "split" (LLVM functions) and "place" (every buffer's
/// place in scratch or the outputs).
std::span<const std::string_view> planSteps();

} // namespace adjit::codegen
