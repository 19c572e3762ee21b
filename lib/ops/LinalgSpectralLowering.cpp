// ops/LinalgSpectralLowering.cpp — the decompositions' algorithms as
// generated code: Householder QR, Jacobi eigh in round-robin rounds,
// one-sided Jacobi SVD; the same steps as the reference versions in
// LinalgSpectral.cpp (which say why each step is there), with no library
// calls (large matrices call LAPACK instead: LinalgLapack.cpp). Working
// matrices live in the op's workspace. QR's steps have no branch on values,
// so a batch of small matrices runs them on vectors, one matrix per lane
// (LinalgSmall.h's acrossBatch), with the same bits. Against LAPACK's
// dgeqrf + dorgqr per matrix (f64, bench/linalg_bench.cpp --small-only,
// interleaved, load ~4): 1000 × 8×8 12-17× faster (per matrix 3.3×), 1000 ×
// 16×4 10.5-10.8× (2.1×), 100 × 32×32 2.8-3.0× (0.84×: LAPACK then), so up
// to 32 × 32 batches go across the batch before LAPACK's threshold. Jacobi
// eigh too: its lanes converge on their own (a lane done, or whose apq is
// zero, rotates by the identity), and sort and normalise on their own
// (Gen's lane helpers). Against dsyevd per matrix (f64,
// bench/decompositions_bench.cpp --quick, interleaved, load ~4): 256 × 8×8
// 0.15 of its time (one matrix at a time 0.83), 64 × 32×32 0.90-1.02
// (LAPACK's own path before, from order 16). One-sided Jacobi svd likewise,
// its column completion lane by lane: against dgesdd, 256 × 8×8 0.16 (one
// matrix at a time 0.93), 64 × 32×32 0.64 (LAPACK before, from order 24).
#include "ops/LinalgSpectral.h"
#include "ops/LinalgSmall.h"

#include "support/Assert.h"

#include <array>
#include <cmath>
#include <functional>

namespace adjit::ops::spectral {
namespace {

using codegen::LowerCtx;

/// Scalar arithmetic, variables and control flow for the lowerings; with
/// `lanes`, the same on vectors of that type, one matrix per lane, over
/// buffers that hold element e of every lane's matrix in vector e
/// (LinalgSmall.h's acrossBatch). Code free of branches on values (QR's)
/// then runs for a group of matrices as it runs for one.
struct Gen {
  LowerCtx& c;
  DType t;
  llvm::FixedVectorType* lanes = nullptr;

  llvm::Type* ty() const { return lanes ? static_cast<llvm::Type*>(lanes) : c.scalarType(t); }
  llvm::Value* k(double v) const { return lanes ? llvm::ConstantFP::get(lanes, v) : c.constant(t, v); }
  llvm::Value* i64(int64_t v) const { return c.i64(v); }
  // index arithmetic
  llvm::Value* at(llvm::Value* i, int64_t stride, llvm::Value* j) const { return c.b.CreateAdd(c.b.CreateMul(i, i64(stride)), j); }
  llvm::Value* iadd(llvm::Value* a, int64_t v) const { return c.b.CreateAdd(a, i64(v)); }
  llvm::Value* isub(int64_t v, llvm::Value* a) const { return c.b.CreateSub(i64(v), a); }
  llvm::Value* offset(llvm::Value* buf, llvm::Value* bt, int64_t size) const {
    return c.b.CreateInBoundsGEP(ty(), buf, c.b.CreateMul(bt, i64(size)));
  }
  // memory
  llvm::Value* ld(llvm::Value* buf, llvm::Value* i) const {
    if (lanes) return c.b.CreateAlignedLoad(lanes, c.b.CreateInBoundsGEP(lanes, buf, i), vectorAlign());
    return c.load(t, buf, i);
  }
  void st(llvm::Value* v, llvm::Value* buf, llvm::Value* i) const {
    if (lanes) c.b.CreateAlignedStore(v, c.b.CreateInBoundsGEP(lanes, buf, i), vectorAlign());
    else c.store(t, v, buf, i);
  }
  llvm::Align vectorAlign() const { return llvm::Align(lanes->getNumElements() * size_of(t)); }
  llvm::Value* var(llvm::Value* init) const {
    llvm::Value* s = c.entryAlloca(init->getType(), 1);
    c.b.CreateStore(init, s);
    return s;
  }
  llvm::Value* get(llvm::Value* slot, llvm::Type* type) const { return c.b.CreateLoad(type, slot); }
  llvm::Value* get(llvm::Value* slot) const { return get(slot, ty()); }
  llvm::Value* geti(llvm::Value* slot) const { return get(slot, c.b.getInt64Ty()); }
  void set(llvm::Value* slot, llvm::Value* v) const { c.b.CreateStore(v, slot); }
  // arithmetic (no fast-math: the interpreter's results, up to contraction)
  llvm::Value* add(llvm::Value* a, llvm::Value* b) const { return c.b.CreateFAdd(a, b); }
  llvm::Value* sub(llvm::Value* a, llvm::Value* b) const { return c.b.CreateFSub(a, b); }
  llvm::Value* mul(llvm::Value* a, llvm::Value* b) const { return c.b.CreateFMul(a, b); }
  llvm::Value* div(llvm::Value* a, llvm::Value* b) const { return c.b.CreateFDiv(a, b); }
  llvm::Value* neg(llvm::Value* a) const { return c.b.CreateFNeg(a); }
  llvm::Value* sqrt(llvm::Value* a) const { return c.intrinsic(llvm::Intrinsic::sqrt, {{a}}); }
  llvm::Value* abs(llvm::Value* a) const { return c.intrinsic(llvm::Intrinsic::fabs, {{a}}); }
  llvm::Value* copysign(llvm::Value* mag, llvm::Value* sgn) const { return c.intrinsic(llvm::Intrinsic::copysign, {{mag, sgn}}); }
  llvm::Value* select(llvm::Value* cond, llvm::Value* a, llvm::Value* b) const { return c.b.CreateSelect(cond, a, b); }
  /// sum += x
  void accumulate(llvm::Value* slot, llvm::Value* x) const { set(slot, add(get(slot), x)); }

