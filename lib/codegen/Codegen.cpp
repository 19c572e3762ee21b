// codegen/Codegen.cpp — the codegen driver: plans which values live in memory,
// emits loop nests for them and fuses everything else into those loops. It
// calls the op table's `scalar`, `element` and `lower` hooks and never looks
// at op kinds.
#include "codegen/Codegen.h"

#include "codegen/Emitter.h"
#include "ops/OpTable.h"
#include "support/Assert.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <map>
#include <set>
#include <optional>

namespace adjit::codegen {

/// Buffers at most this large live on the stack; larger ones are malloc'd.
constexpr std::size_t kStackBufferLimit = 4096;
/// A reused value whose fused expression is larger than this is materialised.
constexpr int kRecomputeLimit = 8;

class FunctionEmitter {
public:
  /// A lowered function and the scratch bytes it needs.
  struct Lowered {
    llvm::Function* fn;
    uint64_t scratch;
  };

  FunctionEmitter(const ir::Module& m, const ir::Function& f, llvm::Function* out,
                  std::function<Lowered(const std::string&)> callee)
      : m_(m), f_(f), out_(out), b_(out->getContext()), callee_(std::move(callee)) {}

  /// Emits the body; returns the scratch bytes it needs (its own large buffers
  /// and its callees').
  uint64_t emit();

  llvm::IRBuilder<>& builder() { return b_; }
  llvm::Module& llvmModule() { return *out_->getParent(); }
  llvm::Value* element(ir::ValueId v, const Index& idx);
  llvm::Value* buffer(ir::ValueId v) {
    ADJIT_ASSERT(buffers_[v], "value %" + std::to_string(v) + " has no buffer");
    return buffers_[v];
  }
  /// Calls lowered function `name` on buffers, giving it scratch past ours.
  void call(const std::string& name, std::vector<llvm::Value*> buffers) {
    Lowered l = callee_(name);
    const uint64_t at = (scratchBytes_ + 63) / 64 * 64;
    scratchBytes_ = at + l.scratch;
    buffers.push_back(b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), scratch_, at));
    b_.CreateCall(l.fn, buffers);
  }
  llvm::Value* entryAlloca(llvm::Type* t, uint64_t count);
  /// Records a load or store of buffer `base`; see finishAliasScopes.
  void tagAccess(llvm::Instruction* access, llvm::Value* base);
  llvm::Value* constantGlobal(const Array& a);

private:
  /// A materialised value and the loop domain that computes it.
  struct Root {
    const ir::Op* op;
    ir::ValueId value;
    Shape domain;           ///< the iteration space
    std::size_t reduceFrom; ///< reductions: first reduced axis (trailing axes only); else domain rank
    bool reduction;
  };

  struct Unit {
    const ir::Op* op;
    int level;
    std::vector<Root> roots; ///< empty: a `lower` op or a reduction emitted on its own
  };

  void plan();
  std::vector<Unit> schedule() const;
  void unitsComputing(ir::ValueId v, int unit, std::vector<std::set<int>>& out, std::vector<char>& seen) const;
  bool sameDomainUses(ir::ValueId v, std::vector<signed char>& memo) const;
  bool needsMultiIndex(ir::ValueId v) const;
  /// A materialised value an op reads, and whether it is read at the op's own
  /// index (through elementwise ops only).
  struct Read {
    ir::ValueId value;
    bool sameIndex;
  };
  void materializedReads(ir::ValueId v, bool sameIndex, std::vector<char>& seen, std::vector<Read>& out) const;
  std::optional<Root> fusibleRoot(const ir::Op& op) const;
  void emitGroup(const std::vector<Root>& group);
  void emitReduction(const ir::Op& op);
  llvm::Value* compute(ir::ValueId v, const Index& idx);
  llvm::Value* allocate(ir::ValueId v);
  EmitBase base(const ir::Op& op) { return EmitBase{*this, b_, f_, op}; }
  LowerCtx lowerCtx(const ir::Op& op, std::span<llvm::Value* const> results) {
    return LowerCtx{base(op), results};
  }

  const ir::Module& m_;
  const ir::Function& f_;
  llvm::Function* out_;
  llvm::IRBuilder<> b_;
  /// Gives every buffer its own alias scope: loads and stores of one buffer are
  /// marked as not aliasing any other, which LLVM cannot see for buffers
  /// carved from one scratch region.
  void finishAliasScopes();
  std::map<llvm::Value*, int> scopeOf_;
  std::vector<std::pair<llvm::Instruction*, int>> accesses_;
  std::function<Lowered(const std::string&)> callee_;
  llvm::Value* scratch_ = nullptr;  ///< the scratch argument: large intermediates live here
  uint64_t scratchBytes_ = 0;
  llvm::BasicBlock* entry_ = nullptr;
  std::vector<const ir::Op*> producer_;
  std::vector<std::vector<const ir::Op*>> users_;
  std::vector<bool> isOutput_;
  std::vector<bool> materialized_;
  std::vector<ir::ValueId> sharedInLoops_; ///< reused values left fused for loops that share them
  std::vector<llvm::Value*> buffers_;
  std::vector<llvm::Value*> outArgs_;
  std::map<const void*, llvm::Value*> globals_;
};

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

