// codegen/EmitContext.cpp — the contexts the op table's hooks emit through
// (EmitBase, ElementCtx, LowerCtx, Emitter.h): constants, loads and stores,
// math calls, calls of other functions, and the loop skeletons (loop,
// loopRange, loopNest, rowNest). Each forwards to the FunctionEmitter
// (Codegen.cpp) for what depends on the function being emitted.
#include "codegen/Emitter.h"
#include "codegen/FunctionEmitter.h"
#include "codegen/Lowering.h"
#include "support/Assert.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <unordered_map>

namespace adjit::codegen {

// ---- EmitBase helpers -------------------------------------------------------

llvm::Type* EmitBase::scalarType(DType t) const {
  switch (t) {
  case DType::f32: return b.getFloatTy();
  case DType::f64: return b.getDoubleTy();
  case DType::i32: return b.getInt32Ty();
  case DType::i64: return b.getInt64Ty();
  case DType::i1: return b.getInt1Ty();
  }
  ADJIT_UNREACHABLE("bad dtype");
}

llvm::Type* storageType(llvm::IRBuilderBase& b, DType t) {
  switch (t) {
  case DType::f32: return b.getFloatTy();
  case DType::f64: return b.getDoubleTy();
  case DType::i32: return b.getInt32Ty();
  case DType::i64: return b.getInt64Ty();
  case DType::i1: return b.getInt8Ty();
  }
  ADJIT_UNREACHABLE("bad dtype");
}

llvm::Value* EmitBase::constant(DType t, double v) const {
  llvm::Type* ty = scalarType(t);
  if (is_floating(t)) return llvm::ConstantFP::get(ty, v);
  if (t == DType::i1) return b.getInt1(v != 0);
  return llvm::ConstantInt::get(ty, static_cast<uint64_t>(static_cast<int64_t>(v)), true);
}

const std::vector<llvm::Value*>& EmitBase::dims(const Index& idx, const Shape& shape) const {
  if (idx.dims.size() == shape.size()) return idx.dims;
  ADJIT_ASSERT(idx.dims.empty() && idx.linear, "index has neither dims nor a linear position");
  idx.dims = fe.delinearize(idx.linear, shape);
  return idx.dims;
}

llvm::Value* EmitBase::linear(const Index& idx, const Shape& shape) const {
  if (idx.linear) return idx.linear;
  if (shape.empty()) return idx.linear = i64(0);
  ADJIT_ASSERT(idx.dims.size() == shape.size(), "index rank differs from the shape's");
  return idx.linear = fe.linearize(idx.dims, shape);
}

llvm::Value* EmitBase::callMath(std::string_view name, DType t, std::span<llvm::Value* const> args) const {
  std::string fname(name);
  if (t == DType::f32) fname += "f";
  llvm::Type* ty = scalarType(t);
  std::vector<llvm::Type*> params(args.size(), ty);
  llvm::FunctionCallee fc = fe.llvmModule().getOrInsertFunction(fname, llvm::FunctionType::get(ty, params, false));
  auto* fn = llvm::cast<llvm::Function>(fc.getCallee());
  // Pure math: no errno, so calls can be hoisted, CSE'd and vectorised.
  fn->setDoesNotAccessMemory();
  fn->setDoesNotThrow();
  fn->setWillReturn();
  llvm::CallInst* call = b.CreateCall(fc, llvm::ArrayRef<llvm::Value*>(args.data(), args.size()));
  call->setDoesNotAccessMemory();
  ++fe.mathCalls;
  return call;
}

llvm::Value* EmitBase::intrinsic(llvm::Intrinsic::ID id, std::span<llvm::Value* const> args) const {
  return b.CreateIntrinsic(id, {args[0]->getType()}, llvm::ArrayRef<llvm::Value*>(args.data(), args.size()));
}

llvm::FastMathFlags EmitBase::reassocFlags() const {
  llvm::FastMathFlags f;
  f.setAllowReassoc();
  return f;
}

llvm::Value* EmitBase::load(DType t, llvm::Value* buffer, llvm::Value* lin) const {
  llvm::Type* st = storageType(b, t);
  llvm::LoadInst* v = b.CreateLoad(st, b.CreateInBoundsGEP(st, buffer, fe.rowIndex(buffer, lin)));
  fe.tagAccess(v, buffer);
  return t == DType::i1 ? b.CreateTrunc(v, b.getInt1Ty()) : static_cast<llvm::Value*>(v);
}

void EmitBase::store(DType t, llvm::Value* value, llvm::Value* buffer, llvm::Value* lin) const {
  llvm::Type* st = storageType(b, t);
  if (t == DType::i1) value = b.CreateZExt(value, st);
  fe.tagAccess(b.CreateStore(value, b.CreateInBoundsGEP(st, buffer, fe.rowIndex(buffer, lin))), buffer);
}

llvm::Value* EmitBase::globalConstant(const Array& a) const { return fe.constantGlobal(a); }
const VectorUnit& EmitBase::vectorUnit() const { return fe.vectorUnit(); }
bool EmitBase::parallel() const { return fe.parallel(); }
bool EmitBase::lapack() const { return fe.lapack(); }
llvm::Module& EmitBase::llvmModule() const { return fe.llvmModule(); }

std::optional<std::pair<int64_t, int64_t>> EmitBase::knownRange(llvm::Value* v) const {
  if (const auto* k = llvm::dyn_cast<llvm::ConstantInt>(v)) return std::pair{k->getSExtValue(), k->getSExtValue()};
  return fe.indexRange(v);
}

void EmitBase::setRange(llvm::Value* v, int64_t first, int64_t last) const { fe.setIndexRange(v, first, last); }

std::optional<std::pair<int64_t, int64_t>> EmitBase::operandBounds(std::size_t i) const {
  return fe.knownBounds(op.operands.at(i));
}

llvm::Value* ElementCtx::operand(std::size_t i, const Index& idx) const { return fe.element(op.operands.at(i), idx); }
llvm::Value* LowerCtx::operand(std::size_t i, const Index& idx) const { return fe.element(op.operands.at(i), idx); }
llvm::Value* LowerCtx::operandBuffer(std::size_t i) const { return fe.buffer(op.operands.at(i)); }
bool LowerCtx::hasBuffer(std::size_t i) const { return !fe.fused(op.operands.at(i)); }
std::optional<Array> LowerCtx::knownOperand(std::size_t i) const { return fe.knownValue(op.operands.at(i)); }
void LowerCtx::call(const std::string& name, std::vector<llvm::Value*> buffers, uint64_t after) const {
  fe.call(name, std::move(buffers), after);
}
llvm::Value* LowerCtx::workspace(uint64_t bytes) const { return fe.workspace(bytes); }
const ir::Function& LowerCtx::callee(std::size_t i) const { return fe.calleeFunction(op.callees.at(i)); }
bool LowerCtx::calleeShares(std::size_t i, std::size_t output, std::size_t param) const {
  return fe.calleeShares(op.callees.at(i), output, param);
}
void LowerCtx::callFirstCallee() const {
  std::vector<llvm::Value*> args;
  for (std::size_t i = 0; i < op.operands.size(); ++i) args.push_back(operandBuffer(i));
  args.insert(args.end(), results.begin(), results.end());
  call(op.callees.at(0), std::move(args));
}

llvm::FunctionType* tileFunctionType(llvm::LLVMContext& ctx) {
  auto* i64 = llvm::Type::getInt64Ty(ctx);
  auto* ptr = llvm::PointerType::get(ctx, 0);
  return llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr, i64, i64, i64, i64, i64, ptr, i64}, false);
}

