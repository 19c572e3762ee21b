// codegen/Codegen.cpp — the emitter: renders a fusion plan (FusionPlan.h) to
// LLVM IR. Each kernel of the plan becomes a loop nest (or an op's own
// `lower` code); fused values are computed inside those loops at most once
// per index. Calls the op table's `scalar`, `element`, `reduce` and `lower`
// hooks and never looks at op kinds.
#include "codegen/Codegen.h"

#include "codegen/Emitter.h"
#include "codegen/FunctionEmitter.h"
#include "codegen/FusionPlan.h"
#include "codegen/Stats.h"
#include "ir/Effects.h"
#include "ir/OpInfo.h"
#include "codegen/Lowering.h"
#include "support/Assert.h"

#include <fmt/format.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace adjit::codegen {

/// Kernels writing more buffers than this get no alias scopes (the written
/// buffers' lists grow with the square of their count); LLVM then checks
/// overlap at run time where it vectorises.
constexpr std::size_t kMaxScopedWrites = 64;

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

void FunctionEmitter::finishAliasScopes(std::size_t kernel) {
  // Only a write can conflict: each written buffer gets a scope of its own,
  // and all buffers the kernel only reads share one. A read is then known not
  // to alias any written buffer, and a write not to alias anything else, with
  // metadata linear in the buffers read (the residuals of a gradient step).
  std::vector<char> written(scopeOf_.size());
  for (auto [inst, k] : accesses_)
    if (llvm::isa<llvm::StoreInst>(inst)) written[static_cast<std::size_t>(k)] = 1;
  const std::size_t writes = static_cast<std::size_t>(std::count(written.begin(), written.end(), 1));
  if (scopeOf_.size() >= 2 && writes >= 1 && writes <= kMaxScopedWrites) {
    llvm::LLVMContext& ctx = out_->getContext();
    llvm::MDBuilder md(ctx);
    llvm::MDNode* domain = md.createAnonymousAliasScopeDomain(out_->getName().str() + ".k" + std::to_string(kernel));
    const bool reads = writes < written.size();
    llvm::MDNode* read = reads ? md.createAnonymousAliasScope(domain) : nullptr;
    std::vector<llvm::Metadata*> writeScopes;
    std::vector<std::size_t> writeIndex(written.size());
    for (std::size_t i = 0; i < written.size(); ++i)
      if (written[i]) {
        writeIndex[i] = writeScopes.size();
        writeScopes.push_back(md.createAnonymousAliasScope(domain));
      }
    llvm::MDNode* readOwn = reads ? llvm::MDNode::get(ctx, {read}) : nullptr;
    llvm::MDNode* readOthers = llvm::MDNode::get(ctx, writeScopes);
    std::vector<llvm::MDNode*> own(writeScopes.size()), others(writeScopes.size());
    for (std::size_t i = 0; i < writeScopes.size(); ++i) {
      own[i] = llvm::MDNode::get(ctx, {writeScopes[i]});
      std::vector<llvm::Metadata*> rest;
      if (reads) rest.push_back(read);
      for (std::size_t j = 0; j < writeScopes.size(); ++j)
        if (j != i) rest.push_back(writeScopes[j]);
      others[i] = llvm::MDNode::get(ctx, rest);
    }
    for (auto [inst, k] : accesses_) {
      const std::size_t b = static_cast<std::size_t>(k);
      inst->setMetadata(llvm::LLVMContext::MD_alias_scope, written[b] ? own[writeIndex[b]] : readOwn);
      inst->setMetadata(llvm::LLVMContext::MD_noalias, written[b] ? others[writeIndex[b]] : readOthers);
    }
  }
  scopeOf_.clear();
  accesses_.clear();
}

std::optional<std::pair<int64_t, int64_t>> FunctionEmitter::knownBounds(ir::ValueId v) const {
  if (kernelFrame_ || !is_integer(f_.type(v).dtype)) return std::nullopt;
  if (auto it = bounds_.find(v); it != bounds_.end()) return it->second;
  std::optional<std::pair<int64_t, int64_t>> answer;
  if (const std::optional<Array> a = knownValue(v); a && a->size() > 0) {
    answer = std::pair{a->get<int64_t>(0), a->get<int64_t>(0)};
    for (int64_t k = 1; k < a->size(); ++k) {
      const int64_t e = a->get<int64_t>(k);
      answer->first = std::min(answer->first, e);
      answer->second = std::max(answer->second, e);
    }
  }
  return bounds_[v] = answer;
}

std::optional<Array> FunctionEmitter::knownValue(ir::ValueId v) const {
  if (kernelFrame_) return std::nullopt;
  if (auto it = known_.find(v); it != known_.end()) return it->second;
  std::optional<Array>& answer = known_[v];
  // The ops v is computed from, back to ops of no operands (a worklist);
  // any parameter, effect or call among them and v is not known.
  std::vector<const ir::Op*> cone;
  std::vector<ir::ValueId> work{v};
  std::unordered_set<ir::ValueId> seen; // (the cone's size, not the function's)
  int64_t elements = 0;
  while (!work.empty()) {
    const ir::ValueId x = work.back();
    work.pop_back();
    if (!seen.insert(x).second) continue;
    const ir::Op* p = producer_[static_cast<std::size_t>(x)];
    if (!p) return answer;
    const ir::OpInfo& info = ir::info(p->kind);
    if (!info.has(ir::kPure) || info.has(ir::kHasCallee)) return answer;
    elements += f_.type(x).size();
    if (elements > kMaxKnownElements) return answer;
    cone.push_back(p);
    for (ir::ValueId o : p->operands) work.push_back(o);
  }
  // Evaluated in program order (the ops are one vector: address order).
  std::sort(cone.begin(), cone.end());
  cone.erase(std::unique(cone.begin(), cone.end()), cone.end());
  std::unordered_map<ir::ValueId, Array> value;
  for (const ir::Op* op : cone) {
    std::vector<Array> in;
    for (ir::ValueId o : op->operands) in.push_back(value.at(o));
    std::vector<Array> out = ir::info(op->kind).eval(ir::EvalCtx{*op, f_, in, nullptr});
    for (std::size_t r = 0; r < out.size(); ++r) value.insert_or_assign(op->results[r], std::move(out[r]));
  }
  return answer = value.at(v);
}

