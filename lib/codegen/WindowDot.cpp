// codegen/WindowDot.cpp — the window-dot kernel (WindowDot.h): conv's
// kernel gradient as dot products along the window's rows.
//
//   R = 0
//   for block of channels of a group:          (the forward's images; one, unless
//     for block of window rows:                 a channel's rows are few) (the rows' K fit L1)
//       chunks over (group, block of `ro` outputs), on threads when parallel:
//         for block of `sb` batch entries:     (the forward's input channels)
//           for outer output position q:       (all but the last axis)
//             acc[ro][sb][Qx] = 0              (vector accumulators, lanes over the row)
//             for channel, window row t in the blocks: (skipped where it reads padding)
//               for vector v of the row:       (unrolled)
//                 K rows of the ro outputs: ro loads
//                 per batch entry and last-axis output qx: one load of X's row
//                 shifted by qx·stride - lo, ro multiply-adds
//             R[b, o, q, qx] += the lanes' sum of acc
//
// Lanes of a vector are taps along the window's last axis: K's rows and X's
// rows are read in place, contiguous, and one X vector serves ro outputs, one
// K vector sb·Qx accumulators (4 outputs × 2 entries × 3 positions: 24
// multiply-adds per 10 loads for a 3×3 kernel's gradient). A lane whose tap
// reads padding (or lies past the row's end) is masked out of its load and
// of its multiply-add: the accumulator keeps its value, so padding is never
// multiplied (an infinity in K next to the padding stays out of the sum, as
// in the interpreter). The lanes are summed once per row block.
#include "codegen/WindowDot.h"
#include "support/Assert.h"

#include <fmt/format.h>
#include <llvm/IR/Module.h>

#include <algorithm>

namespace adjit::codegen {
namespace {

/// Loads and the work per row block are sized for an L1 of this many bytes:
/// the ro outputs' K rows stay in it while X's rows of every batch entry
/// stream past from L2. 48 KiB (Zen 5's L1; ResNet's kernel gradient in 2
/// row blocks instead of 3, fewer sums of lanes) measured even: 0.999-1.014x.
constexpr int64_t kL1Bytes = 32 << 10;

/// Calls to the chunks of less work than this (multiply-adds) run on one
/// thread: handing chunks to the pool costs a few microseconds.
constexpr int64_t kParallelWork = 1 << 20;

int64_t product(const std::vector<int64_t>& v, std::size_t from, std::size_t to) {
  int64_t p = 1;
  for (std::size_t i = from; i < to; ++i) p *= v[i];
  return p;
}

/// The kernel's blocking for one shape.
struct Plan {
  std::size_t rank;
  int64_t lanes, nv;      ///< elements per vector, vectors per window row
  int64_t qx, tx, wx;     ///< outputs, taps and input elements along the last axis
  int64_t ro, sb;         ///< register tile: outputs × batch entries (× all qx)
  int64_t cg, og;         ///< channels and outputs per group
  int64_t rowsOuter;      ///< window rows (the window's taps but the last axis)
  int64_t outsOuter;      ///< output rows (the outputs but the last axis)
  int64_t rowsPerBlock, blocks; ///< window rows per block, blocks of a channel
  int64_t channelsPerBlock;     ///< channels per block: more than one when a channel's rows are fewer than a block's
  int64_t taps, positions, inSize;
};

Plan planFor(const WindowDotShape& s, const VectorUnit& unit) {
  Plan p{};
  const int64_t e = static_cast<int64_t>(size_of(s.dtype));
  p.rank = s.in.size();
  p.lanes = std::max<int64_t>(1, unit.bits / 8 / e);
  p.qx = s.out.back();
  p.tx = s.window.back();
  p.wx = s.in.back();
  p.nv = (p.tx + p.lanes - 1) / p.lanes;
  p.cg = s.channels / s.groups;
  p.og = s.outputs / s.groups;
  p.rowsOuter = product(s.window, 0, p.rank - 1);
  p.outsOuter = product(s.out, 0, p.rank - 1);
  p.taps = product(s.window, 0, p.rank);
  p.positions = product(s.out, 0, p.rank);
  p.inSize = product(s.in, 0, p.rank);
  // The fewest loads per multiply-add with accumulators that leave registers
  // for the ro K vectors, one X vector and a spare; of equal ratios, the
  // most accumulators (4 outputs × 2 entries for a 3×3 kernel's gradient: 10
  // loads per 24; 4 × 1 for a 5×5 kernel's: 9 per 20, where the most
  // accumulators, 1 × 5, would load 26 per 25).
  const int64_t regs = unit.registers;
  int64_t bestAcc = 0, bestLoads = 0;
  for (int64_t ro = 1; ro <= 8; ++ro)
    for (int64_t sb = 1; sb <= 8; ++sb) {
      const int64_t acc = ro * sb * p.qx, loads = ro + sb * p.qx;
      if (ro > p.og || sb > s.batch || acc + ro + 3 > regs) continue;
      // loads / acc < bestLoads / bestAcc, or equal with more accumulators
      if (bestAcc == 0 || loads * bestAcc < bestLoads * acc || (loads * bestAcc == bestLoads * acc && acc > bestAcc)) {
        bestAcc = acc;
        bestLoads = loads;
        p.ro = ro;
        p.sb = sb;
      }
    }
  const int64_t rowBytes = (p.ro * p.tx + p.sb * p.wx) * e;
  const int64_t rows = std::max<int64_t>(1, kL1Bytes / std::max<int64_t>(rowBytes, 1));
  p.rowsPerBlock = std::min(rows, p.rowsOuter);
  p.blocks = (p.rowsOuter + p.rowsPerBlock - 1) / p.rowsPerBlock;
  p.channelsPerBlock = std::clamp<int64_t>(rows / p.rowsOuter, 1, p.cg);
  return p;
}

/// The context slots of the chunk function.
enum Slot { sX, sK, sR, sChannel, sBlock, kSlots };

/// Emits the chunk function's body (see the file's comment).
class Gen {
public:
  Gen(llvm::Function* fn, const WindowDotShape& s, const Plan& p) : b_(fn->getContext()), fn_(fn), s_(s), p_(p) {
    elem_ = s.dtype == DType::f32 ? b_.getFloatTy() : b_.getDoubleTy();
    vec_ = llvm::FixedVectorType::get(elem_, static_cast<unsigned>(p.lanes));
    auto* entry = llvm::BasicBlock::Create(fn->getContext(), "entry", fn);
    entry_ = entry;
    b_.SetInsertPoint(llvm::BasicBlock::Create(fn->getContext(), "body", fn));
    llvm::FastMathFlags fmf;
    fmf.setAllowReassoc(); // the lanes' sums; multiply-adds are llvm.fmuladd
    b_.setFastMathFlags(fmf);
  }

