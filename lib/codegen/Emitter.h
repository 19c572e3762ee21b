// codegen/Emitter.h — the API op lowering hooks are written against: indices
// into tensors, loop nests, buffers, and the contexts handed to the `scalar`,
// `element` and `lower` hooks of the op table.
#pragma once

#include "ir/IR.h"

#include <llvm/IR/IRBuilder.h>

#include <functional>
#include <optional>
#include <span>

namespace adjit::codegen {

class FunctionEmitter;

/// The builder hooks emit with. Its folder only folds constants: a folder
/// that simplifies (InstSimplifyFolder) would fold comparisons over a loop's
/// induction PHI before its latch value exists.
using Builder = llvm::IRBuilder<>;

/// A position in a tensor: its multi-dimensional index, its row-major linear
/// index, or both. Whichever is missing is computed on demand (and kept).
/// Equal positions built from the same values are recognised by the emitter,
/// which computes a value at most once per position in a loop body.
struct Index {
  mutable std::vector<llvm::Value*> dims; ///< empty: not computed yet (or rank 0)
  mutable llvm::Value* linear = nullptr;  ///< nullptr: not computed yet
  bool linearFirst = false;               ///< built from the linear position (its identity)
  static Index ofDims(std::vector<llvm::Value*> d) { return Index{std::move(d), nullptr, false}; }
  static Index ofLinear(llvm::Value* l) { return Index{{}, l, true}; }
};

/// What generated code may assume of the target's vector unit: register width
/// and count (AVX-512: 512 bits, 32 registers; AVX2: 256, 16; SSE: 128, 16).
/// Kernels blocked for registers (the packed matmul) are sized from it.
struct VectorUnit {
  unsigned bits = 256;
  unsigned registers = 16;
};

/// The builder and helpers shared by all contexts.
struct EmitBase {
  FunctionEmitter& fe;
  Builder& b;
  const ir::Function& fn;
  const ir::Op& op;

