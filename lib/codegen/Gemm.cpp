// codegen/Gemm.cpp — the packed matrix product (BLIS's loop nest, generated).
//
//   for jc in N step NC:                 B block KC×NC packed (L3/L2)
//     for pc in K step KC:               pack B[pc:, jc:] into NR-wide panels
//       for ic in M step MC:             pack A[ic:, pc:] into MR-tall panels (L2)
//         for jr in NC step NR:          one B panel stays in L1 ...
//           for ir in MC step MR:        ... while A panels stream past it
//             MR×NR tile of C += A panel · B panel   (register accumulators)
//
// The micro-kernel keeps MR×NR/W vector accumulators (W lanes per register)
// and per step of k loads NR/W vectors of B and broadcasts MR elements of A:
// MR·NR/W fused multiply-adds per MR + NR/W loads. Packing pads edge panels
// with zeros, so the micro-kernel never branches; edge tiles of C go through
// a local tile. Transposed operands differ only in how packing reads them,
// so a VJP's A^T·dY or dY·B^T never materialises a transpose.
//
// Products that stay in cache skip packing: the direct kernel (the same
// micro-kernel reading A and B in place) and, for A·B^T, the dot kernel
// (tiles of dot products along both operands' rows).
#include "codegen/Gemm.h"
#include "support/Assert.h"

#include <adjit/error.h>

#include <fmt/format.h>
#include <llvm/IR/Module.h>

#include <algorithm>

namespace adjit::codegen {
namespace {

/// Register and cache blocking for one dtype on one vector unit.
struct Blocking {
  int64_t lanes; ///< W: elements per vector register
  int64_t mr, nr, kc, mc, nc;
};

Blocking blockingFor(DType t, const VectorUnit& u) {
  const int64_t bytes = static_cast<int64_t>(size_of(t));
  Blocking bl{};
  bl.lanes = std::max<int64_t>(1, u.bits / 8 / bytes);
  bl.nr = 2 * bl.lanes;
  // Accumulators MR·2 plus two B vectors and a broadcast fit the registers:
  // 6×2 + 3 = 15 of 16 (BLIS's Haswell kernels), 12×2 + 3 = 27 of 32.
  bl.mr = u.registers >= 32 ? 12 : 6;
  // A deep KC: the micro-kernel loads and stores its C tile once per KC
  // steps of k, and C of a large product lives in memory. KC = 64 (a B panel
  // in half of L1) made 1024^3-2048^3 products 0.78-0.91x of OpenBLAS; KC =
  // 512 with 32 registers (BLIS's SKX kernels use 384) and 256 with 16
  // (BLIS's Haswell value) make them 0.96-1.05x, f32 and f64, with both
  // kinds of code measured on one Zen 4 core (L2 1 MiB). An A block (MC×KC)
  // takes a quarter of such an L2 (an eighth with 16 registers: older cores
  // have 256 KiB); a B block (KC×NC) 4 MiB of L3, so A is packed again only
  // every 4 MiB of B (1 MiB: 2048^3 f32 went from 1.0x to 0.76-0.92x).
  bl.kc = u.registers >= 32 ? 512 : 256;
  bl.mc = std::max<int64_t>(1, (u.registers >= 32 ? 262144 : 131072) / (bl.kc * bytes) / bl.mr) * bl.mr;
  bl.nc = std::max<int64_t>(1, 4194304 / (bl.kc * bytes) / bl.nr) * bl.nr;
  return bl;
}

/// Products of at most this many multiply-adds run unpacked (measured: at
/// 64×64×64 packing costs a third of the time; at 128^3 it pays for itself).
constexpr int64_t kDirectMaxWork = 256 * 256 * 256;

/// Products C = A B^T whose B is at most this large use the dot kernel
/// (dotPanel), which reads all of B once per panel of rows of A: B must stay
/// in cache. Measured against the packed kernel on one Zen 4 core:
/// - 32 registers (4×4 tiles): 25 × 20×1000 @ (20×1000)^T, a GMM gradient's
///   product, 4.4x faster (0.25x of OpenBLAS -> 1.10x); 64×64 @ (64×4096)^T
///   1.4x; 256×512 @ (512×512)^T 1.05-1.10x; 512^3 f32 (B 1 MiB) and 1024^3
///   f32 (4 MiB) even; 1024^3 f64 (8 MiB) 0.9x, 2048^3 0.4-0.7x.
/// - 16 registers (AVX2, 3×3 tiles: 9 multiply-adds per 6 loads, so B is
///   read from L2 at a higher rate): the GMM product 2.2-3.7x faster, 128×128
///   @ (128×256)^T (B 256 KiB) 1.14x, but 64×64 @ (64×4096)^T (2 MiB) 0.8x
///   and 256×512 @ (512×512)^T 0.85x.
int64_t dotMaxBBytes(const VectorUnit& unit) { return unit.registers >= 32 ? 2 << 20 : 256 << 10; }

/// Unpacked products of fewer multiply-adds run on one thread (about 20 µs
/// of work: handing chunks to the pool costs a few).
constexpr int64_t kParallelGemmWork = 1 << 20;

int64_t roundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/// Most threads that each pack blocks of A of their own (the row split of
/// gemmFunction); with more, the threads share each block (the column split).
/// Each has a block's room in the workspace.
constexpr int64_t kMaxRowThreads = 8;

/// The row split has each thread pack all of B into a block of its own,
/// instead of sharing one packed B, from this many rows per thread and while
/// the threads' blocks take at most kOwnBBytes together. Packing all of B
/// costs a thread about as much as 2-5 rows of the product; sharing it has
/// each core rewrite, every call, lines the other core read the call before.
/// On this 2-core VM, in the phases where that is slow, B4 (132 rows per
/// thread) ran 1.50x faster on two threads than on one with B shared and
/// 1.71-1.79x with blocks of their own (steady calls). In a fast phase (2
/// threads, k = n = 512) own blocks cost: 24 rows per thread 9%, 48 5%, 64
/// 3.7%, 96 1.9%, 128 1.2%.
/// The blocks' bound keeps them to a part of a shared L3 on machines with
/// more cores, where every thread packing B would crowd it.
constexpr int64_t kOwnBRows = 96;
constexpr int64_t kOwnBBytes = 4 << 20;

/// Rows of a block of A in the row split: up to a quarter more than MC, so
/// that a thread's share a little over MC rows is one block, not a block and
/// a sliver (which would read all of the packed B again for a few rows).
int64_t rowSplitBlock(const Blocking& bl) { return roundUp(bl.mc + bl.mc / 4, bl.mr); }

/// Elements of one packed A block for an M×K product: rowSplitBlock rows or
/// M's, KC steps of k or K's, rounded to a multiple of 16 (each thread's block
/// starts on a cache line).
int64_t aBlockElements(int64_t m, int64_t k, const Blocking& bl) {
  return roundUp(std::min(rowSplitBlock(bl), roundUp(m, bl.mr)) * std::min(bl.kc, k), 16);
}

/// Bytes of the packed A blocks (one, or with `parallel` one per thread of
/// the row split) and of the packed B blocks (one, or with `parallel` one per
/// thread that may pack its own: see kOwnBRows) for shape s.
std::pair<uint64_t, uint64_t> packedBytes(const GemmShape& s, const Blocking& bl, bool parallel) {
  const int64_t bytes = static_cast<int64_t>(size_of(s.dtype));
  const int64_t kc = std::min(bl.kc, s.k);
  const int64_t blocks = parallel ? std::clamp<int64_t>((s.m + bl.mr - 1) / bl.mr / 2, 1, kMaxRowThreads) : 1;
  const int64_t each = parallel ? aBlockElements(s.m, s.k, bl) : std::min(bl.mc, roundUp(s.m, bl.mr)) * kc;
  const uint64_t a = static_cast<uint64_t>(blocks * each * bytes);
  // The shared block of B, or the threads' own blocks (kOwnBBytes).
  const int64_t bBlock = std::min(bl.nc, roundUp(s.n, bl.nr)) * kc * bytes;
  const int64_t copies = parallel ? std::clamp<int64_t>(std::min(kOwnBBytes / bBlock, s.m / kOwnBRows), 1, kMaxRowThreads) : 1;
  const uint64_t b = static_cast<uint64_t>(copies * bBlock);
  return {roundUp(static_cast<int64_t>(a), 64), b};
}

/// Builds the generated function's loops over run-time bounds.
class Gen {
public:
  Gen(llvm::Function* fn, DType t, const Blocking& bl) : b_(fn->getContext()), fn_(fn), bl_(bl) {
    elem_ = t == DType::f32 ? b_.getFloatTy() : b_.getDoubleTy();
    vec_ = llvm::FixedVectorType::get(elem_, static_cast<unsigned>(bl.lanes));
    entry_ = llvm::BasicBlock::Create(fn->getContext(), "entry", fn);
    b_.SetInsertPoint(llvm::BasicBlock::Create(fn->getContext(), "body", fn));
    llvm::FastMathFlags fmf;
    fmf.setAllowReassoc(); // no contraction: its multiply-adds are llvm.fmuladd (EmitBase::reassocFlags)
    b_.setFastMathFlags(fmf);
  }