llvm::Value* FunctionEmitter::constantGlobal(const Array& a) {
  // One global per distinct content, however many ops hold that constant.
  std::string content(1, static_cast<char>(a.dtype()));
  content.append(static_cast<const char*>(a.raw()), a.bytes());
  auto it = globals_.find(content);
  if (it != globals_.end()) return it->second;
  // As bytes: loads read it through typed GEPs either way, and LLVM's object
  // writer emits an i8 array with one call where it emits a double array one
  // APFloat at a time (a 200k-row table took the code generator 20-30 ms).
  llvm::Constant* init = llvm::ConstantDataArray::getRaw(llvm::StringRef(static_cast<const char*>(a.raw()), a.bytes()),
                                                         a.bytes(), b_.getInt8Ty());
  auto* g = new llvm::GlobalVariable(llvmModule(), init->getType(), true, llvm::GlobalValue::PrivateLinkage, init, "const");
  g->setAlignment(llvm::Align(64));
  g->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
  globals_.emplace(std::move(content), g);
  return g;
}

const std::vector<llvm::Value*>& FunctionEmitter::delinearize(llvm::Value* l, const Shape& shape) {
  static const char kDelinearize = 0;
  Key k = shapeKey(&kDelinearize, shape);
  k.push_back(l);
  if (const auto* hit = find(k)) return *hit;
  std::vector<llvm::Value*> d(shape.size());
  llvm::Value* rest = l;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (i == 0) {
      d[i] = rest;
    } else if (shape[i] == 1) { // a unit axis: index 0, no arithmetic
      d[i] = b_.getInt64(0);
    } else {
      d[i] = b_.CreateURem(rest, b_.getInt64(static_cast<uint64_t>(shape[i])));
      rest = b_.CreateUDiv(rest, b_.getInt64(static_cast<uint64_t>(shape[i])));
    }
  }
  return put(std::move(k), std::move(d));
}

llvm::Value* FunctionEmitter::linearize(const std::vector<llvm::Value*>& dims, const Shape& shape) {
  static const char kLinearize = 0;
  Key k = shapeKey(&kLinearize, shape);
  k.insert(k.end(), dims.begin(), dims.end());
  if (const auto* hit = find(k)) return (*hit)[0];
  // Unit axes contribute nothing (their index is 0).
  llvm::Value* l = nullptr;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    l = l ? b_.CreateAdd(b_.CreateMul(l, b_.getInt64(static_cast<uint64_t>(shape[i]))), dims[i]) : dims[i];
  }
  if (!l) l = b_.getInt64(0);
  return put(std::move(k), {l})[0];
}

llvm::Value* FunctionEmitter::buffer(ir::ValueId v) {
  llvm::Value*& buf = buffers_[static_cast<std::size_t>(v)];
  if (buf) return buf;
  ADJIT_ASSERT(!kernelFrame_, "a shared kernel reads %" + std::to_string(v) + ", which its key does not list");
  bufferSet_.push_back(v);
  const Placement& p = plan_.place[static_cast<std::size_t>(v)];
  const Type& t = f_.type(v);
  switch (p.where) {
  case Storage::Param: return buf = out_->getArg(p.index);
  case Storage::Output: return buf = outArgs_[p.index];
  case Storage::Stack:
    return buf = entryAlloca(storageType(b_, t.dtype), static_cast<uint64_t>(std::max<int64_t>(t.size(), 1)));
  case Storage::Scratch: {
    llvm::IRBuilder<> eb(entry_); // the entry block dominates every use
    return buf = eb.CreateConstInBoundsGEP1_64(eb.getInt8Ty(), scratch_, p.offset);
  }
  case Storage::View: {
    llvm::Value* viewed = buffer(static_cast<ir::ValueId>(p.index)); // a view itself only for a result updated in place
    if (p.offset == 0) return buffers_[static_cast<std::size_t>(v)] = viewed; // one pointer: one alias scope
    llvm::IRBuilder<> eb(entry_);
    return buffers_[static_cast<std::size_t>(v)] = eb.CreateConstInBoundsGEP1_64(eb.getInt8Ty(), viewed, p.offset);
  }
  case Storage::Constant: {
    const ir::Op& op = *producer_[static_cast<std::size_t>(v)];
    return buf = constantGlobal(*codegen::lowering(op.kind).data(op.attrs));
  }
  case Storage::Block: // set by the row group's kernel functions, the only ones that read it
  case Storage::Fused: break;
  }
  ADJIT_UNREACHABLE("value %" + std::to_string(v) + " has no buffer");
}

llvm::Value* FunctionEmitter::element(ir::ValueId v, const Index& idx) {
  static const char kTag = 0;
  Key k{&kTag, reinterpret_cast<const void*>(static_cast<std::uintptr_t>(v))};
  if (idx.linearFirst) k.push_back(idx.linear);
  else k.insert(k.end(), idx.dims.begin(), idx.dims.end());
  if (const auto* hit = find(k)) return (*hit)[0];
  llvm::Value* r;
  if (inLoop_[static_cast<std::size_t>(v)] || plan_.fused(v)) {
    r = compute(v, idx);
  } else if (v == tileValue_) { // a tile epilogue's product: from the tile (not a buffer: no alias scope)
    r = b_.CreateLoad(storageType(b_, f_.type(v).dtype), tileElement(v, idx));
  } else {
    const Type& t = f_.type(v);
    static const ir::Op noOp{};
    const std::size_t at = static_cast<std::size_t>(v);
    EmitBase eb{*this, b_, f_, producer_[at] ? *producer_[at] : noOp};
    r = eb.load(t.dtype, buffer(v), eb.linear(idx, t.shape));
  }
  return put(std::move(k), {r})[0];
}