static llvm::Type* storageType(llvm::IRBuilder<>& b, DType t) {
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
  std::vector<llvm::Value*> d(shape.size());
  llvm::Value* rest = idx.linear;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (i == 0) {
      d[i] = rest;
    } else {
      d[i] = b.CreateURem(rest, i64(shape[i]));
      rest = b.CreateUDiv(rest, i64(shape[i]));
    }
  }
  idx.dims = std::move(d);
  return idx.dims;
}

llvm::Value* EmitBase::linear(const Index& idx, const Shape& shape) const {
  if (idx.linear) return idx.linear;
  if (shape.empty()) return idx.linear = i64(0);
  ADJIT_ASSERT(idx.dims.size() == shape.size(), "index rank differs from the shape's");
  llvm::Value* l = idx.dims[0];
  for (std::size_t i = 1; i < shape.size(); ++i)
    l = b.CreateAdd(b.CreateMul(l, i64(shape[i])), idx.dims[i]);
  return idx.linear = l;
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
  return call;
}

llvm::Value* EmitBase::intrinsic(llvm::Intrinsic::ID id, std::span<llvm::Value* const> args) const {
  return b.CreateIntrinsic(id, {args[0]->getType()}, llvm::ArrayRef<llvm::Value*>(args.data(), args.size()));
}

llvm::FastMathFlags EmitBase::reassocFlags() const {
  llvm::FastMathFlags f;
  f.setAllowReassoc();
  f.setAllowContract();
  return f;
}

llvm::Value* EmitBase::load(DType t, llvm::Value* buffer, llvm::Value* lin) const {
  llvm::Type* st = storageType(b, t);
  llvm::LoadInst* v = b.CreateLoad(st, b.CreateInBoundsGEP(st, buffer, lin));
  fe.tagAccess(v, buffer);
  return t == DType::i1 ? b.CreateTrunc(v, b.getInt1Ty()) : static_cast<llvm::Value*>(v);
}

void EmitBase::store(DType t, llvm::Value* value, llvm::Value* buffer, llvm::Value* lin) const {
  llvm::Type* st = storageType(b, t);
  if (t == DType::i1) value = b.CreateZExt(value, st);
  fe.tagAccess(b.CreateStore(value, b.CreateInBoundsGEP(st, buffer, lin)), buffer);
}

llvm::Value* EmitBase::globalConstant(const Array& a) const { return fe.constantGlobal(a); }

llvm::Value* ElementCtx::operand(std::size_t i, const Index& idx) const { return fe.element(op.operands.at(i), idx); }
llvm::Value* LowerCtx::operand(std::size_t i, const Index& idx) const { return fe.element(op.operands.at(i), idx); }
llvm::Value* LowerCtx::operandBuffer(std::size_t i) const { return fe.buffer(op.operands.at(i)); }
void LowerCtx::call(const std::string& name, std::vector<llvm::Value*> buffers) const { fe.call(name, std::move(buffers)); }

llvm::Value* LowerCtx::scalarSlot(DType t) const { return fe.entryAlloca(scalarType(t), 1); }
llvm::Value* LowerCtx::fe_alloca(llvm::Type* t, uint64_t count) const { return fe.entryAlloca(t, count); }