  /// for (iv = begin; iv < end; iv += step) body(iv); LLVM may transform the
  /// loop only when `optimise` (see plain()).
  template <class Body> void forRange(llvm::Value* begin, llvm::Value* end, int64_t step, Body body, bool optimise = false) {
    llvm::Instruction* latch = countedLoop(b_, begin, end, step, body);
    if (!optimise) plain(latch);
  }
  /// Marks a loop's latch branch: the loop stays as written (LLVM would
  /// otherwise vectorise, interleave and unroll these loops at great compile
  /// cost for loops that are already vector code or move little data).
  void plain(llvm::Instruction* latch) {
    llvm::LLVMContext& ctx = b_.getContext();
    setLoopHints(latch, {noVectorizeHint(ctx), llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, "llvm.loop.unroll.disable")})});
  }
  template <class Body> void forCount(llvm::Value* n, Body body, bool optimise = false) {
    forRange(i64(0), n, 1, body, optimise);
  }

  /// if (cond) then() else otherwise()
  template <class Then, class Else> void ifElse(llvm::Value* cond, Then then, Else otherwise) {
    branches(b_, cond, then, otherwise, "join");
  }

  /// for (p = 0; p < end; p += step) accs = body(p, accs), with `count`
  /// vector accumulators from zero carried in registers (end >= step);
  /// returns their final values. The loop stays as written (plain).
  template <class Body>
  std::vector<llvm::Value*> accumulate(llvm::Value* end, int64_t step, std::size_t count, Body body) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* loop = llvm::BasicBlock::Create(b_.getContext(), "acc", fn_);
    auto* done = llvm::BasicBlock::Create(b_.getContext(), "acc.done", fn_);
    b_.CreateBr(loop);
    b_.SetInsertPoint(loop);
    llvm::PHINode* p = b_.CreatePHI(b_.getInt64Ty(), 2);
    p->addIncoming(i64(0), pre);
    std::vector<llvm::Value*> acc(count);
    std::vector<llvm::PHINode*> phis(count);
    for (std::size_t i = 0; i < count; ++i) {
      acc[i] = phis[i] = b_.CreatePHI(vec_, 2);
      phis[i]->addIncoming(llvm::Constant::getNullValue(vec_), pre);
    }
    acc = body(static_cast<llvm::Value*>(p), std::move(acc));
    for (std::size_t i = 0; i < count; ++i) phis[i]->addIncoming(acc[i], b_.GetInsertBlock());
    llvm::Value* next = add(p, i64(step));
    p->addIncoming(next, b_.GetInsertBlock());
    plain(b_.CreateCondBr(b_.CreateICmpSLT(next, end), loop, done));
    b_.SetInsertPoint(done);
    return acc;
  }

  /// The micro-kernel: sums[r·nv + v] = Σ_{p < kc} splat(a(p, r)) · b(p, v),
  /// rows × nv vector accumulators kept in registers through the k loop (kc >= 1).
  template <class AElem, class BVec>
  std::vector<llvm::Value*> microKernel(llvm::Value* kc, int64_t rows, int64_t nv, AElem a, BVec bvec) {
    return accumulate(kc, 1, static_cast<std::size_t>(rows * nv), [&](llvm::Value* p, std::vector<llvm::Value*> acc) {
      std::vector<llvm::Value*> bv(static_cast<std::size_t>(nv));
      for (int64_t v = 0; v < nv; ++v) bv[static_cast<std::size_t>(v)] = bvec(p, v);
      for (int64_t r = 0; r < rows; ++r) {
        llvm::Value* splat = b_.CreateVectorSplat(static_cast<unsigned>(bl_.lanes), a(p, r));
        for (int64_t v = 0; v < nv; ++v) {
          llvm::Value*& x = acc[static_cast<std::size_t>(r * nv + v)];
          x = b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {vec_}, {splat, bv[static_cast<std::size_t>(v)], x});
        }
      }
      return acc;
    });
  }

  /// panel[p][lane] = elem(p, lane) for p < kc and lane < width; with
  /// `lanesOuter` the lanes loop outside (reads run along p), else inside.
  template <class Elem>
  void packPanel(llvm::Value* panel, llvm::Value* kc, int64_t width, bool lanesOuter, bool optimise, Elem elem) {
    auto one = [&](llvm::Value* p, llvm::Value* lane) { store(elem(p, lane), panel, add(mul(p, i64(width)), lane)); };
    if (lanesOuter)
      forCount(i64(width), [&](llvm::Value* lane) { forCount(kc, [&](llvm::Value* p) { one(p, lane); }, optimise); });
    else
      forCount(kc, [&](llvm::Value* p) { forCount(i64(width), [&](llvm::Value* lane) { one(p, lane); }); });
  }
  /// The last panel, of which only `valid` lanes are real: zeros in the
  /// others (elem is asked for a real lane only, so it never reads past the edge).
  template <class Elem> void packEdge(llvm::Value* panel, llvm::Value* kc, int64_t width, llvm::Value* valid, Elem elem) {
    packPanel(panel, kc, width, false, false, [&](llvm::Value* p, llvm::Value* lane) {
      llvm::Value* in = b_.CreateICmpSLT(lane, valid);
      return b_.CreateSelect(in, elem(p, b_.CreateSelect(in, lane, i64(0))), zero());
    });
  }

  llvm::Value* i64(int64_t v) { return b_.getInt64(static_cast<uint64_t>(v)); }
  llvm::Value* add(llvm::Value* x, llvm::Value* y) { return b_.CreateAdd(x, y, "", true, true); }
  llvm::Value* mul(llvm::Value* x, llvm::Value* y) { return b_.CreateMul(x, y, "", true, true); }
  llvm::Value* min(llvm::Value* x, llvm::Value* y) { return b_.CreateSelect(b_.CreateICmpSLT(x, y), x, y); }
  /// ceil(x / d) for x >= 0, d > 0.
  llvm::Value* ceilDiv(llvm::Value* x, llvm::Value* d) { return b_.CreateUDiv(add(x, b_.CreateSub(d, i64(1))), d); }
  llvm::Value* ceilDiv(llvm::Value* x, int64_t d) { return ceilDiv(x, i64(d)); }
  llvm::Value* at(llvm::Value* base, llvm::Value* i) { return b_.CreateInBoundsGEP(elem_, base, i); }
  llvm::Value* load(llvm::Value* base, llvm::Value* i) { return b_.CreateAlignedLoad(elem_, at(base, i), align()); }
  void store(llvm::Value* v, llvm::Value* base, llvm::Value* i) { b_.CreateAlignedStore(v, at(base, i), align()); }
  llvm::Value* loadVec(llvm::Value* base, llvm::Value* i) { return b_.CreateAlignedLoad(vec_, at(base, i), align()); }
  void storeVec(llvm::Value* v, llvm::Value* base, llvm::Value* i) { b_.CreateAlignedStore(v, at(base, i), align()); }
  llvm::Value* zero() { return llvm::ConstantFP::get(elem_, 0.0); }
  llvm::Value* alloca(int64_t count) { return allocaOf(elem_, count); }
  /// `count` 8-byte slots.
  llvm::Value* alloca8(int64_t count) { return allocaOf(b_.getInt64Ty(), count); }
  llvm::Value* allocaOf(llvm::Type* t, int64_t count) {
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    auto* a = eb.CreateAlloca(t, eb.getInt64(static_cast<uint64_t>(count)));
    a->setAlignment(llvm::Align(64));
    return a;
  }
  /// Calls tile function `fn` (an epilogue or a prologue: tileFunctionType) on
  /// rows [row0, row0 + rows) and columns [col0, col0 + cols) of matrix
  /// `matrix`, their values at tile[r · stride + c] (see LowerCtx::callEpilogue).
  void callTile(llvm::Value* fn, llvm::Value* ctx, llvm::Value* matrix, llvm::Value* row0, llvm::Value* rows, llvm::Value* col0,
                llvm::Value* cols, llvm::Value* tile, int64_t stride) {
    b_.CreateCall(tileFunctionType(b_.getContext()), fn, {ctx, matrix, row0, add(row0, rows), col0, add(col0, cols), tile, i64(stride)});
  }

  void finish() {
    b_.CreateRetVoid();
    llvm::IRBuilder<>(entry_).CreateBr(entry_->getNextNode());
  }

  Builder b_;
  llvm::Function* fn_;
  const Blocking bl_;
  llvm::Type* elem_;
  llvm::FixedVectorType* vec_;