llvm::Value* FunctionEmitter::tileElement(ir::ValueId v, const Index& idx) {
  const Type& t = f_.type(v);
  static const ir::Op noOp{};
  EmitBase eb{*this, b_, f_, noOp};
  const std::vector<llvm::Value*>& d = eb.dims(idx, t.shape);
  const std::size_t rowAxis = d.size() - 1 - tile_->colAxes;
  // Columns over several axes: the point's column, as the loop made it (an
  // epilogue reads the tile at its own point only), not re-linearised.
  llvm::Value* col = tile_->colAxes > 1 ? tileColumn_ : d.back();
  ADJIT_ASSERT(col, "a tile's element read outside the tile's loop");
  llvm::Value* at = b_.CreateAdd(b_.CreateMul(b_.CreateSub(d[rowAxis], tile_->begin), tile_->stride), b_.CreateSub(col, tile_->colBegin));
  return b_.CreateInBoundsGEP(storageType(b_, t.dtype), tile_->tile, at);
}

/// Computes v at idx through its op's `scalar` or `element` hook. The
/// recursion through operands is bounded by the plan's body budget.
llvm::Value* FunctionEmitter::compute(ir::ValueId v, const Index& idx) {
  const ir::Op& op = *producer_[static_cast<std::size_t>(v)];
  const ir::OpInfo& info = ir::info(op.kind);
  if (codegen::lowering(op.kind).scalar) {
    std::vector<llvm::Value*> args;
    for (ir::ValueId o : op.operands) args.push_back(element(o, idx));
    ScalarCtx c{base(op), args};
    return codegen::lowering(op.kind).scalar(c);
  }
  ADJIT_ASSERT(codegen::lowering(op.kind).element, std::string(info.name) + " must be materialised");
  ElementCtx c{base(op), idx};
  return codegen::lowering(op.kind).element(c);
}