void LowerCtx::callEpilogue(llvm::Value* matrix, llvm::Value* row0, llvm::Value* row1, llvm::Value* col0, llvm::Value* col1,
                            llvm::Value* tile, llvm::Value* stride) const {
  ADJIT_ASSERT(epilogue, "no epilogue to call");
  b.CreateCall(tileFunctionType(ctx()), epilogue, {epilogueCtx, matrix, row0, row1, col0, col1, tile, stride});
}

llvm::Value* LowerCtx::scalarSlot(DType t) const { return fe.entryAlloca(scalarType(t), 1); }
llvm::Value* LowerCtx::entryAlloca(llvm::Type* t, uint64_t count) const { return fe.entryAlloca(t, count); }

void setLoopHints(llvm::Instruction* latch, std::initializer_list<llvm::Metadata*> hints) {
  std::vector<llvm::Metadata*> ops{nullptr};
  ops.insert(ops.end(), hints.begin(), hints.end());
  llvm::MDNode* id = llvm::MDNode::getDistinct(latch->getContext(), ops);
  id->replaceOperandWith(0, id); // a loop ID names itself
  latch->setMetadata(llvm::LLVMContext::MD_loop, id);
}

llvm::MDNode* noVectorizeHint(llvm::LLVMContext& ctx) {
  llvm::Metadata* hint[] = {llvm::MDString::get(ctx, "llvm.loop.vectorize.enable"),
                            llvm::ConstantAsMetadata::get(llvm::ConstantInt::getFalse(ctx))};
  return llvm::MDNode::get(ctx, hint);
}

