// codegen/SharedCode.cpp — what the emitter puts out of line: kernels whose
// code repeats (one function of their buffers, called), runs of such calls
// (one loop), the chunk functions of split loops (run on threads through
// adjit_parallel_for, their partial results combined in chunk order), and
// the block functions of row groups.
#include "codegen/FunctionEmitter.h"
#include "ir/OpInfo.h"
#include "codegen/Lowering.h"
#include "support/Assert.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/Module.h>

namespace adjit::codegen {

std::pair<llvm::Value*, int64_t> FunctionEmitter::address(ir::ValueId v) {
  const Placement& p = plan_.place[static_cast<std::size_t>(v)];
  switch (p.where) {
  case Storage::View: {
    auto [base, offset] = address(static_cast<ir::ValueId>(p.index)); // a view itself only for an update in place
    return {base, offset + static_cast<int64_t>(p.offset)};
  }
  case Storage::Scratch: return {scratch_, static_cast<int64_t>(p.offset)};
  case Storage::Block: ADJIT_UNREACHABLE("a block buffer is passed to shared code");
  default: return {buffer(v), 0};
  }
}

constexpr unsigned kSlotShift = 48;
constexpr uint64_t kOffsetMask = (uint64_t{1} << kSlotShift) - 1;

std::size_t FunctionEmitter::argEntries(const std::vector<ir::ValueId>& buffers) {
  const std::size_t first = argTable_.size();
  for (ir::ValueId v : buffers) {
    auto [base, offset] = address(v);
    auto [it, fresh] = baseSlot_.try_emplace(base, baseSlot_.size());
    if (fresh) {
      // The array's size is set when the frame ends (endFrame); bases are
      // arguments, globals or entry allocas, so the entry block can store them.
      if (!bases_) bases_ = llvm::cast<llvm::AllocaInst>(entryAlloca(b_.getPtrTy(), 1));
      llvm::IRBuilder<> eb(entry_);
      eb.CreateStore(base, eb.CreateConstInBoundsGEP1_64(eb.getPtrTy(), bases_, it->second));
    }
    ADJIT_ASSERT(offset >= 0 && static_cast<uint64_t>(offset) <= kOffsetMask && it->second < (uint64_t{1} << 16),
                 "argument table entry out of range");
    argTable_.push_back(it->second << kSlotShift | static_cast<uint64_t>(offset));
  }
  return first;
}

llvm::Value* FunctionEmitter::argTableAt(llvm::Value* i) {
  if (!argTableGlobal_) // a placeholder, replaced by the table when the function is done
    argTableGlobal_ = new llvm::GlobalVariable(llvmModule(), llvm::ArrayType::get(b_.getInt64Ty(), 0), true,
                                               llvm::GlobalValue::PrivateLinkage, nullptr, "call.args.pending");
  return b_.CreateInBoundsGEP(b_.getInt64Ty(), argTableGlobal_, i);
}

llvm::Value* FunctionEmitter::decodeArg(Builder& b, llvm::Value* bases, llvm::Value* entries, std::size_t j) {
  llvm::Value* e = b.CreateLoad(b.getInt64Ty(), b.CreateConstInBoundsGEP1_64(b.getInt64Ty(), entries, j));
  llvm::Value* base = b.CreateLoad(b.getPtrTy(), b.CreateInBoundsGEP(b.getPtrTy(), bases, b.CreateLShr(e, kSlotShift)));
  return b.CreateInBoundsGEP(b.getInt8Ty(), base, b.CreateAnd(e, kOffsetMask));
}

void FunctionEmitter::callShared(std::size_t k, llvm::Value* entries) {
  const Kernel& kn = plan_.kernels[k];
  const bool table = kn.buffers.size() > kDirectArgs;
  if (!entries && table) entries = argTableAt(b_.getInt64(argEntries(kn.buffers)));
  std::vector<llvm::Value*> args;
  if (table) args = {bases_, entries}; // argEntries made the bases array
  else
    for (std::size_t a = 0; a < kn.buffers.size(); ++a)
      args.push_back(entries ? decodeArg(b_, bases_, entries, a) : buffer(kn.buffers[a]));
  args.push_back(scratch_);
  b_.CreateCall(sharedFn_[k], args);
}

/// A run's calls read their buffers from the argument table, one row of
/// entries per step: the step's buffers may lie anywhere (the residuals of
/// step t wherever the scratch allocator put them) and the loop stays small.
void FunctionEmitter::emitRun(const Run& run) {
  const std::size_t period = static_cast<std::size_t>(run.period), count = static_cast<std::size_t>(run.count);
  std::vector<std::size_t> column(period); // where call j's entries start in a row
  std::size_t first = 0, row = 0;
  for (std::size_t r = 0; r < count; ++r)
    for (std::size_t j = 0; j < period; ++j) {
      const std::size_t at = argEntries(plan_.kernels[run.first + j + r * period].buffers);
      if (r == 0 && j == 0) first = at;
      if (r == 0) column[j] = at - first;
      if (r == 0 && j + 1 == period) row = argTable_.size() - first;
    }
  static const ir::Op noOp{};
  LowerCtx c = lowerCtx(noOp, {});
  c.loop(static_cast<int64_t>(count), [&](llvm::Value* step) {
    llvm::Value* rowStart = b_.CreateAdd(c.i64(static_cast<int64_t>(first)), b_.CreateMul(step, c.i64(static_cast<int64_t>(row))));
    for (std::size_t j = 0; j < period; ++j)
      callShared(run.first + j, argTableAt(b_.CreateAdd(rowStart, c.i64(static_cast<int64_t>(column[j])))));
  });
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

/// Rows [begin, end) of chunk `index` of `total` rows in chunks of `rows`.
static std::pair<llvm::Value*, llvm::Value*> chunkRows(Builder& b, llvm::Value* index, int64_t rows, int64_t total) {
  llvm::Value* begin = b.CreateNSWMul(index, b.getInt64(static_cast<uint64_t>(rows)));
  llvm::Value* next = b.CreateNSWAdd(begin, b.getInt64(static_cast<uint64_t>(rows)));
  llvm::Value* last = b.getInt64(static_cast<uint64_t>(total));
  return {begin, b.CreateSelect(b.CreateICmpSLT(next, last), next, last)};
}

llvm::Value* FunctionEmitter::storeContext(const std::vector<ir::ValueId>& buffers, std::size_t extra) {
  llvm::Value* ctx = entryAlloca(b_.getPtrTy(), buffers.size() + 1 + extra);
  for (std::size_t j = 0; j < buffers.size(); ++j) b_.CreateStore(buffer(buffers[j]), ctxSlot(b_, ctx, j));
  b_.CreateStore(scratch_, ctxSlot(b_, ctx, buffers.size()));
  return ctx;
}

llvm::Value* FunctionEmitter::openWithContext(llvm::Function* fn, const std::vector<ir::ValueId>& buffers) {
  for (auto a : {llvm::Attribute::NoAlias, llvm::Attribute::NoCapture, llvm::Attribute::ReadOnly}) fn->addParamAttr(0, a);
  openFrame(fn);
  llvm::Value* ctx = fn->getArg(0);
  llvm::IRBuilder<> eb(entry_);
  // Values in the same output's buffer (a row group's value in place of a
  // result) get one pointer: one alias scope.
  std::vector<llvm::Value*> outputs;
  for (std::size_t j = 0; j < buffers.size(); ++j) {
    const Placement& p = plan_.place[static_cast<std::size_t>(buffers[j])];
    llvm::Value* shared = p.where == Storage::Output && p.index < outputs.size() ? outputs[p.index] : nullptr;
    llvm::Value* buf = shared ? shared : eb.CreateLoad(eb.getPtrTy(), ctxSlot(eb, ctx, j));
    if (p.where == Storage::Output) {
      if (outputs.size() <= p.index) outputs.resize(p.index + 1, nullptr);
      outputs[p.index] = buf;
    }
    buffers_[static_cast<std::size_t>(buffers[j])] = buf;
    bufferSet_.push_back(buffers[j]);
  }
  scratch_ = eb.CreateLoad(eb.getPtrTy(), ctxSlot(eb, ctx, buffers.size()));
  kernelFrame_ = true;
  return ctx;
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
    llvm::Value* c = openWithContext(fn, k.buffers);
    llvm::IRBuilder<> eb(entry_);
    auto load = [&](std::size_t slot) { return eb.CreateLoad(eb.getPtrTy(), ctxSlot(eb, c, slot)); };
    const auto [begin, end] = chunkRows(b_, fn->getArg(1), k.chunkRows, k.domain[0]);
    Chunk chunk{fn->getArg(1), begin, end, {}};
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
  llvm::Value* ctx = storeContext(k.buffers, reductions);
  std::vector<llvm::Value*> partials;
  for (const LoopRoot& r : k.roots)
    if (r.reduction && k.partials) {
      partials.push_back(entryAlloca(accumulatorType(*r.op, f_.type(r.value).dtype), static_cast<uint64_t>(k.chunks)));
      b_.CreateStore(partials.back(), ctxSlot(b_, ctx, n + partials.size()));
    }
  llvm::Type* voidTy = b_.getVoidTy();
  llvm::FunctionCallee pf = llvmModule().getOrInsertFunction(
      "adjit_parallel_for", llvm::FunctionType::get(voidTy, {b_.getPtrTy(), b_.getPtrTy(), b_.getInt64Ty()}, false));
  b_.CreateCall(pf, {chunkFn_[i], ctx, c.i64(k.chunks)});
  // Partial results combine in chunk order, whichever threads made them.
  std::size_t p = 0;
  for (const LoopRoot& r : k.roots)
    if (r.reduction && k.partials) combinePartials(c, r, partials[p++], 1, k.chunks);
}

void FunctionEmitter::emitRowGroupFunctions() {
  groupFn_.assign(plan_.groups.size(), nullptr);
  if (plan_.groups.empty()) return;
  llvm::Function* const whole = out_;
  llvm::LLVMContext& ctx = whole->getContext();
  auto* ptr = llvm::PointerType::get(ctx, 0);
  auto* i64 = llvm::Type::getInt64Ty(ctx);
  // Block values, and views of them (the same rows: the same pointer).
  std::vector<std::vector<ir::ValueId>> blockValues(plan_.groups.size()), blockViews(plan_.groups.size());
  for (std::size_t v = 0; v < plan_.place.size(); ++v) {
    const Placement& p = plan_.place[v];
    if (p.where == Storage::Block) blockValues[p.index].push_back(static_cast<ir::ValueId>(v));
    if (p.where == Storage::View && plan_.place[p.index].where == Storage::Block)
      blockViews[plan_.place[p.index].index].push_back(static_cast<ir::ValueId>(v));
  }
  for (std::size_t g = 0; g < plan_.groups.size(); ++g) {
    const RowGroup& group = plan_.groups[g];
    const std::string name = ".g" + std::to_string(g);
    std::vector<llvm::Function*> kernels;
    for (std::size_t i = group.first; i < group.first + group.count; ++i) {
      llvm::Function* fn = outOfLine(whole, llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr, i64, i64, ptr}, false),
                                     name + ".k" + std::to_string(i - group.first));
      fn->addParamAttr(3, llvm::Attribute::NoAlias); // the block
      fn->addParamAttr(3, llvm::Attribute::NoCapture);
      openWithContext(fn, group.buffers);
      llvm::IRBuilder<> eb(entry_);
      // Block values: rows [begin, end) at the start of their part of the block.
      for (ir::ValueId v : blockValues[g]) {
        llvm::Value* at = eb.CreateConstInBoundsGEP1_64(eb.getInt8Ty(), fn->getArg(3), plan_.place[static_cast<std::size_t>(v)].offset);
        buffers_[static_cast<std::size_t>(v)] = at;
        bufferSet_.push_back(v);
        rowShift_[at] = eb.CreateNSWMul(fn->getArg(1), eb.getInt64(static_cast<uint64_t>(f_.type(v).size() / group.rows)));
      }
      for (ir::ValueId v : blockViews[g]) {
        buffers_[static_cast<std::size_t>(v)] = buffers_[plan_.place[static_cast<std::size_t>(v)].index];
        bufferSet_.push_back(v);
      }
      kernelFrame_ = true;
      const Kernel& k = plan_.kernels[i];
      if (k.kind == Kernel::Kind::Loop) {
        Chunk chunk{nullptr, fn->getArg(1), fn->getArg(2), {}};
        emitLoop(k, &chunk);
      } else { // an op with kRowRanges
        std::vector<llvm::Value*> results;
        for (ir::ValueId r : k.op->results) results.push_back(buffer(r));
        LowerCtx c = lowerCtx(*k.op, results);
        c.rowBegin = fn->getArg(1);
        c.rowEnd = fn->getArg(2);
        codegen::lowering(k.op->kind).wholeLowering()(c);
      }
      finishAliasScopes(i);
      endFrame();
      kernels.push_back(fn);
    }
    llvm::Function* fn = outOfLine(whole, llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr, i64}, false), name);
    fn->addParamAttr(0, llvm::Attribute::NoCapture);
    fn->addParamAttr(0, llvm::Attribute::ReadOnly);
    openFrame(fn);
    llvm::Value* block = group.blockBytes ? entryAlloca(b_.getInt8Ty(), group.blockBytes) : llvm::ConstantPointerNull::get(ptr);
    const auto [begin, end] = chunkRows(b_, fn->getArg(1), group.blockRows, group.rows);
    for (llvm::Function* k : kernels) b_.CreateCall(k, {fn->getArg(0), begin, end, block});
    endFrame();
    groupFn_[g] = fn;
  }
  out_ = whole;
}

