// ops/LinalgSmallLowering.cpp — cholesky, triangular_solve and lu on batches of
// small matrices, vectorised across the batch: the lanes of one SIMD vector
// hold the same element of G different matrices (G = the target's vector
// width in elements: 8 f64 or 16 f32 on AVX-512, 4 or 8 on AVX2), so every
// step of the factorisation or solve is one vector instruction for G
// matrices, whatever the order of the matrix, with no reductions across
// lanes and no remainder loops for the short triangular trips.
//
// Per group of G matrices: the group is gathered into a lane-interleaved
// scratch (element e of every matrix in vector e: G×G blocks loaded as rows,
// transposed in registers by log2(G) rounds of shuffles; only the blocks that
// meet the triangle the op reads), factored or solved there, and scattered
// back the same way (cholesky first sets a lane whose pivot was not positive
// to NaN, under a branch taken only then). The last group of a batch that is
// not a multiple of G reads its missing lanes from its last matrix (harmless
// work) and writes only its real ones. Matrices up to kUnrollOrder are
// emitted unrolled (straight-line code); larger ones as loops, with the inner
// dot products blocked by kBlock rows or right-hand sides that share a load
// (solves with fewer right-hand sides update the unknowns ahead instead).
//
// The costs, per matrix, 100 × 32×32 f64 on AVX-512 (bench/linalg_bench.cpp;
// LinalgSolve.cpp has the comparisons): cholesky 0.48 µs (per-matrix loops
// 3.0 µs), cholesky + cho_solve 0.70 µs (3.7 µs); 1000 × 8×8: 17 and 34 ns
// (46 and 84 ns). Compile time: the transposes (G·log2 G shuffles each) live
// in two small functions per module and type that every op calls (emitted
// inline at each op, instruction selection of their shuffles took LLVM ~50 ms
// more per program); with them, LLVM's total time over bench/linalg_bench.cpp's
// 14 programs is that of the per-matrix loops (1.5 s).
//
// Differences from the per-matrix loops of LinalgSolve.cpp, which the
// interpreter's reference matches up to contraction: cholesky multiplies by
// the reciprocal of the pivot instead of dividing (one division per column),
// and dot products are accumulated starting from the element they are
// subtracted from; results agree to a few ulps.
#include "ops/LinalgSmall.h"

#include "support/Assert.h"

#include <llvm/IR/Module.h>

#include <functional>
#include <limits>
#include <vector>

namespace adjit::ops::small {
namespace {

using codegen::LowerCtx;

/// Orders up to this are emitted unrolled; larger ones as loops (unrolled,
/// 32×32 took seconds of LLVM).
constexpr int64_t kUnrollOrder = 8;
/// Orders above this keep the per-matrix loops (the scratch of one group,
/// n² vectors, outgrows the L2 cache).
constexpr int64_t kMaxOrder = 32;
/// Rows (cholesky) or right-hand sides (solves) whose dot products share
/// their common operand's loads in one pass over k.
constexpr int64_t kBlock = 4;

/// Vector arithmetic over the lanes of a group of matrices, and the loops
/// around it: unrolled where bounds are constants and the emission is small.
struct Lanes {
  LowerCtx& c;
  DType t;
  int64_t G;                  ///< lanes: matrices per group
  bool unroll;                ///< unroll loops with constant bounds
  llvm::Type* elem;
  llvm::FixedVectorType* vec;

  Lanes(LowerCtx& c, DType t, bool unroll)
      : c(c), t(t), G(lanesOf(c, t)), unroll(unroll), elem(c.scalarType(t)),
        vec(llvm::FixedVectorType::get(elem, static_cast<unsigned>(G))) {}

  static int64_t lanesOf(const LowerCtx& c, DType t) { return c.vectorUnit().bits / (8 * static_cast<unsigned>(size_of(t))); }
  int64_t es() const { return static_cast<int64_t>(size_of(t)); }

  llvm::Value* i64(int64_t v) const { return c.i64(v); }
  llvm::Value* add(llvm::Value* a, int64_t v) const { return c.b.CreateAdd(a, i64(v)); }
  llvm::Value* add(llvm::Value* a, llvm::Value* v) const { return c.b.CreateAdd(a, v); }
  llvm::Value* mul(llvm::Value* a, int64_t v) const { return c.b.CreateMul(a, i64(v)); }
  /// i * stride + j
  llvm::Value* at(llvm::Value* i, int64_t stride, llvm::Value* j) const { return add(mul(i, stride), j); }