  /// if (cond) body();
  void ifThen(llvm::Value* cond, const std::function<void()>& body) const { c.ifThen(cond, body); }
  /// if (cond) then(); else otherwise();
  void ifElse(llvm::Value* cond, const std::function<void()>& then, const std::function<void()>& otherwise) const {
    c.ifElse(cond, then, otherwise);
  }
  /// for (i = begin; i < end; ++i) body(i)
  void range(llvm::Value* begin, llvm::Value* end, const std::function<void(llvm::Value*)>& body) const {
    c.loopRange(begin, end, body);
  }

  /// rotation(app, aqq, apq) -> (c, s, t).
  std::array<llvm::Value*, 3> rotation(llvm::Value* app, llvm::Value* aqq, llvm::Value* apq) const {
    llvm::Value* theta = div(sub(aqq, app), mul(k(2), apq));
    llvm::Value* tt = div(copysign(k(1), theta), add(abs(theta), sqrt(add(mul(theta, theta), k(1)))));
    llvm::Value* cs = div(k(1), sqrt(add(mul(tt, tt), k(1))));
    return {cs, mul(tt, cs), tt};
  }
  /// Rows p, q of x (rows×cols) rotated as rotateColumns rotates columns (contiguous).
  void rotateRows(llvm::Value* x, int64_t cols, llvm::Value* p, llvm::Value* q, llvm::Value* cs, llvm::Value* sn) const {
    c.loop(cols, [&](llvm::Value* i) {
      llvm::Value *pi = at(p, cols, i), *qi = at(q, cols, i);
      llvm::Value *xp = ld(x, pi), *xq = ld(x, qi);
      st(sub(mul(cs, xp), mul(sn, xq)), x, pi);
      st(add(mul(sn, xp), mul(cs, xq)), x, qi);
    });
  }
  void swapColumns(llvm::Value* x, int64_t rows, int64_t cols, llvm::Value* i, llvm::Value* j) const {
    c.loop(rows, [&](llvm::Value* r) {
      llvm::Value *a = at(r, cols, i), *b = at(r, cols, j);
      llvm::Value *xa = ld(x, a), *xb = ld(x, b);
      st(xb, x, a);
      st(xa, x, b);
    });
  }
  // ---- lanes: values that differ from lane to lane ----------------------------
  /// The lanes' type with i64 elements, for per-lane indices.
  llvm::FixedVectorType* indexType() const { return llvm::FixedVectorType::get(c.b.getInt64Ty(), lanes->getNumElements()); }
  llvm::Value* splatIndex(llvm::Value* i) const { return c.b.CreateVectorSplat(lanes->getNumElements(), i); }
  /// Lane l's element idx[l] of a lane-interleaved buffer: a vector of pointers.
  llvm::Value* lanePtrs(llvm::Value* buf, llvm::Value* idx) const {
    std::vector<llvm::Constant*> l;
    for (unsigned i = 0; i < lanes->getNumElements(); ++i) l.push_back(llvm::ConstantInt::get(c.b.getInt64Ty(), i));
    llvm::Value* scaled = c.b.CreateMul(idx, splatIndex(i64(lanes->getNumElements())));
    return c.b.CreateInBoundsGEP(c.scalarType(t), buf, c.b.CreateAdd(scaled, llvm::ConstantVector::get(l)));
  }
  llvm::Value* allLanes() const {
    return llvm::Constant::getAllOnesValue(llvm::FixedVectorType::get(c.b.getInt1Ty(), lanes->getNumElements()));
  }
  llvm::Value* gatherAt(llvm::Value* buf, llvm::Value* idx) const {
    return c.b.CreateMaskedGather(lanes, lanePtrs(buf, idx), llvm::Align(size_of(t)), allLanes());
  }
  void scatterAt(llvm::Value* v, llvm::Value* buf, llvm::Value* idx) const {
    c.b.CreateMaskedScatter(v, lanePtrs(buf, idx), llvm::Align(size_of(t)), allLanes());
  }
  /// Elements a (same for every lane) and idx (lane by lane) of buf swapped.
  void swapLanes(llvm::Value* buf, llvm::Value* a, llvm::Value* idx) const {
    llvm::Value* x = ld(buf, a);
    st(gatherAt(buf, idx), buf, a);
    scatterAt(x, buf, idx);
  }
  /// Whether any lane of mask m is set (m scalar: m).
  llvm::Value* any(llvm::Value* m) const { return lanes ? c.intrinsic(llvm::Intrinsic::vector_reduce_or, {{m}}) : m; }

