// codegen/FunctionEmitter.h — the emitter of one IR function (internal to
// codegen): renders a fusion plan to LLVM IR. Codegen.cpp holds its loops and
// frames; SharedCode.cpp what it emits out of line (shared kernels, runs of
// calls, chunk functions of split loops).
#pragma once

#include "codegen/Emitter.h"
#include "codegen/FusionPlan.h"
#include "support/Assert.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace adjit::codegen {

/// The LLVM type an element of dtype t is stored as (i1 as one byte).
llvm::Type* storageType(llvm::IRBuilderBase& b, DType t);

class FunctionEmitter {
public:
  /// A lowered function and the scratch bytes it needs.
  struct Lowered {
    llvm::Function* fn;
    uint64_t scratch;
    const ir::Function* source; ///< the IR function it was lowered from
    std::vector<std::pair<uint32_t, uint32_t>> sharedOutputs; ///< FusionPlan::sharedOutputs
  };

  FunctionEmitter(const ir::Function& f, FusionPlan plan, llvm::Function* out,
                  std::function<Lowered(const std::string&)> callee, const VectorUnit& unit, bool parallel,
                  bool lapack = false)
      : f_(f), plan_(std::move(plan)), out_(out), b_(out->getContext()), callee_(std::move(callee)), unit_(unit),
        parallel_(parallel), lapack_(lapack) {}

  /// Emits the body; returns the scratch bytes it needs (its own buffers and
  /// its callees').
  uint64_t emit();

  llvm::Module& llvmModule() { return *out_->getParent(); }
  const VectorUnit& vectorUnit() const { return unit_; }
  bool parallel() const { return parallel_; }
  bool lapack() const { return lapack_; }
  /// Temporary memory in the callee part of the scratch region: no callee runs
  /// while an op's lowering uses it.
  llvm::Value* workspace(uint64_t bytes) {
    calleeScratch_ = std::max(calleeScratch_, bytes);
    return b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), scratch_, calleeScratchAt());
  }
  /// Element of value v at idx: computed (once per index in a loop body) or loaded.
  llvm::Value* element(ir::ValueId v, const Index& idx);
  llvm::Value* buffer(ir::ValueId v);
  /// Whether v is computed inline (no buffer) by the plan.
  bool fused(ir::ValueId v) const { return plan_.fused(v); }
  /// The elements of v when they follow from constants alone (v and what it
  /// is computed from, at most kMaxKnownElements elements in all, evaluated
  /// by the ops' reference semantics), else nullopt; nullopt in a shared
  /// kernel, whose code serves kernels that name other constants there.
  std::optional<Array> knownValue(ir::ValueId v) const;
  static constexpr int64_t kMaxKnownElements = int64_t(1) << 18;
  /// The least and the greatest element of integer value v where knownValue
  /// knows its elements (and v has some), else nullopt.
  std::optional<std::pair<int64_t, int64_t>> knownBounds(ir::ValueId v) const;
  /// Calls lowered function `name` on buffers, giving it the scratch past ours
  /// and past the first `after` bytes of the workspace (which the caller keeps
  /// using across the call: a loop's next carry).
  void call(const std::string& name, std::vector<llvm::Value*> buffers, uint64_t after = 0) {
    Lowered l = callee_(name);
    after = (after + 63) / 64 * 64;
    calleeScratch_ = std::max(calleeScratch_, after + l.scratch);
    buffers.push_back(b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), scratch_, calleeScratchAt() + after));
    b_.CreateCall(l.fn, buffers);
  }
  /// Whether lowered function `name` may be given one buffer as its output
  /// `output` and its parameter `param` (FusionPlan::sharedOutputs).
  bool calleeShares(const std::string& name, std::size_t output, std::size_t param) {
    for (auto [o, p] : callee_(name).sharedOutputs)
      if (o == output && p == param) return true;
    return false;
  }
  /// The IR function `name` (a callee of an op of this function).
  const ir::Function& calleeFunction(const std::string& name) { return *callee_(name).source; }
  llvm::Value* entryAlloca(llvm::Type* t, uint64_t count);
  /// Records a load or store of buffer `base`; see finishAliasScopes.
  void tagAccess(llvm::Instruction* access, llvm::Value* base);
  /// Element `lin` of buffer `base` as an index into it: a block buffer of a
  /// row group holds the block's rows only, the first at index 0.
  llvm::Value* rowIndex(llvm::Value* base, llvm::Value* lin) {
    if (rowShift_.empty()) return lin;
    auto it = rowShift_.find(base);
    return it == rowShift_.end() ? lin : b_.CreateNSWSub(lin, it->second);
  }
  llvm::Value* constantGlobal(const Array& a);

  // Memoisation, scoped by loop bodies: what is computed inside a loop body is
  // forgotten when the loop ends (it does not dominate the code after it).
  std::size_t openScope() const { return memoLog_.size(); }
  void closeScope(std::size_t mark) {
    while (memoLog_.size() > mark) {
      memo_.erase(memoLog_.back());
      memoLog_.pop_back();
    }
  }
  /// The range recorded for index value v (EmitBase::setRange), if any.
  std::optional<std::pair<int64_t, int64_t>> indexRange(llvm::Value* v) const {
    auto it = ranges_.find(v);
    if (it == ranges_.end()) return std::nullopt;
    return it->second;
  }
  void setIndexRange(llvm::Value* v, int64_t first, int64_t last) { ranges_[v] = {first, last}; }
  /// Loops emitted so far that LLVM will keep as loops (see LowerCtx::loopRange).
  int64_t longLoops = 0;
  /// libm calls and reduction steps (accumulate) emitted so far: what
  /// LowerCtx::loopRange asks of an innermost loop's body.
  int64_t mathCalls = 0, accumulations = 0;

  /// The multi-dimensional index of linear position `l` in `shape`, computed once per scope.
  const std::vector<llvm::Value*>& delinearize(llvm::Value* l, const Shape& shape);
  /// The linear position of `dims` in `shape`, computed once per scope.
  llvm::Value* linearize(const std::vector<llvm::Value*>& dims, const Shape& shape);