private:
  llvm::Align align() const { return llvm::Align(elem_->getPrimitiveSizeInBits() / 8); }
  llvm::BasicBlock* entry_;
};

/// The context the packed product's chunk functions read: 8-byte slots. With
/// a tile epilogue (kTileEpilogue), each tile of C calls sEpi once final, from
/// a local tile (after the last block of k, sLast, in the packed kernel): C's
/// elements go to memory once, as the epilogue's results. The functions that
/// call an epilogue are variants of their own (".epi"): code without one
/// stays as it was, and so does its compile time.
/// With a prologue for A or B (kTilePrologue; sProA, sProB), the packing
/// computes that operand's elements instead of reading them.
enum Slot {
  sA, sB, sC, sAp, sBp, sM, sN, sK, sIc, sJc, sPc, sKc, sMc, sNc, sFirst, sLast, sEpi, sEpiCtx, sMatrix,
  sProA, sProACtx, sProB, sProBCtx, sRowThreads, kSlots
};

/// The slots of a context, loaded in a chunk function's entry.
struct Slots {
  Builder& b;
  llvm::Value* base;
  llvm::Value* ptr(Slot s) const { return b.CreateLoad(b.getPtrTy(), at(s)); }
  llvm::Value* i64(Slot s) const { return b.CreateLoad(b.getInt64Ty(), at(s)); }
  llvm::Value* at(Slot s) const { return b.CreateConstInBoundsGEP1_64(b.getInt64Ty(), base, static_cast<uint64_t>(s)); }
};

/// A prologue's steps of k per call when its tile is transposed into a panel.
constexpr int64_t kPrologueSteps = 64;

/// Packs steps [k0, k0 + kc) of one panel of `width` lanes, `valid` of them
/// real (lanes [l0, l0 + valid) of the operand), computing the operand with
/// prologue `pro` instead of reading it. With `lanesAreColumns` (B, or A
/// stored transposed) the panel's layout is the operand's rows k0.. and
/// columns l0..: the prologue writes it in place. Otherwise (A, or B stored
/// transposed: rows are lanes, columns are k) the prologue writes
/// kPrologueSteps steps at a time into `tile`, which is copied across.
/// Padding lanes get zeros either way.
void packFromPrologue(Gen& g, const Slots& sl, Slot pro, llvm::Value* panel, llvm::Value* k0, llvm::Value* kc, llvm::Value* l0,
                      llvm::Value* valid, int64_t width, bool lanesAreColumns, llvm::Value* tile) {
  Builder& b = g.b_;
  llvm::Value *fn = sl.ptr(pro), *ctx = sl.ptr(static_cast<Slot>(pro + 1)), *matrix = sl.i64(sMatrix);
  if (lanesAreColumns) {
    g.callTile(fn, ctx, matrix, k0, kc, l0, valid, panel, width);
    g.forCount(kc, [&](llvm::Value* p) {
      g.forRange(valid, g.i64(width), 1, [&](llvm::Value* lane) { g.store(g.zero(), panel, g.add(g.mul(p, g.i64(width)), lane)); });
    });
    return;
  }
  g.forRange(g.i64(0), kc, kPrologueSteps, [&](llvm::Value* p0) {
    llvm::Value* steps = g.min(g.i64(kPrologueSteps), b.CreateSub(kc, p0));
    g.callTile(fn, ctx, matrix, l0, valid, g.add(k0, p0), steps, tile, kPrologueSteps);
    llvm::Value* sub = g.at(panel, g.mul(p0, g.i64(width)));
    auto elem = [&](llvm::Value* p, llvm::Value* lane) { return g.load(tile, g.add(g.mul(lane, g.i64(kPrologueSteps)), p)); };
    // Along the tile's rows, vectorised (the transposing copy of packing A).
    g.ifElse(b.CreateICmpEQ(valid, g.i64(width)), [&] { g.packPanel(sub, steps, width, true, true, elem); },
             [&] { g.packEdge(sub, steps, width, valid, elem); });
  });
}

/// void name(ptr slots, i64 chunk): body(g, slots, chunk), once per module.
template <class Body>
llvm::Function* chunkFunction(llvm::Module& module, const std::string& name, DType t, const VectorUnit& unit, Body body) {
  if (llvm::Function* f = module.getFunction(name)) return f;
  llvm::Function* fn = declareChunkFunction(module, name, unit.bits);
  Gen g(fn, t, blockingFor(t, unit));
  body(g, Slots{g.b_, fn->getArg(0)}, static_cast<llvm::Value*>(fn->getArg(1)));
  g.finish();
  return fn;
}

/// Packs panel `chunk` of B[pc:pc+kc, jc:jc+nc] (NR columns) into Bp[panel][p][jj].
llvm::Function* packBFunction(llvm::Module& module, DType t, const VectorUnit& unit, bool transB, const std::string& name,
                              bool prologue) {
  return chunkFunction(module, name, t, unit, [&](Gen& g, const Slots& sl, llvm::Value* chunk) {
    Builder& b = g.b_;
    const int64_t NR = g.bl_.nr, W = g.bl_.lanes, NV = NR / W;
    llvm::Value *B = sl.ptr(sB), *Bp = sl.ptr(sBp), *N = sl.i64(sN), *K = sl.i64(sK);
    llvm::Value *jc = sl.i64(sJc), *pc = sl.i64(sPc), *kc = sl.i64(sKc), *nc = sl.i64(sNc);
    auto bIndex = [&](llvm::Value* p, llvm::Value* j) { return transB ? g.add(g.mul(j, K), p) : g.add(g.mul(p, N), j); };
    llvm::Value* j0 = g.mul(chunk, g.i64(NR));
    llvm::Value* panel = g.at(Bp, g.mul(j0, kc));
    llvm::Value* cols = g.min(g.i64(NR), b.CreateSub(nc, j0));
    llvm::Value* col0 = g.add(jc, j0);
    if (prologue)
      return packFromPrologue(g, sl, sProB, panel, pc, kc, col0, cols, NR, !transB, transB ? g.alloca(NR * kPrologueSteps) : nullptr);
    g.ifElse(
        b.CreateICmpEQ(cols, g.i64(NR)),
        [&] {
          if (!transB) { // rows of B are contiguous: copy vectors
            g.forCount(kc, [&](llvm::Value* p) {
              llvm::Value* src = bIndex(g.add(pc, p), col0);
              for (int64_t v = 0; v < NV; ++v)
                g.storeVec(g.loadVec(B, g.add(src, g.i64(v * W))), panel, g.add(g.mul(p, g.i64(NR)), g.i64(v * W)));
            });
          } else { // columns of op(B) are contiguous: read along them
            g.packPanel(panel, kc, NR, true, false, [&](llvm::Value* p, llvm::Value* jj) { return g.load(B, bIndex(g.add(pc, p), g.add(col0, jj))); });
          }
        },
        [&] { // the last, narrower panel
          g.packEdge(panel, kc, NR, cols, [&](llvm::Value* p, llvm::Value* jj) { return g.load(B, bIndex(g.add(pc, p), g.add(col0, jj))); });
        });
  });
}