/// One loop nest for a kernel's roots: outer loops over the kept axes, an
/// inner loop (flat when no index remapping is needed) over the reduced ones;
/// elementwise roots store at every point, reductions accumulate in registers
/// and store after the inner loop.
void FunctionEmitter::emitLoop(const Kernel& k, const Chunk* chunk) {
  const Shape& domain = k.domain;
  const std::size_t from = k.reduceFrom;
  std::vector<llvm::Value*> buffers;
  for (const LoopRoot& r : k.roots) buffers.push_back(buffer(r.value));
  for (const LoopRoot& r : k.roots) inLoop_[static_cast<std::size_t>(r.value)] = !r.reduction;
  const Shape outer(domain.begin(), domain.begin() + static_cast<std::ptrdiff_t>(from));
  const Shape inner(domain.begin() + static_cast<std::ptrdiff_t>(from), domain.end());
  const int64_t innerSize = num_elements(inner);
  static const ir::Op noOp{};
  LowerCtx c = lowerCtx(noOp, {});
  std::vector<llvm::Value*> slots(k.roots.size(), nullptr);
  for (std::size_t i = 0; i < k.roots.size(); ++i)
    if (k.roots[i].reduction) slots[i] = entryAlloca(accumulatorType(*k.roots[i].op, f_.type(k.roots[i].value).dtype), 1);

  // A reducing tile epilogue stores its roots' operands at a tile's points
  // in a local buffer per root (tileVals, at valAt), then reduces the buffer
  // in one flat loop: no chain of dependent additions from row to row.
  std::vector<llvm::Value*> tileVals(k.roots.size(), nullptr);
  llvm::Value* valAt = nullptr;
  // Every root's value at the point is computed before any is stored: a
  // tile epilogue may write a root in place of a value the others read.
  std::vector<llvm::Value*> values(k.roots.size());
  auto body = [&](const Index& idx) {
    for (std::size_t i = 0; i < k.roots.size(); ++i)
      values[i] = element(k.roots[i].reduction ? k.roots[i].op->operands[0] : k.roots[i].value, idx);
    for (std::size_t i = 0; i < k.roots.size(); ++i) {
      const LoopRoot& r = k.roots[i];
      const DType t = f_.type(r.value).dtype;
      if (r.reduction) {
        if (tileVals[i]) b_.CreateStore(values[i], b_.CreateInBoundsGEP(c.scalarType(t), tileVals[i], valAt));
        else accumulate(r, slots[i], values[i]);
      } else if (r.value == tileRoot_) { // a tile prologue's result goes to the tile (no alias scope)
        b_.CreateStore(t == DType::i1 ? b_.CreateZExt(values[i], storageType(b_, t)) : values[i], tileElement(r.value, idx));
      } else {
        c.store(t, values[i], buffers[i], c.linear(idx, domain));
      }
    }
  };
  if (k.swapped) {
    ADJIT_ASSERT(!chunk && k.roots.size() == 1 && !k.roots[0].reduction, "a swapped loop runs whole, storing one root");
    emitSwapped(k, c, buffers[0]);
    inLoop_[static_cast<std::size_t>(k.roots[0].value)] = 0;
    return;
  }
  if (chunk && chunk->colBegin) { // a tile epilogue or prologue: rows and columns of one matrix (Chunk::colAxes)
    if (k.epilogueOf >= 0) tileValue_ = plan_.kernels[static_cast<std::size_t>(k.epilogueOf)].op->results[0];
    else tileRoot_ = k.roots[0].value;
    tile_ = chunk;
    const auto colAxes = static_cast<std::ptrdiff_t>(chunk->colAxes);
    const Shape lead(domain.begin(), domain.end() - 1 - colAxes), colShape(domain.end() - colAxes, domain.end());
    std::vector<llvm::Value*> dims = lead.empty() ? std::vector<llvm::Value*>{} : delinearize(chunk->index, lead);
    // The columns of a tile's row: `cols` of them from column colBegin, or
    // tileCols when `full` (a constant trip count: LLVM unrolls the row).
    llvm::Value* cols = b_.CreateSub(chunk->colEnd, chunk->colBegin);
    auto columns = [&](bool full, const std::function<void(llvm::Value*)>& fn) {
      return full ? (c.loop(k.tileCols, fn), nullptr) : c.loopRange(c.i64(0), cols, fn);
    };
    // Row `row` of the tile; with `buffered` rows, its values go to row
    // (row - begin) of the roots' buffers, else to their row 0.
    auto rowOfTile = [&](llvm::Value* row, bool full, bool buffered) {
      llvm::Value* rowAt = buffered ? b_.CreateMul(b_.CreateSub(row, chunk->begin), c.i64(k.tileCols)) : c.i64(0);
      llvm::Instruction* latch = columns(full, [&](llvm::Value* j) {
        valAt = b_.CreateAdd(rowAt, j);
        std::vector<llvm::Value*> d = dims;
        d.push_back(row);
        llvm::Value* col = b_.CreateAdd(chunk->colBegin, j);
        if (colAxes == 1) {
          d.push_back(col);
          return body(Index::ofDims(std::move(d)));
        }
        // columns over several axes: their indices, and the point's linear index without them
        for (llvm::Value* x : delinearize(col, colShape)) d.push_back(x);
        tileColumn_ = col;
        const int64_t rowsOf = domain[domain.size() - 1 - chunk->colAxes];
        llvm::Value* lin = b_.CreateAdd(b_.CreateMul(b_.CreateAdd(b_.CreateMul(chunk->index, c.i64(rowsOf)), row), c.i64(num_elements(colShape))), col);
        body(Index{std::move(d), lin, false});
      });
      // A tile's row is a few vectors (a micro-tile's: two): one vector per
      // step, not LLVM's four, or the whole row falls to the remainder loop.
      llvm::Metadata* once[] = {llvm::MDString::get(b_.getContext(), "llvm.loop.interleave.count"),
                                llvm::ConstantAsMetadata::get(b_.getInt32(1))};
      if (latch) setLoopHints(latch, {llvm::MDNode::get(b_.getContext(), once)});
    };
    if (!reducesTiles(k)) {
      c.loopRange(chunk->begin, chunk->end, [&](llvm::Value* row) { rowOfTile(row, false, false); });
    } else {
      // Partial results: per cell of the op's tile grid (per row of it when
      // rows are kept), at [(matrix · rows + row or cell) · cells + cell].
      // A cell of at most kMaxBufferedCell elements is buffered whole and
      // reduced at once; a larger one (plain loops' whole matrices) row by
      // row, the rows' results combined in order.
      const std::size_t rank = domain.size();
      const bool byRows = k.reduceFrom + 1 == rank;
      const int64_t m = domain[rank - 2], n = domain[rank - 1];
      const int64_t rows = byRows ? m : (m + k.tileRows - 1) / k.tileRows, cells = (n + k.tileCols - 1) / k.tileCols;
      constexpr int64_t kMaxBufferedCell = 1024;
      const bool wholeCell = !byRows && k.tileRows * k.tileCols <= kMaxBufferedCell;
      std::vector<llvm::Value*> partials(k.roots.size(), nullptr);
      uint64_t offset = k.tilePartials;
      for (std::size_t i = 0; i < k.roots.size(); ++i) {
        if (!k.roots[i].reduction) continue;
        const DType t = f_.type(k.roots[i].value).dtype;
        tileVals[i] = entryAlloca(c.scalarType(t), static_cast<uint64_t>((wholeCell ? k.tileRows : 1) * k.tileCols));
        partials[i] = b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), scratch_, offset);
        offset += tilePartialBytes(k, t);
      }
      auto reducer = [&](std::size_t i) -> const codegen::ReduceHooks& { return *codegen::lowering(k.roots[i].op->kind).reduce; };
      auto dtype = [&](std::size_t i) { return f_.type(k.roots[i].value).dtype; };
      auto accType = [&](std::size_t i) { return accumulatorType(*k.roots[i].op, dtype(i)); };
      // Root i's buffered values of `n` rows, combined in order into slot i.
      auto reduceRows = [&](std::size_t i, llvm::Value* n, bool full) {
        llvm::Type* st = c.scalarType(dtype(i));
        auto add = [&](llvm::Value* at) { accumulate(k.roots[i], slots[i], b_.CreateLoad(st, b_.CreateInBoundsGEP(st, tileVals[i], at))); };
        if (full) c.loopRange(c.i64(0), b_.CreateMul(n, c.i64(k.tileCols)), add); // contiguous
        else
          c.loopRange(c.i64(0), n, [&](llvm::Value* r) {
            columns(false, [&](llvm::Value* j) { add(b_.CreateAdd(b_.CreateMul(r, c.i64(k.tileCols)), j)); });
          });
      };
      auto startSlots = [&] {
        for (std::size_t i = 0; i < k.roots.size(); ++i)
          if (tileVals[i]) b_.CreateStore(reducer(i).identity(c, dtype(i)), slots[i]);
      };
      // Slot i (a row's or cell's result) to the partial at `row` of this tile's column.
      auto storePartials = [&](llvm::Value* row) {
        llvm::Value* at = b_.CreateAdd(b_.CreateMul(b_.CreateAdd(b_.CreateMul(chunk->index, c.i64(rows)), row), c.i64(cells)),
                                       b_.CreateUDiv(chunk->colBegin, c.i64(k.tileCols)));
        for (std::size_t i = 0; i < k.roots.size(); ++i)
          if (tileVals[i])
            b_.CreateStore(b_.CreateLoad(accType(i), slots[i]), b_.CreateInBoundsGEP(accType(i), partials[i], at));
      };
      auto tile = [&](bool full) {
        const std::size_t scope = openScope(); // what one way computes, the other cannot use
        if (wholeCell) { // the tile is one cell: its rows start at a multiple of tileRows
          c.loopRange(chunk->begin, chunk->end, [&](llvm::Value* row) { rowOfTile(row, full, true); });
          startSlots();
          for (std::size_t i = 0; i < k.roots.size(); ++i)
            if (tileVals[i]) reduceRows(i, b_.CreateSub(chunk->end, chunk->begin), full);
          storePartials(b_.CreateUDiv(chunk->begin, c.i64(k.tileRows)));
        } else if (byRows) {
          c.loopRange(chunk->begin, chunk->end, [&](llvm::Value* row) {
            rowOfTile(row, full, false);
            startSlots();
            for (std::size_t i = 0; i < k.roots.size(); ++i)
              if (tileVals[i]) reduceRows(i, c.i64(1), full);
            storePartials(row);
          });
        } else { // a large cell: each row's result joins the cell's, in order
          std::vector<llvm::Value*> cell(k.roots.size(), nullptr);
          for (std::size_t i = 0; i < k.roots.size(); ++i)
            if (tileVals[i]) {
              cell[i] = entryAlloca(accType(i), 1);
              b_.CreateStore(reducer(i).identity(c, dtype(i)), cell[i]);
            }
          c.loopRange(chunk->begin, chunk->end, [&](llvm::Value* row) {
            rowOfTile(row, full, false);
            startSlots();
            for (std::size_t i = 0; i < k.roots.size(); ++i) {
              if (!tileVals[i]) continue;
              reduceRows(i, c.i64(1), full);
              mergeInto(*k.roots[i].op, dtype(i), cell[i], b_.CreateLoad(accType(i), slots[i]));
            }
          });
          for (std::size_t i = 0; i < k.roots.size(); ++i)
            if (tileVals[i]) b_.CreateStore(b_.CreateLoad(accType(i), cell[i]), slots[i]);
          storePartials(b_.CreateUDiv(chunk->begin, c.i64(k.tileRows)));
        }
        closeScope(scope);
      };
      // Whole tiles, the common case, in code of their own: constant trip
      // counts, and the buffered rows contiguous.
      llvm::Function* fn = b_.GetInsertBlock()->getParent();
      llvm::BasicBlock* whole = llvm::BasicBlock::Create(b_.getContext(), "tile.whole", fn);
      llvm::BasicBlock* edge = llvm::BasicBlock::Create(b_.getContext(), "tile.edge", fn);
      llvm::BasicBlock* done = llvm::BasicBlock::Create(b_.getContext(), "tile.done", fn);
      b_.CreateCondBr(b_.CreateICmpEQ(cols, c.i64(k.tileCols)), whole, edge);
      b_.SetInsertPoint(whole);
      tile(true);
      b_.CreateBr(done);
      b_.SetInsertPoint(edge);
      tile(false);
      b_.CreateBr(done);
      b_.SetInsertPoint(done);
    }
    for (const LoopRoot& r : k.roots) inLoop_[static_cast<std::size_t>(r.value)] = 0;
    tileValue_ = tileRoot_ = -1;
    tile_ = nullptr;
    tileColumn_ = nullptr;
    return;
  }
  // A chunk covers rows [begin, end) of axis 0 (or, with partials, of the
  // linear positions of the flat inner loop).
  llvm::Value* begin = chunk ? chunk->begin : nullptr;
  llvm::Value* end = chunk ? chunk->end : nullptr;
  c.rowBegin = begin;
  c.rowEnd = end;
  // The last axis cut into pieces (Kernel::peel) is the outer nest's when
  // nothing is reduced, else the inner one's.
  const bool peelOuter = !k.peel.empty() && inner.empty(), peelInner = !k.peel.empty() && !inner.empty();
  auto outerNest = [&](const std::function<void(const Index&)>& fn) {
    const bool rows = chunk && !k.partials;
    if (peelOuter) return peeledNest(c, outer, k.peel, rows ? begin : nullptr, rows ? end : nullptr, fn);
    if (!rows) return c.loopNest(outer, fn);
    c.rowNest(outer, fn);
  };
  outerNest([&](const Index& o) {
    const auto& od = c.dims(o, outer);
    llvm::Value* outerLinear = c.linear(o, outer);
    for (std::size_t i = 0; i < k.roots.size(); ++i)
      if (k.roots[i].reduction) {
        const DType t = f_.type(k.roots[i].value).dtype;
        b_.CreateStore(codegen::lowering(k.roots[i].op->kind).reduce->identity(c, t), slots[i]);
      }
    if (chunk && k.partials && !k.flat) {
      if (peelInner) peeledNest(c, inner, k.peel, begin, end, body);
      else c.rowNest(inner, body);
    } else if (!k.flat) {
      auto point = [&](const Index& i) {
        std::vector<llvm::Value*> d = od;
        const auto& id = c.dims(i, inner);
        d.insert(d.end(), id.begin(), id.end());
        body(Index::ofDims(std::move(d)));
      };
      if (peelInner) peeledNest(c, inner, k.peel, nullptr, nullptr, point);
      else c.loopNest(inner, point);
    } else if (chunk && k.partials) {
      const int64_t perRow = innerSize / domain[0];
      c.loopRange(b_.CreateMul(begin, c.i64(perRow)), b_.CreateMul(end, c.i64(perRow)),
                  [&](llvm::Value* iv) { body(Index::ofLinear(iv)); });
    } else {
      c.loop(innerSize, [&](llvm::Value* iv) {
        body(Index::ofLinear(outer.empty() ? iv : b_.CreateAdd(b_.CreateMul(outerLinear, c.i64(innerSize)), iv)));
      });
    }
    std::size_t partial = 0;
    for (std::size_t i = 0; i < k.roots.size(); ++i)
      if (k.roots[i].reduction) {
        const DType t = f_.type(k.roots[i].value).dtype;
        llvm::Type* at = accumulatorType(*k.roots[i].op, t);
        llvm::Value* v = b_.CreateLoad(at, slots[i]);
        if (chunk && k.partials) b_.CreateStore(v, b_.CreateInBoundsGEP(at, chunk->partials[partial++], chunk->index));
        else c.store(t, finishAccumulator(*k.roots[i].op, t, v), buffers[i], outerLinear);
      }
  });
  for (const LoopRoot& r : k.roots) inLoop_[static_cast<std::size_t>(r.value)] = 0;
}