  /// for (iv = lo; iv < hi; ++iv) body(iv), unrolled when both are constants
  /// and unrolling is on (or the trip count is at most 1).
  void range(llvm::Value* lo, llvm::Value* hi, const std::function<void(llvm::Value*)>& body) const {
    const auto* l = llvm::dyn_cast<llvm::ConstantInt>(lo);
    const auto* h = llvm::dyn_cast<llvm::ConstantInt>(hi);
    if (l && h && (unroll || h->getSExtValue() - l->getSExtValue() <= 1)) {
      for (int64_t k = l->getSExtValue(); k < h->getSExtValue(); ++k) body(i64(k));
      return;
    }
    c.loopRange(lo, hi, body);
  }
  void range(int64_t lo, int64_t hi, const std::function<void(llvm::Value*)>& body) const { range(i64(lo), i64(hi), body); }
  /// A loop LLVM leaves rolled (its body is long: transposes).
  void rolled(llvm::Value* lo, llvm::Value* hi, const std::function<void(llvm::Value*)>& body) const {
    llvm::Instruction* latch = c.loopRange(lo, hi, body);
    codegen::setLoopHints(latch, {codegen::noVectorizeHint(c.ctx()),
                                  llvm::MDNode::get(c.ctx(), {llvm::MDString::get(c.ctx(), "llvm.loop.unroll.disable")})});
  }

  // vectors in the scratch: vector e at S + e * G elements
  llvm::Value* slot(llvm::Value* S, llvm::Value* e) const { return c.b.CreateInBoundsGEP(vec, S, e); }
  llvm::Value* ld(llvm::Value* S, llvm::Value* e) const {
    return c.b.CreateAlignedLoad(vec, slot(S, e), llvm::Align(static_cast<uint64_t>(G * es())));
  }
  void st(llvm::Value* v, llvm::Value* S, llvm::Value* e) const {
    c.b.CreateAlignedStore(v, slot(S, e), llvm::Align(static_cast<uint64_t>(G * es())));
  }
  llvm::Value* var(llvm::Type* ty) const { return c.entryAlloca(ty, 1); }
  llvm::Value* get(llvm::Value* s, llvm::Type* ty) const { return c.b.CreateLoad(ty, s); }
  /// acc - x * y
  llvm::Value* nfma(llvm::Value* x, llvm::Value* y, llvm::Value* acc) const {
    return c.intrinsic(llvm::Intrinsic::fmuladd, {{c.b.CreateFNeg(x), y, acc}});
  }
  llvm::Value* splat(double v) const { return llvm::ConstantFP::get(vec, v); }

  /// if (cond) then(); else otherwise();
  void ifElse(llvm::Value* cond, const std::function<void()>& then, const std::function<void()>& otherwise) const {
    c.ifElse(cond, then, otherwise);
  }

  /// The transpose of G vectors of G lanes (rows[r][l] -> out[l][r]): round
  /// s swaps bit s of the row with bit s of the lane, s = G/2, ..., 1.
  std::vector<llvm::Value*> transpose(llvm::IRBuilderBase& b, std::vector<llvm::Value*> rows) const {
    const auto g = static_cast<int>(G);
    ADJIT_ASSERT(g >= 2 && (g & (g - 1)) == 0 && rows.size() == std::size_t(g));
    for (int s = g / 2; s >= 1; s /= 2) {
      std::vector<int> lo(static_cast<std::size_t>(g)), hi(static_cast<std::size_t>(g));
      for (int p = 0; p < g; ++p) {
        lo[std::size_t(p)] = (p & s) ? g + p - s : p;
        hi[std::size_t(p)] = (p & s) ? g + p : p + s;
      }
      for (int r = 0; r < g; ++r) {
        if (r & s) continue;
        llvm::Value *x = rows[std::size_t(r)], *y = rows[std::size_t(r + s)];
        rows[std::size_t(r)] = b.CreateShuffleVector(x, y, lo);
        rows[std::size_t(r + s)] = b.CreateShuffleVector(x, y, hi);
      }
    }
    return rows;
  }