/// Packs panel `chunk` of A[ic:ic+mc, pc:pc+kc] (MR rows) into Ap[panel][p][ii].
llvm::Function* packAFunction(llvm::Module& module, DType t, const VectorUnit& unit, bool transA, const std::string& name,
                              bool prologue) {
  return chunkFunction(module, name, t, unit, [&](Gen& g, const Slots& sl, llvm::Value* chunk) {
    Builder& b = g.b_;
    const int64_t MR = g.bl_.mr;
    llvm::Value *A = sl.ptr(sA), *Ap = sl.ptr(sAp), *M = sl.i64(sM), *K = sl.i64(sK);
    llvm::Value *ic = sl.i64(sIc), *pc = sl.i64(sPc), *kc = sl.i64(sKc), *mc = sl.i64(sMc);
    auto aIndex = [&](llvm::Value* i, llvm::Value* p) { return transA ? g.add(g.mul(p, M), i) : g.add(g.mul(i, K), p); };
    llvm::Value* i0 = g.mul(chunk, g.i64(MR));
    llvm::Value* panel = g.at(Ap, g.mul(i0, kc));
    llvm::Value* rows = g.min(g.i64(MR), b.CreateSub(mc, i0));
    llvm::Value* row0 = g.add(ic, i0);
    if (prologue)
      return packFromPrologue(g, sl, sProA, panel, pc, kc, row0, rows, MR, transA, transA ? nullptr : g.alloca(MR * kPrologueSteps));
    auto elem = [&](llvm::Value* p, llvm::Value* ii) { return g.load(A, aIndex(g.add(row0, ii), g.add(pc, p))); };
    g.ifElse(
        b.CreateICmpEQ(rows, g.i64(MR)),
        // Rows of A are contiguous: read along them (LLVM's vectoriser turns
        // this transposing copy into shuffles: 20% of a 512^3 product's time
        // without it); rows of A^T are the panel's steps: copy them.
        [&] { g.packPanel(panel, kc, MR, !transA, !transA, elem); },
        [&] { g.packEdge(panel, kc, MR, rows, elem); }); // the last, shorter panel
  });
}

/// Column panel `chunk` (NR columns) of C's block at (ic, jc) += packed A
/// block · packed B panel, one micro-tile per MR rows. The edge tile lives in
/// this function: each thread has its own.
llvm::Function* panelFunction(llvm::Module& module, DType t, const VectorUnit& unit, const std::string& name, bool epilogue) {
  return chunkFunction(module, name, t, unit, [&](Gen& g, const Slots& sl, llvm::Value* chunk) {
    Builder& b = g.b_;
    const int64_t MR = g.bl_.mr, NR = g.bl_.nr, W = g.bl_.lanes, NV = NR / W;
    llvm::Value *Ap = sl.ptr(sAp), *Bp = sl.ptr(sBp), *C = sl.ptr(sC), *N = sl.i64(sN);
    llvm::Value *ic = sl.i64(sIc), *jc = sl.i64(sJc), *kc = sl.i64(sKc), *mc = sl.i64(sMc), *nc = sl.i64(sNc);
    llvm::Value* first = b.CreateICmpNE(sl.i64(sFirst), g.i64(0));
    llvm::Value *epi = sl.ptr(sEpi), *epiCtx = sl.ptr(sEpiCtx), *matrix = sl.i64(sMatrix);
    llvm::Value* final = epilogue ? b.CreateICmpNE(sl.i64(sLast), g.i64(0)) : b.getFalse();
    llvm::Value* tile = g.alloca(MR * NR); // an edge tile of C, or the final values the epilogue reads
    llvm::Value* jr = g.mul(chunk, g.i64(NR));
    llvm::Value* bPanel = g.at(Bp, g.mul(jr, kc));
    llvm::Value* cols = g.min(g.i64(NR), b.CreateSub(nc, jr));
    g.forRange(g.i64(0), mc, MR, [&](llvm::Value* ir) {
      llvm::Value* aPanel = g.at(Ap, g.mul(ir, kc));
      llvm::Value* rows = g.min(g.i64(MR), b.CreateSub(mc, ir));
      // The tile of C is read after the k loop: fetch its lines now, so
      // they arrive during the loop instead of stalling after it.
      llvm::Value* c0 = g.add(g.mul(g.add(ic, ir), N), g.add(jc, jr));
      g.forCount(rows, [&](llvm::Value* r) {
        llvm::Value* rowAt = g.add(c0, g.mul(r, N));
        for (int64_t v = 0; v < NV; ++v)
          b.CreateIntrinsic(llvm::Intrinsic::prefetch, {b.getPtrTy()},
                            {g.at(C, g.add(rowAt, g.i64(v * W))), b.getInt32(1), b.getInt32(3), b.getInt32(1)});
      });
      std::vector<llvm::Value*> sums = g.microKernel(
          kc, MR, NV, [&](llvm::Value* p, int64_t r) { return g.load(aPanel, g.add(g.mul(p, g.i64(MR)), g.i64(r))); },
          [&](llvm::Value* p, int64_t v) { return g.loadVec(bPanel, g.add(g.mul(p, g.i64(NR)), g.i64(v * W))); });
      auto update = [&](llvm::Value* old, llvm::Value* sum) { return b.CreateSelect(first, sum, b.CreateFAdd(old, sum)); };
      auto toTile = [&] {
        for (int64_t r = 0; r < MR; ++r)
          for (int64_t v = 0; v < NV; ++v) g.storeVec(sums[static_cast<std::size_t>(r * NV + v)], tile, g.i64(r * NR + v * W));
      };
      auto lastBlock = [&] { // C's final values stay in the tile, which the epilogue reads
            toTile();
            g.ifElse(
                first, [] {},
                [&] { // add what the earlier blocks of k left in C
                  g.forCount(rows, [&](llvm::Value* r) {
                    g.forCount(cols, [&](llvm::Value* j) {
                      llvm::Value* at = g.add(g.mul(r, g.i64(NR)), j);
                      g.store(b.CreateFAdd(g.load(tile, at), g.load(C, g.add(c0, g.add(g.mul(r, N), j)))), tile, at);
                    });
                  });
                });
            g.callTile(epi, epiCtx, matrix, g.add(ic, ir), rows, g.add(jc, jr), cols, tile, NR);
      };
      auto inC = [&] {
            g.ifElse(
                b.CreateAnd(b.CreateICmpEQ(rows, g.i64(MR)), b.CreateICmpEQ(cols, g.i64(NR))),
                [&] {
                  for (int64_t r = 0; r < MR; ++r)
                    for (int64_t v = 0; v < NV; ++v) {
                      llvm::Value* at = g.add(c0, g.add(g.mul(g.i64(r), N), g.i64(v * W)));
                      g.storeVec(update(g.loadVec(C, at), sums[static_cast<std::size_t>(r * NV + v)]), C, at);
                    }
                },
                [&] {
                  toTile();
                  g.forCount(rows, [&](llvm::Value* r) {
                    g.forCount(cols, [&](llvm::Value* j) {
                      llvm::Value* at = g.add(c0, g.add(g.mul(r, N), j));
                      g.store(update(g.load(C, at), g.load(tile, g.add(g.mul(r, g.i64(NR)), j))), C, at);
                    });
                  });
                });
      };
      if (epilogue) g.ifElse(final, lastBlock, inC);
      else inC();
    });
  });
}