/// The interleave count for an innermost loop whose body is one block: see below; 0 for LLVM's choice.
static int serialChainInterleave(const llvm::BasicBlock& body, int64_t accumulators, int64_t trips, unsigned vectorBits) {
  // The longest chain of dependent floating-point operations through the
  // body (loads start chains), against how many there are. A body that is
  // one long chain (Horner's rule: each multiply-add waits for the last) is
  // bound by the chain's latency, not by its instructions, and LLVM keeps
  // such a long body at one vector per step: each vector waits for itself.
  // Several vectors per step run their chains side by side. Measured on
  // GradBench's llsq (f64, 127 multiplies and adds per point in a chain,
  // AVX-512, one thread, 3 interleaved rounds of 200 runs beside the code
  // without it, load average 6): the primal 0.99 -> 0.73 us at n = 128,
  // 7.43 -> 5.13 at n = 1024, 116 -> 88 at n = 16392; the gradient (its
  // forward chain's loops) 2.33 -> 2.11, 16.4 -> 14.0, 263 -> 236 us. 8
  // vectors per step were slower than 4 (the primal 91 -> 127 us at n = 16392,
  // 0.74 -> 0.82 at n = 128). Not
  // past the trip count: forcing 4 vectors of 8 over 16 points left every
  // point to the scalar remainder (0.29 -> 0.86 us). Not with more than 4
  // accumulators either: each would take that many registers (the
  // gradient's reduce loops, 24-48 sums each, stay at LLVM's choice).
  constexpr int kMinChain = 32, kMaxInterleave = 4, kMaxAccumulators = 4;
  if (accumulators > kMaxAccumulators) return 0;
  std::unordered_map<const llvm::Value*, int> depth;
  int ops = 0, longest = 0;
  unsigned bits = 0;
  for (const llvm::Instruction& inst : body) {
    int d = 0;
    for (const llvm::Use& u : inst.operands())
      if (auto it = depth.find(u.get()); it != depth.end()) d = std::max(d, it->second);
    if (inst.getType()->isFloatingPointTy() && (llvm::isa<llvm::BinaryOperator>(inst) || llvm::isa<llvm::UnaryOperator>(inst))) {
      ++ops;
      ++d;
      bits = std::max(bits, static_cast<unsigned>(inst.getType()->getPrimitiveSizeInBits().getFixedValue()));
    }
    if (d > 0) depth[&inst] = d;
    longest = std::max(longest, d);
  }
  if (longest < kMinChain || 2 * longest < ops || bits == 0) return 0;
  const int64_t lanes = std::max<int64_t>(1, vectorBits / bits);
  return static_cast<int>(trips < 0 ? kMaxInterleave : std::min<int64_t>(kMaxInterleave, trips / lanes));
}

/// Loops of at least this many trips (or of trips known at run time only)
/// stay loops: LLVM's full unrolling, which stops at a few hundred
/// instructions, leaves them.
constexpr int64_t kLongLoopTrips = 64;

void LowerCtx::loop(int64_t n, const std::function<void(llvm::Value*)>& body) const {
  // No loop for no trip or one: LLVM would spend time removing it.
  if (n <= 0) return;
  if (n == 1) {
    body(i64(0));
    return;
  }
  loopRange(i64(0), i64(n), body);
}