void LowerCtx::loop(int64_t n, const std::function<void(llvm::Value*)>& body) const {
  llvm::Function* f = b.GetInsertBlock()->getParent();
  llvm::BasicBlock* pre = b.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx(), "loop", f);
  auto* bodyBB = llvm::BasicBlock::Create(ctx(), "loop.body", f);
  auto* exit = llvm::BasicBlock::Create(ctx(), "loop.exit", f);
  b.CreateBr(header);
  b.SetInsertPoint(header);
  llvm::PHINode* iv = b.CreatePHI(b.getInt64Ty(), 2, "i");
  iv->addIncoming(i64(0), pre);
  b.CreateCondBr(b.CreateICmpSLT(iv, i64(n)), bodyBB, exit);
  b.SetInsertPoint(bodyBB);
  body(iv);
  llvm::Value* next = b.CreateAdd(iv, i64(1), "i.next", /*HasNUW=*/true, /*HasNSW=*/true);
  iv->addIncoming(next, b.GetInsertBlock());
  b.CreateBr(header);
  b.SetInsertPoint(exit);
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

// ---- FunctionEmitter ---------------------------------------------------------

llvm::Value* FunctionEmitter::entryAlloca(llvm::Type* t, uint64_t count) {
  llvm::IRBuilder<> eb(entry_, entry_->begin());
  llvm::AllocaInst* a = eb.CreateAlloca(t, eb.getInt64(count));
  a->setAlignment(llvm::Align(64));
  return a;
}

void FunctionEmitter::tagAccess(llvm::Instruction* access, llvm::Value* base) {
  auto [it, fresh] = scopeOf_.try_emplace(base, static_cast<int>(scopeOf_.size()));
  accesses_.push_back({access, it->second});
}

void FunctionEmitter::finishAliasScopes() {
  if (scopeOf_.size() < 2) return;
  llvm::MDBuilder md(out_->getContext());
  llvm::MDNode* domain = md.createAnonymousAliasScopeDomain(out_->getName());
  std::vector<llvm::Metadata*> scopes(scopeOf_.size());
  for (std::size_t i = 0; i < scopes.size(); ++i) scopes[i] = md.createAnonymousAliasScope(domain);
  std::vector<llvm::MDNode*> own(scopes.size()), others(scopes.size());
  for (std::size_t i = 0; i < scopes.size(); ++i) {
    own[i] = llvm::MDNode::get(out_->getContext(), {scopes[i]});
    std::vector<llvm::Metadata*> rest;
    for (std::size_t j = 0; j < scopes.size(); ++j)
      if (j != i) rest.push_back(scopes[j]);
    others[i] = llvm::MDNode::get(out_->getContext(), rest);
  }
  for (auto [inst, k] : accesses_) {
    inst->setMetadata(llvm::LLVMContext::MD_alias_scope, own[static_cast<std::size_t>(k)]);
    inst->setMetadata(llvm::LLVMContext::MD_noalias, others[static_cast<std::size_t>(k)]);
  }
}

llvm::Value* FunctionEmitter::constantGlobal(const Array& a) {
  auto it = globals_.find(&a);
  if (it != globals_.end()) return it->second;
  llvm::Type* st = storageType(b_, a.dtype());
  llvm::Constant* init = llvm::ConstantDataArray::getRaw(
      llvm::StringRef(static_cast<const char*>(a.raw()), a.bytes()), static_cast<uint64_t>(a.size()), st);
  auto* g = new llvm::GlobalVariable(llvmModule(), init->getType(), true, llvm::GlobalValue::PrivateLinkage, init, "const");
  g->setAlignment(llvm::Align(64));
  g->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
  globals_[&a] = g;
  return g;
}

/// Decides which values live in buffers. A value is materialised when it is a
/// parameter or result of the function, when an op that writes whole results
/// (a `lower` or `reduce` hook) produces it, when its consumer reads buffers
/// (kMaterializesOperands), or when it is used more than once and recomputing
/// it would be costly (an expensive op, or a large fused expression) — unless
/// every use reaches it through elementwise ops over the same domain: those
/// consumers share one loop (see emit), where the value is computed once.
void FunctionEmitter::plan() {
  const std::size_t n = f_.types.size();
  producer_.assign(n, nullptr);
  users_.assign(n, {});
  isOutput_.assign(n, false);
  materialized_.assign(n, false);
  std::vector<int> uses(n, 0), cost(n, 0);
  std::vector<bool> expensive(n, false);
  for (ir::ValueId p : f_.params) materialized_[p] = true;
  for (const ir::Op& op : f_.ops) {
    for (ir::ValueId r : op.results) producer_[r] = &op;
    for (ir::ValueId o : op.operands) {
      ++uses[o];
      users_[o].push_back(&op);
    }
    if (ops::info(op.kind).has(ops::kMaterializesOperands))
      for (ir::ValueId o : op.operands) materialized_[o] = true;
  }
  for (ir::ValueId o : f_.outputs) {
    ++uses[o];
    isOutput_[o] = true;
    materialized_[o] = true;
  }
  std::vector<signed char> memo(n, -1);
  for (const ir::Op& op : f_.ops) {
    const ops::OpInfo& info = ops::info(op.kind);
    int c = 1;
    bool exp = info.has(ops::kExpensive);
    for (ir::ValueId o : op.operands)
      if (!materialized_[o]) {
        c += cost[o];
        exp = exp || expensive[o];
      }
    for (ir::ValueId r : op.results) {
      cost[r] = c;
      expensive[r] = exp;
      if (info.hooks.lower || info.hooks.reduce) materialized_[r] = true;
      else if (uses[r] > 1 && (exp || c > kRecomputeLimit)) {
        if (sameDomainUses(r, memo)) sharedInLoops_.push_back(r);
        else materialized_[r] = true;
      }
    }
  }
}