/// Rows `chunk` of sRowThreads even shares of C's row panels at (jc, pc),
/// all of nc's columns: this thread packs its blocks of A (of even size, at
/// most rowSplitBlock rows) into its own part of Ap and multiplies them by
/// every panel of the packed B, through packA and panel on a copy of the slots.
/// With `packB`, the thread first packs all of B itself, into block `chunk`
/// of Bp (kOwnBRows); without, the threads share one packed B.
llvm::Function* rowsFunction(llvm::Module& module, DType t, const VectorUnit& unit, const std::string& name, llvm::Function* packA,
                             llvm::Function* panel, llvm::Function* packB = nullptr) {
  return chunkFunction(module, name, t, unit, [&](Gen& g, const Slots& sl, llvm::Value* chunk) {
    Builder& b = g.b_;
    const int64_t MR = g.bl_.mr, NR = g.bl_.nr, most = rowSplitBlock(g.bl_);
    llvm::Value* local = g.alloca8(kSlots);
    b.CreateMemCpy(local, llvm::MaybeAlign(8), sl.base, llvm::MaybeAlign(8), kSlots * 8);
    const Slots own{b, local};
    llvm::Value *M = sl.i64(sM), *K = sl.i64(sK), *threads = sl.i64(sRowThreads), *nc = sl.i64(sNc);
    llvm::Value* rowPanels = g.ceilDiv(M, MR);
    auto rowAt = [&](llvm::Value* share) { return g.min(g.mul(b.CreateUDiv(g.mul(rowPanels, share), threads), g.i64(MR)), M); };
    llvm::Value *r0 = rowAt(chunk), *r1 = rowAt(g.add(chunk, g.i64(1)));
    // aBlockElements at run time: this thread's block in the workspace.
    llvm::Value* rows = g.min(g.i64(most), g.mul(rowPanels, g.i64(MR)));
    llvm::Value* elements = g.mul(g.ceilDiv(g.mul(rows, g.min(g.i64(g.bl_.kc), K)), 16), g.i64(16));
    b.CreateStore(g.at(sl.ptr(sAp), g.mul(chunk, elements)), own.at(sAp));
    if (packB) {
      llvm::Value* bElements = g.mul(g.mul(g.ceilDiv(nc, NR), g.i64(NR)), g.min(g.i64(g.bl_.kc), K));
      b.CreateStore(g.at(sl.ptr(sBp), g.mul(chunk, bElements)), own.at(sBp));
      g.forCount(g.ceilDiv(nc, NR), [&](llvm::Value* j) { b.CreateCall(packB, {local, j}); });
    }
    llvm::Value* share = b.CreateSub(r1, r0);
    llvm::Value* blocks = g.ceilDiv(share, most); // >= 1: every share has two row panels or more
    llvm::Value* block = g.mul(g.ceilDiv(g.ceilDiv(share, b.CreateSelect(b.CreateICmpEQ(blocks, g.i64(0)), g.i64(1), blocks)), MR),
                               g.i64(MR)); // <= most: a multiple of MR
    g.forCount(blocks, [&](llvm::Value* k) {
      llvm::Value* ic = g.add(r0, g.mul(k, block));
      llvm::Value* mc = g.min(block, b.CreateSub(r1, ic));
      b.CreateStore(ic, own.at(sIc));
      b.CreateStore(mc, own.at(sMc));
      g.forCount(g.ceilDiv(mc, MR), [&](llvm::Value* i) { b.CreateCall(packA, {local, i}); });
      g.forCount(g.ceilDiv(nc, NR), [&](llvm::Value* j) { b.CreateCall(panel, {local, j}); });
    });
  });
}

/// void gemm(A, B, C, Ap, Bp, M, N, K, epi, epiCtx, matrix, proA, proACtx,
/// proB, proBCtx): C = op(A) op(B) for one matrix (`matrix` of the batch, for
/// the epilogue and the prologues). Its
/// packing and column panels are chunk functions over one context; with
/// `parallel`, each step's chunks go through adjit_parallel_for. Every element
/// of C is summed by one chunk in one order: results do not depend on threads.
llvm::Function* gemmFunction(llvm::Module& module, DType t, bool transA, bool transB, const VectorUnit& unit, bool parallel,
                             bool epilogue, bool prologueA, bool prologueB) {
  const std::string base = std::string("adjit.gemm.") + std::string(name_of(t)) + "." + std::to_string(unit.bits);
  const std::string name =
      base + "." + (transA ? "t" : "n") + (transB ? "t" : "n") + (parallel ? ".par" : "") + (epilogue ? ".epi" : "") +
      (prologueA ? ".proA" : "") + (prologueB ? ".proB" : "");
  if (llvm::Function* f = module.getFunction(name)) return f;
  const std::string packBName = base + ".packB." + (transB ? "t" : "n") + (prologueB ? ".pro" : "");
  const std::string packAName = base + ".packA." + (transA ? "t" : "n") + (prologueA ? ".pro" : "");
  llvm::Function* packB = packBFunction(module, t, unit, transB, packBName, prologueB);
  llvm::Function* packA = packAFunction(module, t, unit, transA, packAName, prologueA);
  llvm::Function* panel = panelFunction(module, t, unit, base + ".panel" + (epilogue ? ".epi" : ""), epilogue);
  llvm::LLVMContext& ctx = module.getContext();
  auto* ptr = llvm::PointerType::get(ctx, 0);
  auto* i64 = llvm::Type::getInt64Ty(ctx);
  // A, B, C, Ap, Bp, M, N, K, the epilogue and its context, the matrix, the prologues of A and B and their contexts
  auto* ty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx),
                                     {ptr, ptr, ptr, ptr, ptr, i64, i64, i64, ptr, ptr, i64, ptr, ptr, ptr, ptr}, false);
  auto* fn = llvm::Function::Create(ty, llvm::GlobalValue::InternalLinkage, name, module);
  for (unsigned a = 0; a < 5; ++a) {
    fn->addParamAttr(a, llvm::Attribute::NoAlias);
    fn->addParamAttr(a, llvm::Attribute::NoCapture);
  }
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  fn->addFnAttr(llvm::Attribute::NoInline);
  const Blocking bl = blockingFor(t, unit);
  Gen g(fn, t, bl);
  Builder& b = g.b_;
  llvm::Value* slots = g.alloca8(kSlots);
  auto set = [&](Slot s, llvm::Value* v) { b.CreateStore(v, Slots{b, slots}.at(s)); };
  for (unsigned a = 0; a < 8; ++a) set(static_cast<Slot>(a), fn->getArg(a)); // A, B, C, Ap, Bp, M, N, K
  set(sEpi, fn->getArg(8));
  set(sEpiCtx, fn->getArg(9));
  set(sMatrix, fn->getArg(10));
  for (unsigned a = 0; a < 4; ++a) set(static_cast<Slot>(sProA + a), fn->getArg(11 + a)); // prologues of A and B, their contexts
  llvm::Value *M = fn->getArg(5), *N = fn->getArg(6), *K = fn->getArg(7);
  llvm::FunctionCallee parallelFor = module.getOrInsertFunction(
      "adjit_parallel_for", llvm::FunctionType::get(b.getVoidTy(), {b.getPtrTy(), b.getPtrTy(), b.getInt64Ty()}, false));
  // Runs chunks [0, count) of f: on threads, or in order here.
  auto dispatch = [&](llvm::Function* f, llvm::Value* count) {
    if (parallel) b.CreateCall(parallelFor, {f, slots, count});
    else g.forCount(count, [&](llvm::Value* c) { b.CreateCall(f, {slots, c}); });
  };
  auto panels = [&](llvm::Value* extent, int64_t width) { return g.ceilDiv(extent, width); };
  llvm::FunctionCallee parallelThreads = module.getOrInsertFunction("adjit_parallel_threads", llvm::FunctionType::get(b.getInt64Ty(), false));
  const std::string suffix = std::string(transA ? "t" : "n") + (prologueA ? ".proA" : "") + (epilogue ? ".epi" : "");
  llvm::Function* rows = parallel ? rowsFunction(module, t, unit, base + ".rows." + suffix, packA, panel) : nullptr;
  llvm::Function* ownRows =
      parallel ? rowsFunction(module, t, unit, base + ".rows.own." + suffix + (transB ? ".t" : ".n") + (prologueB ? ".proB" : ""), packA,
                              panel, packB)
               : nullptr;
  g.forRange(g.i64(0), N, bl.nc, [&](llvm::Value* jc) {
    llvm::Value* nc = g.min(g.i64(bl.nc), b.CreateSub(N, jc));
    set(sJc, jc);
    set(sNc, nc);
    g.forRange(g.i64(0), K, bl.kc, [&](llvm::Value* pc) {
      set(sPc, pc);
      set(sKc, g.min(g.i64(bl.kc), b.CreateSub(K, pc)));
      set(sFirst, b.CreateZExt(b.CreateICmpEQ(pc, g.i64(0)), b.getInt64Ty()));
      set(sLast, b.CreateZExt(b.CreateICmpSGE(g.add(pc, g.i64(bl.kc)), K), b.getInt64Ty()));
      auto columnSplit = [&] { // the threads share each block of A and split its column panels
        dispatch(packB, panels(nc, bl.nr));
        g.forRange(g.i64(0), M, bl.mc, [&](llvm::Value* ic) {
          llvm::Value* mc = g.min(g.i64(bl.mc), b.CreateSub(M, ic));
          set(sIc, ic);
          set(sMc, mc);
          dispatch(packA, panels(mc, bl.mr));
          dispatch(panel, panels(nc, bl.nr));
        });
      };
      if (!rows) return columnSplit();
      // The row split when every thread gets two row panels or more: each
      // packs and multiplies blocks of A of its own. Sharing the blocks made
      // B4 (256×512 @ 512×512 twice) 1.53-1.65x faster on two threads than
      // on one in the half of the time this machine runs slower, when the
      // OpenMP baseline threaded by rows stayed at 1.9-2.0x: each thread
      // rewrote the packed lines the other had just read. The shares are
      // fixed: letting a thread done early take units of the others' last
      // blocks of A balanced the threads when one core ran slower, but
      // reading the packed A the other core wrote, and writing tiles of C
      // that core reads next, cost more than the wait (README, Threads).
      llvm::Value* threads = b.CreateCall(parallelThreads);
      llvm::Value* fits = b.CreateAnd(b.CreateAnd(b.CreateICmpSGE(threads, g.i64(2)), b.CreateICmpSLE(threads, g.i64(kMaxRowThreads))),
                                      b.CreateICmpSLE(g.mul(threads, g.i64(2)), panels(M, bl.mr)));
      // Each thread packs all of B into a block of its own (kOwnBRows). The
      // workspace holds packedBytes' block of B min(kOwnBBytes / block,
      // M / kOwnBRows) times: both conditions below keep `threads` within it.
      llvm::Value* bBlockBytes = g.mul(g.mul(g.min(g.i64(bl.nc), g.mul(panels(N, bl.nr), g.i64(bl.nr))), g.i64(int64_t(size_of(t)))),
                                       g.min(g.i64(bl.kc), K));
      llvm::Value* own = b.CreateAnd(b.CreateICmpSGE(b.CreateUDiv(M, threads), g.i64(kOwnBRows)),
                                     b.CreateICmpSLE(g.mul(threads, bBlockBytes), g.i64(kOwnBBytes)));
      set(sRowThreads, threads);
      g.ifElse(fits, [&] {
        g.ifElse(own, [&] { b.CreateCall(parallelFor, {ownRows, slots, threads}); }, [&] {
          dispatch(packB, panels(nc, bl.nr));
          b.CreateCall(parallelFor, {rows, slots, threads});
        });
      }, columnSplit);
    });
  });
  g.finish();
  return fn;
}