void LowerCtx::ifThen(llvm::Value* cond, const std::function<void()>& then) const {
  llvm::Function* f = b.GetInsertBlock()->getParent();
  auto* thenBB = llvm::BasicBlock::Create(ctx(), "then", f);
  auto* done = llvm::BasicBlock::Create(ctx(), "endif", f);
  b.CreateCondBr(cond, thenBB, done);
  b.SetInsertPoint(thenBB);
  then();
  b.CreateBr(done);
  b.SetInsertPoint(done);
}

llvm::Function* declareChunkFunction(llvm::Module& module, const std::string& name, unsigned vectorBits) {
  llvm::LLVMContext& ctx = module.getContext();
  auto* fn = llvm::Function::Create(
      llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {llvm::PointerType::get(ctx, 0), llvm::Type::getInt64Ty(ctx)}, false),
      llvm::GlobalValue::InternalLinkage, name, module);
  fn->addParamAttr(0, llvm::Attribute::NoCapture);
  fn->addParamAttr(0, llvm::Attribute::ReadOnly);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  fn->addFnAttr(llvm::Attribute::NoInline);
  fn->addFnAttr("min-legal-vector-width", std::to_string(vectorBits));
  fn->addFnAttr("prefer-vector-width", std::to_string(vectorBits));
  return fn;
}

void branches(llvm::IRBuilderBase& b, llvm::Value* cond, llvm::function_ref<void()> then,
              llvm::function_ref<void()> otherwise, llvm::StringRef joinName) {
  llvm::LLVMContext& ctx = b.getContext();
  llvm::Function* f = b.GetInsertBlock()->getParent();
  auto* thenBB = llvm::BasicBlock::Create(ctx, "then", f);
  auto* elseBB = llvm::BasicBlock::Create(ctx, "else", f);
  auto* done = llvm::BasicBlock::Create(ctx, joinName, f);
  b.CreateCondBr(cond, thenBB, elseBB);
  b.SetInsertPoint(thenBB);
  then();
  b.CreateBr(done);
  b.SetInsertPoint(elseBB);
  otherwise();
  b.CreateBr(done);
  b.SetInsertPoint(done);
}

void LowerCtx::ifElse(llvm::Value* cond, const std::function<void()>& then, const std::function<void()>& otherwise) const {
  branches(b, cond, then, otherwise, "endif");
}

llvm::Instruction* countedLoop(llvm::IRBuilderBase& b, llvm::Value* begin, llvm::Value* end, int64_t step,
                               llvm::function_ref<void(llvm::Value*)> body, llvm::StringRef ivName) {
  llvm::LLVMContext& ctx = b.getContext();
  llvm::Function* f = b.GetInsertBlock()->getParent();
  llvm::BasicBlock* pre = b.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx, "loop", f);
  auto* bodyBB = llvm::BasicBlock::Create(ctx, "loop.body", f);
  auto* exit = llvm::BasicBlock::Create(ctx, "loop.exit", f);
  b.CreateBr(header);
  b.SetInsertPoint(header);
  llvm::PHINode* iv = b.CreatePHI(b.getInt64Ty(), 2, ivName);
  iv->addIncoming(begin, pre);
  b.CreateCondBr(b.CreateICmpSLT(iv, end), bodyBB, exit);
  b.SetInsertPoint(bodyBB);
  body(iv);
  llvm::Value* next = b.CreateAdd(iv, b.getInt64(static_cast<uint64_t>(step)), ivName.empty() ? "" : ivName + ".next",
                                  /*HasNUW=*/true, /*HasNSW=*/true);
  iv->addIncoming(next, b.GetInsertBlock());
  llvm::Instruction* latch = b.CreateBr(header);
  b.SetInsertPoint(exit);
  return latch;
}