void FunctionEmitter::peeledNest(const LowerCtx& c, const Shape& shape, const std::vector<int64_t>& peel,
                                 llvm::Value* rowBegin, llvm::Value* rowEnd,
                                 const std::function<void(const Index&)>& body) {
  const std::size_t last = shape.size() - 1;
  std::vector<int64_t> cuts{0};
  cuts.insert(cuts.end(), peel.begin(), peel.end());
  cuts.push_back(shape[last]);
  std::vector<llvm::Value*> ivs;
  auto each = [&](llvm::Value* iv, auto&& inner) {
    ivs.push_back(iv);
    inner();
    ivs.pop_back();
  };
  // The last axis, piece by piece: [cuts[p], cuts[p + 1]), within the rows
  // [rowBegin, rowEnd) when the last axis is axis 0 of a chunk.
  auto pieces = [&] {
    for (std::size_t p = 0; p + 1 < cuts.size(); ++p) {
      const int64_t from = cuts[p], to = cuts[p + 1];
      auto piece = [&](llvm::Value* iv) {
        setIndexRange(iv, from, to - 1);
        each(iv, [&] { body(Index::ofDims(ivs)); });
      };
      if (last == 0 && rowBegin) {
        llvm::Value* lo = c.intrinsic(llvm::Intrinsic::smax, {{rowBegin, c.i64(from)}});
        llvm::Value* hi = c.intrinsic(llvm::Intrinsic::smin, {{rowEnd, c.i64(to)}});
        c.loopRange(lo, hi, piece);
      } else {
        c.loop(to - from, [&](llvm::Value* j) { piece(from == 0 ? j : b_.CreateNSWAdd(j, c.i64(from))); });
      }
    }
  };
  // The axes before the last: whole, or axis 0's rows [rowBegin, rowEnd).
  std::function<void(std::size_t)> nest = [&](std::size_t d) {
    if (d == last) return pieces();
    auto next = [&](llvm::Value* iv) { each(iv, [&] { nest(d + 1); }); };
    if (d == 0 && rowBegin) c.loopRange(rowBegin, rowEnd, next);
    else c.loop(shape[d], next);
  };
  nest(0);
}

