// codegen/Lowering.h — each op's lowering and the facts the fusion planner
// reads: how its results are computed (a scalar body, an element, a
// reduction's accumulator, or a whole-result lowering), which libm function it
// calls, whether its result is a view, which rows and tiles it reads, and what
// makes it worth materialising. Owned here, by the code generator that uses
// them; filled by the op's block in lib/ops at start-up (ops/OpTable.cpp).
// Exactly one of `scalar` (elementwise ops), `element` (ops that compute one
// result element from operand elements), `reduce` (reductions) or `lower` (ops
// that write whole results) is set for every op that can be compiled.
#pragma once

#include "ir/IR.h"

#include <cstdint>
#include <optional>
#include <span>
#include <utility>

namespace llvm {
class Type;
class Value;
} // namespace llvm

namespace adjit::codegen {

struct EmitBase;
struct ScalarCtx;
struct ElementCtx;
struct LowerCtx;
struct VectorUnit;

/// What the code generator and planner know of an op kind.
enum Trait : uint32_t {
  kExpensive = 1u << 0,            ///< worth materialising rather than recomputing when reused
  kRemapsIndex = 1u << 1,          ///< reads operand elements at other indices than the result's
  kMaterializesOperands = 1u << 2, ///< its lowering reads operands from buffers, not fused
  kLoopPerOperand = 1u << 3,       ///< its lowering reads each operand in a loop of its own: the fusion budget bounds each operand, not their sum
  /// Its `lower` hook honours LowerCtx::rowBegin/rowEnd: it then writes those
  /// rows of its result only, reading those rows of its operands (which keep
  /// rows: `keepsRows`), so it can run block by block in a row group.
  kRowRanges = 1u << 4,
  /// Its `lower` hook calls LowerCtx::epilogue, when set, on every tile of its
  /// (single) result once the tile's elements are final: each element in
  /// exactly one tile, a tile being rows [row0, row1) and columns [col0, col1)
  /// of matrix `matrix`: the result's last two axes and its leading axes
  /// linearised, or, with the `tileColumnAxes` hook, columns over the last
  /// few axes linearised (conv: images, output channels, positions).
  /// The planner then runs an elementwise consumer of the result on each tile
  /// while it is in cache (FusionPlan.h, Kernel::epilogue).
  kTileEpilogue = 1u << 5,
  /// Its `lower` hook computes operand i on the tiles it reads (matmul's
  /// packing) through LowerCtx::prologue[i], when set, instead of reading it.
  /// The planner sets it for an elementwise producer of an operand where the
  /// `tilesOperand` hook says the lowering reads that operand by tiles; the
  /// operand then never goes through memory (Kernel::prologueOf).
  kTilePrologue = 1u << 6,
};

/// Reductions over the attribute `axes` (with `keepdims`): the codegen driver
/// emits their loops itself, fusing them with other loops over the same
/// domain; the op supplies the accumulator's identity and combine step.
struct ReduceHooks {
  /// The accumulator's start, a constant of dtype t (kept in t: INT64_MAX is
  /// not a double), or of `state`'s type when set.
  llvm::Value* (*identity)(EmitBase&, DType t);
  /// The accumulator after element x.
  llvm::Value* (*combine)(EmitBase&, DType, llvm::Value* acc, llvm::Value* x);
  /// Optional, for an accumulator kept in another form than the result (a
  /// float max as an ordered integer, so that LLVM vectorises it as an
  /// integer max): its type, how two accumulators combine (partial results,
  /// in order) and the result one stands for. Without them the accumulator
  /// is a value of dtype t, and partial results combine by `combine`.
  llvm::Type* (*state)(EmitBase&, DType t) = nullptr;
  llvm::Value* (*merge)(EmitBase&, DType, llvm::Value* acc, llvm::Value* other) = nullptr;
  llvm::Value* (*finish)(EmitBase&, DType, llvm::Value* acc) = nullptr;
};

/// A libm function an op's scalar lowering calls: `name` for f64, `name`+"f"
/// for f32. Declared in the op's block, so the code generator registers its
/// glibc libmvec variants with the loop vectorizer (codegen/VectorMath.cpp).
struct MathFunction {
  const char* name = nullptr; ///< null: the op calls no libm function
  int arity = 1;
  bool hasIntrinsic = false; ///< llvm.<name>.f32/.f64 exists and maps to the same vector variants
  bool vector = true;        ///< glibc's libmvec has variants (lgamma has none: vector loops call it per lane)
};

/// Ops whose result is operand `operand` with some of its elements replaced
/// (dynamic_update_slice: a window). `lower` writes the result by writing only
/// the replaced elements into a result buffer that holds the operand's: when
/// the result's buffer is not the operand's (LowerCtx::results[0] compared
/// with operandBuffer(operand) at run time, or an operand without a buffer)
/// it copies the operand there first. The planner gives the result the
/// operand's own buffer when the operand is a value the function computes
/// (not a parameter, a constant, an output or a view), read by this op only,
/// and what the op's other operands compute reads none of it: the update then
/// costs the replaced elements, not a copy of the operand (PlanPlacement.cpp).
struct InPlace {
  std::size_t operand = 0;
  void (*lower)(LowerCtx&) = nullptr;
};

/// How an op with an `element` hook reads an operand along the last axis:
/// result element j reads operand element j + shift, for j in [first, end)
/// only (outside, the op reads nothing of the operand there: a pad's zeros).
struct AxisShift {
  int64_t shift = 0;
  int64_t first = 0, end = 0;
};

/// The lowering rules and planning facts of an op kind.
struct Lowering {
  uint32_t traits = 0; ///< Trait bits
  llvm::Value* (*scalar)(ScalarCtx&) = nullptr;
  llvm::Value* (*element)(ElementCtx&) = nullptr;
  void (*lower)(LowerCtx&) = nullptr;
  const ReduceHooks* reduce = nullptr;
  /// The libm function `scalar` calls, if any (see MathFunction).
  MathFunction libm = {};
  /// For ops whose result is a contiguous run of operand 0's elements in the
  /// same row-major order (a reshape; a slice of whole trailing rows): the
  /// element offset where that run starts, or nullopt when this op's result is
  /// not such a run. The fusion plan then gives the result no buffer of its
  /// own: it reads the operand's buffer from that offset, copying nothing.
  std::optional<int64_t> (*view)(const Type& operand, const Type& result, const ir::Attrs&) = nullptr;
  /// For ops with an `element` hook: whether result elements [r, ...] read
  /// operand `i` at elements [r, ...] only, for every row r, given that both
  /// have the same extent on axis 0 (a slice or pad that keeps axis 0 whole,
  /// a transpose that keeps it first, a gather's indices along axis 0). Loops
  /// over the same rows that read each other's values only so may run block
  /// by block (codegen's RowGroup). Null: reads may be at any row.
  bool (*keepsRows)(const Type& operand, std::size_t i, const Type& result, const ir::Attrs&) = nullptr;
  /// For ops with an `element` hook that read operand `i` along the result's
  /// last axis at a constant shift (a slice of stride 1 there, a pad without
  /// interior there, a broadcast that keeps it): the shift, and where the
  /// read happens; nullopt otherwise. The planner cuts a loop's last axis
  /// where fused pads change between reading their operand and their zeros
  /// (Kernel::peel), so that between the cuts they need no select and no
  /// clamped index, and their reads stay consecutive (vector loads).
  std::optional<AxisShift> (*lastAxisShift)(const Type& operand, std::size_t i, const Type& result, const ir::Attrs&) = nullptr;
  /// For ops with an `element` hook: whether the result is operand 0 with
  /// its last two axes exchanged and the others in place (a transpose). A
  /// loop storing such a result may run with those two axes' loops exchanged,
  /// so that what it computes of the operand goes along the operand's rows
  /// (Kernel::swapped).
  bool (*swapsLastAxes)(const Type& operand, const Type& result, const ir::Attrs&) = nullptr;
  /// For ops with kTilePrologue: whether the lowering for this vector unit
  /// reads operand `i` tile by tile (matmul's packed kernel packs both), so
  /// that a prologue can compute it there; else the planner leaves its
  /// producer a loop of its own (which may run on threads).
  bool (*tilesOperand)(std::span<const Type> operands, std::size_t i, const ir::Attrs&, const VectorUnit&) = nullptr;
  /// For ops with kTileEpilogue: the grid the lowering for this vector unit
  /// cuts each matrix of its result into, {rows, columns}: every tile it
  /// passes to the epilogue is one cell, rows [i·rows, (i+1)·rows) and
  /// columns [j·columns, (j+1)·columns) clipped to the matrix, and every cell
  /// is one tile. An epilogue that reduces then folds each cell (each row of
  /// a cell, when rows are kept) into a partial result of its own: no two
  /// threads write one, and they combine in the grid's order, so results do
  /// not depend on how the lowering shares cells among threads.
  std::pair<int64_t, int64_t> (*tileGrid)(std::span<const Type> operands, const ir::Attrs&, const VectorUnit&) = nullptr;
  /// For ops with kTileEpilogue: how many trailing axes of the result its
  /// tiles' columns run over, linearised (the axis before them holds the
  /// rows, the ones before that the matrices); null: 1 (a matmul). An op
  /// whose columns span several axes has no reducing epilogue (its tileGrid
  /// returns {0, 0}).
  std::size_t (*tileColumnAxes)(const Type& result, const ir::Attrs&) = nullptr;
  /// For ops whose result is data held in an attribute (a constant): that
  /// data, or null when the op computes its elements more cheaply than a load
  /// (a splat: one repeated element, an immediate). The fusion plan reads the
  /// data from a global like a parameter's buffer: no loop computes it, slices
  /// of it are views, and code reading different rows of it is shared (an
  /// unrolled loop over a constant sequence).
  const Array* (*data)(const ir::Attrs&) = nullptr;
  /// For ops with an `element` hook whose result is an operand with some
  /// elements replaced: the lowering the planner uses instead when it may
  /// update that operand's buffer in place (see InPlace).
  InPlace inPlace = {};
  /// Whether the lowering may call LAPACK when the compile allows it.
  bool lapack = false;
  /// Bit i set: the lowering reads operand i in an order of its own, not
  /// along the result (scatter_add's updates, grouped by where they land):
  /// the planner computes that operand in a loop of its own, which
  /// vectorises, instead of fusing its computation into the reads.
  uint32_t materializedOperands = 0;
  bool has(Trait t) const { return (traits & t) != 0; }
  /// The hook that writes whole results: `lower`, or for an op the planner
  /// lowers in place, `inPlace.lower`.
  using LowerFn = void (*)(LowerCtx&);
  LowerFn wholeLowering() const { return lower ? lower : inPlace.lower; }
};

/// The lowering of op kind k.
const Lowering& lowering(ir::OpKind k);
/// Sets op kind k's lowering: called once per op, at start-up (ops/OpTable.cpp).
void define(ir::OpKind k, const Lowering& l);

} // namespace adjit::codegen