/// True when every use of v is a reduction of v, or an elementwise op of v's
/// shape whose result is a function result or is itself used only so: all of
/// them are computed by loops over v's domain, which emit() fuses into one.
bool FunctionEmitter::sameDomainUses(ir::ValueId v, std::vector<signed char>& memo) const {
  if (memo[v] >= 0) return memo[v] != 0;
  memo[v] = 0;
  if (isOutput_[v]) return false;
  const Shape& shape = f_.type(v).shape;
  for (const ir::Op* u : users_[v]) {
    const ops::OpInfo& info = ops::info(u->kind);
    if (info.hooks.reduce) continue;
    if (!info.has(ops::kElementwise) || f_.type(u->results[0]).shape != shape) return false;
    if (!isOutput_[u->results[0]] && !sameDomainUses(u->results[0], memo)) return false;
  }
  memo[v] = 1;
  return true;
}

bool FunctionEmitter::needsMultiIndex(ir::ValueId v) const {
  const ir::Op* op = producer_[v];
  if (!op || materialized_[v]) return false;
  if (ops::info(op->kind).has(ops::kRemapsIndex)) return true;
  for (ir::ValueId o : op->operands)
    if (needsMultiIndex(o)) return true;
  return false;
}

llvm::Value* FunctionEmitter::element(ir::ValueId v, const Index& idx) {
  if (materialized_[v]) {
    const Type& t = f_.type(v);
    static const ir::Op noOp{};
    EmitBase eb{*this, b_, f_, producer_[v] ? *producer_[v] : noOp};
    return eb.load(t.dtype, buffer(v), eb.linear(idx, t.shape));
  }
  return compute(v, idx);
}

llvm::Value* FunctionEmitter::compute(ir::ValueId v, const Index& idx) {
  const ir::Op& op = *producer_[v];
  const ops::OpInfo& info = ops::info(op.kind);
  if (info.hooks.scalar) {
    std::vector<llvm::Value*> args;
    for (ir::ValueId o : op.operands) args.push_back(element(o, idx));
    ScalarCtx c{base(op), args};
    return info.hooks.scalar(c);
  }
  ADJIT_ASSERT(info.hooks.element, std::string(info.name) + " must be materialised");
  ElementCtx c{base(op), idx};
  return info.hooks.element(c);
}

llvm::Value* FunctionEmitter::allocate(ir::ValueId v) {
  for (std::size_t i = 0; i < f_.outputs.size(); ++i)
    if (f_.outputs[i] == v && outArgs_[i]) {
      llvm::Value* p = outArgs_[i];
      outArgs_[i] = nullptr; // written in place; later duplicates are copied
      return buffers_[v] = p;
    }
  const Type& t = f_.type(v);
  llvm::Type* st = storageType(b_, t.dtype);
  if (t.bytes() <= kStackBufferLimit) return buffers_[v] = entryAlloca(st, static_cast<uint64_t>(std::max<int64_t>(t.size(), 1)));
  const uint64_t at = (scratchBytes_ + 63) / 64 * 64;
  scratchBytes_ = at + t.bytes();
  return buffers_[v] = b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), scratch_, at);
}

/// Collects the materialised values that computing v (through its fused operands) reads.
void FunctionEmitter::materializedReads(ir::ValueId v, bool sameIndex, std::vector<char>& seen,
                                        std::vector<Read>& out) const {
  if (seen[v]) return;
  seen[v] = 1;
  const ir::Op* op = producer_[v];
  if (!op || materialized_[v]) {
    out.push_back({v, sameIndex});
    return;
  }
  const bool keeps = sameIndex && ops::info(op->kind).has(ops::kElementwise);
  for (ir::ValueId o : op->operands) materializedReads(o, keeps, seen, out);
}