void FunctionEmitter::emitRowGroup(std::size_t g) {
  const RowGroup& group = plan_.groups[g];
  static const ir::Op noOp{};
  LowerCtx c = lowerCtx(noOp, {});
  llvm::Value* ctx = storeContext(group.buffers);
  if (group.threads) {
    llvm::FunctionCallee pf = llvmModule().getOrInsertFunction(
        "adjit_parallel_for", llvm::FunctionType::get(b_.getVoidTy(), {b_.getPtrTy(), b_.getPtrTy(), b_.getInt64Ty()}, false));
    b_.CreateCall(pf, {groupFn_[g], ctx, c.i64(group.blocks())});
  } else {
    c.loop(group.blocks(), [&](llvm::Value* block) { b_.CreateCall(groupFn_[g], {ctx, block}); });
  }
}

void FunctionEmitter::emitTileFunctions() {
  tileFn_.assign(plan_.kernels.size(), nullptr);
  llvm::Function* const whole = out_;
  int made = 0;
  for (std::size_t i = 0; i < plan_.kernels.size(); ++i) {
    const Kernel& k = plan_.kernels[i];
    if (k.epilogueOf < 0 && k.prologueOf < 0) continue;
    llvm::Function* fn = outOfLine(whole, tileFunctionType(whole->getContext()), ".e" + std::to_string(made++));
    fn->addParamAttr(6, llvm::Attribute::NoCapture);
    if (k.epilogueOf >= 0) fn->addParamAttr(6, llvm::Attribute::ReadOnly); // (a prologue writes the tile)
    openWithContext(fn, k.buffers);
    // A view at the start of another of these buffers (the product, written in
    // place of a result of the loop) is that buffer: one pointer, one alias scope.
    for (ir::ValueId v : k.buffers)
      if (const Placement& p = plan_.place[static_cast<std::size_t>(v)]; p.where == Storage::View && p.offset == 0)
        if (llvm::Value* viewed = buffers_[p.index]) buffers_[static_cast<std::size_t>(v)] = viewed;
    Chunk tile{fn->getArg(1), fn->getArg(2), fn->getArg(3), {}, fn->getArg(4), fn->getArg(5), fn->getArg(6), fn->getArg(7)};
    if (k.epilogueOf >= 0) {
      const ir::Op& op = *plan_.kernels[static_cast<std::size_t>(k.epilogueOf)].op;
      if (auto axes = codegen::lowering(op.kind).tileColumnAxes) tile.colAxes = axes(f_.type(op.results[0]), op.attrs);
    }
    emitLoop(k, &tile);
    finishAliasScopes(i);
    endFrame();
    tileFn_[i] = fn;
  }
  out_ = whole;
}