private:
  using Key = std::vector<const void*>;
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      std::size_t h = k.size();
      for (const void* p : k) h = h * 0x9e3779b97f4a7c15ull ^ (reinterpret_cast<std::uintptr_t>(p) + (h >> 7));
      return h;
    }
  };
  const std::vector<llvm::Value*>* find(const Key& k) const {
    auto it = memo_.find(k);
    return it == memo_.end() ? nullptr : &it->second;
  }
  const std::vector<llvm::Value*>& put(Key k, std::vector<llvm::Value*> v) {
    auto [it, fresh] = memo_.emplace(std::move(k), std::move(v));
    ADJIT_ASSERT(fresh, "memoised twice");
    memoLog_.push_back(it->first);
    return it->second;
  }
  static Key shapeKey(const void* tag, const Shape& shape) {
    Key k{tag};
    for (int64_t d : shape) k.push_back(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(d)));
    k.push_back(nullptr);
    return k;
  }

  /// Where a chunk of a split loop (Kernel::chunks) or a block of a row
  /// group runs: its rows [begin, end) of axis 0, its index, and per
  /// reduction root the array of partial results (with Kernel::partials).
  /// A tile epilogue's (colBegin set) are rows [begin, end) and columns
  /// [colBegin, colEnd) of matrix `index`: of the last two axes, or with
  /// `colAxes` > 1, columns over the last colAxes axes linearised (the op's
  /// tileColumnAxes); the product's values there are at
  /// tile[(i - begin) · stride + (j - colBegin)].
  struct Chunk {
    llvm::Value *index, *begin, *end;
    std::vector<llvm::Value*> partials;
    llvm::Value *colBegin = nullptr, *colEnd = nullptr, *tile = nullptr, *stride = nullptr;
    std::size_t colAxes = 1;
  };
  void emitLoop(const Kernel& k, const Chunk* chunk = nullptr);
  /// Kernel::swapped: the loop along its root's operand's rows, stored
  /// through a tile buffer transposed in registers.
  void emitSwapped(const Kernel& k, LowerCtx& c, llvm::Value* out);
  /// LowerCtx::loopNest over `shape` (over rows [rowBegin, rowEnd) of axis 0
  /// when they are set), its last axis run as the pieces Kernel::peel cuts
  /// it into, one loop each, with each piece's range recorded on its index.
  void peeledNest(const LowerCtx& c, const Shape& shape, const std::vector<int64_t>& peel, llvm::Value* rowBegin,
                  llvm::Value* rowEnd, const std::function<void(const Index&)>& body);
  void emitTileCombine(const Kernel& k);
  /// acc = combine(acc, x) for reduction root r (acc: a slot of its accumulator).
  void accumulate(const LoopRoot& r, llvm::Value* acc, llvm::Value* x);
  /// acc = merge(acc, other) for reduction op: `other` is an accumulator
  /// (a partial result), not an element.
  void mergeInto(const ir::Op& op, DType t, llvm::Value* acc, llvm::Value* other);
  /// The type of reduction op's accumulator for dtype t (ReduceHooks::state).
  llvm::Type* accumulatorType(const ir::Op& op, DType t);
  /// The result an accumulator of reduction op stands for (ReduceHooks::finish).
  llvm::Value* finishAccumulator(const ir::Op& op, DType t, llvm::Value* acc);
  /// Reduction root r's partial results at `part`, `each` per element of its
  /// result, combined in order into its `kept` elements.
  void combinePartials(LowerCtx& c, const LoopRoot& r, llvm::Value* part, int64_t kept, int64_t each);
  /// The context of an out-of-line function (a chunk, a row group's block, a
  /// tile epilogue): an array of these buffers' pointers, then the scratch
  /// pointer, then `extra` slots, filled here.
  llvm::Value* storeContext(const std::vector<ir::ValueId>& buffers, std::size_t extra = 0);
  /// Starts emitting such a function, `fn`, whose argument 0 is the context
  /// (marked noalias, nocapture, readonly): the buffers and scratch pointer
  /// are loaded from it, and every buffer it reads must be one of them.
  /// Returns the context.
  llvm::Value* openWithContext(llvm::Function* fn, const std::vector<ir::ValueId>& buffers);
  /// Emits each split loop's chunk function: void(ptr ctx, i64 chunk), ctx =
  /// {the kernel's buffers, scratch, partial arrays}.
  void emitChunkFunctions();
  /// Runs a split loop: fills its ctx, calls adjit_parallel_for, combines partials.
  void emitParallelLoop(const Kernel& k);
  /// Emits each row group's functions: per kernel void(ptr ctx, i64 begin,
  /// i64 end, ptr block) over rows [begin, end), and the block's
  /// void(ptr ctx, i64 block), which calls them in order on a block buffer of
  /// its stack; ctx = {the group's buffers, scratch}.
  void emitRowGroupFunctions();
  /// Runs row group g's blocks: fills its ctx, then adjit_parallel_for or a loop.
  void emitRowGroup(std::size_t g);
  /// Emits each tile epilogue and prologue (Kernel::epilogue, prologue) as a
  /// function of tileFunctionType: ctx = {the loop's buffers, scratch}.
  void emitTileFunctions();
  /// Kernel k's op with its epilogue and prologues: fills their contexts, then lowers.
  void emitWithTiles(const Kernel& k);
  void emitReduction(const ir::Op& op);
  /// Emits kernel k's code at the insertion point.
  void emitKernel(const Kernel& k);
  /// Emits each kernel whose code repeats once, as a function of its buffers.
  void emitSharedKernels();
  /// Emits a run of shared kernels as one loop of calls.
  void emitRun(const Run& run);
  /// Calls kernel k's shared function at the insertion point, its buffers
  /// read from the argument table at `entries` (a run's row) or, when null,
  /// passed as they are where there are few (else entered in the table here).
  void callShared(std::size_t k, llvm::Value* entries = nullptr);
  /// A shared kernel with more buffers than kDirectCallArgs reads them from
  /// the argument table (see argEntries).
  static constexpr std::size_t kDirectArgs = kDirectCallArgs;
  /// Appends the argument-table entries of these buffers: each is a slot of
  /// this frame's bases array (the scratch pointer, parameters, results,
  /// globals: filled in the frame's entry block) in the top 16 bits and a byte
  /// offset from that base below.
  /// Returns the index of the first entry.
  std::size_t argEntries(const std::vector<ir::ValueId>& buffers);
  /// A pointer to entry `i` of the argument table (a global of the module).
  llvm::Value* argTableAt(llvm::Value* i);
  /// Buffer j of a call whose entries start at `entries`, with the caller's bases.
  static llvm::Value* decodeArg(Builder& b, llvm::Value* bases, llvm::Value* entries, std::size_t j);
  /// Where v's buffer is: a base pointer and a byte offset from it.
  std::pair<llvm::Value*, int64_t> address(ir::ValueId v);
  llvm::Value* compute(ir::ValueId v, const Index& idx);
  EmitBase base(const ir::Op& op) { return EmitBase{*this, b_, f_, op}; }
  LowerCtx lowerCtx(const ir::Op& op, std::span<llvm::Value* const> results) { return LowerCtx{base(op), results}; }
  uint64_t calleeScratchAt() const { return (plan_.scratchBytes + 63) / 64 * 64; }
  /// Starts emitting into `fn` (the function itself, or one of its chunks:
  /// both take the function's buffers and the scratch pointer).
  void beginFrame(llvm::Function* fn);
  /// What both frames start with: no buffers, no memoised values, an entry block.
  void openFrame(llvm::Function* fn);
  /// Starts emitting a shared kernel's function: its arguments are the
  /// kernel's buffers (in kernelKey's order), then the scratch pointer.
  void beginKernelFrame(llvm::Function* fn, const std::vector<ir::ValueId>& buffers);
  void endFrame();
  /// Marks a kernel's loads and stores, in an alias-scope domain of that
  /// kernel, as not aliasing the buffers the kernel writes (each written
  /// buffer a scope of its own; the buffers only read share one), which LLVM
  /// cannot see for buffers carved from one scratch region or read from the
  /// argument table. Metadata grows with the kernels, not with the function.
  void finishAliasScopes(std::size_t kernel);

  const ir::Function& f_;
  const FusionPlan plan_;
  llvm::Function* out_;
  Builder b_;
  std::function<Lowered(const std::string&)> callee_;
  const VectorUnit unit_;
  const bool parallel_;
  const bool lapack_;
  llvm::Value* scratch_ = nullptr; ///< the scratch argument
  bool kernelFrame_ = false;       ///< emitting a shared kernel: every buffer is an argument
  /// Per kernel: the shared function that computes it, or null.
  std::vector<llvm::Function*> sharedFn_;
  /// Per kernel: the chunk function of a split loop, or null.
  std::vector<llvm::Function*> chunkFn_;
  /// Per row group: the function running one block.
  std::vector<llvm::Function*> groupFn_;
  /// Per kernel: the tile function of a loop run as an epilogue or prologue, or null.
  std::vector<llvm::Function*> tileFn_;
  /// In a row group's kernel function: per block buffer, the elements its
  /// rows before the block's first would take (see rowIndex).
  std::unordered_map<llvm::Value*, llvm::Value*> rowShift_;
  /// In a tile epilogue: the product it reads from the tile; in a tile
  /// prologue: the operand it writes there; and the tile.
  ir::ValueId tileValue_ = -1, tileRoot_ = -1;
  const Chunk* tile_ = nullptr;
  /// The column of the point a tile epilogue is at, when its columns span several axes (Chunk::colAxes).
  llvm::Value* tileColumn_ = nullptr;
  /// The address of value v's element at idx in the tile (tile_).
  llvm::Value* tileElement(ir::ValueId v, const Index& idx);
  uint64_t calleeScratch_ = 0;     ///< the largest scratch of a callee
  llvm::BasicBlock* entry_ = nullptr;
  std::vector<const ir::Op*> producer_;
  /// knownValue's answers, by value (several scatters often read one index array).
  mutable std::unordered_map<ir::ValueId, std::optional<Array>> known_;
  /// knownBounds' answers, by value (a gather's indices are read once per fused use).
  mutable std::unordered_map<ir::ValueId, std::optional<std::pair<int64_t, int64_t>>> bounds_;
  std::vector<char> inLoop_; ///< elementwise roots of the loop being emitted: computed, not loaded
  std::vector<llvm::Value*> buffers_; ///< per frame
  std::vector<ir::ValueId> bufferSet_; ///< values with a buffer in this frame
  std::vector<llvm::Value*> outArgs_;
  // The argument table of shared-kernel calls (see argEntries): its entries
  // (the global is made when the function is done), and the current frame's
  // bases array with the slot of each base in it.
  std::vector<uint64_t> argTable_;
  llvm::GlobalVariable* argTableGlobal_ = nullptr;
  llvm::AllocaInst* bases_ = nullptr;
  std::map<llvm::Value*, uint64_t> baseSlot_;
  std::map<llvm::Value*, int> scopeOf_; ///< buffers of the current kernel
  std::vector<std::pair<llvm::Instruction*, int>> accesses_;
  std::unordered_map<std::string, llvm::Value*> globals_; ///< by dtype and bytes
  /// Index values known to lie in a range (EmitBase::setRange): values are
  /// never freed while the function is emitted, so entries stay true.
  std::unordered_map<llvm::Value*, std::pair<int64_t, int64_t>> ranges_;
  std::unordered_map<Key, std::vector<llvm::Value*>, KeyHash> memo_;
  std::vector<Key> memoLog_;
};

} // namespace adjit::codegen