/// The loop domain of a materialised value computed by a loop: an elementwise
/// or element op iterates its result; a reduction over trailing axes iterates
/// its operand. Other reductions are emitted on their own (nullopt).
std::optional<FunctionEmitter::Root> FunctionEmitter::fusibleRoot(const ir::Op& op) const {
  const ops::OpInfo& info = ops::info(op.kind);
  ir::ValueId r = op.results.at(0);
  if (!info.hooks.reduce) {
    Shape s = f_.type(r).shape;
    return Root{&op, r, s, s.size(), false};
  }
  const Shape& in = f_.type(op.operands.at(0)).shape;
  std::vector<int64_t> axes = op.attrs.ints("axes");
  for (int64_t& x : axes) if (x < 0) x += static_cast<int64_t>(in.size());
  std::sort(axes.begin(), axes.end());
  const std::size_t from = in.size() - axes.size();
  for (std::size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != static_cast<int64_t>(from + i)) return std::nullopt;
  return Root{&op, r, in, from, true};
}

/// One loop nest for several roots over one domain: outer loops over the
/// kept axes, an inner loop (flat when no index remapping is needed) over the
/// reduced ones; elementwise roots store at every point, reductions
/// accumulate in registers and store after the inner loop.
void FunctionEmitter::emitGroup(const std::vector<Root>& group) {
  const Shape& domain = group[0].domain;
  std::size_t from = domain.size();
  bool multi = false;
  // Members are computed, not loaded, inside the group's loop.
  for (const Root& g : group) if (!g.reduction) materialized_[g.value] = false;
  for (const Root& g : group) {
    if (g.reduction) from = g.reduceFrom;
    if (needsMultiIndex(g.reduction ? g.op->operands[0] : g.value)) multi = true;
  }
  for (const Root& g : group) if (!g.reduction) materialized_[g.value] = true;
  std::vector<llvm::Value*> buffers;
  for (const Root& g : group) buffers.push_back(allocate(g.value));
  const Shape outer(domain.begin(), domain.begin() + static_cast<std::ptrdiff_t>(from));
  const Shape inner(domain.begin() + static_cast<std::ptrdiff_t>(from), domain.end());
  const int64_t innerSize = num_elements(inner);
  static const ir::Op noOp{};
  LowerCtx c = lowerCtx(noOp, {});
  std::vector<llvm::Value*> slots(group.size(), nullptr);
  for (std::size_t k = 0; k < group.size(); ++k)
    if (group[k].reduction) slots[k] = entryAlloca(c.scalarType(f_.type(group[k].value).dtype), 1);

  // Computes every root at `idx` (a point of the domain); values are
  // computed, not loaded, for the roots of this group.
  auto body = [&](const Index& idx) {
    for (const Root& g : group) if (!g.reduction) materialized_[g.value] = false;
    for (std::size_t k = 0; k < group.size(); ++k) {
      const Root& g = group[k];
      const DType t = f_.type(g.value).dtype;
      if (g.reduction) {
        const ops::OpInfo& info = ops::info(g.op->kind);
        EmitBase eb = base(*g.op);
        llvm::Value* x = element(g.op->operands[0], idx);
        llvm::Value* acc = b_.CreateLoad(c.scalarType(t), slots[k]);
        b_.CreateStore(info.hooks.reduce->combine(eb, t, acc, x), slots[k]);
      } else {
        c.store(t, compute(g.value, idx), buffers[k], c.linear(idx, domain));
      }
    }
    for (const Root& g : group) if (!g.reduction) materialized_[g.value] = true;
  };
  c.loopNest(outer, [&](const Index& o) {
    const auto& od = c.dims(o, outer);
    llvm::Value* outerLinear = c.linear(o, outer);
    for (std::size_t k = 0; k < group.size(); ++k)
      if (group[k].reduction) {
        const DType t = f_.type(group[k].value).dtype;
        b_.CreateStore(c.constant(t, ops::info(group[k].op->kind).hooks.reduce->identity(t)), slots[k]);
      }
    if (multi) {
      c.loopNest(inner, [&](const Index& i) {
        std::vector<llvm::Value*> d = od;
        const auto& id = c.dims(i, inner);
        d.insert(d.end(), id.begin(), id.end());
        body(Index::ofDims(std::move(d)));
      });
    } else {
      c.loop(innerSize, [&](llvm::Value* iv) {
        body(Index::ofLinear(b_.CreateAdd(b_.CreateMul(outerLinear, c.i64(innerSize)), iv)));
      });
    }
    for (std::size_t k = 0; k < group.size(); ++k)
      if (group[k].reduction) {
        const DType t = f_.type(group[k].value).dtype;
        c.store(t, b_.CreateLoad(c.scalarType(t), slots[k]), buffers[k], outerLinear);
      }
  });
}