  /// Scratch vectors [0, count) from a group of G consecutive matrices of
  /// `count` elements at P (full) or of `valid` < G of them (the missing
  /// lanes read the last one).
  void gather(llvm::Value* P, int64_t count, llvm::Value* S, int64_t valid) const {
    auto lanePtr = [&](int64_t l, llvm::Value* e) {
      return c.b.CreateInBoundsGEP(elem, P, add(e, std::min(l, valid - 1) * count));
    };
    auto byElements = [&](llvm::Value* e) {
      llvm::Value* v = llvm::PoisonValue::get(vec);
      for (int64_t l = 0; l < G; ++l)
        v = c.b.CreateInsertElement(v, c.b.CreateAlignedLoad(elem, lanePtr(l, e), llvm::Align(uint64_t(es()))), uint64_t(l));
      st(v, S, e);
    };
    const int64_t tiles = valid == G ? count / G : 0;
    if (tiles > 0) callTiles(true, P, count, S, i64(0), i64(tiles));
    if (tiles * G < count) rolled(i64(tiles * G), i64(count), byElements); // no unrolling: rare, long code
  }

  /// The module's function that moves `tiles` G×G blocks from elements
  /// [e0, e0 + tiles·G) of G consecutive matrices of `count` elements at P
  /// to scratch vectors e0, ... (toScratch), or back; once per module and
  /// type, so that LLVM selects the transposes' shuffles once.
  void callTiles(bool toScratch, llvm::Value* P, int64_t count, llvm::Value* S, llvm::Value* e0, llvm::Value* tiles) const {
    const std::string name = std::string("adjit.lanes.") + (toScratch ? "gather." : "scatter.") + std::string(name_of(t)) + "x" +
                             std::to_string(G);
    llvm::Module& module = c.llvmModule();
    llvm::Function* fn = module.getFunction(name);
    if (!fn) {
      llvm::LLVMContext& ctx = c.ctx();
      llvm::Type *ptr = llvm::PointerType::get(ctx, 0), *i64t = llvm::Type::getInt64Ty(ctx);
      fn = llvm::Function::Create(llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr, i64t, ptr, i64t, i64t}, false),
                                  llvm::GlobalValue::InternalLinkage, name, module);
      fn->addFnAttr(llvm::Attribute::NoUnwind);
      fn->addFnAttr(llvm::Attribute::NoInline);
      fn->addFnAttr("min-legal-vector-width", std::to_string(c.vectorUnit().bits));
      fn->addFnAttr("prefer-vector-width", std::to_string(c.vectorUnit().bits));
      llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", fn));
      llvm::Value *fP = fn->getArg(0), *fCount = fn->getArg(1), *fS = fn->getArg(2), *fE0 = fn->getArg(3), *fTiles = fn->getArg(4);
      llvm::BasicBlock* entry = b.GetInsertBlock();
      auto* header = llvm::BasicBlock::Create(ctx, "tile", fn);
      auto* body = llvm::BasicBlock::Create(ctx, "tile.body", fn);
      auto* exit = llvm::BasicBlock::Create(ctx, "tile.exit", fn);
      b.CreateBr(header);
      b.SetInsertPoint(header);
      llvm::PHINode* tile = b.CreatePHI(i64t, 2);
      tile->addIncoming(b.getInt64(0), entry);
      b.CreateCondBr(b.CreateICmpSLT(tile, fTiles), body, exit);
      b.SetInsertPoint(body);
      llvm::Value* first = b.CreateAdd(fE0, b.CreateMul(tile, b.getInt64(uint64_t(G))));
      const llvm::Align elemAlign{static_cast<uint64_t>(es())}, vecAlign{static_cast<uint64_t>(G * es())};
      auto matrixPtr = [&](int64_t l) { return b.CreateInBoundsGEP(elem, fP, b.CreateAdd(first, b.CreateMul(fCount, b.getInt64(uint64_t(l))))); };
      auto slotPtr = [&](int64_t k) { return b.CreateInBoundsGEP(vec, fS, b.CreateAdd(first, b.getInt64(uint64_t(k)))); };
      std::vector<llvm::Value*> in;
      for (int64_t l = 0; l < G; ++l)
        in.push_back(toScratch ? b.CreateAlignedLoad(vec, matrixPtr(l), elemAlign) : b.CreateAlignedLoad(vec, slotPtr(l), vecAlign));
      const std::vector<llvm::Value*> out = transpose(b, std::move(in));
      for (int64_t k = 0; k < G; ++k) {
        if (toScratch) b.CreateAlignedStore(out[std::size_t(k)], slotPtr(k), vecAlign);
        else b.CreateAlignedStore(out[std::size_t(k)], matrixPtr(k), elemAlign);
      }
      tile->addIncoming(b.CreateAdd(tile, b.getInt64(1)), b.GetInsertBlock());
      b.CreateBr(header);
      b.SetInsertPoint(exit);
      b.CreateRetVoid();
    }
    c.b.CreateCall(fn, {P, i64(count), S, e0, tiles});
  }