/// After a reducing tile epilogue ran on every tile of its op: each result
/// element combines its partial results in order (see Kernel::tileRows).
void FunctionEmitter::emitTileCombine(const Kernel& k) {
  static const ir::Op noOp{};
  LowerCtx c = lowerCtx(noOp, {});
  const int64_t count = tilePartialCount(k);
  const int64_t kept = num_elements(Shape(k.domain.begin(), k.domain.begin() + static_cast<std::ptrdiff_t>(k.reduceFrom)));
  uint64_t offset = k.tilePartials;
  for (const LoopRoot& r : k.roots) {
    if (!r.reduction) continue;
    combinePartials(c, r, b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), scratch_, offset), kept, kept > 0 ? count / kept : 0);
    offset += tilePartialBytes(k, f_.type(r.value).dtype);
  }
}

void FunctionEmitter::accumulate(const LoopRoot& r, llvm::Value* acc, llvm::Value* x) {
  ++accumulations;
  const DType t = f_.type(r.value).dtype;
  EmitBase eb = base(*r.op);
  llvm::Value* cur = b_.CreateLoad(accumulatorType(*r.op, t), acc);
  b_.CreateStore(codegen::lowering(r.op->kind).reduce->combine(eb, t, cur, x), acc);
}

void FunctionEmitter::mergeInto(const ir::Op& op, DType t, llvm::Value* acc, llvm::Value* other) {
  const codegen::ReduceHooks& rh = *codegen::lowering(op.kind).reduce;
  EmitBase eb = base(op);
  llvm::Value* cur = b_.CreateLoad(accumulatorType(op, t), acc);
  b_.CreateStore(rh.merge ? rh.merge(eb, t, cur, other) : rh.combine(eb, t, cur, other), acc);
}

llvm::Type* FunctionEmitter::accumulatorType(const ir::Op& op, DType t) {
  EmitBase eb = base(op);
  const codegen::ReduceHooks& rh = *codegen::lowering(op.kind).reduce;
  return rh.state ? rh.state(eb, t) : eb.scalarType(t);
}

llvm::Value* FunctionEmitter::finishAccumulator(const ir::Op& op, DType t, llvm::Value* acc) {
  EmitBase eb = base(op);
  const codegen::ReduceHooks& rh = *codegen::lowering(op.kind).reduce;
  return rh.finish ? rh.finish(eb, t, acc) : acc;
}

void FunctionEmitter::combinePartials(LowerCtx& c, const LoopRoot& r, llvm::Value* part, int64_t kept, int64_t each) {
  const DType t = f_.type(r.value).dtype;
  llvm::Type* st = accumulatorType(*r.op, t);
  llvm::Value* acc = entryAlloca(st, 1);
  c.loop(kept, [&](llvm::Value* o) {
    b_.CreateStore(codegen::lowering(r.op->kind).reduce->identity(c, t), acc);
    c.loop(each, [&](llvm::Value* j) {
      mergeInto(*r.op, t, acc, b_.CreateLoad(st, b_.CreateInBoundsGEP(st, part, b_.CreateAdd(b_.CreateMul(o, c.i64(each)), j))));
    });
    c.store(t, finishAccumulator(*r.op, t, b_.CreateLoad(st, acc)), buffer(r.value), o);
  });
}

/// A reduction over axes that are not trailing: loops over the result, and
/// for each result element an inner nest over the reduced axes.
void FunctionEmitter::emitReduction(const ir::Op& op) {
  const codegen::ReduceHooks& rh = *codegen::lowering(op.kind).reduce;
  const Shape& in = f_.type(op.operands.at(0)).shape;
  const Type& rt = f_.type(op.results.at(0));
  std::vector<int64_t> axes = op.attrs.ints("axes");
  for (int64_t& a : axes)
    if (a < 0) a += static_cast<int64_t>(in.size());
  std::sort(axes.begin(), axes.end());
  const bool keep = op.attrs.boolean("keepdims");
  Shape inner;
  for (int64_t a : axes) inner.push_back(in[static_cast<std::size_t>(a)]);
  llvm::Value* out = buffer(op.results[0]);
  LowerCtx c = lowerCtx(op, {&out, 1});
  llvm::Type* at = accumulatorType(op, rt.dtype);
  llvm::Value* acc = entryAlloca(at, 1);
  c.loopNest(rt.shape, [&](const Index& oi) {
    const auto& o = c.dims(oi, rt.shape);
    b_.CreateStore(rh.identity(c, rt.dtype), acc);
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
      llvm::Value* cur = b_.CreateLoad(at, acc);
      b_.CreateStore(rh.combine(c, rt.dtype, cur, v), acc);
    });
    c.store(rt.dtype, finishAccumulator(op, rt.dtype, b_.CreateLoad(at, acc)), out, c.linear(oi, rt.shape));
  });
}