/// A reduction over axes that are not trailing: loops over the result, and
/// for each result element an inner nest over the reduced axes.
void FunctionEmitter::emitReduction(const ir::Op& op) {
  const ops::ReduceHooks& rh = *ops::info(op.kind).hooks.reduce;
  const Shape& in = f_.type(op.operands.at(0)).shape;
  const Type& rt = f_.type(op.results.at(0));
  std::vector<int64_t> axes = op.attrs.ints("axes");
  for (int64_t& a : axes) if (a < 0) a += static_cast<int64_t>(in.size());
  std::sort(axes.begin(), axes.end());
  const bool keep = op.attrs.boolean("keepdims");
  Shape inner;
  for (int64_t a : axes) inner.push_back(in[static_cast<std::size_t>(a)]);
  llvm::Value* out = allocate(op.results[0]);
  LowerCtx c = lowerCtx(op, {&out, 1});
  llvm::Value* acc = c.scalarSlot(rt.dtype);
  c.loopNest(rt.shape, [&](const Index& oi) {
    const auto& o = c.dims(oi, rt.shape);
    b_.CreateStore(c.constant(rt.dtype, rh.identity(rt.dtype)), acc);
    c.loopNest(inner, [&](const Index& ri) {
      const auto& r = c.dims(ri, inner);
      std::vector<llvm::Value*> full(in.size());
      std::size_t next = 0, nextOut = 0;
      for (std::size_t d = 0; d < in.size(); ++d) {
        if (next < axes.size() && axes[next] == static_cast<int64_t>(d)) {
          full[d] = r[next++];
          if (keep) ++nextOut;
        } else {
          full[d] = o[nextOut++];
        }
      }
      llvm::Value* v = element(op.operands[0], Index::ofDims(std::move(full)));
      llvm::Value* cur = b_.CreateLoad(c.scalarType(rt.dtype), acc);
      b_.CreateStore(rh.combine(c, rt.dtype, cur, v), acc);
    });
    c.store(rt.dtype, b_.CreateLoad(c.scalarType(rt.dtype), acc), out, c.linear(oi, rt.shape));
  });
}

/// Records which units compute v inline (through fused operands).
void FunctionEmitter::unitsComputing(ir::ValueId v, int unit, std::vector<std::set<int>>& out, std::vector<char>& seen) const {
  if (seen[v] || materialized_[v] || !producer_[v]) return;
  seen[v] = 1;
  out[v].insert(unit);
  for (ir::ValueId o : producer_[v]->operands) unitsComputing(o, unit, out, seen);
}