/// The epilogue a chunk function calls on its final tiles (sEpi, sEpiCtx).
struct TileEpilogue {
  llvm::Value *fn, *ctx;
};

/// Column panel `chunk` (of every matrix's ceil(N / NR), matrix after
/// matrix) of the direct product; see directGemmFunction.
void directPanel(Gen& g, const GemmShape& s, llvm::Value* A0, llvm::Value* B0, llvm::Value* C0, llvm::Value* chunk,
                 const TileEpilogue* epi) {
  const Blocking& bl = g.bl_;
  Builder& b = g.b_;
  const int64_t MR = bl.mr, NR = bl.nr, W = bl.lanes, M = s.m, N = s.n, K = s.k;
  const int64_t panels = (N + NR - 1) / NR;
  llvm::Value* matrix = b.CreateUDiv(chunk, g.i64(panels));
  llvm::Value* which = b.CreateURem(chunk, g.i64(panels));
  llvm::Value* A = g.at(A0, g.mul(matrix, g.i64(M * K)));
  llvm::Value* B = g.at(B0, g.mul(matrix, g.i64(K * N)));
  llvm::Value* C = g.at(C0, g.mul(matrix, g.i64(M * N)));
  llvm::Align align(size_of(s.dtype));
  llvm::Value* tileBuffer = epi ? g.alloca(MR * NR) : nullptr;
  // One tile of `rows` rows at row0 (a value), `cols` columns at col0.
  auto tile = [&](llvm::Value* row0, int64_t rows, llvm::Value* col0, int64_t cols) {
    const int64_t nv = (cols + W - 1) / W;
    auto mask = [&](int64_t v) -> llvm::Value* { // lanes of vector v inside the columns, or null for all
      if ((v + 1) * W <= cols) return nullptr;
      std::vector<llvm::Constant*> bits;
      for (int64_t l = 0; l < W; ++l) bits.push_back(b.getInt1(v * W + l < cols));
      return llvm::ConstantVector::get(bits);
    };
    std::vector<llvm::Value*> sums = g.microKernel(
        g.i64(K), rows, nv,
        [&](llvm::Value* p, int64_t r) {
          llvm::Value* i = g.add(row0, g.i64(r));
          return g.load(A, s.transA ? g.add(g.mul(p, g.i64(M)), i) : g.add(g.mul(i, g.i64(K)), p));
        },
        [&](llvm::Value* p, int64_t v) -> llvm::Value* {
          llvm::Value* at = g.at(B, g.add(g.mul(p, g.i64(N)), g.add(col0, g.i64(v * W))));
          if (llvm::Value* m = mask(v)) return b.CreateMaskedLoad(g.vec_, at, align, m, llvm::Constant::getNullValue(g.vec_));
          return b.CreateAlignedLoad(g.vec_, at, align);
        });
    if (epi) { // the epilogue reads the tile from here; C's elements go to memory once, as its results
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t v = 0; v < nv; ++v) g.storeVec(sums[static_cast<std::size_t>(r * nv + v)], tileBuffer, g.i64(r * nv * W + v * W));
      g.callTile(epi->fn, epi->ctx, matrix, row0, g.i64(rows), col0, g.i64(cols), tileBuffer, nv * W);
      return;
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t v = 0; v < nv; ++v) {
        llvm::Value* at = g.at(C, g.add(g.mul(g.add(row0, g.i64(r)), g.i64(N)), g.add(col0, g.i64(v * W))));
        llvm::Value* sum = sums[static_cast<std::size_t>(r * nv + v)];
        if (llvm::Value* m = mask(v)) b.CreateMaskedStore(sum, at, align, m);
        else b.CreateAlignedStore(sum, at, align);
      }
  };
  // The panel's row panels: full ones in a loop, then the rest.
  auto panel = [&](llvm::Value* col0, int64_t cols) {
    if (M / MR > 0) g.forRange(g.i64(0), g.i64(M / MR * MR), MR, [&](llvm::Value* row0) { tile(row0, MR, col0, cols); });
    if (M % MR) tile(g.i64(M / MR * MR), M % MR, col0, cols);
  };
  if (N % NR == 0) panel(g.mul(which, g.i64(NR)), NR);
  else if (N / NR == 0) panel(g.i64(0), N % NR);
  else
    g.ifElse(b.CreateICmpULT(which, g.i64(N / NR)), [&] { panel(g.mul(which, g.i64(NR)), NR); },
             [&] { panel(g.i64(N / NR * NR), N % NR); });
}

/// void panel(ptr slots, i64 chunk) for one small shape, without packing (what
/// fits in L1 and L2 gains nothing from it, as OpenBLAS's small-matrix
/// kernels): the micro-kernel broadcasts A where it lies and loads rows of B
/// in place. The shape is constant, so row offsets are immediate
/// displacements; a last panel of fewer rows gets a kernel of that many rows,
/// and a last panel of fewer columns masked loads and stores. B must not be
/// transposed. A chunk is one column panel of one matrix of the batch.
llvm::Function* directGemmFunction(llvm::Module& module, const GemmShape& s, const VectorUnit& unit, bool epilogue) {
  const std::string name = fmt::format("adjit.gemm.direct.{}.{}n.{}.{}x{}x{}{}", name_of(s.dtype), s.transA ? "t" : "n",
                                       unit.bits, s.m, s.n, s.k, epilogue ? ".epi" : "");
  return chunkFunction(module, name, s.dtype, unit, [&](Gen& g, const Slots& sl, llvm::Value* chunk) {
    const TileEpilogue epi{sl.ptr(sEpi), sl.ptr(sEpiCtx)};
    directPanel(g, s, sl.ptr(sA), sl.ptr(sB), sl.ptr(sC), chunk, epilogue ? &epi : nullptr);
  });
}

