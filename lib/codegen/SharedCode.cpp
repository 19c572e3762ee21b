// codegen/SharedCode.cpp — what the emitter puts out of line: kernels whose
// code repeats (one function of their buffers, called), runs of such calls
// (one loop), and the chunk functions of split loops (run on threads through
// adjit_parallel_for, their partial results combined in chunk order).
#include "codegen/FunctionEmitter.h"
#include "ops/OpTable.h"
#include "support/Assert.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/Module.h>

namespace adjit::codegen {

std::pair<llvm::Value*, int64_t> FunctionEmitter::address(ir::ValueId v) {
  const Placement& p = plan_.place[static_cast<std::size_t>(v)];
  switch (p.where) {
  case Storage::View: {
    auto [base, offset] = address(static_cast<ir::ValueId>(p.index)); // never a view itself
    return {base, offset + static_cast<int64_t>(p.offset)};
  }
  case Storage::Scratch: return {scratch_, static_cast<int64_t>(p.offset)};
  default: return {buffer(v), 0};
  }
}

/// A run's call arguments step through memory: row t of xs, the residuals of
/// step t. Each argument whose offset is affine in the step is computed; the
/// others are read from a table of offsets (one row per step).
bool FunctionEmitter::emitRun(const Run& run) {
  const std::size_t period = static_cast<std::size_t>(run.period), count = static_cast<std::size_t>(run.count);
  struct Column {
    llvm::Value* base;
    std::vector<int64_t> offsets; ///< per step
    int table = -1;               ///< its column in the table, if not affine
  };
  std::vector<std::vector<Column>> args(period);
  for (std::size_t j = 0; j < period; ++j) {
    const Kernel& first = plan_.kernels[run.first + j];
    for (std::size_t a = 0; a < first.buffers.size(); ++a) {
      Column c{nullptr, {}, -1};
      for (std::size_t r = 0; r < count; ++r) {
        auto [base, offset] = address(plan_.kernels[run.first + j + r * period].buffers[a]);
        if (r == 0) c.base = base;
        else if (base != c.base) return false;
        c.offsets.push_back(offset);
      }
      args[j].push_back(std::move(c));
    }
  }
  int tableColumns = 0;
  for (auto& call : args)
    for (Column& c : call) {
      const int64_t step = c.offsets[1] - c.offsets[0];
      for (std::size_t r = 2; r < count && c.table < 0; ++r)
        if (c.offsets[r] != c.offsets[0] + static_cast<int64_t>(r) * step) c.table = tableColumns++;
    }
  llvm::Value* table = nullptr;
  if (tableColumns) {
    std::vector<uint64_t> data(count * static_cast<std::size_t>(tableColumns));
    for (auto& call : args)
      for (Column& c : call)
        if (c.table >= 0)
          for (std::size_t r = 0; r < count; ++r)
            data[r * static_cast<std::size_t>(tableColumns) + static_cast<std::size_t>(c.table)] = static_cast<uint64_t>(c.offsets[r]);
    auto* g = new llvm::GlobalVariable(llvmModule(), llvm::ArrayType::get(b_.getInt64Ty(), data.size()), true,
                                       llvm::GlobalValue::PrivateLinkage,
                                       llvm::ConstantDataArray::get(b_.getContext(), data), "run.offsets");
    g->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
    table = g;
  }
  static const ir::Op noOp{};
  LowerCtx c = lowerCtx(noOp, {});
  c.loop(static_cast<int64_t>(count), [&](llvm::Value* step) {
    llvm::Value* row = tableColumns ? b_.CreateMul(step, c.i64(tableColumns)) : nullptr;
    for (std::size_t j = 0; j < period; ++j) {
      std::vector<llvm::Value*> callArgs;
      for (const Column& col : args[j]) {
        llvm::Value* offset;
        if (col.table >= 0)
          offset = b_.CreateLoad(b_.getInt64Ty(), b_.CreateInBoundsGEP(b_.getInt64Ty(), table, b_.CreateAdd(row, c.i64(col.table))));
        else
          offset = b_.CreateAdd(c.i64(col.offsets[0]), b_.CreateMul(step, c.i64(col.offsets[1] - col.offsets[0])));
        callArgs.push_back(b_.CreateGEP(b_.getInt8Ty(), col.base, offset));
      }
      callArgs.push_back(scratch_);
      b_.CreateCall(sharedFn_[run.first + j], callArgs);
    }
  });
  return true;
}

/// An internal function beside `whole`, named after it, with its function
/// attributes (target, CPU), never inlined back: shared kernels and chunks.
static llvm::Function* outOfLine(llvm::Function* whole, llvm::FunctionType* ty, const std::string& suffix) {
  auto* fn = llvm::Function::Create(ty, llvm::GlobalValue::InternalLinkage, whole->getName() + suffix, whole->getParent());
  fn->setAttributes(llvm::AttributeList::get(whole->getContext(), whole->getAttributes().getFnAttrs(), llvm::AttributeSet(), {}));
  fn->addFnAttr(llvm::Attribute::NoInline);
  return fn;
}

static llvm::Value* ctxSlot(Builder& b, llvm::Value* ctx, std::size_t i) {
  return b.CreateConstInBoundsGEP1_64(b.getPtrTy(), ctx, i);
}

void FunctionEmitter::emitChunkFunctions() {
  const std::size_t n = plan_.kernels.size();
  chunkFn_.assign(n, nullptr);
  llvm::Function* const whole = out_;
  llvm::LLVMContext& ctx = whole->getContext();
  int made = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Kernel& k = plan_.kernels[i];
    if (k.chunks <= 1) continue;
    // Kernels sharing code share the chunk function too: their buffers come in one order.
    if (k.sameAs >= 0 && chunkFn_[static_cast<std::size_t>(k.sameAs)]) {
      chunkFn_[i] = chunkFn_[static_cast<std::size_t>(k.sameAs)];
      continue;
    }
    auto* ty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {llvm::PointerType::get(ctx, 0), llvm::Type::getInt64Ty(ctx)}, false);
    llvm::Function* fn = outOfLine(whole, ty, ".p" + std::to_string(made++));
    fn->addParamAttr(0, llvm::Attribute::NoAlias);
    fn->addParamAttr(0, llvm::Attribute::NoCapture);
    fn->addParamAttr(0, llvm::Attribute::ReadOnly);
    openFrame(fn);
    llvm::IRBuilder<> eb(entry_);
    llvm::Value* c = fn->getArg(0);
    auto load = [&](std::size_t slot) { return eb.CreateLoad(eb.getPtrTy(), ctxSlot(eb, c, slot)); };
    for (std::size_t j = 0; j < k.buffers.size(); ++j) {
      buffers_[static_cast<std::size_t>(k.buffers[j])] = load(j);
      bufferSet_.push_back(k.buffers[j]);
    }
    scratch_ = load(k.buffers.size());
    kernelFrame_ = true;
    Chunk chunk{fn->getArg(1), {}};
    for (const LoopRoot& r : k.roots)
      if (r.reduction && k.partials) chunk.partials.push_back(load(k.buffers.size() + 1 + chunk.partials.size()));
    emitLoop(k, &chunk);
    finishAliasScopes(i);
    endFrame();
    chunkFn_[i] = fn;
  }
  out_ = whole;
}