  /// gather of n × n matrices that reads only the tiles of rows that meet
  /// the lower (or upper) triangle: a full group and G dividing n; else all
  /// of them.
  void gatherTriangle(llvm::Value* P, int64_t n, llvm::Value* S, int64_t valid, bool lower) const {
    if (valid < G || n % G != 0 || n == G) return gather(P, n * n, S, valid);
    rolled(i64(0), i64(n), [&](llvm::Value* i) {
      llvm::Value* diagTile = c.b.CreateUDiv(i, i64(G));
      llvm::Value* firstTile = lower ? i64(0) : diagTile;
      callTiles(true, P, n * n, S, add(mul(i, n), mul(firstTile, G)), c.b.CreateSub(lower ? add(diagTile, 1) : i64(n / G), firstTile));
    });
  }

  /// The inverse of gather: scratch vectors [0, count) into the first
  /// `valid` matrices of the group at Q.
  void scatter(llvm::Value* S, int64_t count, llvm::Value* Q, int64_t valid) const {
    auto lanePtr = [&](int64_t l, llvm::Value* e) { return c.b.CreateInBoundsGEP(elem, Q, add(e, l * count)); };
    const int64_t tiles = valid == G ? count / G : 0;
    if (tiles > 0) callTiles(false, Q, count, S, i64(0), i64(tiles));
    if (tiles * G < count) rolled(i64(tiles * G), i64(count), [&](llvm::Value* e) {
      llvm::Value* v = ld(S, e);
      for (int64_t l = 0; l < valid; ++l)
        c.b.CreateAlignedStore(c.b.CreateExtractElement(v, uint64_t(l)), lanePtr(l, e), llvm::Align(uint64_t(es())));
    });
  }

  /// For every item in [begin, end): acc = init(item) - sum over k in
  /// [kBegin, kEnd) of own(item, k) * shared(k), then finish(item, acc).
  /// Items go in blocks of kBlock that load shared(k) once (as loops), then
  /// one at a time. A null `end`: the one item `begin`.
  void blockedDots(llvm::Value* begin, llvm::Value* end, llvm::Value* kBegin, llvm::Value* kEnd,
                   const std::function<llvm::Value*(llvm::Value*)>& init, const std::function<llvm::Value*(llvm::Value*)>& shared,
                   const std::function<llvm::Value*(llvm::Value*, llvm::Value*)>& own,
                   const std::function<void(llvm::Value*, llvm::Value*)>& finish) const {
    auto block = [&](llvm::Value* first, int64_t size) {
      std::vector<llvm::Value*> acc;
      for (int64_t r = 0; r < size; ++r) {
        acc.push_back(var(vec));
        c.b.CreateStore(init(add(first, r)), acc.back());
      }
      range(kBegin, kEnd, [&](llvm::Value* k) {
        llvm::Value* y = shared(k);
        for (int64_t r = 0; r < size; ++r)
          c.b.CreateStore(nfma(own(add(first, r), k), y, get(acc[std::size_t(r)], vec)), acc[std::size_t(r)]);
      });
      for (int64_t r = 0; r < size; ++r) finish(add(first, r), get(acc[std::size_t(r)], vec));
    };
    if (!end) return block(begin, 1); // one item
    const auto* cb = llvm::dyn_cast<llvm::ConstantInt>(begin);
    const auto* ce = llvm::dyn_cast<llvm::ConstantInt>(end);
    if (unroll && cb && ce) { // straight-line code: blocks change nothing
      range(begin, end, [&](llvm::Value* item) { block(item, 1); });
      return;
    }
    llvm::Value* blocks = c.b.CreateSDiv(c.b.CreateSub(end, begin), i64(kBlock));
    range(i64(0), blocks, [&](llvm::Value* bk) { block(add(begin, mul(bk, kBlock)), kBlock); });
    range(add(begin, mul(blocks, kBlock)), end, [&](llvm::Value* item) { block(item, 1); });
  }

  /// For every group of G matrices of a batch: load(first, valid), compute(),
  /// store(first, valid), with `first` the group's first matrix and `valid`
  /// its number of real matrices (G but in a last, partial group). compute
  /// is emitted once.
  void groups(int64_t batch, const std::function<void(llvm::Value*, int64_t)>& load, const std::function<void()>& compute,
              const std::function<void(llvm::Value*, int64_t)>& store) const {
    const int64_t full = batch / G, rest = batch % G;
    c.loop(full + (rest ? 1 : 0), [&](llvm::Value* g) {
      llvm::Value* first = mul(g, G);
      auto both = [&](const std::function<void(llvm::Value*, int64_t)>& f) {
        if (rest == 0) return f(first, G);
        if (full == 0) return f(first, rest);
        ifElse(c.b.CreateICmpSLT(g, i64(full)), [&] { f(first, G); }, [&] { f(first, rest); });
      };
      both(load);
      compute();
      both(store);
    });
  }
};