/// Whether the direct kernel suits s: small enough that the operands stay in
/// cache (or at most MR rows: one row panel, which reads B once either way,
/// so packing B is a copy of it for nothing), B read in rows, and masked
/// vector loads (AVX and later). Measured for the rows of at most MR, one
/// Zen 5 core, f32, calls in a loop (B in cache): 8×1024 @ 1024×1024 0.23
/// -> 0.088 ms, 12×512 @ 512×512 0.055 -> 0.029, 4×2048 @ 2048×256 0.12 ->
/// 0.033, 12×256 @ 256×2048 0.11 -> 0.058, 6×400 @ 400×392 (the product of
/// LeNet-5's second input gradient, per two images) 0.045 -> 0.009.
bool useDirect(const GemmShape& s, const VectorUnit& unit) {
  const int64_t bytes = static_cast<int64_t>(size_of(s.dtype));
  return !s.transB && unit.bits >= 256 && s.m * s.n * s.k <= kDirectMaxWork &&
         (s.k * s.n * bytes <= 256 * 1024 || s.m <= blockingFor(s.dtype, unit).mr);
}

/// The dot kernel's register tile: rows of A by rows of B, one vector
/// accumulator each. 4×4 accumulators and 8 operand vectors fit 32 registers;
/// 3×3 and 6 fit 16. Either keeps 9 or more multiply-adds in flight, what two
/// pipelines of 4-cycle FMAs need.
int64_t dotTile(const VectorUnit& unit) { return unit.registers >= 32 ? 4 : 3; }

/// Row panel `chunk` (of every matrix's ceil(M / T), matrix after matrix) of
/// C = A B^T as dot products: A is M×K and B is N×K, both read along their
/// rows, so the T×T tile of C at (i, j) is T·T dot products of rows of length
/// K, each accumulated in a vector of W partial sums over k and summed at the
/// end. Nothing is packed: a product with a small C and a long K (a GMM
/// gradient's 20×20 sums over 1,000 points) reads its operands once per tile
/// row, where the packed kernel would pad its 12×16 micro-tiles and pack B
/// across its rows. The shape is constant: the K loop's last vector is masked.
void dotPanel(Gen& g, const GemmShape& s, llvm::Value* A0, llvm::Value* B0, llvm::Value* C0, llvm::Value* chunk, int64_t T,
              const TileEpilogue* epi) {
  Builder& b = g.b_;
  const int64_t W = g.bl_.lanes, M = s.m, N = s.n, K = s.k;
  const int64_t panels = (M + T - 1) / T;
  llvm::Value* matrix = b.CreateUDiv(chunk, g.i64(panels));
  llvm::Value* row0 = g.mul(b.CreateURem(chunk, g.i64(panels)), g.i64(T));
  llvm::Value* A = g.at(A0, g.mul(matrix, g.i64(M * K)));
  llvm::Value* B = g.at(B0, g.mul(matrix, g.i64(N * K)));
  llvm::Value* C = g.at(C0, g.mul(matrix, g.i64(M * N)));
  llvm::Align align(size_of(s.dtype));
  llvm::Constant* zeros = llvm::Constant::getNullValue(g.vec_);
  llvm::Value* tileBuffer = epi ? g.alloca(T * T) : nullptr;
  // The tile of `rows` × `cols` dot products at (i0, j0); rows and cols <= T.
  auto tile = [&](llvm::Value* i0, int64_t rows, llvm::Value* j0, int64_t cols) {
    std::vector<llvm::Value*> aRow(static_cast<std::size_t>(rows)), bRow(static_cast<std::size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) aRow[static_cast<std::size_t>(r)] = g.at(A, g.mul(g.add(i0, g.i64(r)), g.i64(K)));
    for (int64_t c = 0; c < cols; ++c) bRow[static_cast<std::size_t>(c)] = g.at(B, g.mul(g.add(j0, g.i64(c)), g.i64(K)));
    // acc[r·cols + c] += a_r[p:p+W] * b_c[p:p+W]; `mask` for the last, partial vector.
    auto step = [&](std::vector<llvm::Value*> acc, llvm::Value* p, llvm::Value* mask) {
      auto load = [&](llvm::Value* row) -> llvm::Value* {
        llvm::Value* at = g.at(row, p);
        if (mask) return b.CreateMaskedLoad(g.vec_, at, align, mask, zeros);
        return b.CreateAlignedLoad(g.vec_, at, align);
      };
      std::vector<llvm::Value*> av, bv;
      for (llvm::Value* row : aRow) av.push_back(load(row));
      for (llvm::Value* row : bRow) bv.push_back(load(row));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          llvm::Value*& x = acc[static_cast<std::size_t>(r * cols + c)];
          x = b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {g.vec_}, {av[static_cast<std::size_t>(r)], bv[static_cast<std::size_t>(c)], x});
        }
      return acc;
    };
    std::vector<llvm::Value*> acc(static_cast<std::size_t>(rows * cols), zeros);
    if (const int64_t full = K / W * W; full > 0)
      acc = g.accumulate(g.i64(full), W, acc.size(),
                         [&](llvm::Value* p, std::vector<llvm::Value*> a) { return step(std::move(a), p, nullptr); });
    if (const int64_t tail = K % W; tail > 0) {
      std::vector<llvm::Constant*> bits;
      for (int64_t l = 0; l < W; ++l) bits.push_back(b.getInt1(l < tail));
      acc = step(acc, g.i64(K / W * W), llvm::ConstantVector::get(bits));
    }
    std::vector<llvm::Value*> sums;
    for (llvm::Value* a : acc) sums.push_back(b.CreateFAddReduce(llvm::ConstantFP::get(g.elem_, -0.0), a));
    if (epi) { // the epilogue reads the tile from here
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) g.store(sums[static_cast<std::size_t>(r * cols + c)], tileBuffer, g.i64(r * T + c));
      g.callTile(epi->fn, epi->ctx, matrix, i0, g.i64(rows), j0, g.i64(cols), tileBuffer, T);
      return;
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        g.store(sums[static_cast<std::size_t>(r * cols + c)], C, g.add(g.mul(g.add(i0, g.i64(r)), g.i64(N)), g.add(j0, g.i64(c))));
  };
  // The panel's tiles along N: full ones in a loop, then the rest; a last
  // panel of fewer rows gets tiles of that many rows.
  auto panel = [&](int64_t rows) {
    if (N / T > 0) g.forRange(g.i64(0), g.i64(N / T * T), T, [&](llvm::Value* j0) { tile(row0, rows, j0, T); });
    if (N % T) tile(row0, rows, g.i64(N / T * T), N % T);
  };
  if (M % T == 0) panel(T);
  else if (M / T == 0) panel(M % T);
  else
    g.ifElse(b.CreateICmpULT(row0, g.i64(M / T * T)), [&] { panel(T); }, [&] { panel(M % T); });
}

/// void panel(ptr slots, i64 chunk) of the dot kernel for one shape.
llvm::Function* dotGemmFunction(llvm::Module& module, const GemmShape& s, const VectorUnit& unit, bool epilogue) {
  const std::string name =
      fmt::format("adjit.gemm.dot.{}.{}.{}x{}x{}{}", name_of(s.dtype), unit.bits, s.m, s.n, s.k, epilogue ? ".epi" : "");
  return chunkFunction(module, name, s.dtype, unit, [&](Gen& g, const Slots& sl, llvm::Value* chunk) {
    const TileEpilogue epi{sl.ptr(sEpi), sl.ptr(sEpiCtx)};
    dotPanel(g, s, sl.ptr(sA), sl.ptr(sB), sl.ptr(sC), chunk, dotTile(unit), epilogue ? &epi : nullptr);
  });
}

