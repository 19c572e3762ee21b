// ops/OpTable.h — the op blocks' view of the tables. Each op is one row of
// Ops.def plus one block in its family's file, which gives all its rules
// together in one `Hooks` record: type rule, reference evaluation and folding
// (the IR's table, ir/OpInfo.h), JVP and VJP (autodiff/Rules.h), batching (batching/Rules.h),
// dependencies (sparsity/Rules.h), lowering and
// planning facts (codegen/Lowering.h). At start-up OpTable.cpp hands each layer
// its part; generic code reads its own layer's table and never switches on
// the op kind. lib/ops is the top of the compiler, as JAX's lax.py: it may use
// every layer below it, and nothing below includes it.
#pragma once

#include "autodiff/Rules.h"
#include "batching/Rules.h"
#include "codegen/Lowering.h"
#include "ir/OpInfo.h"
#include "sparsity/Rules.h"

#include <array>

namespace adjit::ops {

using ir::OpKind;
using codegen::MathFunction;
using codegen::ReduceHooks;
using ir::noFold;

/// An op's traits, each owned by the layer that reads it. Ops.def's rows
/// combine them with |.
struct Traits {
  uint32_t ir = 0, autodiff = 0, codegen = 0;
  friend constexpr Traits operator|(Traits a, Traits b) {
    return {a.ir | b.ir, a.autodiff | b.autodiff, a.codegen | b.codegen};
  }
};
inline constexpr Traits kPure{ir::kPure, 0, 0};
inline constexpr Traits kElementwise{ir::kElementwise, 0, 0};
inline constexpr Traits kCommutative{ir::kCommutative, 0, 0};
inline constexpr Traits kElementsFromOperand{ir::kElementsFromOperand, 0, 0};
inline constexpr Traits kHasCallee{ir::kHasCallee, 0, 0};
inline constexpr Traits kForwardsToCallee{ir::kForwardsToCallee, 0, 0};
inline constexpr Traits kHostOnly{ir::kHostOnly, 0, 0};
inline constexpr Traits kLocationInCode{ir::kLocationInCode, 0, 0};
inline constexpr Traits kNonDifferentiable{0, autodiff::kNonDifferentiable, 0};
inline constexpr Traits kGradientIsError{0, autodiff::kGradientIsError, 0};
inline constexpr Traits kLinear{0, autodiff::kLinear, 0};
inline constexpr Traits kLinearInEach{0, autodiff::kLinearInEach, 0};
inline constexpr Traits kLinearInFirst{0, autodiff::kLinearInFirst, 0};
inline constexpr Traits kLinearInLast{0, autodiff::kLinearInLast, 0};
inline constexpr Traits kExpensive{0, 0, codegen::kExpensive};
inline constexpr Traits kRemapsIndex{0, 0, codegen::kRemapsIndex};
inline constexpr Traits kMaterializesOperands{0, 0, codegen::kMaterializesOperands};
inline constexpr Traits kLoopPerOperand{0, 0, codegen::kLoopPerOperand};
inline constexpr Traits kRowRanges{0, 0, codegen::kRowRanges};
inline constexpr Traits kTileEpilogue{0, 0, codegen::kTileEpilogue};
inline constexpr Traits kTilePrologue{0, 0, codegen::kTilePrologue};

/// The hooks of one op. Exactly one of `scalar` (elementwise ops), `element`
/// (ops that compute one result element from operand elements), `reduce`
/// (reductions) or `lower` (ops that write whole results) is set.
struct Hooks {
  std::vector<Type> (*infer)(const ir::InferCtx&) = nullptr;
  std::vector<Array> (*eval)(const ir::EvalCtx&) = nullptr;
  std::optional<ir::Folded> (*fold)(const ir::FoldCtx&) = nullptr;
  llvm::Value* (*scalar)(codegen::ScalarCtx&) = nullptr;
  llvm::Value* (*element)(codegen::ElementCtx&) = nullptr;
  void (*lower)(codegen::LowerCtx&) = nullptr;
  const ReduceHooks* reduce = nullptr;
  /// Operands the lowering reads in an order of its own (Lowering::materializedOperands).
  uint32_t materializedOperands = 0;
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
  /// For ops with an `element` hook: how they read operand `i` along the
  /// last axis, when at a constant shift (codegen::Lowering::lastAxisShift).
  std::optional<codegen::AxisShift> (*lastAxisShift)(const Type& operand, std::size_t i, const Type& result, const ir::Attrs&) = nullptr;
  /// For ops with an `element` hook: whether the result is operand 0 with its
  /// last two axes exchanged (codegen::Lowering::swapsLastAxes).
  bool (*swapsLastAxes)(const Type& operand, const Type& result, const ir::Attrs&) = nullptr;
  /// For ops with kTilePrologue: whether the lowering for this vector unit
  /// reads operand `i` tile by tile (matmul's packed kernel packs both), so
  /// that a prologue can compute it there; else the planner leaves its
  /// producer a loop of its own (which may run on threads).
  bool (*tilesOperand)(std::span<const Type> operands, std::size_t i, const ir::Attrs&, const codegen::VectorUnit&) = nullptr;
  /// For ops with kTileEpilogue: the grid the lowering for this vector unit
  /// cuts each matrix of its result into, {rows, columns}: every tile it
  /// passes to the epilogue is one cell, rows [i·rows, (i+1)·rows) and
  /// columns [j·columns, (j+1)·columns) clipped to the matrix, and every cell
  /// is one tile. An epilogue that reduces then folds each cell (each row of
  /// a cell, when rows are kept) into a partial result of its own: no two
  /// threads write one, and they combine in the grid's order, so results do
  /// not depend on how the lowering shares cells among threads.
  std::pair<int64_t, int64_t> (*tileGrid)(std::span<const Type> operands, const ir::Attrs&, const codegen::VectorUnit&) = nullptr;
  /// For ops with kTileEpilogue: how many trailing axes of the result the
  /// tiles' columns span, linearised (codegen::Lowering::tileColumnAxes);
  /// null: 1, rows and columns the last two axes (a matmul).
  std::size_t (*tileColumnAxes)(const Type& result, const ir::Attrs&) = nullptr;
  /// For ops whose result is data held in an attribute (a constant): that
  /// data, or null when the op computes its elements more cheaply than a load
  /// (a splat: one repeated element, an immediate). The fusion plan reads the
  /// data from a global like a parameter's buffer: no loop computes it, slices
  /// of it are views, and code reading different rows of it is shared (an
  /// unrolled loop over a constant sequence).
  const Array* (*data)(const ir::Attrs&) = nullptr;
  /// For ops with an `element` hook whose result is operand `inPlace.operand`
  /// with some elements replaced (dynamic_update_slice): a lowering writing
  /// only those into a result buffer that may be the operand's, which the
  /// planner then shares when that is safe (codegen::InPlace).
  codegen::InPlace inPlace = {};
  /// Sets result tangents from operand tangents (forward mode). Required
  /// unless the op is kNonDifferentiable.
  void (*jvp)(const autodiff::JvpCtx&) = nullptr;
  /// Adds operand cotangents from result cotangents (reverse mode). Required
  /// unless the op is kNonDifferentiable.
  void (*vjp)(const autodiff::VjpCtx&) = nullptr;
  /// Batches the op (vmap): results batched along a new axis 0 from operands
  /// of which at least one is. Required; kElementwise ops without one get
  /// batching::elementwiseBatch (their operands broadcast to agree).
  void (*batch)(const batching::BatchCtx&) = nullptr;
  /// Which operand elements each result element reads, term by term
  /// (sparsity/Rules.h): Jacobian and Hessian patterns. kElementwise ops
  /// without one get sparsity::elementwiseDeps; ops without one are
  /// analysed by sparsity::denseDeps (never wrong, seldom exact).
  void (*deps)(const sparsity::SparsityCtx&) = nullptr;
  /// Whether the lowering may call LAPACK (runtime/Lapack.h) when
  /// CompileOptions::lapack allows: only modules holding such an op make
  /// the compile look for the library, whose loading costs milliseconds.
  bool lapack = false;
};


/// Where the family files put each op's hooks while the tables are built.
using Table = std::array<Hooks, ir::kNumOps>;
inline void set(Table& t, OpKind k, Hooks h) { t[static_cast<std::size_t>(k)] = h; }

// Each family file fills the hooks of its ops.
void defineArithOps(Table&);
void defineMathOps(Table&);
void defineLogicOps(Table&);
void defineBitsOps(Table&);
void defineCreationOps(Table&);
void defineShapeOps(Table&);
void defineIndexingOps(Table&);
void defineReduceOps(Table&);
void defineSortOps(Table&);
void defineConvOps(Table&);
void defineLinalgOps(Table&);
void defineLinalgSolveOps(Table&);
void defineCallOps(Table&);
void defineControlFlowOps(Table&);
void defineGradientOps(Table&);
void defineCallbackOps(Table&);
void defineSpectralOps(Table&);

} // namespace adjit::ops