/// Assigns every op that writes memory to a unit, in op order.
std::vector<FunctionEmitter::Unit> FunctionEmitter::schedule() const {
  // Every op that writes memory is a unit at a level one above the levels of
  // the materialised values it reads. Loop roots of one level and domain
  // cannot read each other's results at other indices, so each such set
  // becomes one loop nest. A root that reads an elementwise root's value at
  // its own index may share that root's loop (and level): in the loop body the
  // value is computed before it is used.
  std::vector<Unit> units;
  std::vector<int> levelOf(f_.types.size(), -1), unitOf(f_.types.size(), -1);
  int lastEffect = -1; // ops with side effects run in program order
  auto compatible = [](const Unit& u, const Root& r) {
    if (u.roots.empty() || u.roots[0].domain != r.domain) return false;
    if (r.reduction)
      for (const Root& x : u.roots)
        if (x.reduction && x.reduceFrom != r.reduceFrom) return false;
    return true;
  };
  for (const ir::Op& op : f_.ops) {
    const ops::OpInfo& info = ops::info(op.kind);
    if (!info.hooks.lower && !materialized_[op.results.at(0)]) continue; // fused into its users
    std::optional<Root> root = info.hooks.lower ? std::nullopt : fusibleRoot(op);
    // Reads at the root's own index can share its loop (elementwise roots and
    // reductions read their domain's points; `element` ops remap indices).
    const bool pointwise = root && (root->reduction || info.has(ops::kElementwise));
    std::vector<char> seen(f_.types.size(), 0);
    std::vector<Read> reads;
    for (ir::ValueId o : op.operands) materializedReads(o, pointwise, seen, reads);
    int level = 0;
    std::set<int> shareUnits; // units this root may join because it reads them at its own index
    for (const Read& r : reads) {
      const int u = unitOf[r.value];
      const bool share = root && r.sameIndex && u >= 0 && !units[u].roots.empty() && f_.type(r.value).shape == root->domain &&
                         !ops::info(producer_[r.value]->kind).hooks.reduce;
      if (share) {
        level = std::max(level, levelOf[r.value]);
        shareUnits.insert(u);
      } else {
        level = std::max(level, levelOf[r.value] + 1);
      }
    }
    // A root sharing a unit's loop must join that very unit; otherwise it goes one level up.
    int target = -1;
    for (int u : shareUnits)
      if (units[u].level == level) {
        if (target < 0 && compatible(units[u], *root)) target = u;
        else if (target != u) level += 1, target = -2;
      }
    if (target == -2) target = -1;
    if (root && target < 0)
      for (std::size_t u = 0; u < units.size() && target < 0; ++u)
        if (units[u].level == level && compatible(units[u], *root)) {
          // Joining an unrelated unit is fine unless it shares a level with a unit we read.
          bool clash = false;
          for (int su : shareUnits) clash = clash || (units[su].level == level && su != static_cast<int>(u));
          if (!clash) target = static_cast<int>(u);
        }
    if (!info.has(ops::kPure)) {
      level = std::max(level, lastEffect + 1);
      lastEffect = level;
    }
    for (ir::ValueId r : op.results) levelOf[r] = level;
    if (!root) {
      units.push_back({&op, level, {}});
      continue;
    }
    if (target >= 0) {
      units[target].roots.push_back(*root);
    } else {
      units.push_back({&op, level, {*root}});
      target = static_cast<int>(units.size() - 1);
    }
    unitOf[root->value] = target;
  }
  return units;
}

/// Emits the function: every op that writes memory becomes a unit scheduled
/// by level (see below); loop roots that share a level and a domain form one
/// loop nest, so a value and several gradients are computed in one pass.
uint64_t FunctionEmitter::emit() {
  plan();
  buffers_.assign(f_.types.size(), nullptr);
  entry_ = llvm::BasicBlock::Create(out_->getContext(), "entry", out_);
  auto* body = llvm::BasicBlock::Create(out_->getContext(), "body", out_);
  b_.SetInsertPoint(body);
  std::size_t a = 0;
  for (ir::ValueId p : f_.params) buffers_[p] = out_->getArg(static_cast<unsigned>(a++));
  for (std::size_t i = 0; i < f_.outputs.size(); ++i) outArgs_.push_back(out_->getArg(static_cast<unsigned>(a++)));
  scratch_ = out_->getArg(static_cast<unsigned>(a));
  std::vector<llvm::Value*> outSlots = outArgs_;

  // Schedule; a value left fused for a shared loop but computed by several
  // loops after all is stored instead (once), and the schedule redone.
  std::vector<Unit> units = schedule();
  for (int round = 0; round < 4; ++round) {
    std::vector<std::set<int>> computedBy(f_.types.size());
    for (std::size_t u = 0; u < units.size(); ++u) {
      std::vector<char> seen(f_.types.size(), 0);
      for (const Root& r : units[u].roots)
        for (ir::ValueId o : r.op->operands) unitsComputing(o, static_cast<int>(u), computedBy, seen);
    }
    bool changed = false;
    for (ir::ValueId v : sharedInLoops_)
      if (!materialized_[v] && computedBy[v].size() > 1) materialized_[v] = changed = true;
    if (!changed) break;
    units = schedule();
  }
  std::stable_sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) { return a.level < b.level; });
  for (const Unit& u : units) {
    if (!u.roots.empty()) {
      emitGroup(u.roots);
    } else if (const auto lower = ops::info(u.op->kind).hooks.lower) {
      std::vector<llvm::Value*> results;
      for (ir::ValueId r : u.op->results) results.push_back(allocate(r));
      LowerCtx c = lowerCtx(*u.op, results);
      lower(c);
    } else {
      emitReduction(*u.op);
    }
  }
  // Results not written in place (parameters, duplicates) are copied.
  for (std::size_t i = 0; i < f_.outputs.size(); ++i) {
    if (!outArgs_[i]) continue;
    const Type& t = f_.type(f_.outputs[i]);
    b_.CreateMemCpy(outSlots[i], llvm::MaybeAlign(1), buffer(f_.outputs[i]), llvm::MaybeAlign(1), t.bytes());
  }
  b_.CreateRetVoid();
  llvm::IRBuilder<>(entry_).CreateBr(body);
  finishAliasScopes();
  return scratchBytes_;
}