  void emit() {
    llvm::Value* slots = fn_->getArg(0);
    auto slot = [&](Slot sl, llvm::Type* t) {
      return b_.CreateLoad(t, b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), slots, static_cast<uint64_t>(sl)));
    };
    X_ = slot(sX, b_.getPtrTy());
    K_ = slot(sK, b_.getPtrTy());
    R_ = slot(sR, b_.getPtrTy());
    c0_ = slot(sChannel, b_.getInt64Ty());
    c1_ = min(add(c0_, i64(p_.channelsPerBlock)), i64(p_.cg));
    llvm::Value* block = slot(sBlock, b_.getInt64Ty());
    t0_ = mul(block, i64(p_.rowsPerBlock));
    t1_ = min(add(t0_, i64(p_.rowsPerBlock)), i64(p_.rowsOuter));
    acc_.resize(static_cast<std::size_t>(p_.ro * p_.sb * p_.qx));
    {
      llvm::IRBuilder<> eb(entry_);
      for (auto& a : acc_) a = eb.CreateAlloca(vec_);
    }
    const int64_t oBlocks = (p_.og + p_.ro - 1) / p_.ro;
    llvm::Value* chunk = fn_->getArg(1);
    llvm::Value* g = b_.CreateUDiv(chunk, i64(oBlocks));
    llvm::Value* ob = b_.CreateURem(chunk, i64(oBlocks));
    llvm::Value* o0 = add(mul(g, i64(p_.og)), mul(ob, i64(p_.ro)));
    xChannel0_ = mul(g, i64(p_.cg));
    auto outputs = [&](int64_t ro) {
      const int64_t full = s_.batch / p_.sb, rest = s_.batch % p_.sb;
      forRange(i64(0), i64(full), [&](llvm::Value* bb) { tile(ro, p_.sb, o0, mul(bb, i64(p_.sb))); });
      if (rest) tile(ro, rest, o0, i64(full * p_.sb));
    };
    if (p_.og % p_.ro == 0) outputs(p_.ro);
    else
      ifElse(b_.CreateICmpULT(ob, i64(oBlocks - 1)), [&] { outputs(p_.ro); }, [&] { outputs(p_.og % p_.ro); });
    b_.CreateRetVoid();
    llvm::IRBuilder<>(entry_).CreateBr(entry_->getNextNode());
  }

private:
  /// The register tile of `ro` outputs from o0 and `sb` batch entries from b0, every output row.
  void tile(int64_t ro, int64_t sb, llvm::Value* o0, llvm::Value* b0) {
    const std::size_t r = p_.rank;
    forRange(i64(0), i64(p_.outsOuter), [&](llvm::Value* qo) {
      std::vector<llvm::Value*> q = unravel(qo, s_.out, r - 1);
      llvm::Constant* zero = llvm::Constant::getNullValue(vec_);
      for (int64_t i = 0; i < ro * sb * p_.qx; ++i) b_.CreateStore(zero, acc_[static_cast<std::size_t>(i)]);
      forRange(c0_, c1_, [&](llvm::Value* channel) {
        forRange(t0_, t1_, [&](llvm::Value* t) {
          std::vector<llvm::Value*> td = unravel(t, s_.window, r - 1);
          llvm::Value* valid = b_.getTrue();
          llvm::Value* pLin = i64(0); // the input row read, linear over the outer axes
          for (std::size_t d = 0; d + 1 < r; ++d) {
            llvm::Value* pd = b_.CreateSub(add(mul(q[d], i64(s_.stride[d])), mul(td[d], i64(s_.rhsDil[d]))), i64(s_.lo[d]));
            valid = b_.CreateAnd(valid, b_.CreateICmpULT(pd, i64(s_.in[d]))); // unsigned: pd < 0 fails too
            pLin = add(mul(pLin, i64(s_.in[d])), pd);
          }
          ifElse(valid, [&] { row(ro, sb, o0, b0, channel, pLin, t); }, [] {});
        });
      });
      // R[b, o, qo, qx] += the lanes' sum
      for (int64_t j = 0; j < sb; ++j)
        for (int64_t i = 0; i < ro; ++i)
          for (int64_t x = 0; x < p_.qx; ++x) {
            llvm::Value* sum = b_.CreateFAddReduce(llvm::ConstantFP::get(elem_, -0.0), b_.CreateLoad(vec_, acc(i, j, x, sb)));
            llvm::Value* at = add(mul(add(mul(add(b0, i64(j)), i64(s_.outputs)), add(o0, i64(i))), i64(p_.positions)),
                                  add(mul(qo, i64(p_.qx)), i64(x)));
            llvm::Value* ptr = b_.CreateInBoundsGEP(elem_, R_, at);
            b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(elem_, ptr), sum), ptr);
          }
    });
  }

  /// One window row t of `channel` (reading input row pLin) of the tile.
  void row(int64_t ro, int64_t sb, llvm::Value* o0, llvm::Value* b0, llvm::Value* channel, llvm::Value* pLin, llvm::Value* t) {
    const llvm::Align align(size_of(s_.dtype));
    llvm::Constant* zeros = llvm::Constant::getNullValue(vec_);
    std::vector<llvm::Value*> kRow(static_cast<std::size_t>(ro)), xRow(static_cast<std::size_t>(sb));
    for (int64_t i = 0; i < ro; ++i) // K[o0 + i, channel, t, :]
      kRow[static_cast<std::size_t>(i)] = b_.CreateInBoundsGEP(
          elem_, K_, add(mul(add(mul(add(o0, i64(i)), i64(p_.cg)), channel), i64(p_.taps)), mul(t, i64(p_.tx))));
    for (int64_t j = 0; j < sb; ++j) // X[b0 + j, xChannel, pLin, :]
      xRow[static_cast<std::size_t>(j)] = b_.CreateInBoundsGEP(
          elem_, X_, add(mul(add(mul(add(b0, i64(j)), i64(s_.channels)), add(xChannel0_, channel)), i64(p_.inSize)), mul(pLin, i64(p_.wx))));
    const int64_t sx = s_.stride.back(), lox = s_.lo.back();
    std::vector<llvm::Value*> accs(static_cast<std::size_t>(ro * sb * p_.qx));
    for (int64_t j = 0; j < sb; ++j)
      for (int64_t i = 0; i < ro; ++i)
        for (int64_t x = 0; x < p_.qx; ++x) accs[index(i, j, x, sb)] = b_.CreateLoad(vec_, acc(i, j, x, sb));
    for (int64_t v = 0; v < p_.nv; ++v) {
      const int64_t tap0 = v * p_.lanes;
      std::vector<llvm::Value*> kv(static_cast<std::size_t>(ro));
      const int64_t kLanes = std::min(p_.lanes, p_.tx - tap0);
      for (int64_t i = 0; i < ro; ++i) {
        llvm::Value* at = b_.CreateInBoundsGEP(elem_, kRow[static_cast<std::size_t>(i)], i64(tap0));
        kv[static_cast<std::size_t>(i)] = kLanes == p_.lanes ? static_cast<llvm::Value*>(b_.CreateAlignedLoad(vec_, at, align))
                                                             : b_.CreateMaskedLoad(vec_, at, align, lanesBelow(kLanes), zeros);
      }
      for (int64_t x = 0; x < p_.qx; ++x) {
        // lane l reads X's column x·sx - lox + tap0 + l: in the row, and a tap of the window
        const int64_t shift = x * sx - lox + tap0;
        std::vector<llvm::Constant*> bits;
        int64_t on = 0;
        for (int64_t l = 0; l < p_.lanes; ++l) {
          const bool in = tap0 + l < p_.tx && shift + l >= 0 && shift + l < p_.wx;
          bits.push_back(b_.getInt1(in));
          on += in;
        }
        if (on == 0) continue;
        llvm::Value* mask = on == p_.lanes ? nullptr : llvm::ConstantVector::get(bits);
        for (int64_t j = 0; j < sb; ++j) {
          // the address of lane 0 may lie outside the row (a masked lane): not inbounds
          llvm::Value* at = b_.CreateGEP(elem_, xRow[static_cast<std::size_t>(j)], i64(shift));
          llvm::Value* xv = mask ? static_cast<llvm::Value*>(b_.CreateMaskedLoad(vec_, at, align, mask, zeros)) : b_.CreateAlignedLoad(vec_, at, align);
          for (int64_t i = 0; i < ro; ++i) {
            llvm::Value*& a = accs[index(i, j, x, sb)];
            llvm::Value* fma = b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {vec_}, {kv[static_cast<std::size_t>(i)], xv, a});
            a = mask ? b_.CreateSelect(mask, fma, a) : fma; // masked lanes keep their sums
          }
        }
      }
    }
    for (int64_t j = 0; j < sb; ++j)
      for (int64_t i = 0; i < ro; ++i)
        for (int64_t x = 0; x < p_.qx; ++x) b_.CreateStore(accs[index(i, j, x, sb)], acc(i, j, x, sb));
  }

  std::size_t index(int64_t i, int64_t j, int64_t x, int64_t sb) const {
    return static_cast<std::size_t>((i * sb + j) * p_.qx + x);
  }
  llvm::Value* acc(int64_t i, int64_t j, int64_t x, int64_t sb) const { return acc_[index(i, j, x, sb)]; }

  llvm::Constant* lanesBelow(int64_t n) {
    std::vector<llvm::Constant*> bits;
    for (int64_t l = 0; l < p_.lanes; ++l) bits.push_back(b_.getInt1(l < n));
    return llvm::ConstantVector::get(bits);
  }

  /// The multi-index over axes [0, count) of `shape` of linear index `lin`.
  std::vector<llvm::Value*> unravel(llvm::Value* lin, const std::vector<int64_t>& shape, std::size_t count) {
    std::vector<llvm::Value*> d(count);
    for (std::size_t a = count; a-- > 0;) {
      if (a == 0) {
        d[a] = lin;
        break;
      }
      d[a] = b_.CreateURem(lin, i64(shape[a]));
      lin = b_.CreateUDiv(lin, i64(shape[a]));
    }
    return d;
  }

  template <class Body> void forRange(llvm::Value* begin, llvm::Value* end, Body body) {
    llvm::Instruction* latch = countedLoop(b_, begin, end, 1, body);
    // already vector code: LLVM is not to vectorise or unroll it again
    llvm::LLVMContext& ctx = b_.getContext();
    setLoopHints(latch, {noVectorizeHint(ctx), llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, "llvm.loop.unroll.disable")})});
  }

  template <class Then, class Else> void ifElse(llvm::Value* cond, Then then, Else otherwise) {
    branches(b_, cond, then, otherwise, "join");
  }

  llvm::Value* i64(int64_t v) { return b_.getInt64(static_cast<uint64_t>(v)); }
  llvm::Value* add(llvm::Value* x, llvm::Value* y) { return b_.CreateAdd(x, y, "", true, true); }
  llvm::Value* mul(llvm::Value* x, llvm::Value* y) { return b_.CreateMul(x, y, "", true, true); }
  llvm::Value* min(llvm::Value* x, llvm::Value* y) { return b_.CreateSelect(b_.CreateICmpSLT(x, y), x, y); }

  Builder b_;
  llvm::Function* fn_;
  const WindowDotShape& s_;
  const Plan& p_;
  llvm::Type* elem_;
  llvm::FixedVectorType* vec_;
  llvm::BasicBlock* entry_;
  llvm::Value *X_ = nullptr, *K_ = nullptr, *R_ = nullptr, *c0_ = nullptr, *c1_ = nullptr, *xChannel0_ = nullptr, *t0_ = nullptr,
              *t1_ = nullptr;
  std::vector<llvm::Value*> acc_;
};