void FunctionEmitter::emitParallelLoop(const Kernel& k) {
  const std::size_t i = static_cast<std::size_t>(&k - plan_.kernels.data());
  static const ir::Op noOp{};
  LowerCtx c = lowerCtx(noOp, {});
  std::size_t reductions = 0;
  for (const LoopRoot& r : k.roots) reductions += r.reduction && k.partials;
  const std::size_t n = k.buffers.size();
  llvm::Value* ctx = entryAlloca(b_.getPtrTy(), n + 1 + reductions);
  for (std::size_t j = 0; j < n; ++j) b_.CreateStore(buffer(k.buffers[j]), ctxSlot(b_, ctx, j));
  b_.CreateStore(scratch_, ctxSlot(b_, ctx, n));
  std::vector<llvm::Value*> partials;
  for (const LoopRoot& r : k.roots)
    if (r.reduction && k.partials) {
      partials.push_back(entryAlloca(c.scalarType(f_.type(r.value).dtype), static_cast<uint64_t>(k.chunks)));
      b_.CreateStore(partials.back(), ctxSlot(b_, ctx, n + partials.size()));
    }
  llvm::Type* voidTy = b_.getVoidTy();
  llvm::FunctionCallee pf = llvmModule().getOrInsertFunction(
      "adjit_parallel_for", llvm::FunctionType::get(voidTy, {b_.getPtrTy(), b_.getPtrTy(), b_.getInt64Ty()}, false));
  b_.CreateCall(pf, {chunkFn_[i], ctx, c.i64(k.chunks)});
  // Partial results combine in chunk order, whichever threads made them.
  std::size_t p = 0;
  for (const LoopRoot& r : k.roots) {
    if (!r.reduction || !k.partials) continue;
    const DType t = f_.type(r.value).dtype;
    EmitBase eb = base(*r.op);
    const ops::ReduceHooks& rh = *ops::info(r.op->kind).hooks.reduce;
    llvm::Value* acc = entryAlloca(c.scalarType(t), 1);
    b_.CreateStore(rh.identity(eb, t), acc);
    llvm::Value* part = partials[p++];
    c.loop(k.chunks, [&](llvm::Value* ci) {
      llvm::Value* x = b_.CreateLoad(c.scalarType(t), b_.CreateInBoundsGEP(c.scalarType(t), part, ci));
      b_.CreateStore(rh.combine(eb, t, b_.CreateLoad(c.scalarType(t), acc), x), acc);
    });
    c.store(t, b_.CreateLoad(c.scalarType(t), acc), buffer(r.value), c.i64(0));
  }
}

/// Kernels the plan found to repeat (Kernel::sameAs) are emitted once, as an
/// internal function taking their buffers, and called.
void FunctionEmitter::emitSharedKernels() {
  const std::size_t n = plan_.kernels.size();
  sharedFn_.assign(n, nullptr);
  llvm::Function* const whole = out_;
  llvm::LLVMContext& ctx = whole->getContext();
  int shared = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Kernel& k = plan_.kernels[i];
    if (k.sameAs < 0) continue;
    if (k.sameAs != static_cast<int>(i)) { // emitted with its first occurrence
      sharedFn_[i] = sharedFn_[static_cast<std::size_t>(k.sameAs)];
      continue;
    }
    const std::size_t params = k.buffers.size() + 1;
    auto* ty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx),
                                       std::vector<llvm::Type*>(params, llvm::PointerType::get(ctx, 0)), false);
    llvm::Function* fn = outOfLine(whole, ty, ".s" + std::to_string(shared++));
    // Kernels write buffers no other buffer of theirs overlaps (the plan keeps
    // what a kernel reads live while it writes); views are read, never written.
    for (unsigned a = 0; a + 1 < params; ++a) {
      fn->addParamAttr(a, llvm::Attribute::NoAlias);
      fn->addParamAttr(a, llvm::Attribute::NoCapture);
    }
    beginKernelFrame(fn, k.buffers);
    emitKernel(k);
    finishAliasScopes(i);
    endFrame();
    sharedFn_[i] = fn;
  }
  out_ = whole;
}

} // namespace adjit::codegen