// ---- module-level driver -----------------------------------------------------

/// void name(ptr in..., ptr out..., ptr scratch): buffers never overlap.
static llvm::Function* declareKernel(llvm::Module& out, const ir::Function& f, const std::string& name,
                                     llvm::GlobalValue::LinkageTypes linkage) {
  llvm::LLVMContext& ctx = out.getContext();
  std::size_t n = f.params.size() + f.outputs.size() + 1;
  auto* ty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), std::vector<llvm::Type*>(n, llvm::PointerType::get(ctx, 0)), false);
  llvm::Function* fn = llvm::Function::Create(ty, linkage, name, out);
  for (unsigned i = 0; i < n; ++i) {
    fn->addParamAttr(i, llvm::Attribute::NoAlias);
    fn->addParamAttr(i, llvm::Attribute::NoCapture);
    if (i < f.params.size()) fn->addParamAttr(i, llvm::Attribute::ReadOnly);
  }
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  return fn;
}

uint64_t lowerFunction(const ir::Module& m, const std::string& entry, const std::string& symbol, llvm::Module& out,
                       bool packed) {
  const ir::Function* ef = m.lookup(entry);
  if (!ef) throw Error("codegen: no function named @" + entry);
  std::map<std::string, FunctionEmitter::Lowered> done;
  std::function<FunctionEmitter::Lowered(const ir::Function&, bool)> lower = [&](const ir::Function& f, bool isEntry) {
    auto it = done.find(f.name);
    if (it != done.end()) return it->second;
    llvm::Function* fn = declareKernel(out, f, symbol + (isEntry ? ".impl" : "." + f.name), llvm::GlobalValue::InternalLinkage);
    FunctionEmitter fe(m, f, fn, [&](const std::string& name) { return lower(*m.lookup(name), false); });
    FunctionEmitter::Lowered l{fn, fe.emit()};
    done[f.name] = l;
    return l;
  };
  const FunctionEmitter::Lowered impl = lower(*ef, true);
  llvm::LLVMContext& ctx = out.getContext();
  auto* ptrTy = llvm::PointerType::get(ctx, 0);
  auto* voidTy = llvm::Type::getVoidTy(ctx);
  const std::size_t nBuffers = ef->params.size() + ef->outputs.size();

  // void <symbol>(ptr in..., ptr out...): allocates its own scratch.
  {
    auto* fn = llvm::Function::Create(llvm::FunctionType::get(voidTy, std::vector<llvm::Type*>(nBuffers, ptrTy), false),
                                      llvm::GlobalValue::ExternalLinkage, symbol, out);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", fn));
    std::vector<llvm::Value*> args;
    for (auto& a : fn->args()) args.push_back(&a);
    llvm::Value* scratch = llvm::ConstantPointerNull::get(ptrTy);
    if (impl.scratch) scratch = b.CreateMalloc(b.getInt64Ty(), b.getInt8Ty(), b.getInt64(1), b.getInt64(impl.scratch));
    args.push_back(scratch);
    b.CreateCall(impl.fn, args);
    if (impl.scratch) b.CreateFree(scratch);
    b.CreateRetVoid();
  }
  // void <symbol>.packed(ptr args): args = {in..., out..., scratch}.
  if (packed) {
    auto* packed = llvm::Function::Create(llvm::FunctionType::get(voidTy, {ptrTy}, false),
                                          llvm::GlobalValue::ExternalLinkage, symbol + ".packed", out);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", packed));
    std::vector<llvm::Value*> args;
    for (unsigned i = 0; i <= nBuffers; ++i)
      args.push_back(b.CreateLoad(ptrTy, b.CreateConstInBoundsGEP1_64(ptrTy, packed->getArg(0), i)));
    b.CreateCall(impl.fn, args);
    b.CreateRetVoid();
  }

  std::string err;
  llvm::raw_string_ostream os(err);
  ADJIT_ASSERT(!llvm::verifyModule(out, &os), "codegen produced invalid LLVM IR: " + err);
  return impl.scratch;
}

} // namespace adjit::codegen