/// void name(ptr slots, i64 chunk) for shape s: chunk = group · ceil(Og / ro) + block of outputs.
llvm::Function* chunkFunction(llvm::Module& module, const WindowDotShape& s, const Plan& p, const VectorUnit& unit) {
  std::string name = fmt::format("adjit.windowdot.{}.{}.b{}c{}g{}o{}", name_of(s.dtype), unit.bits, s.batch, s.channels, s.groups, s.outputs);
  for (const auto* v : {&s.in, &s.window, &s.out, &s.stride, &s.lo, &s.rhsDil}) {
    name += ".";
    for (int64_t x : *v) name += fmt::format("{}_", x);
  }
  if (llvm::Function* f = module.getFunction(name)) return f;
  llvm::Function* fn = declareChunkFunction(module, name, unit.bits);
  Gen(fn, s, p).emit();
  return fn;
}

} // namespace

bool useWindowDot(const WindowDotShape& s, const VectorUnit& unit) {
  if (!is_floating(s.dtype) || s.in.empty() || unit.bits < 256) return false;
  const std::size_t r = s.in.size();
  const int64_t lanes = std::max<int64_t>(1, unit.bits / 8 / static_cast<int64_t>(size_of(s.dtype)));
  const int64_t taps = product(s.window, 0, r), positions = product(s.out, 0, r);
  if (s.rhsDil.back() != 1 || s.out.back() < 1 || s.out.back() > 8 || positions == 0 || s.batch == 0) return false;
  if (s.window.back() * 2 < lanes || taps <= positions) return false;
  if (s.out.back() + 4 > static_cast<int64_t>(unit.registers)) return false; // one output, one batch entry, K, X and a spare
  // Enough work for vector code (usePackedGemm's bound).
  return s.batch * s.outputs * positions * taps * (s.channels / s.groups) >= 32 * 32 * 32;
}