  llvm::LLVMContext& ctx() const { return b.getContext(); }
  llvm::Value* i64(int64_t v) const { return b.getInt64(static_cast<uint64_t>(v)); }
  /// LLVM type of one element of `t` in registers (i1 is i1).
  llvm::Type* scalarType(DType t) const;
  /// A constant of dtype `t`.
  llvm::Value* constant(DType t, double v) const;
  const Type& resultType(std::size_t i = 0) const { return fn.type(op.results.at(i)); }
  const Type& operandType(std::size_t i) const { return fn.type(op.operands.at(i)); }
  /// Multi-dimensional index of `idx` in a tensor of `shape`.
  const std::vector<llvm::Value*>& dims(const Index& idx, const Shape& shape) const;
  /// Linear index of `idx` in a tensor of `shape`.
  llvm::Value* linear(const Index& idx, const Shape& shape) const;
  /// Calls libm's `name` (or `name`+"f" for f32) on scalars; the call is marked
  /// free of side effects so the loop vectorizer can use libmvec variants.
  llvm::Value* callMath(std::string_view name, DType t, std::span<llvm::Value* const> args) const;
  /// Calls the LLVM intrinsic `id` overloaded on the type of args[0].
  llvm::Value* intrinsic(llvm::Intrinsic::ID id, std::span<llvm::Value* const> args) const;
  /// Fast-math flags for arithmetic that may be reassociated (reductions,
  /// matmul): reassociation only. Fused multiply-adds are asked for
  /// explicitly (llvm.fmuladd), never left to the code generator to contract,
  /// so that code generated at any level computes the same bits (the JIT's
  /// two tiers, jit/Pipeline.h).
  llvm::FastMathFlags reassocFlags() const;
  /// Loads element `linear` of a buffer of dtype t (i1 is stored as one byte).
  llvm::Value* load(DType t, llvm::Value* buffer, llvm::Value* linear) const;
  void store(DType t, llvm::Value* value, llvm::Value* buffer, llvm::Value* linear) const;
  /// A private constant global holding the array's data.
  llvm::Value* globalConstant(const Array& a) const;
  const VectorUnit& vectorUnit() const;
  /// Whether code may split work among threads (adjit_parallel_for).
  bool parallel() const;
  /// Whether code may call LAPACK through runtime/Lapack.h's entry points
  /// (the JIT, where a LAPACK library was loaded; never objects).
  bool lapack() const;
  llvm::Module& llvmModule() const;
  /// The values an index `v` may take, [first, last], when known: a
  /// constant's, or what setRange recorded (a peeled loop's induction
  /// variable, a shifted index of one); nullopt otherwise.
  std::optional<std::pair<int64_t, int64_t>> knownRange(llvm::Value* v) const;
  /// knownRange, or [0, extent - 1] for an index along an axis of `extent`.
  std::pair<int64_t, int64_t> range(llvm::Value* v, int64_t extent) const {
    return knownRange(v).value_or(std::pair<int64_t, int64_t>{0, extent - 1});
  }
  /// Records that index `v` lies in [first, last] wherever it is computed.
  void setRange(llvm::Value* v, int64_t first, int64_t last) const;
  /// The least and the greatest element of integer operand `i` where its
  /// elements are known when compiling (FunctionEmitter::knownValue), else
  /// nullopt: indices known to lie in range need no wrapping or clamping.
  std::optional<std::pair<int64_t, int64_t>> operandBounds(std::size_t i) const;
};

/// Elementwise ops: the scalar body only. `args` are operand elements.
struct ScalarCtx : EmitBase {
  std::span<llvm::Value* const> args;
  DType argType(std::size_t i) const { return operandType(i).dtype; }
  DType outType() const { return resultType().dtype; }
};

/// Ops computing one result element at `index` from operand elements.
struct ElementCtx : EmitBase {
  const Index& index;
  /// Element of operand `i` at `idx` (fused: computed in place, or loaded).
  llvm::Value* operand(std::size_t i, const Index& idx) const;
};

/// Ops that write whole results (reductions, matmul, calls).
struct LowerCtx : EmitBase {
  std::span<llvm::Value* const> results; ///< result buffers
  /// When set (ops with kRowRanges, in a row group's block): write rows
  /// [rowBegin, rowEnd) of the result only, from the same rows of operands.
  llvm::Value* rowBegin = nullptr;
  llvm::Value* rowEnd = nullptr;
  /// When set (ops with kTileEpilogue): the function the lowering calls on
  /// each final tile of the result, and the context it takes (see
  /// callEpilogue); null otherwise.
  llvm::Value* epilogue = nullptr;
  llvm::Value* epilogueCtx = nullptr;
  /// When set (ops with kTilePrologue, for operands their `tilesOperand`
  /// hook names), per operand: the function of tileFunctionType that writes a
  /// tile of the operand's elements at tile[(i - row0) * stride + (j - col0)],
  /// and its context; null for an operand read from its buffer.
  std::vector<llvm::Value*> prologue = {}, prologueCtx = {};
  /// Element of operand `i` at `idx` (fused if the operand allows it).
  llvm::Value* operand(std::size_t i, const Index& idx) const;
  /// Buffer of operand `i` (ops with kMaterializesOperands, or where hasBuffer(i)).
  llvm::Value* operandBuffer(std::size_t i) const;
  /// Whether the plan gave operand `i` a buffer (else it is computed inline).
  bool hasBuffer(std::size_t i) const;
  /// The elements of operand `i` where they are known when compiling
  /// (computed from constants alone, in code emitted for this op alone;
  /// FunctionEmitter::knownValue), else nullopt.
  std::optional<Array> knownOperand(std::size_t i) const;
  /// Emits a loop nest over `shape` (outermost first) calling `body` with the index.
  void loopNest(const Shape& shape, const std::function<void(const Index&)>& body) const;
  /// loopNest over rows [rowBegin, rowEnd) of `shape` when they are set, else over all of it.
  void rowNest(const Shape& shape, const std::function<void(const Index&)>& body) const;
  /// for (iv = 0; iv < n; ++iv) body(iv).
  void loop(int64_t n, const std::function<void(llvm::Value*)>& body) const;
  /// for (iv = begin; iv < end; ++iv) body(iv), bounds known at run time;
  /// returns the loop's latch branch (for setLoopHints).
  llvm::Instruction* loopRange(llvm::Value* begin, llvm::Value* end, const std::function<void(llvm::Value*)>& body) const;
  /// if (cond) then();
  void ifThen(llvm::Value* cond, const std::function<void()>& then) const;
  /// if (cond) then(); else otherwise();
  void ifElse(llvm::Value* cond, const std::function<void()>& then, const std::function<void()>& otherwise) const;
  /// A stack slot for a scalar accumulator of dtype t.
  llvm::Value* scalarSlot(DType t) const;
  /// A stack array of `count` values of type t (in the entry block).
  llvm::Value* entryAlloca(llvm::Type* t, uint64_t count) const;
  /// `bytes` of temporary memory, 64-byte aligned from the scratch base, valid
  /// until the op's lowering returns (packing buffers); shared with callees.
  llvm::Value* workspace(uint64_t bytes) const;
  /// Calls module function `name` with operand and result buffers; the first
  /// `after` bytes of the workspace stay the caller's during the call.
  void call(const std::string& name, std::vector<llvm::Value*> buffers, uint64_t after = 0) const;
  /// The op's i-th callee (lowered first if it was not yet).
  const ir::Function& callee(std::size_t i) const;
  /// Whether the op's i-th callee may be given one buffer as its output
  /// `output` and its parameter `param` (FusionPlan::sharedOutputs).
  bool calleeShares(std::size_t i, std::size_t output, std::size_t param) const;
  /// Calls the epilogue on rows [row0, row1) and columns [col0, col1) of
  /// matrix `matrix` of the result, whose final values are at
  /// tile[(i - row0) · stride + (j - col0)]: in the result's buffer, or in a
  /// local tile the result's elements never leave.
  void callEpilogue(llvm::Value* matrix, llvm::Value* row0, llvm::Value* row1, llvm::Value* col0, llvm::Value* col1,
                    llvm::Value* tile, llvm::Value* stride) const;
  /// The prologue of operand i, or null.
  llvm::Value* prologueOf(std::size_t i) const { return i < prologue.size() ? prologue[i] : nullptr; }
  /// Whether any operand has a prologue.
  bool hasPrologues() const { return std::any_of(prologue.begin(), prologue.end(), [](llvm::Value* p) { return p; }); }
  /// Calls the op's first callee on its operand and result buffers (ops
  /// with kForwardsToCallee: call, custom_vjp, custom_jvp).
  void callFirstCallee() const;
};

/// The type of a tile function, an epilogue (kTileEpilogue) or a prologue
/// (kTilePrologue): void(ptr ctx, i64 matrix, i64 row0, i64 row1, i64 col0,
/// i64 col1, ptr tile, i64 stride); see LowerCtx::callEpilogue.
llvm::FunctionType* tileFunctionType(llvm::LLVMContext& ctx);

/// for (iv = begin; iv < end; iv += step) body(iv), emitted at `b`'s insertion
/// point (blocks "loop", "loop.body", "loop.exit"; the induction variable
/// named `ivName`, its increment `ivName`.next, no wrap): leaves `b` at the
/// exit and returns the loop's latch branch (for setLoopHints).
llvm::Instruction* countedLoop(llvm::IRBuilderBase& b, llvm::Value* begin, llvm::Value* end, int64_t step,
                               llvm::function_ref<void(llvm::Value*)> body, llvm::StringRef ivName = "");

/// A new internal function `void name(ptr ctx, i64 chunk)` of `module`
/// without a body, the shape adjit_parallel_for calls: ctx read-only and not
/// captured, nounwind, noinline, and its vectors kept at `vectorBits` where the
/// CPU's tuning would split 512-bit vectors in two.
llvm::Function* declareChunkFunction(llvm::Module& module, const std::string& name, unsigned vectorBits);

/// if (cond) then() else otherwise(), emitted at `b`'s insertion point
/// (blocks "then", "else" and `joinName`): leaves `b` at the join.
void branches(llvm::IRBuilderBase& b, llvm::Value* cond, llvm::function_ref<void()> then,
              llvm::function_ref<void()> otherwise, llvm::StringRef joinName);

/// Marks the loop whose latch branch is `latch` with loop hints (the
/// operands of its llvm.loop ID), e.g. "llvm.loop.unroll.disable".
void setLoopHints(llvm::Instruction* latch, std::initializer_list<llvm::Metadata*> hints);
/// The loop hint that keeps LLVM from vectorising a loop.
llvm::MDNode* noVectorizeHint(llvm::LLVMContext& ctx);

} // namespace adjit::codegen