void FunctionEmitter::emitWithTiles(const Kernel& k) {
  std::vector<llvm::Value*> results;
  for (ir::ValueId r : k.op->results) results.push_back(buffer(r));
  LowerCtx c = lowerCtx(*k.op, results);
  if (k.epilogue >= 0) {
    const std::size_t e = static_cast<std::size_t>(k.epilogue);
    c.epilogue = tileFn_[e];
    c.epilogueCtx = storeContext(plan_.kernels[e].buffers);
  }
  c.prologue.assign(k.prologue.size(), nullptr);
  c.prologueCtx.assign(k.prologue.size(), nullptr);
  for (std::size_t o = 0; o < k.prologue.size(); ++o)
    if (const int p = k.prologue[o]; p >= 0) {
      c.prologue[o] = tileFn_[static_cast<std::size_t>(p)];
      c.prologueCtx[o] = storeContext(plan_.kernels[static_cast<std::size_t>(p)].buffers);
    }
  codegen::lowering(k.op->kind).wholeLowering()(c);
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
    // void(buffers..., scratch), or void(bases, entries, scratch) with the
    // buffers in the argument table.
    const bool table = k.buffers.size() > kDirectArgs;
    const std::size_t params = (table ? 2 : k.buffers.size()) + 1;
    auto* ty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx),
                                       std::vector<llvm::Type*>(params, llvm::PointerType::get(ctx, 0)), false);
    llvm::Function* fn = outOfLine(whole, ty, ".s" + std::to_string(shared++));
    // Shared code stays one function: LLVM would otherwise specialise it for
    // the constant arguments of each call (its table entries, a global).
    fn->addFnAttr(llvm::Attribute::NoDuplicate);
    // Kernels write buffers no other buffer of theirs overlaps (the plan keeps
    // what a kernel reads live while it writes); views are read, never written.
    // Buffers from the table get the same facts from the kernel's alias scopes.
    for (unsigned a = 0; a + 1 < params; ++a) {
      fn->addParamAttr(a, table ? llvm::Attribute::ReadOnly : llvm::Attribute::NoAlias);
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