/// Whether a batch of `batch` matrices of order n goes across the batch.
bool acrossBatch(const LowerCtx& c, DType t, int64_t batch, int64_t n) {
  return n >= 1 && n <= kMaxOrder && batch >= Lanes::lanesOf(c, t) && Lanes::lanesOf(c, t) >= 2;
}

} // namespace

bool lowerCholeskyAcrossBatch(LowerCtx& c) {
  const Type& at = c.operandType(0);
  const int64_t n = at.shape.back();
  const int64_t batch = num_elements(Shape(at.shape.begin(), at.shape.end() - 2));
  if (!acrossBatch(c, at.dtype, batch, n)) return false;
  const Lanes v(c, at.dtype, n <= kUnrollOrder);
  llvm::Value *A = c.operandBuffer(0), *L = c.results[0];
  const int64_t nn = n * n;
  llvm::Value* S = c.workspace(static_cast<uint64_t>(nn * v.G * v.es()));
  llvm::Type* maskTy = llvm::FixedVectorType::get(c.b.getInt1Ty(), static_cast<unsigned>(v.G));
  llvm::Value* ok = v.var(maskTy);
  auto s = [&](llvm::Value* i, llvm::Value* j) { return v.at(i, n, j); };
  auto load = [&](llvm::Value* first, int64_t valid) {
    v.gatherTriangle(c.b.CreateInBoundsGEP(v.elem, A, v.mul(first, nn)), n, S, valid, true);
  };
  auto store = [&](llvm::Value* first, int64_t valid) {
    v.scatter(S, nn, c.b.CreateInBoundsGEP(v.elem, L, v.mul(first, nn)), valid);
  };
  // Column by column (Cholesky–Crout): L[j, j] = sqrt(a[j, j] - |L[j, :j]|²),
  // L[i, j] = (a[i, j] - <L[i, :j], L[j, :j]>) / L[j, j] for i > j, zeros
  // above; a lane whose pivot is not positive is all NaN.
  v.groups(batch, load, [&] {
    c.b.CreateStore(llvm::Constant::getAllOnesValue(maskTy), ok);
    v.range(0, n, [&](llvm::Value* j) {
      llvm::Value* inv = v.var(v.vec);
      v.blockedDots(j, nullptr, v.i64(0), j, [&](llvm::Value*) { return v.ld(S, s(j, j)); },
                    [&](llvm::Value* k) { return v.ld(S, s(j, k)); }, [&](llvm::Value*, llvm::Value* k) { return v.ld(S, s(j, k)); },
                    [&](llvm::Value*, llvm::Value* d) {
                      c.b.CreateStore(c.b.CreateAnd(c.b.CreateLoad(maskTy, ok), c.b.CreateFCmpOGT(d, v.splat(0))), ok);
                      llvm::Value* root = c.intrinsic(llvm::Intrinsic::sqrt, {{d}});
                      v.st(root, S, s(j, j));
                      c.b.CreateStore(c.b.CreateFDiv(v.splat(1), root), inv);
                    });
      v.range(v.i64(0), j, [&](llvm::Value* i) { v.st(v.splat(0), S, s(i, j)); });
      v.blockedDots(v.add(j, 1), v.i64(n), v.i64(0), j, [&](llvm::Value* i) { return v.ld(S, s(i, j)); },
                    [&](llvm::Value* k) { return v.ld(S, s(j, k)); }, [&](llvm::Value* i, llvm::Value* k) { return v.ld(S, s(i, k)); },
                    [&](llvm::Value* i, llvm::Value* acc) { v.st(c.b.CreateFMul(acc, v.get(inv, v.vec)), S, s(i, j)); });
    });
    // a lane whose pivot was not positive: all NaN (a rare branch)
    llvm::Value* mask = c.b.CreateLoad(maskTy, ok);
    v.ifElse(c.intrinsic(llvm::Intrinsic::vector_reduce_and, {{mask}}), [] {}, [&] {
      v.rolled(v.i64(0), v.i64(nn), [&](llvm::Value* e) {
        v.st(c.b.CreateSelect(mask, v.ld(S, e), v.splat(std::numeric_limits<double>::quiet_NaN())), S, e);
      });
    });
  }, store);
  return true;
}