void FunctionEmitter::emitKernel(const Kernel& k) {
  switch (k.kind) {
  case Kernel::Kind::Loop:
    if (k.chunks > 1) emitParallelLoop(k);
    else emitLoop(k);
    break;
  case Kernel::Kind::Reduction: emitReduction(*k.op); break;
  case Kernel::Kind::Lower: {
    std::vector<llvm::Value*> results;
    for (ir::ValueId r : k.op->results) results.push_back(buffer(r));
    LowerCtx c = lowerCtx(*k.op, results);
    codegen::lowering(k.op->kind).wholeLowering()(c);
    break;
  }
  }
}

void FunctionEmitter::openFrame(llvm::Function* fn) {
  out_ = fn;
  for (ir::ValueId v : bufferSet_) buffers_[static_cast<std::size_t>(v)] = nullptr;
  bufferSet_.clear();
  closeScope(0); // values of another function are not visible here
  entry_ = llvm::BasicBlock::Create(fn->getContext(), "entry", fn);
  b_.SetInsertPoint(llvm::BasicBlock::Create(fn->getContext(), "body", fn));
  outArgs_.clear();
  rowShift_.clear();
}

void FunctionEmitter::beginFrame(llvm::Function* fn) {
  openFrame(fn);
  unsigned a = static_cast<unsigned>(f_.params.size());
  for (std::size_t i = 0; i < f_.outputs.size(); ++i) outArgs_.push_back(fn->getArg(a++));
  scratch_ = fn->getArg(a);
}

void FunctionEmitter::beginKernelFrame(llvm::Function* fn, const std::vector<ir::ValueId>& buffers) {
  openFrame(fn);
  const bool table = buffers.size() > kDirectArgs;
  llvm::IRBuilder<> eb(entry_);
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    buffers_[static_cast<std::size_t>(buffers[i])] =
        table ? decodeArg(eb, fn->getArg(0), fn->getArg(1), i) : fn->getArg(static_cast<unsigned>(i));
    bufferSet_.push_back(buffers[i]);
  }
  scratch_ = fn->getArg(table ? 2 : static_cast<unsigned>(buffers.size()));
  kernelFrame_ = true;
}

void FunctionEmitter::endFrame() {
  kernelFrame_ = false;
  if (bases_) bases_->setOperand(0, b_.getInt64(baseSlot_.size()));
  bases_ = nullptr;
  baseSlot_.clear();
  b_.CreateRetVoid();
  llvm::IRBuilder<>(entry_).CreateBr(entry_->getNextNode());
}