void emitWindowDot(const LowerCtx& c, const WindowDotShape& s, llvm::Value* X, llvm::Value* K, llvm::Value* R) {
  const Plan p = planFor(s, c.vectorUnit());
  ADJIT_ASSERT(p.ro > 0 && p.sb > 0, "conv: the window-dot kernel has no register tile for its shape");
  llvm::Function* fn = chunkFunction(c.llvmModule(), s, p, c.vectorUnit());
  const uint64_t bytes = static_cast<uint64_t>(s.batch * s.outputs * p.positions) * size_of(s.dtype);
  c.b.CreateMemSet(R, c.b.getInt8(0), c.b.getInt64(bytes), llvm::MaybeAlign(size_of(s.dtype)));
  llvm::Value* slots = c.entryAlloca(c.b.getInt64Ty(), kSlots);
  auto at = [&](Slot sl) { return c.b.CreateConstInBoundsGEP1_64(c.b.getInt64Ty(), slots, static_cast<uint64_t>(sl)); };
  c.b.CreateStore(X, at(sX));
  c.b.CreateStore(K, at(sK));
  c.b.CreateStore(R, at(sR));
  const int64_t chunks = s.groups * ((p.og + p.ro - 1) / p.ro);
  const int64_t work = s.batch * s.outputs * p.positions * p.channelsPerBlock * p.rowsPerBlock * p.tx; // per call of the chunks
  const bool threads = c.parallel() && chunks > 1 && work >= kParallelWork;
  c.loop((p.cg + p.channelsPerBlock - 1) / p.channelsPerBlock, [&](llvm::Value* cb) {
    c.loop(p.blocks, [&](llvm::Value* block) {
      c.b.CreateStore(c.b.CreateMul(cb, c.i64(p.channelsPerBlock)), at(sChannel));
      c.b.CreateStore(block, at(sBlock));
      if (threads) {
        llvm::FunctionCallee pf = c.llvmModule().getOrInsertFunction(
            "adjit_parallel_for", llvm::FunctionType::get(c.b.getVoidTy(), {c.b.getPtrTy(), c.b.getPtrTy(), c.b.getInt64Ty()}, false));
        c.b.CreateCall(pf, {fn, slots, c.i64(chunks)});
      } else {
        c.loop(chunks, [&](llvm::Value* i) { c.b.CreateCall(fn, {slots, i}); });
      }
    });
  });
}

} // namespace adjit::codegen