bool lowerTriangularSolveAcrossBatch(LowerCtx& c, const SolveFlags& f) {
  const Type &at = c.operandType(0), &bt = c.operandType(1);
  const int64_t m = at.shape.back();
  const int64_t nr = f.left ? bt.shape.back() : bt.shape[bt.shape.size() - 2]; // systems: columns (left) or rows of b
  const int64_t batch = num_elements(Shape(at.shape.begin(), at.shape.end() - 2));
  if (!acrossBatch(c, at.dtype, batch, m) || nr > 2 * kMaxOrder) return false;
  const Lanes v(c, at.dtype, m <= kUnrollOrder && nr <= kUnrollOrder);
  llvm::Value *A = c.operandBuffer(0), *B = c.operandBuffer(1), *X = c.results[0];
  const int64_t mm = m * m, mn = m * nr;
  llvm::Value* SA = c.workspace(static_cast<uint64_t>((mm + mn) * v.G * v.es()));
  llvm::Value* SX = v.slot(SA, v.i64(mm));
  // Each system s is C x = b_s with C = op(a) (left) or op(a)^T (right): C is
  // lower, solved forwards, when op(a) is lower (left) or upper (right).
  const bool forward = f.left ? f.lower != f.transpose : f.lower == f.transpose;
  const bool cRowsOfA = f.left != f.transpose; // C[i, k] = a[i, k], else a[k, i]
  auto C = [&](llvm::Value* i, llvm::Value* k) { return v.ld(SA, cRowsOfA ? v.at(i, m, k) : v.at(k, m, i)); };
  auto x = [&](llvm::Value* sys, llvm::Value* i) { return f.left ? v.at(i, nr, sys) : v.at(sys, m, i); };
  auto load = [&](llvm::Value* first, int64_t valid) {
    v.gatherTriangle(c.b.CreateInBoundsGEP(v.elem, A, v.mul(first, mm)), m, SA, valid, f.lower);
    v.gather(c.b.CreateInBoundsGEP(v.elem, B, v.mul(first, mn)), mn, SX, valid);
  };
  auto store = [&](llvm::Value* first, int64_t valid) {
    v.scatter(SX, mn, c.b.CreateInBoundsGEP(v.elem, X, v.mul(first, mn)), valid);
  };
  // Fewer systems than a block: column by column, x[i] = b[i] / C[i, i], then
  // b[k] -= C[k, i] x[i] for the unknowns k still ahead (independent updates;
  // one system's dot products would be one chain of dependent adds).
  if (nr < kBlock) {
    v.groups(batch, load, [&] {
      v.range(0, m, [&](llvm::Value* ii) {
        llvm::Value* i = forward ? ii : c.b.CreateSub(v.i64(m - 1), ii);
        llvm::Value* diag = f.unit ? nullptr : C(i, i);
        v.range(0, nr, [&](llvm::Value* sys) {
          llvm::Value* xi = v.ld(SX, x(sys, i));
          if (diag) {
            xi = c.b.CreateFDiv(xi, diag);
            v.st(xi, SX, x(sys, i));
          }
          v.range(forward ? v.add(i, 1) : v.i64(0), forward ? v.i64(m) : i,
                  [&](llvm::Value* k) { v.st(v.nfma(C(k, i), xi, v.ld(SX, x(sys, k))), SX, x(sys, k)); });
        });
      });
    }, store);
    return true;
  }
  // unknown i of every system, in order: x[i] = (b[i] - sum over solved k of C[i, k] x[k]) / C[i, i]
  v.groups(batch, load, [&] {
    v.range(0, m, [&](llvm::Value* ii) {
      llvm::Value* i = forward ? ii : c.b.CreateSub(v.i64(m - 1), ii);
      llvm::Value* diag = f.unit ? nullptr : C(i, i);
      v.blockedDots(v.i64(0), v.i64(nr), forward ? v.i64(0) : v.add(i, 1), forward ? i : v.i64(m),
                    [&](llvm::Value* sys) { return v.ld(SX, x(sys, i)); }, [&](llvm::Value* k) { return C(i, k); },
                    [&](llvm::Value* sys, llvm::Value* k) { return v.ld(SX, x(sys, k)); },
                    [&](llvm::Value* sys, llvm::Value* acc) { v.st(diag ? c.b.CreateFDiv(acc, diag) : acc, SX, x(sys, i)); });
    });
  }, store);
  return true;
}