llvm::Instruction* LowerCtx::loopRange(llvm::Value* begin, llvm::Value* end, const std::function<void(llvm::Value*)>& body) const {
  const int64_t longLoopsBefore = fe.longLoops, mathCallsBefore = fe.mathCalls, accumulationsBefore = fe.accumulations;
  llvm::BasicBlock* bodyBB = nullptr;
  llvm::Instruction* latch = countedLoop(b, begin, end, 1, [&](llvm::Value* iv) {
    bodyBB = b.GetInsertBlock();
    const std::size_t scope = fe.openScope(); // what the body computes stays in it
    body(iv);
    fe.closeScope(scope);
  }, "i");
  // A loop around a long loop is never unrolled: fully unrolled, a [25, 10,
  // 1000] nest became 10 vectorised loops (and their remainders) per row,
  // whose loop strength reduction took 20-30 ms of a GMM gradient's 150 ms in
  // LLVM's code generator, for no speed. Short inner loops may still be
  // unrolled away, and their outer loop with them. Marking innermost loops
  // instead would stop their interleaving, which LLVM ties to the same hint.
  if (fe.longLoops > longLoopsBefore)
    setLoopHints(latch, {llvm::MDNode::get(ctx(), {llvm::MDString::get(ctx(), "llvm.loop.unroll.disable")})});
  // An innermost loop calling libm once per element, with at most one
  // accumulator, keeps one vector per step: the call preserves no vector
  // register, and LLVM's four vectors per step only added spills around
  // back-to-back calls. Measured against LLVM's choice on AVX-512, one
  // thread, minimum of 150 calls of 10^6 elements: exp(x) 0.32 -> 0.28 ms,
  // log(x*x+1) 0.35 -> 0.30, B3 (logsumexp's exp(x - max) and sum) 0.44 ->
  // 0.41, F1 0.44 -> 0.37; on AVX2 (x86-64-v3) exp(x) 0.49 -> 0.30 and
  // log(x*x+1) 0.49 -> 0.34, though B3 went 0.476 -> 0.507 ms there. But
  // F3's loop (exp, two sums) went 0.49 -> 0.60 on AVX-512, and loops of two
  // calls (exp then log1p: B1, G1) lost 5-13%: there the other vectors'
  // calls are the independent work between dependent ones. Those keep
  // LLVM's choice (test/ir/libm-interleave.adj).
  else if (fe.mathCalls == mathCallsBefore + 1 && fe.accumulations <= accumulationsBefore + 1)
    setLoopHints(latch, {llvm::MDNode::get(ctx(), {llvm::MDString::get(ctx(), "llvm.loop.interleave.count"),
                                                   llvm::ConstantAsMetadata::get(b.getInt32(1))})});
  const auto* constBegin = llvm::dyn_cast<llvm::ConstantInt>(begin);
  const auto* constEnd = llvm::dyn_cast<llvm::ConstantInt>(end);
  if (fe.longLoops == longLoopsBefore && fe.mathCalls == mathCallsBefore && latch->getParent() == bodyBB) {
    const int64_t trips = constBegin && constEnd ? constEnd->getSExtValue() - constBegin->getSExtValue() : -1;
    if (const int ic = serialChainInterleave(*bodyBB, fe.accumulations - accumulationsBefore, trips, vectorUnit().bits); ic > 1)
      setLoopHints(latch, {llvm::MDNode::get(ctx(), {llvm::MDString::get(ctx(), "llvm.loop.interleave.count"),
                                                     llvm::ConstantAsMetadata::get(b.getInt32(ic))})});
  }
  if (!constBegin || !constEnd || constEnd->getSExtValue() - constBegin->getSExtValue() >= kLongLoopTrips) ++fe.longLoops;
  return latch;
}

void LowerCtx::loopNest(const Shape& shape, const std::function<void(const Index&)>& body) const {
  std::vector<llvm::Value*> ivs;
  std::function<void(std::size_t)> rec = [&](std::size_t d) {
    if (d == shape.size()) {
      body(Index::ofDims(ivs));
      return;
    }
    loop(shape[d], [&](llvm::Value* iv) {
      ivs.push_back(iv);
      rec(d + 1);
      ivs.pop_back();
    });
  };
  rec(0);
}


void LowerCtx::rowNest(const Shape& shape, const std::function<void(const Index&)>& body) const {
  if (!rowBegin) return loopNest(shape, body);
  const Shape rest(shape.begin() + 1, shape.end());
  loopRange(rowBegin, rowEnd, [&](llvm::Value* row) {
    loopNest(rest, [&](const Index& r) {
      std::vector<llvm::Value*> d{row};
      const auto& rd = dims(r, rest);
      d.insert(d.end(), rd.begin(), rd.end());
      body(Index::ofDims(std::move(d)));
    });
  });
}

} // namespace adjit::codegen