  /// Element i of x is x[ix(i)] (i < len), of y y[iy(i)] (i < ylen): both
  /// negated where x's entry of the largest magnitude (the first of equals)
  /// is negative. With lanes, lane by lane: the largest entry's value is
  /// carried along, and the vectors are multiplied by its sign by a select.
  void normaliseSignOf(llvm::Value* x, int64_t len, const std::function<llvm::Value*(llvm::Value*)>& ix, llvm::Value* y, int64_t ylen,
                       const std::function<llvm::Value*(llvm::Value*)>& iy) const {
    if (lanes) {
      llvm::Value* bestAbs = var(k(0));
      llvm::Value* bestVal = var(ld(x, ix(i64(0))));
      c.loop(len, [&](llvm::Value* i) {
        llvm::Value* xi = ld(x, ix(i));
        llvm::Value* better = c.b.CreateFCmpOGT(abs(xi), get(bestAbs));
        set(bestAbs, select(better, abs(xi), get(bestAbs)));
        set(bestVal, select(better, xi, get(bestVal)));
      });
      llvm::Value* flip = c.b.CreateFCmpOLT(get(bestVal), k(0));
      c.loop(len, [&](llvm::Value* i) { st(select(flip, neg(ld(x, ix(i))), ld(x, ix(i))), x, ix(i)); });
      c.loop(ylen, [&](llvm::Value* i) { st(select(flip, neg(ld(y, iy(i))), ld(y, iy(i))), y, iy(i)); });
      return;
    }
    llvm::Value* best = var(i64(0));
    llvm::Value* bestAbs = var(k(0));
    c.loop(len, [&](llvm::Value* i) {
      llvm::Value* a = abs(ld(x, ix(i)));
      ifThen(c.b.CreateFCmpOGT(a, get(bestAbs)), [&] {
        set(bestAbs, a);
        set(best, i);
      });
    });
    ifThen(c.b.CreateFCmpOLT(ld(x, ix(geti(best))), k(0)), [&] {
      c.loop(len, [&](llvm::Value* i) { st(neg(ld(x, ix(i))), x, ix(i)); });
      c.loop(ylen, [&](llvm::Value* i) { st(neg(ld(y, iy(i))), y, iy(i)); });
    });
  }
  /// normaliseSignOf column j of x (rows×cols), and of y (yrows×cols) with it.
  void normaliseSign(llvm::Value* x, int64_t rows, int64_t cols, llvm::Value* j, llvm::Value* y, int64_t yrows) const {
    auto column = [&](llvm::Value* i) { return at(i, cols, j); };
    normaliseSignOf(x, rows, column, y, yrows, column);
  }
  /// normaliseSignOf for matrices stored transposed: row j of x (len
  /// entries), and row j of y (ylen entries) with it.
  void normaliseSignRow(llvm::Value* x, int64_t len, llvm::Value* j, llvm::Value* y, int64_t ylen) const {
    normaliseSignOf(x, len, [&](llvm::Value* i) { return at(j, len, i); }, y, ylen, [&](llvm::Value* i) { return at(j, ylen, i); });
  }
  /// Selection sort of vals[0, n) (ascending, or descending), swapping the
  /// columns of each of `mats` (rows×n) alike; or their rows, where they are
  /// stored transposed (n×rows).
  void sortWithColumns(llvm::Value* vals, int64_t n, bool ascending, std::initializer_list<std::pair<llvm::Value*, int64_t>> mats,
                       bool transposed = false) const {
    if (lanes) { // each lane's own order: its best index, then swaps by gather and scatter
      c.loop(n, [&](llvm::Value* i) {
        llvm::Value* best = var(splatIndex(i));
        llvm::Value* bestVal = var(ld(vals, i));
        range(iadd(i, 1), i64(n), [&](llvm::Value* j) {
          llvm::Value* vj = ld(vals, j);
          llvm::Value* better = ascending ? c.b.CreateFCmpOLT(vj, get(bestVal)) : c.b.CreateFCmpOGT(vj, get(bestVal));
          set(best, c.b.CreateSelect(better, splatIndex(j), get(best, indexType())));
          set(bestVal, select(better, vj, get(bestVal)));
        });
        llvm::Value* b = get(best, indexType());
        ifThen(any(c.b.CreateICmpNE(b, splatIndex(i))), [&] {
          swapLanes(vals, i, b);
          for (auto [m, rows] : mats)
            c.loop(rows, [&](llvm::Value* r) {
              if (!transposed) swapLanes(m, at(r, n, i), c.b.CreateAdd(c.b.CreateMul(splatIndex(r), splatIndex(i64(n))), b));
              else swapLanes(m, at(i, rows, r), c.b.CreateAdd(c.b.CreateMul(b, splatIndex(i64(rows))), splatIndex(r)));
            });
        });
      });
      return;
    }
    c.loop(n, [&](llvm::Value* i) {
      llvm::Value* best = var(i);
      llvm::Value* bestVal = var(ld(vals, i));
      range(iadd(i, 1), i64(n), [&](llvm::Value* j) {
        llvm::Value* vj = ld(vals, j);
        ifThen(ascending ? c.b.CreateFCmpOLT(vj, get(bestVal)) : c.b.CreateFCmpOGT(vj, get(bestVal)), [&] {
          set(best, j);
          set(bestVal, vj);
        });
      });
      llvm::Value* b = geti(best);
      llvm::Value* vi = ld(vals, i);
      st(ld(vals, b), vals, i);
      st(vi, vals, b);
      for (auto [m, rows] : mats) {
        if (!transposed) {
          swapColumns(m, rows, n, i, b);
          continue;
        }
        c.loop(rows, [&](llvm::Value* r) {
          llvm::Value *ia = at(i, rows, r), *ib = at(b, rows, r);
          llvm::Value *xa = ld(m, ia), *xb = ld(m, ib);
          st(xb, m, ia);
          st(xa, m, ib);
        });
      }
    });
  }
};

/// Householder QR of the m × n matrix in w (overwritten by the reflectors),
/// tau in tauBuf: q (m × k) and r (k × n), k = min(m, n). Branch-free, so
/// one matrix or a group of lanes alike (Gen).
void qrCore(const Gen& g, int64_t m, int64_t n, llvm::Value* w, llvm::Value* tauBuf, llvm::Value* q, llvm::Value* r) {
  LowerCtx& c = g.c;
  const int64_t kk = std::min(m, n);
  // column col of x (m rows, row stride ld) times reflector j (v = (1, w[j+1.., j]), tau tj):
  // x -= tj v (vᵀ x)
  auto reflect = [&](llvm::Value* x, int64_t ld, llvm::Value* j, llvm::Value* tj, llvm::Value* col) {
    llvm::Value* s = g.var(g.ld(x, g.at(j, ld, col)));
    g.range(g.iadd(j, 1), g.i64(m), [&](llvm::Value* i) { g.accumulate(s, g.mul(g.ld(w, g.at(i, n, j)), g.ld(x, g.at(i, ld, col)))); });
    llvm::Value* st = g.mul(g.get(s), tj);
    g.st(g.sub(g.ld(x, g.at(j, ld, col)), st), x, g.at(j, ld, col));
    g.range(g.iadd(j, 1), g.i64(m), [&](llvm::Value* i) {
      llvm::Value* ic = g.at(i, ld, col);
      g.st(g.sub(g.ld(x, ic), g.mul(st, g.ld(w, g.at(i, n, j)))), x, ic);
    });
  };
  c.loop(kk, [&](llvm::Value* j) {
    llvm::Value* jj = g.at(j, n, j);
    llvm::Value* alpha = g.ld(w, jj);
    llvm::Value* xnorm2 = g.var(g.k(0));
    g.range(g.iadd(j, 1), g.i64(m), [&](llvm::Value* i) {
      llvm::Value* x = g.ld(w, g.at(i, n, j));
      g.accumulate(xnorm2, g.mul(x, x));
    });
    llvm::Value* x2 = g.get(xnorm2);
    llvm::Value* zero = c.b.CreateFCmpOEQ(x2, g.k(0));
    llvm::Value* beta = g.select(zero, alpha, g.neg(g.copysign(g.sqrt(g.add(g.mul(alpha, alpha), x2)), alpha)));
    llvm::Value* tj = g.select(zero, g.k(0), g.div(g.sub(beta, alpha), beta));
    llvm::Value* scale = g.select(zero, g.k(0), g.div(g.k(1), g.sub(alpha, beta)));
    g.st(tj, tauBuf, j);
    g.range(g.iadd(j, 1), g.i64(m), [&](llvm::Value* i) {
      llvm::Value* ij = g.at(i, n, j);
      g.st(g.mul(g.ld(w, ij), scale), w, ij);
    });
    g.st(beta, w, jj);
    g.range(g.iadd(j, 1), g.i64(n), [&](llvm::Value* col) { reflect(w, n, j, tj, col); });
  });
  c.loop(kk, [&](llvm::Value* i) {
    c.loop(n, [&](llvm::Value* col) {
      llvm::Value* ic = g.at(i, n, col);
      g.st(g.select(c.b.CreateICmpSGE(col, i), g.ld(w, ic), g.k(0)), r, ic);
    });
  });
  c.loop(m, [&](llvm::Value* i) {
    c.loop(kk, [&](llvm::Value* col) { g.st(g.select(c.b.CreateICmpEQ(i, col), g.k(1), g.k(0)), q, g.at(i, kk, col)); });
  });
  c.loop(kk, [&](llvm::Value* jr) {
    llvm::Value* j = g.isub(kk - 1, jr);
    llvm::Value* tj = g.ld(tauBuf, j);
    g.range(j, g.i64(kk), [&](llvm::Value* col) { reflect(q, kk, j, tj, col); });
  });
}

} // namespace

bool lowerQrAcrossBatch(LowerCtx& c) {
  const Mat d = matOf(c.operandType(0).shape);
  const int64_t m = d.m, n = d.n, kk = std::min(m, n);
  if (d.batch == 0 || kk == 0) return false;
  const DType t = c.resultType(0).dtype;
  const uint64_t es = size_of(t);
  return small::acrossBatch(
      c, t, d.batch, std::max(m, n), {{c.operandBuffer(0), m * n}}, {{c.results[0], m * kk}, {c.results[1], kk * n}},
      static_cast<uint64_t>(kk) * small::vectorType(c, t)->getNumElements() * es,
      [&](const std::vector<llvm::Value*>& in, const std::vector<llvm::Value*>& out, llvm::Value* extra) {
        qrCore(Gen{c, t, small::vectorType(c, t)}, m, n, in[0], extra, out[0], out[1]);
      });
}

void lowerQr(LowerCtx& c) {
  const Mat d = matOf(c.operandType(0).shape);
  const int64_t m = d.m, n = d.n, kk = std::min(m, n);
  if (d.batch == 0 || kk == 0) return;
  const Gen g{c, c.resultType(0).dtype};
  const uint64_t es = size_of(g.t);
  llvm::Value* w = c.workspace(static_cast<uint64_t>(m * n + kk) * es); // the reflectors, then tau
  llvm::Value* tauBuf = c.b.CreateInBoundsGEP(g.ty(), w, g.i64(m * n));
  c.loop(d.batch, [&](llvm::Value* bt) {
    llvm::Value* a = g.offset(c.operandBuffer(0), bt, m * n);
    llvm::Value* q = g.offset(c.results[0], bt, m * kk);
    llvm::Value* r = g.offset(c.results[1], bt, kk * n);
    c.loop(m * n, [&](llvm::Value* i) { g.st(g.ld(a, i), w, i); });
    qrCore(g, m, n, w, tauBuf, q, r);
  });
}

namespace {

/// eigh's workspace per matrix (or group of lanes): a round's pairs (p, q as
/// i64, the same for every lane), their c, s, new diagonal entries and
/// whether each rotates (one value or vector each), then S. The pairs take
/// a multiple of 64 bytes, so that the vectors after them are aligned.
int64_t eighPairBytes(int64_t n) { return (16 * ((n + (n & 1)) / 2) + 63) / 64 * 64; }
uint64_t eighWorkspace(int64_t n, uint64_t valueBytes) {
  const int64_t half = (n + (n & 1)) / 2;
  return static_cast<uint64_t>(eighPairBytes(n)) + (5 * static_cast<uint64_t>(half) + static_cast<uint64_t>(n * n)) * valueBytes;
}

/// Jacobi eigh of the n × n matrix a (its symmetric part) into w (ascending)
/// and v (columns, signs normalised), as eighMatrix; `ws` holds
/// eighWorkspace bytes. With lanes, each lane sweeps until its own matrix
/// has converged (a lane done or with a zero apq rotates by the identity:
/// c = 1, s = 0, its entries kept), and sorts and normalises on its own.
void eighCore(const Gen& g, int64_t n, llvm::Value* a, llvm::Value* w, llvm::Value* v, llvm::Value* ws) {
  LowerCtx& c = g.c;
  const double eps = g.t == DType::f32 ? kEps<float> : kEps<double>;
  const int64_t N = n + (n & 1), half = N / 2;
  const int64_t vb = static_cast<int64_t>(g.lanes ? g.lanes->getNumElements() * size_of(g.t) : size_of(g.t));
  auto part = [&](int64_t byteOffset) { return c.b.CreateInBoundsGEP(c.b.getInt8Ty(), ws, g.i64(byteOffset)); };
  llvm::Value *pp = part(0), *qq = part(8 * half);
  const int64_t pairs = eighPairBytes(n);
  llvm::Value *pc = part(pairs), *ps = part(pairs + vb * half), *ppp = part(pairs + 2 * vb * half),
              *pqq = part(pairs + 3 * vb * half), *prot = part(pairs + 4 * vb * half);
  llvm::Value* s = part(pairs + 5 * vb * half);
  llvm::Type* maskTy = g.lanes ? static_cast<llvm::Type*>(llvm::FixedVectorType::get(c.b.getInt1Ty(), g.lanes->getNumElements())) : c.b.getInt1Ty();
  llvm::Value* norm2 = g.var(g.k(0));
  c.loop(n, [&](llvm::Value* i) {
    c.loop(n, [&](llvm::Value* j) {
      llvm::Value* x = g.mul(g.add(g.ld(a, g.at(i, n, j)), g.ld(a, g.at(j, n, i))), g.k(0.5));
      g.st(x, s, g.at(i, n, j));
      g.accumulate(norm2, g.mul(x, x));
      g.st(g.select(c.b.CreateICmpEQ(i, j), g.k(1), g.k(0)), v, g.at(i, n, j));
    });
  });
  llvm::Value* bound = g.mul(g.k(eps * eps), g.get(norm2));
  llvm::Value* done = g.var(llvm::Constant::getNullValue(maskTy));
  c.loop(kMaxSweeps, [&](llvm::Value*) {
    g.ifThen(g.any(c.b.CreateNot(g.get(done, maskTy))), [&] {
      llvm::Value* off = g.var(g.k(0));
      c.loop(n, [&](llvm::Value* p) {
        g.range(g.iadd(p, 1), g.i64(n), [&](llvm::Value* q) {
          llvm::Value* x = g.ld(s, g.at(p, n, q));
          g.accumulate(off, g.mul(x, x));
        });
      });
      llvm::Value* more = c.b.CreateAnd(c.b.CreateFCmpOGT(g.get(off), bound), c.b.CreateNot(g.get(done, maskTy)));
      g.set(done, c.b.CreateOr(g.get(done, maskTy), c.b.CreateNot(more)));
      g.ifThen(g.any(more), [&] {
        c.loop(N - 1, [&](llvm::Value* round) { // eighMatrix's rounds
          llvm::Value* count = g.var(g.i64(0));
          c.loop(N / 2, [&](llvm::Value* k) {
            auto player = [&](llvm::Value* pos) { return g.iadd(c.b.CreateURem(c.b.CreateAdd(pos, round), g.i64(N - 1)), 1); };
            llvm::Value* first = c.b.CreateICmpEQ(k, g.i64(0));
            llvm::Value* x = c.b.CreateSelect(first, g.i64(0), player(k));
            llvm::Value* y = c.b.CreateSelect(first, player(g.i64(0)), player(g.isub(N - 1, k)));
            llvm::Value* p = c.b.CreateSelect(c.b.CreateICmpSLT(x, y), x, y);
            llvm::Value* q = c.b.CreateSelect(c.b.CreateICmpSLT(x, y), y, x);
            g.ifThen(c.b.CreateICmpSLT(q, g.i64(n)), [&] {
              llvm::Value* apq = g.ld(s, g.at(p, n, q));
              auto record = [&](llvm::Value* rot) { // rot: null (one matrix: always), or the lanes that rotate
                llvm::Value *app = g.ld(s, g.at(p, n, p)), *aqq = g.ld(s, g.at(q, n, q));
                auto [cs, sn, tt] = g.rotation(app, aqq, apq);
                auto keep = [&](llvm::Value* x, llvm::Value* otherwise) { return rot ? g.select(rot, x, otherwise) : x; };
                llvm::Value* at = g.geti(count);
                c.store(DType::i64, p, pp, at);
                c.store(DType::i64, q, qq, at);
                g.st(keep(cs, g.k(1)), pc, at);
                g.st(keep(sn, g.k(0)), ps, at);
                g.st(keep(g.sub(app, g.mul(tt, apq)), app), ppp, at);
                g.st(keep(g.add(aqq, g.mul(tt, apq)), aqq), pqq, at);
                g.st(keep(g.k(1), g.k(0)), prot, at);
                g.set(count, g.iadd(at, 1));
              };
              if (g.lanes) record(c.b.CreateAnd(c.b.CreateFCmpONE(apq, g.k(0)), more));
              else g.ifThen(c.b.CreateFCmpONE(apq, g.k(0)), [&] { record(nullptr); });
            });
          });
          llvm::Value* m = g.geti(count);
          c.loop(n, [&](llvm::Value* i) { // S J, row by row
            g.range(g.i64(0), m, [&](llvm::Value* r) {
              llvm::Value *p = c.load(DType::i64, pp, r), *q = c.load(DType::i64, qq, r);
              llvm::Value *cs = g.ld(pc, r), *sn = g.ld(ps, r);
              llvm::Value *ip = g.at(i, n, p), *iq = g.at(i, n, q);
              llvm::Value *xp = g.ld(s, ip), *xq = g.ld(s, iq);
              g.st(g.sub(g.mul(cs, xp), g.mul(sn, xq)), s, ip);
              g.st(g.add(g.mul(sn, xp), g.mul(cs, xq)), s, iq);
            });
          });
          g.range(g.i64(0), m, [&](llvm::Value* r) { // Jᵀ (S J), and Vᵀ kept by rows
            llvm::Value *p = c.load(DType::i64, pp, r), *q = c.load(DType::i64, qq, r);
            llvm::Value *cs = g.ld(pc, r), *sn = g.ld(ps, r);
            g.rotateRows(s, n, p, q, cs, sn);
            g.st(g.ld(ppp, r), s, g.at(p, n, p));
            g.st(g.ld(pqq, r), s, g.at(q, n, q));
            // a lane that did not rotate keeps its (unrotated) apq
            llvm::Value* rotated = c.b.CreateFCmpONE(g.ld(prot, r), g.k(0));
            g.st(g.select(rotated, g.k(0), g.ld(s, g.at(p, n, q))), s, g.at(p, n, q));
            g.st(g.select(rotated, g.k(0), g.ld(s, g.at(q, n, p))), s, g.at(q, n, p));
            g.rotateRows(v, n, p, q, cs, sn);
          });
        });
      });
    });
  });
  c.loop(n, [&](llvm::Value* i) { g.st(g.ld(s, g.at(i, n, i)), w, i); });
  c.loop(n, [&](llvm::Value* i) { // Vᵀ -> V in place
    g.range(g.iadd(i, 1), g.i64(n), [&](llvm::Value* j) {
      llvm::Value *ij = g.at(i, n, j), *ji = g.at(j, n, i);
      llvm::Value *a1 = g.ld(v, ij), *a2 = g.ld(v, ji);
      g.st(a2, v, ij);
      g.st(a1, v, ji);
    });
  });
  llvm::Value* finite = c.b.CreateFCmpOLT(g.get(norm2), g.k(HUGE_VAL));
  auto ordered = [&] {
    g.sortWithColumns(w, n, /*ascending=*/true, {{v, n}});
    c.loop(n, [&](llvm::Value* j) { g.normaliseSign(v, n, n, j, v, 0); });
  };
  // a NaN or inf entry: all NaN (lanes: those lanes, after the others' ordering)
  auto nanUnless = [&](llvm::Value* keep) {
    c.loop(n, [&](llvm::Value* i) { g.st(keep ? g.select(keep, g.ld(w, i), g.k(NAN)) : g.k(NAN), w, i); });
    c.loop(n * n, [&](llvm::Value* i) { g.st(keep ? g.select(keep, g.ld(v, i), g.k(NAN)) : g.k(NAN), v, i); });
  };
  if (g.lanes) {
    ordered();
    nanUnless(finite);
  } else {
    g.ifElse(finite, ordered, [&] { nanUnless(nullptr); });
  }
}

} // namespace

bool lowerEighAcrossBatch(LowerCtx& c) {
  const Mat d = matOf(c.operandType(0).shape);
  const int64_t n = d.n;
  if (d.batch == 0 || n == 0) return false;
  const DType t = c.resultType(0).dtype;
  llvm::FixedVectorType* lanes = small::vectorType(c, t);
  return small::acrossBatch(c, t, d.batch, n, {{c.operandBuffer(0), n * n}}, {{c.results[0], n}, {c.results[1], n * n}},
                            eighWorkspace(n, lanes->getNumElements() * size_of(t)),
                            [&](const std::vector<llvm::Value*>& in, const std::vector<llvm::Value*>& out, llvm::Value* extra) {
                              eighCore(Gen{c, t, lanes}, n, in[0], out[0], out[1], extra);
                            });
}

void lowerEigh(LowerCtx& c) {
  const Mat d = matOf(c.operandType(0).shape);
  const int64_t n = d.n;
  if (d.batch == 0 || n == 0) return;
  const Gen g{c, c.resultType(0).dtype};
  llvm::Value* ws = c.workspace(eighWorkspace(n, size_of(g.t)));
  c.loop(d.batch, [&](llvm::Value* bt) {
    eighCore(g, n, g.offset(c.operandBuffer(0), bt, n * n), g.offset(c.results[0], bt, n), g.offset(c.results[1], bt, n * n), ws);
  });
}

namespace {

/// svd's workspace per matrix (or group of lanes): svdMatrix's W and V, each
/// stored transposed (Wt: k×rows, Vt: k×k) so that its columns, which the
/// rotations and dot products read, are rows; then completeColumns' candidate.
uint64_t svdWorkspace(int64_t m, int64_t n, uint64_t valueBytes) {
  const int64_t kk = std::min(m, n), rows = std::max(m, n);
  return static_cast<uint64_t>(rows * kk + kk * kk + rows) * valueBytes;
}

/// One-sided Jacobi svd of the m × n matrix a into u, s (descending) and vt,
/// as svdMatrix; `ws` holds svdWorkspace bytes. With lanes, each lane sweeps
/// until its own columns are orthogonal (a lane done, or whose pair is
/// orthogonal already, rotates by the identity), and sorts, completes
/// and normalises on its own.
void svdCore(const Gen& g, int64_t m, int64_t n, llvm::Value* a, llvm::Value* u, llvm::Value* s, llvm::Value* vt, llvm::Value* ws) {
  LowerCtx& c = g.c;
  const int64_t kk = std::min(m, n), rows = std::max(m, n);
  const bool tall = m >= n;
  const double eps = g.t == DType::f32 ? kEps<float> : kEps<double>;
  llvm::Value* W = ws;
  llvm::Value* V = c.b.CreateInBoundsGEP(g.ty(), ws, g.i64(rows * kk));
  llvm::Value* x = c.b.CreateInBoundsGEP(g.ty(), ws, g.i64(rows * kk + kk * kk)); // completeColumns' candidate
  llvm::Type* maskTy = g.lanes ? static_cast<llvm::Type*>(llvm::FixedVectorType::get(c.b.getInt1Ty(), g.lanes->getNumElements()))
                               : c.b.getInt1Ty();
  llvm::Value* none = llvm::Constant::getNullValue(maskTy);
  llvm::Value* norm2 = g.var(g.k(0));
  c.loop(rows, [&](llvm::Value* i) {
    c.loop(kk, [&](llvm::Value* j) {
      llvm::Value* xv = g.ld(a, tall ? g.at(i, n, j) : g.at(j, n, i));
      g.st(xv, W, g.at(j, rows, i));
      g.accumulate(norm2, g.mul(xv, xv));
    });
  });
  c.loop(kk, [&](llvm::Value* i) {
    c.loop(kk, [&](llvm::Value* j) { g.st(g.select(c.b.CreateICmpEQ(i, j), g.k(1), g.k(0)), V, g.at(j, kk, i)); });
  });
  llvm::Value* tol = g.k(eps * std::sqrt(static_cast<double>(rows)));
  llvm::Value* done = g.var(none);
  c.loop(kMaxSweeps, [&](llvm::Value*) {
    g.ifThen(g.any(c.b.CreateNot(g.get(done, maskTy))), [&] {
      llvm::Value* active = c.b.CreateNot(g.get(done, maskTy));
      llvm::Value* rotated = g.var(none);
      c.loop(kk, [&](llvm::Value* p) {
        g.range(g.iadd(p, 1), g.i64(kk), [&](llvm::Value* q) {
          llvm::Value *alpha = g.var(g.k(0)), *beta = g.var(g.k(0)), *gamma = g.var(g.k(0));
          c.loop(rows, [&](llvm::Value* i) {
            llvm::Value *wp = g.ld(W, g.at(p, rows, i)), *wq = g.ld(W, g.at(q, rows, i));
            g.accumulate(alpha, g.mul(wp, wp));
            g.accumulate(beta, g.mul(wq, wq));
            g.accumulate(gamma, g.mul(wp, wq));
          });
          llvm::Value *al = g.get(alpha), *be = g.get(beta), *ga = g.get(gamma);
          llvm::Value* rot = c.b.CreateAnd(c.b.CreateFCmpOGT(g.abs(ga), g.mul(g.mul(tol, g.sqrt(al)), g.sqrt(be))), active);
          g.ifThen(g.any(rot), [&] {
            g.set(rotated, c.b.CreateOr(g.get(rotated, maskTy), rot));
            auto [cs, sn, tt] = g.rotation(al, be, ga);
            if (g.lanes) cs = g.select(rot, cs, g.k(1)), sn = g.select(rot, sn, g.k(0)); // the others: the identity
            g.rotateRows(W, rows, p, q, cs, sn);
            g.rotateRows(V, kk, p, q, cs, sn);
          });
        });
      });
      g.set(done, c.b.CreateOr(g.get(done, maskTy), c.b.CreateNot(g.get(rotated, maskTy))));
    });
  });
  c.loop(kk, [&](llvm::Value* j) {
    llvm::Value* n2 = g.var(g.k(0));
    c.loop(rows, [&](llvm::Value* i) {
      llvm::Value* xv = g.ld(W, g.at(j, rows, i));
      g.accumulate(n2, g.mul(xv, xv));
    });
    g.st(g.sqrt(g.get(n2)), s, j);
  });
  g.sortWithColumns(s, kk, /*ascending=*/false, {{W, rows}, {V, kk}}, /*transposed=*/true);
  c.loop(kk, [&](llvm::Value* j) {
    llvm::Value* sj = g.ld(s, j);
    llvm::Value* scale = g.select(c.b.CreateFCmpOEQ(sj, g.k(0)), g.k(1), g.div(g.k(1), sj));
    c.loop(rows, [&](llvm::Value* i) { g.st(g.mul(g.ld(W, g.at(j, rows, i)), scale), W, g.at(j, rows, i)); });
  });
  // completeColumns: a zero singular value's column of W becomes the first
  // unit vector e_cand (cand from `next` on) that stays long enough once
  // orthogonalised (twice) against W's columns; lane by lane, each lane
  // tries the candidates from its own `next`.
  llvm::Type* idxTy = g.lanes ? static_cast<llvm::Type*>(g.indexType()) : c.b.getInt64Ty();
  auto index = [&](llvm::Value* i) { return g.lanes ? g.splatIndex(i) : i; };
  llvm::Value* next = g.var(index(g.i64(0)));
  c.loop(kk, [&](llvm::Value* j) {
    llvm::Value* need = c.b.CreateFCmpOEQ(g.ld(s, j), g.k(0));
    g.ifThen(g.any(need), [&] {
      llvm::Value* found = g.var(c.b.CreateNot(need)); // lanes that need nothing count as found
      g.range(g.i64(0), g.i64(rows), [&](llvm::Value* cand) {
        llvm::Value* tries = c.b.CreateAnd(c.b.CreateNot(g.get(found, maskTy)), c.b.CreateICmpSGE(index(cand), g.get(next, idxTy)));
        g.ifThen(g.any(tries), [&] {
          g.set(next, c.b.CreateSelect(tries, index(g.iadd(cand, 1)), g.get(next, idxTy)));
          c.loop(rows, [&](llvm::Value* i) { g.st(g.select(c.b.CreateICmpEQ(i, cand), g.k(1), g.k(0)), x, i); });
          c.loop(2, [&](llvm::Value*) {
            c.loop(kk, [&](llvm::Value* l) {
              llvm::Value* dot = g.var(g.k(0));
              c.loop(rows, [&](llvm::Value* i) { g.accumulate(dot, g.mul(g.ld(W, g.at(l, rows, i)), g.ld(x, i))); });
              llvm::Value* d = g.get(dot);
              c.loop(rows, [&](llvm::Value* i) { g.st(g.sub(g.ld(x, i), g.mul(d, g.ld(W, g.at(l, rows, i)))), x, i); });
            });
          });
          llvm::Value* n2 = g.var(g.k(0));
          c.loop(rows, [&](llvm::Value* i) { g.accumulate(n2, g.mul(g.ld(x, i), g.ld(x, i))); });
          llvm::Value* take = c.b.CreateAnd(tries, c.b.CreateFCmpOGE(g.get(n2), g.k(0.5 / static_cast<double>(rows))));
          g.ifThen(g.any(take), [&] {
            llvm::Value* scale = g.div(g.k(1), g.sqrt(g.get(n2)));
            c.loop(rows, [&](llvm::Value* i) {
              llvm::Value* at = g.at(j, rows, i);
              g.st(g.select(take, g.mul(g.ld(x, i), scale), g.ld(W, at)), W, at);
            });
            g.set(found, c.b.CreateOr(g.get(found, maskTy), take));
          });
        });
      });
    });
  });
  c.loop(kk, [&](llvm::Value* j) {
    if (tall) g.normaliseSignRow(W, rows, j, V, kk);
    else g.normaliseSignRow(V, kk, j, W, rows);
  });
  llvm::Value* Ut = tall ? W : V; // k×m
  llvm::Value* Vrt = tall ? V : W; // k×n: vt itself
  c.loop(m, [&](llvm::Value* i) {
    c.loop(kk, [&](llvm::Value* j) { g.st(g.ld(Ut, g.at(j, m, i)), u, g.at(i, kk, j)); });
  });
  c.loop(kk * n, [&](llvm::Value* i) { g.st(g.ld(Vrt, i), vt, i); });
  // a NaN or inf entry: all NaN (lanes: those lanes)
  llvm::Value* bad = c.b.CreateNot(c.b.CreateFCmpOLT(g.get(norm2), g.k(HUGE_VAL)));
  g.ifThen(g.any(bad), [&] {
    auto poison = [&](llvm::Value* buf, int64_t count) {
      c.loop(count, [&](llvm::Value* i) { g.st(g.lanes ? g.select(bad, g.k(NAN), g.ld(buf, i)) : g.k(NAN), buf, i); });
    };
    poison(u, m * kk);
    poison(s, kk);
    poison(vt, kk * n);
  });
}

} // namespace

bool lowerSvdAcrossBatch(LowerCtx& c) {
  const Mat d = matOf(c.operandType(0).shape);
  const int64_t m = d.m, n = d.n, kk = std::min(m, n);
  if (d.batch == 0 || kk == 0) return false;
  const DType t = c.resultType(0).dtype;
  llvm::FixedVectorType* lanes = small::vectorType(c, t);
  return small::acrossBatch(c, t, d.batch, std::max(m, n), {{c.operandBuffer(0), m * n}},
                            {{c.results[0], m * kk}, {c.results[1], kk}, {c.results[2], kk * n}},
                            svdWorkspace(m, n, lanes->getNumElements() * size_of(t)),
                            [&](const std::vector<llvm::Value*>& in, const std::vector<llvm::Value*>& out, llvm::Value* extra) {
                              svdCore(Gen{c, t, lanes}, m, n, in[0], out[0], out[1], out[2], extra);
                            });
}

void lowerSvd(LowerCtx& c) {
  const Mat d = matOf(c.operandType(0).shape);
  const int64_t m = d.m, n = d.n, kk = std::min(m, n);
  if (d.batch == 0 || kk == 0) return;
  const Gen g{c, c.resultType(0).dtype};
  llvm::Value* ws = c.workspace(svdWorkspace(m, n, size_of(g.t)));
  c.loop(d.batch, [&](llvm::Value* bt) {
    svdCore(g, m, n, g.offset(c.operandBuffer(0), bt, m * n), g.offset(c.results[0], bt, m * kk), g.offset(c.results[1], bt, kk),
            g.offset(c.results[2], bt, kk * n), ws);
  });
}

} // namespace adjit::ops::spectral