llvm::FixedVectorType* vectorType(const LowerCtx& c, DType t) {
  return llvm::FixedVectorType::get(c.scalarType(t), static_cast<unsigned>(Lanes::lanesOf(c, t)));
}

bool acrossBatch(LowerCtx& c, DType t, int64_t batch, int64_t order, const std::vector<Matrices>& in, const std::vector<Matrices>& out,
                 uint64_t extraBytes,
                 const std::function<void(const std::vector<llvm::Value*>&, const std::vector<llvm::Value*>&, llvm::Value*)>& compute) {
  if (!acrossBatch(c, t, batch, order)) return false;
  const Lanes v(c, t, false);
  // one workspace (each call of c.workspace starts at the same place), cut in vector-aligned parts
  uint64_t bytes = 0;
  std::vector<uint64_t> offsets;
  for (const auto* ms : {&in, &out})
    for (const Matrices& m : *ms) {
      offsets.push_back(bytes);
      bytes += static_cast<uint64_t>(m.elements * v.G * v.es());
    }
  llvm::Value* ws = c.workspace(bytes + extraBytes);
  auto part = [&](uint64_t at) { return c.b.CreateConstInBoundsGEP1_64(c.b.getInt8Ty(), ws, at); };
  std::vector<llvm::Value*> sin, sout;
  for (std::size_t i = 0; i < offsets.size(); ++i) (i < in.size() ? sin : sout).push_back(part(offsets[i]));
  llvm::Value* extra = part(bytes);
  v.groups(batch, [&](llvm::Value* first, int64_t valid) {
    for (std::size_t i = 0; i < in.size(); ++i)
      v.gather(c.b.CreateInBoundsGEP(v.elem, in[i].buffer, v.mul(first, in[i].elements)), in[i].elements, sin[i], valid);
  }, [&] { compute(sin, sout, extra); }, [&](llvm::Value* first, int64_t valid) {
    for (std::size_t i = 0; i < out.size(); ++i)
      v.scatter(sout[i], out[i].elements, c.b.CreateInBoundsGEP(v.elem, out[i].buffer, v.mul(first, out[i].elements)), valid);
  });
  return true;
}