uint64_t FunctionEmitter::emit() {
  const std::size_t n = f_.types.size();
  producer_.assign(n, nullptr);
  for (const ir::Op& op : f_.ops)
    for (ir::ValueId r : op.results) producer_[static_cast<std::size_t>(r)] = &op;
  inLoop_.assign(n, 0);
  buffers_.assign(n, nullptr);
  llvm::Function* const whole = out_;
  // Chunks: internal functions with the function's own signature, never
  // inlined back (that is their point), called in order.
  std::vector<llvm::Function*> chunks;
  if (plan_.functions > 1)
    for (int c = 0; c < plan_.functions; ++c) {
      auto* fn = llvm::Function::Create(whole->getFunctionType(), llvm::GlobalValue::InternalLinkage,
                                        whole->getName() + ".k" + std::to_string(c), whole->getParent());
      fn->copyAttributesFrom(whole);
      fn->addFnAttr(llvm::Attribute::NoInline);
      if (plan_.compileParts) fn->addFnAttr(kCompilePartAttribute);
      chunks.push_back(fn);
    }
  emitChunkFunctions();
  emitRowGroupFunctions();
  emitTileFunctions();
  emitSharedKernels();
  int frame = -1;
  for (std::size_t i = 0; i < plan_.kernels.size(); ++i) {
    const Kernel& k = plan_.kernels[i];
    if (k.function != frame) {
      if (frame >= 0) endFrame();
      frame = k.function;
      beginFrame(chunks.empty() ? whole : chunks[static_cast<std::size_t>(frame)]);
    }
    if (k.run >= 0 && plan_.runs[static_cast<std::size_t>(k.run)].first == i) {
      const Run& run = plan_.runs[static_cast<std::size_t>(k.run)];
      emitRun(run);
      i += static_cast<std::size_t>(run.period * run.count) - 1;
      continue;
    }
    if (sharedFn_[i]) {
      callShared(i);
      continue;
    }
    if (k.group >= 0) { // the group's kernels run from its first, block by block
      if (plan_.groups[static_cast<std::size_t>(k.group)].first == i) emitRowGroup(static_cast<std::size_t>(k.group));
      continue;
    }
    if (k.epilogueOf >= 0 || k.prologueOf >= 0) { // runs inside its op's code
      if (reducesTiles(k)) {
        emitTileCombine(k);
        finishAliasScopes(i);
      }
      continue;
    }
    if (k.epilogue >= 0 || !k.prologue.empty()) emitWithTiles(k);
    else emitKernel(k);
    finishAliasScopes(i);
  }
  if (!chunks.empty()) {
    endFrame();
    beginFrame(whole);
    std::vector<llvm::Value*> args;
    for (llvm::Argument& a : whole->args()) args.push_back(&a);
    for (llvm::Function* c : chunks) b_.CreateCall(c, args);
  } else if (frame < 0) {
    beginFrame(whole); // no kernels: results are copies of parameters
  }
  // Results not written in place (parameters, duplicates) are copied.
  for (std::size_t i = 0; i < f_.outputs.size(); ++i) {
    const ir::ValueId v = f_.outputs[i];
    const Placement& p = plan_.place[static_cast<std::size_t>(v)];
    if (p.where == Storage::Output && p.index == i) continue;
    b_.CreateMemCpy(outArgs_[i], llvm::MaybeAlign(1), buffer(v), llvm::MaybeAlign(1), f_.type(v).bytes());
  }
  endFrame();
  if (argTableGlobal_) { // the calls' entries are all known now
    auto* table = new llvm::GlobalVariable(llvmModule(), llvm::ArrayType::get(b_.getInt64Ty(), argTable_.size()), true,
                                           llvm::GlobalValue::PrivateLinkage,
                                           llvm::ConstantDataArray::get(b_.getContext(), argTable_), "call.args");
    table->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
    argTableGlobal_->replaceAllUsesWith(table);
    argTableGlobal_->eraseFromParent();
    table->setName("call.args");
  }
  return calleeScratch_ ? calleeScratchAt() + calleeScratch_ : plan_.scratchBytes;
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
                       const VectorUnit& unit, const LowerOptions& o) {
  const bool parallel = o.parallel;
  const ir::Function* ef = m.lookup(entry);
  if (!ef) throw Error("codegen: no function named @" + entry);
  std::map<std::string, FunctionEmitter::Lowered> done;
  std::map<std::string, int> references; // ops naming each function
  for (const auto& fp : m.functions)
    for (const ir::Op& op : fp->ops)
      for (const std::string& c : op.callees) ++references[c];
  const ir::Effects effects(m);
  std::function<FunctionEmitter::Lowered(const ir::Function&, bool)> lower = [&](const ir::Function& f, bool isEntry) {
    auto it = done.find(f.name);
    if (it != done.end()) return it->second;
    llvm::Function* fn = declareKernel(out, f, symbol + (isEntry ? ".impl" : "." + f.name), llvm::GlobalValue::InternalLinkage);
    // A function called from several ops stays one function: inlined at each
    // of many call sites (a step of an unrolled recurrence) it would multiply
    // LLVM's work. One called from a single op (a loop body, a branch) may be
    // inlined there, so a loop keeps its carry in registers.
    if (!isEntry && references[f.name] > 1) fn->addFnAttr(llvm::Attribute::NoInline);
    const auto t0 = std::chrono::steady_clock::now();
    PlanOptions po{.effects = &effects, .parallel = parallel, .unit = &unit};
    if (o.plans && !o.planAfter.empty()) {
      po.observeAfter = o.planAfter;
      po.observe = [&](std::string_view step, const std::string& text) { *o.plans += fmt::format("// after {}\n{}", step, text); };
    }
    FusionPlan plan = planFusion(f, po);
    if (o.planMs) *o.planMs += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (o.plans && o.planAfter.empty()) *o.plans += plan.str();
    // An output a caller may pass in a parameter's buffer: neither is noalias, the parameter not read-only.
    std::vector<std::pair<uint32_t, uint32_t>> shared = plan.sharedOutputs;
    for (auto [output, param] : shared) {
      fn->removeParamAttr(param, llvm::Attribute::NoAlias);
      fn->removeParamAttr(param, llvm::Attribute::ReadOnly);
      fn->removeParamAttr(static_cast<unsigned>(f.params.size() + output), llvm::Attribute::NoAlias);
    }
    FunctionEmitter fe(f, std::move(plan), fn, [&](const std::string& name) { return lower(*m.lookup(name), false); }, unit, parallel,
                        o.lapack);
    FunctionEmitter::Lowered l{fn, fe.emit(), &f, std::move(shared)};
    done[f.name] = l;
    return l;
  };
  const FunctionEmitter::Lowered impl = lower(*ef, true);
  llvm::LLVMContext& ctx = out.getContext();
  auto* ptrTy = llvm::PointerType::get(ctx, 0);
  auto* voidTy = llvm::Type::getVoidTy(ctx);
  const std::size_t nBuffers = ef->params.size() + ef->outputs.size();

  // void <symbol>(ptr in..., ptr out...): allocates its own scratch. Not
  // with the JIT's packed entry: the JIT calls nothing else, and each entry
  // inlines the whole body (twice the code for LLVM to optimise and compile:
  // tier-1 compiles of B1 28.5M -> 21.9M instructions, G3 67.3M -> 60.5M).
  if (!o.packed) {
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
  // void <symbol>_work(ptr in..., ptr out..., ptr scratch): the caller's scratch.
  if (o.work) {
    auto* fn = llvm::Function::Create(llvm::FunctionType::get(voidTy, std::vector<llvm::Type*>(nBuffers + 1, ptrTy), false),
                                      llvm::GlobalValue::ExternalLinkage, symbol + "_work", out);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", fn));
    std::vector<llvm::Value*> args;
    for (auto& a : fn->args()) args.push_back(&a);
    b.CreateCall(impl.fn, args);
    b.CreateRetVoid();
  }
  // void <symbol>.packed(ptr args): args = {in..., out..., scratch}.
  if (o.packed) {
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

LoweringStats measureLowering(const ir::Module& m, const std::string& entry) {
  llvm::LLVMContext ctx;
  llvm::Module out("measure", ctx);
  lowerFunction(m, entry, "measured", out, VectorUnit{}, {.packed = false});
  LoweringStats s;
  std::set<llvm::MDNode*> nodes; // distinct metadata nodes: that is what LLVM stores
  for (llvm::Function& f : out) {
    if (f.isDeclaration()) continue;
    ++s.functions;
    std::size_t n = f.getInstructionCount();
    s.instructions += n;
    s.maxFunctionInstructions = std::max(s.maxFunctionInstructions, n);
    for (llvm::Instruction& i : llvm::instructions(f))
      for (unsigned kind : {llvm::LLVMContext::MD_alias_scope, llvm::LLVMContext::MD_noalias})
        if (llvm::MDNode* md = i.getMetadata(kind); md && nodes.insert(md).second) s.aliasOperands += md->getNumOperands();
  }
  return s;
}

} // namespace adjit::codegen