/// Whether the dot kernel suits s: C = A B^T with both operands read along
/// their rows, B small enough to be read again for every panel of rows (see
/// dotMaxBBytes), K long enough that the sums of vector lanes at the end
/// are a small part of the work, and masked loads (AVX and later).
bool useDot(const GemmShape& s, const VectorUnit& unit) {
  const int64_t bytes = static_cast<int64_t>(size_of(s.dtype)), lanes = std::max<int64_t>(1, unit.bits / 8 / bytes);
  return s.transB && !s.transA && unit.bits >= 256 && s.k >= 4 * lanes && s.n * s.k * bytes <= dotMaxBBytes(unit);
}

} // namespace

bool usePackedGemm(const GemmShape& s, const VectorUnit& unit) {
  if (!is_floating(s.dtype) || s.k == 0) return false;
  if (useDot(s, unit)) return true;
  const Blocking bl = blockingFor(s.dtype, unit);
  // Packing costs O(MK + KN) element moves; the kernel O(MNK) multiply-adds.
  // Narrow products leave most of a micro-tile's lanes idle.
  return s.n >= bl.lanes && s.m >= 4 && s.m * s.n * s.k >= 32 * 32 * 32;
}

std::pair<int64_t, int64_t> gemmTileGrid(const GemmShape& s, const VectorUnit& unit) {
  if (!usePackedGemm(s, unit)) return {s.m, s.n}; // the matmul op's own loops call the epilogue once per matrix
  if (useDot(s, unit)) return {dotTile(unit), dotTile(unit)};
  const Blocking bl = blockingFor(s.dtype, unit); // the packed kernel's blocks of rows and columns are whole micro-tiles
  return {bl.mr, bl.nr};
}

bool packsOperands(const GemmShape& s, const VectorUnit& unit) {
  return usePackedGemm(s, unit) && !useDot(s, unit) && !useDirect(s, unit);
}

uint64_t gemmWorkspaceBytes(const GemmShape& s, const VectorUnit& unit, bool parallel) {
  // what emitPackedGemm packs into, whatever usePackedGemm advises for the shape
  if (!is_floating(s.dtype) || useDot(s, unit) || useDirect(s, unit)) return 0;
  const auto [aBytes, bBytes] = packedBytes(s, blockingFor(s.dtype, unit), parallel);
  return aBytes + bBytes;
}

/// The tile function that calls another with its matrix and rows shifted
/// (TileOrigin): its context is {ptr fn, ptr ctx, i64 matrix, i64 row0}.
llvm::Function* shiftedTileFunction(llvm::Module& module) {
  const char* name = "adjit.tile.shifted";
  if (llvm::Function* f = module.getFunction(name)) return f;
  llvm::FunctionType* ft = tileFunctionType(module.getContext());
  auto* fn = llvm::Function::Create(ft, llvm::GlobalValue::InternalLinkage, name, module);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(module.getContext(), "entry", fn));
  auto slot = [&](llvm::Type* t, uint64_t i) { return b.CreateLoad(t, b.CreateConstInBoundsGEP1_64(b.getInt64Ty(), fn->getArg(0), i)); };
  llvm::Value *inner = slot(b.getPtrTy(), 0), *ctx = slot(b.getPtrTy(), 1), *matrix = slot(b.getInt64Ty(), 2), *row0 = slot(b.getInt64Ty(), 3);
  b.CreateCall(ft, inner, {ctx, b.CreateAdd(matrix, fn->getArg(1)), b.CreateAdd(row0, fn->getArg(2)), b.CreateAdd(row0, fn->getArg(3)),
                           fn->getArg(4), fn->getArg(5), fn->getArg(6), fn->getArg(7)});
  b.CreateRetVoid();
  return fn;
}

void emitPackedGemm(const LowerCtx& c, const GemmShape& s, llvm::Value* A, llvm::Value* B, llvm::Value* C, TileOrigin origin) {
  const VectorUnit& unit = c.vectorUnit();
  llvm::Type* elem = c.scalarType(s.dtype);
  const bool dot = useDot(s, unit);
  llvm::Value* none = llvm::ConstantPointerNull::get(c.b.getPtrTy());
  llvm::Value* epi = c.epilogue ? c.epilogue : none;
  llvm::Value* epiCtx = c.epilogue ? c.epilogueCtx : none;
  if (c.epilogue && (origin.matrix || origin.row0)) {
    llvm::Value* shift = c.entryAlloca(c.b.getInt64Ty(), 4);
    llvm::Value* values[] = {epi, epiCtx, origin.matrix ? origin.matrix : c.i64(0), origin.row0 ? origin.row0 : c.i64(0)};
    for (uint64_t i = 0; i < 4; ++i) c.b.CreateStore(values[i], c.b.CreateConstInBoundsGEP1_64(c.b.getInt64Ty(), shift, i));
    epi = shiftedTileFunction(c.llvmModule());
    epiCtx = shift;
  }
  const bool withEpilogue = c.epilogue != nullptr;
  llvm::Value *proA = c.prologueOf(0), *proB = c.prologueOf(1);
  if (dot || useDirect(s, unit)) {
    ADJIT_ASSERT(!c.hasPrologues(), "matmul: a prologue for an operand the direct or dot kernel reads in place");
    // Column panels (row panels for the dot kernel) of every matrix are the
    // chunks: on threads when there is enough work, else in order.
    llvm::Function* fn = dot ? dotGemmFunction(c.llvmModule(), s, unit, withEpilogue)
                             : directGemmFunction(c.llvmModule(), s, unit, withEpilogue);
    llvm::Value* slots = c.entryAlloca(c.b.getInt64Ty(), kSlots);
    for (auto [slot, v] : {std::pair{sA, A}, std::pair{sB, B}, std::pair{sC, C}, std::pair{sEpi, epi}, std::pair{sEpiCtx, epiCtx}})
      c.b.CreateStore(v, c.b.CreateConstInBoundsGEP1_64(c.b.getInt64Ty(), slots, static_cast<uint64_t>(slot)));
    const int64_t width = dot ? dotTile(unit) : blockingFor(s.dtype, unit).nr, extent = dot ? s.m : s.n;
    const int64_t chunks = s.batch * ((extent + width - 1) / width);
    if (c.parallel() && s.batch * s.m * s.n * s.k >= kParallelGemmWork && chunks > 1) {
      llvm::FunctionCallee pf = c.llvmModule().getOrInsertFunction(
          "adjit_parallel_for", llvm::FunctionType::get(c.b.getVoidTy(), {c.b.getPtrTy(), c.b.getPtrTy(), c.b.getInt64Ty()}, false));
      c.b.CreateCall(pf, {fn, slots, c.i64(chunks)});
    } else {
      c.loop(chunks, [&](llvm::Value* i) { c.b.CreateCall(fn, {slots, i}); });
    }
    return;
  }
  llvm::Function* fn = gemmFunction(c.llvmModule(), s.dtype, s.transA, s.transB, unit, c.parallel(), withEpilogue, proA, proB);
  const auto [aBytes, bBytes] = packedBytes(s, blockingFor(s.dtype, unit), c.parallel());
  llvm::Value* work = c.workspace(aBytes + bBytes);
  llvm::Value* Ap = work;
  llvm::Value* Bp = c.b.CreateConstInBoundsGEP1_64(c.b.getInt8Ty(), work, aBytes);
  c.loop(s.batch, [&](llvm::Value* bt) {
    llvm::Value* a = c.b.CreateInBoundsGEP(elem, A, c.b.CreateMul(bt, c.i64(s.m * s.k)));
    llvm::Value* bm = c.b.CreateInBoundsGEP(elem, B, c.b.CreateMul(bt, c.i64(s.k * s.n)));
    llvm::Value* cm = c.b.CreateInBoundsGEP(elem, C, c.b.CreateMul(bt, c.i64(s.m * s.n)));
    c.b.CreateCall(fn, {a, bm, cm, Ap, Bp, c.i64(s.m), c.i64(s.n), c.i64(s.k), epi, epiCtx, bt, proA ? proA : none,
                        proA ? c.prologueCtx[0] : none, proB ? proB : none, proB ? c.prologueCtx[1] : none});
  });
}

} // namespace adjit::codegen