bool lowerLuAcrossBatch(LowerCtx& c) {
  const Type& at = c.operandType(0);
  const int64_t n = at.shape.back();
  const int64_t batch = num_elements(Shape(at.shape.begin(), at.shape.end() - 2));
  if (at.shape[at.shape.size() - 2] != n || !acrossBatch(c, at.dtype, batch, n)) return false;
  const Lanes v(c, at.dtype, n <= kUnrollOrder);
  llvm::Value *A = c.operandBuffer(0), *LU = c.results[0], *Piv = c.results[1], *Perm = c.results[2];
  const int64_t nn = n * n;
  llvm::Value* S = c.workspace(static_cast<uint64_t>(nn * v.G * v.es()));
  llvm::Type* i32 = c.b.getInt32Ty();
  auto* idxTy = llvm::FixedVectorType::get(i32, static_cast<unsigned>(v.G));
  llvm::Value* P = c.entryAlloca(idxTy, static_cast<uint64_t>(n)); // step k's pivot row of each lane
  auto pivotSlot = [&](llvm::Value* k) { return c.b.CreateInBoundsGEP(idxTy, P, k); };
  auto s = [&](llvm::Value* i, llvm::Value* j) { return v.at(i, n, j); };
  auto splat32 = [&](llvm::Value* x) { return c.b.CreateVectorSplat(static_cast<unsigned>(v.G), c.b.CreateTrunc(x, i32)); };
  // element (i, j) of lane l lies at S + (i n + j) G + l: lane l's row p_l of column j
  llvm::Value* lanes = [&] {
    std::vector<llvm::Constant*> l;
    for (int64_t k = 0; k < v.G; ++k) l.push_back(llvm::ConstantInt::get(i32, static_cast<uint64_t>(k)));
    return llvm::ConstantVector::get(l);
  }();
  auto rowOf = [&](llvm::Value* p, llvm::Value* j) {
    llvm::Value* idx = c.b.CreateAdd(c.b.CreateMul(p, splat32(v.i64(n * v.G))), c.b.CreateAdd(splat32(v.mul(j, v.G)), lanes));
    return c.b.CreateInBoundsGEP(v.elem, S, idx);
  };
  const llvm::Align elemAlign{static_cast<uint64_t>(v.es())};
  llvm::Value* all = llvm::Constant::getAllOnesValue(llvm::FixedVectorType::get(c.b.getInt1Ty(), static_cast<unsigned>(v.G)));
  auto load = [&](llvm::Value* first, int64_t valid) { v.gather(c.b.CreateInBoundsGEP(v.elem, A, v.mul(first, nn)), nn, S, valid); };
  // lu back, and each lane's pivots and permutation (the pivots' swaps applied to 0..n-1)
  // (one loop over the lanes: emitted per lane, the copies made LLVM's time)
  auto store = [&](llvm::Value* first, int64_t valid) {
    v.scatter(S, nn, c.b.CreateInBoundsGEP(v.elem, LU, v.mul(first, nn)), valid);
    v.rolled(v.i64(0), v.i64(valid), [&](llvm::Value* l) {
      llvm::Value* base = v.mul(v.add(first, l), n);
      v.range(0, n, [&](llvm::Value* i) { c.store(DType::i32, c.b.CreateTrunc(i, i32), Perm, v.add(base, i)); });
      v.range(0, n, [&](llvm::Value* k) {
        llvm::Value* p = c.b.CreateLoad(i32, c.b.CreateInBoundsGEP(i32, P, v.add(v.mul(k, v.G), l)));
        c.store(DType::i32, p, Piv, v.add(base, k));
        llvm::Value* pk = v.add(base, k);
        llvm::Value* pp = c.b.CreateAdd(base, c.b.CreateZExt(p, c.b.getInt64Ty()));
        llvm::Value* permK = c.load(DType::i32, Perm, pk);
        c.store(DType::i32, c.load(DType::i32, Perm, pp), Perm, pk);
        c.store(DType::i32, permK, Perm, pp);
      });
    });
  };
  // Right-looking, as the per-matrix loops: at step k each lane's pivot row
  // p (the first of the largest |a[i, k]|, i >= k), rows k and p swapped
  // (a gather of row p's elements, lane by lane, and a scatter of row k's
  // into it), then the multipliers and the trailing update for every lane.
  v.groups(batch, load, [&] {
    v.range(0, n, [&](llvm::Value* k) {
      llvm::Value* best = v.var(v.vec);
      llvm::Value* p = v.var(idxTy);
      c.b.CreateStore(c.intrinsic(llvm::Intrinsic::fabs, {{v.ld(S, s(k, k))}}), best);
      c.b.CreateStore(splat32(k), p);
      v.range(v.add(k, 1), v.i64(n), [&](llvm::Value* i) {
        llvm::Value* x = c.intrinsic(llvm::Intrinsic::fabs, {{v.ld(S, s(i, k))}});
        llvm::Value* better = c.b.CreateFCmpOGT(x, v.get(best, v.vec));
        c.b.CreateStore(c.b.CreateSelect(better, x, v.get(best, v.vec)), best);
        c.b.CreateStore(c.b.CreateSelect(better, splat32(i), v.get(p, idxTy)), p);
      });
      llvm::Value* pv = v.get(p, idxTy);
      c.b.CreateStore(pv, pivotSlot(k));
      // swap only where some lane pivots off the diagonal
      llvm::Value* moves = c.intrinsic(llvm::Intrinsic::vector_reduce_or, {{c.b.CreateICmpNE(pv, splat32(k))}});
      v.ifElse(moves, [&] {
        v.range(0, n, [&](llvm::Value* j) {
          llvm::Value* rowK = v.ld(S, s(k, j));
          llvm::Value* rowP = c.b.CreateMaskedGather(v.vec, rowOf(pv, j), elemAlign, all);
          v.st(rowP, S, s(k, j));
          c.b.CreateMaskedScatter(rowK, rowOf(pv, j), elemAlign, all);
        });
      }, [] {});
      llvm::Value* piv = v.ld(S, s(k, k));
      llvm::Value* nonzero = c.b.CreateFCmpUNE(piv, v.splat(0));
      v.range(v.add(k, 1), v.i64(n), [&](llvm::Value* i) {
        llvm::Value* x = v.ld(S, s(i, k));
        llvm::Value* l = c.b.CreateSelect(nonzero, c.b.CreateFDiv(x, piv), x);
        v.st(l, S, s(i, k));
        v.range(v.add(k, 1), v.i64(n), [&](llvm::Value* j) { v.st(v.nfma(l, v.ld(S, s(k, j)), v.ld(S, s(i, j))), S, s(i, j)); });
      });
    });
  }, store);
  return true;
}

} // namespace adjit::ops::small
