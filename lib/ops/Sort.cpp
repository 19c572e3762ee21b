// ops/Sort.cpp — sort (stable, along an axis: operand 0 is the key, the
// others are payloads moved with it), top_k (the first k of the last axis in
// a stable descending sort's order, found by selection) and searchsorted
// (binary search in a sorted 1-D tensor). The order is numpy's: NaNs last, -0.0 and 0.0 equal
// (ties keep their order); `descending` is the exact reverse of that order
// with ties still in their original order (NaNs first), as JAX's and
// PyTorch's descending sorts. The compiled sort is a generated bottom-up merge
// sort per row on integer keys (no library call).
#include "codegen/Emitter.h"
#include "autodiff/JvpCtx.h"
#include "autodiff/VjpCtx.h"
#include "ops/Common.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace adjit::ops {
namespace {

using codegen::ElementCtx;
using codegen::Index;
using codegen::LowerCtx;
using ir::EvalCtx;
using ir::InferCtx;

/// Whether a sorts strictly before b: numpy's order (NaN last), reversed when descending.
template <class T> bool before(T a, T b, bool descending) {
  if (descending) std::swap(a, b);
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

/// A shape split at `axis`: element (o, k, i) is at (o * n + k) * inner + i.
struct Rows {
  int64_t outer, n, inner;
};
Rows rowsOf(const Shape& s, int64_t axis) {
  const auto a = static_cast<std::size_t>(axis);
  const int64_t n = s[a], inner = num_elements(Shape(s.begin() + static_cast<std::ptrdiff_t>(a) + 1, s.end()));
  return {n * inner == 0 ? 0 : num_elements(s) / (n * inner), n, inner};
}

/// Elements sorted per run before merging: insertion sort, then merge passes.
constexpr int64_t kRun = 16;

/// The key of one element as an unsigned integer whose order is the sort's:
/// floats by their bits (negative ones flipped), -0.0 as 0.0, every NaN the
/// largest key; signed integers with the sign bit flipped; all complemented
/// when descending.
llvm::Value* orderKey(codegen::EmitBase& c, DType t, llvm::Value* v, bool descending) {
  const unsigned bits = t == DType::f32 || t == DType::i32 ? 32 : 64;
  llvm::Type* it = c.b.getIntNTy(bits);
  llvm::Value* signBit = llvm::ConstantInt::get(it, llvm::APInt::getSignMask(bits));
  llvm::Value* k;
  if (is_floating(t)) {
    llvm::Value* zero = llvm::ConstantFP::get(v->getType(), 0.0);
    llvm::Value* x = c.b.CreateSelect(c.b.CreateFCmpOEQ(v, zero), zero, v); // -0.0 -> 0.0
    llvm::Value* raw = c.b.CreateBitCast(x, it);
    llvm::Value* mask = c.b.CreateOr(c.b.CreateAShr(raw, bits - 1), signBit); // negative: flip all bits
    k = c.b.CreateXor(raw, mask);
    k = c.b.CreateSelect(c.b.CreateFCmpUNO(v, v), llvm::ConstantInt::getAllOnesValue(it), k);
  } else {
    k = c.b.CreateXor(v, signBit);
  }
  if (descending) k = c.b.CreateNot(k);
  return k;
}

/// while (cond()) body(); as blocks of the current function.
void whileLoop(codegen::EmitBase& c, const std::function<llvm::Value*()>& cond, const std::function<void()>& body) {
  llvm::Function* f = c.b.GetInsertBlock()->getParent();
  auto* header = llvm::BasicBlock::Create(c.ctx(), "while", f);
  auto* bodyBB = llvm::BasicBlock::Create(c.ctx(), "while.body", f);
  auto* exit = llvm::BasicBlock::Create(c.ctx(), "while.exit", f);
  c.b.CreateBr(header);
  c.b.SetInsertPoint(header);
  c.b.CreateCondBr(cond(), bodyBB, exit);
  c.b.SetInsertPoint(bodyBB);
  body();
  c.b.CreateBr(header);
  c.b.SetInsertPoint(exit);
}

/// sort's lowering. Per row: the keys as integers (orderKey) in the
/// workspace, with each element's position beside it (packed into the low 32
/// bits of a 64-bit word for 32-bit keys: every word is then distinct, so any
/// merge is stable; else in an array of its own, moved with the key); runs of
/// kRun sorted by insertion, then merged pairwise, pass after pass, between
/// two buffers, by a branch-free merge. Results are then read from the
/// operands at the sorted positions, so the keys' own bits (a NaN's payload,
/// -0.0) are kept and payloads of any dtype and number follow.
void lowerSort(LowerCtx& c) {
  const Type& kt = c.operandType(0);
  const int64_t axis = c.op.attrs.integer("axis");
  const bool descending = c.op.attrs.boolean("descending");
  const auto [outer, n, inner] = rowsOf(kt.shape, axis);
  if (outer * n * inner == 0) return;
  const bool packed = (kt.dtype == DType::f32 || kt.dtype == DType::i32) && n < (int64_t(1) << 32);
  llvm::Type* w = c.b.getInt64Ty();
  const auto nb = static_cast<uint64_t>(n) * 8;
  llvm::Value* ws = c.workspace(nb * (packed ? 2 : 4));
  auto at = [&](uint64_t off) { return c.b.CreateConstInBoundsGEP1_64(c.b.getInt8Ty(), ws, off); };
  llvm::Value* keys[2] = {at(0), at(nb)};
  llvm::Value* pos[2] = {packed ? nullptr : at(2 * nb), packed ? nullptr : at(3 * nb)};
  auto load = [&](llvm::Value* base, llvm::Value* i) { return c.b.CreateLoad(w, c.b.CreateInBoundsGEP(w, base, i)); };
  auto store = [&](llvm::Value* v, llvm::Value* base, llvm::Value* i) { c.b.CreateStore(v, c.b.CreateInBoundsGEP(w, base, i)); };
  llvm::Value* low32 = c.i64(0xffffffff);
  // Merge passes: runs of kRun, doubled until one run covers the row.
  int64_t passes = 0;
  for (int64_t width = kRun; width < n; width *= 2) ++passes;
  llvm::Value* jSlot = c.scalarSlot(DType::i64);
  llvm::Value* iSlot = c.scalarSlot(DType::i64);
  auto linear = [&](llvm::Value* o, llvm::Value* k, llvm::Value* i) {
    return c.b.CreateAdd(c.b.CreateMul(c.b.CreateAdd(c.b.CreateMul(o, c.i64(n)), k), c.i64(inner)), i);
  };
  c.loop(outer, [&](llvm::Value* o) {
    c.loop(inner, [&](llvm::Value* i) {
      // The row's keys (and positions).
      c.loop(n, [&](llvm::Value* k) {
        llvm::Value* key = c.b.CreateZExt(orderKey(c, kt.dtype, c.operand(0, Index::ofLinear(linear(o, k, i))), descending), w);
        if (packed) {
          store(c.b.CreateOr(c.b.CreateShl(key, 32), k), keys[0], k);
        } else {
          store(key, keys[0], k);
          store(k, pos[0], k);
        }
      });
      // Insertion sort of each run [s, e): shift larger words right.
      c.loop((n + kRun - 1) / kRun, [&](llvm::Value* r) {
        llvm::Value* s = c.b.CreateMul(r, c.i64(kRun));
        llvm::Value* e = c.intrinsic(llvm::Intrinsic::smin, {{c.b.CreateAdd(s, c.i64(kRun)), c.i64(n)}});
        c.loopRange(c.b.CreateAdd(s, c.i64(1)), e, [&](llvm::Value* k) {
          llvm::Value* cur = load(keys[0], k);
          llvm::Value* curPos = packed ? nullptr : load(pos[0], k);
          c.b.CreateStore(k, jSlot);
          whileLoop(
              c,
              [&] {
                llvm::Value* j = c.b.CreateLoad(w, jSlot);
                llvm::Value* more = c.b.CreateICmpSGT(j, s);
                // read j - 1 only where j > s (at j = s it is s itself)
                llvm::Value* prev = load(keys[0], c.b.CreateSelect(more, c.b.CreateSub(j, c.i64(1)), j));
                return c.b.CreateAnd(more, c.b.CreateICmpUGT(prev, cur));
              },
              [&] {
                llvm::Value* j = c.b.CreateLoad(w, jSlot);
                llvm::Value* jm = c.b.CreateSub(j, c.i64(1));
                store(load(keys[0], jm), keys[0], j);
                if (!packed) store(load(pos[0], jm), pos[0], j);
                c.b.CreateStore(jm, jSlot);
              });
          llvm::Value* j = c.b.CreateLoad(w, jSlot);
          store(cur, keys[0], j);
          if (!packed) store(curPos, pos[0], j);
        });
      });
      // Merge passes between the buffers: pass p reads buffer p % 2.
      c.loop(passes, [&](llvm::Value* p) {
        llvm::Value* odd = c.b.CreateTrunc(p, c.b.getInt1Ty());
        llvm::Value* srcK = c.b.CreateSelect(odd, keys[1], keys[0]);
        llvm::Value* dstK = c.b.CreateSelect(odd, keys[0], keys[1]);
        llvm::Value* srcP = packed ? nullptr : c.b.CreateSelect(odd, pos[1], pos[0]);
        llvm::Value* dstP = packed ? nullptr : c.b.CreateSelect(odd, pos[0], pos[1]);
        llvm::Value* width = c.b.CreateShl(c.i64(kRun), p);
        llvm::Value* twice = c.b.CreateShl(width, 1);
        llvm::Value* pairs = c.b.CreateUDiv(c.b.CreateAdd(c.i64(n - 1), twice), twice);
        c.loopRange(c.i64(0), pairs, [&](llvm::Value* q) {
          llvm::Value* lo = c.b.CreateMul(q, twice);
          llvm::Value* mid = c.intrinsic(llvm::Intrinsic::smin, {{c.b.CreateAdd(lo, width), c.i64(n)}});
          llvm::Value* hi = c.intrinsic(llvm::Intrinsic::smin, {{c.b.CreateAdd(lo, twice), c.i64(n)}});
          llvm::Value* last = c.b.CreateSub(hi, c.i64(1));
          c.b.CreateStore(lo, iSlot);
          c.b.CreateStore(mid, jSlot);
          c.loopRange(lo, hi, [&](llvm::Value* k) {
            // i <= mid < hi while k < hi; j may reach hi: read it clamped, then ignore it
            llvm::Value* li = c.b.CreateLoad(w, iSlot);
            llvm::Value* rj = c.b.CreateLoad(w, jSlot);
            llvm::Value* rjc = c.intrinsic(llvm::Intrinsic::smin, {{rj, last}});
            llvm::Value* kl = load(srcK, li);
            llvm::Value* kr = load(srcK, rjc);
            // the right run's word only where it is strictly smaller: stable
            llvm::Value* right = c.b.CreateAnd(c.b.CreateICmpSLT(rj, hi),
                                               c.b.CreateOr(c.b.CreateICmpSGE(li, mid), c.b.CreateICmpULT(kr, kl)));
            store(c.b.CreateSelect(right, kr, kl), dstK, k);
            if (!packed) store(c.b.CreateSelect(right, load(srcP, rjc), load(srcP, li)), dstP, k);
            llvm::Value* step = c.b.CreateZExt(right, w);
            c.b.CreateStore(c.b.CreateAdd(rj, step), jSlot);
            c.b.CreateStore(c.b.CreateAdd(li, c.b.CreateXor(step, c.i64(1))), iSlot);
          });
        });
      });
      // Results: each operand read at the sorted positions.
      const int done = static_cast<int>(passes % 2);
      c.loop(n, [&](llvm::Value* k) {
        llvm::Value* from = packed ? c.b.CreateAnd(load(keys[done], k), low32) : load(pos[done], k);
        Index src = Index::ofLinear(linear(o, from, i));
        llvm::Value* dst = linear(o, k, i);
        for (std::size_t r = 0; r < c.op.results.size(); ++r)
          c.store(c.resultType(r).dtype, c.operand(r, src), c.results[r], dst);
      });
    });
  });
}

/// top_k's order as unsigned words, larger first: an element's key
/// (orderKey, ascending) in the high half and its position complemented in
/// the low half, so that of equal keys the lower position is larger. Every
/// word of a row is distinct; a 32-bit key and position make an i64, a
/// 64-bit key an i128.
struct TopKWords {
  unsigned half;   ///< bits of the key and of the position
  llvm::Type* word; ///< the word's integer type
};
TopKWords topKWords(codegen::EmitBase& c, DType t, int64_t n) {
  const unsigned half = (t == DType::f32 || t == DType::i32) && n < (int64_t(1) << 32) ? 32 : 64;
  return {half, c.b.getIntNTy(2 * half)};
}

/// top_k's lowering: per row, a heap of the k largest words seen (its root
/// the smallest of them), filled with the first k elements, then offered
/// each other one, which replaces the root only when larger; the heap is
/// then emptied smallest first into the results' last slots. O(n) compares
/// and O(k log k + (insertions) log k) moves per row, against sort's
/// O(n log n); the results are read from the operand at the words'
/// positions, so a NaN's payload and -0.0 are kept.
void lowerTopK(LowerCtx& c) {
  const Type& xt = c.operandType(0);
  const int64_t n = xt.shape.back(), k = c.op.attrs.integer("k");
  const int64_t rows = n == 0 ? 0 : num_elements(xt.shape) / n;
  if (rows == 0 || k == 0) return;
  const auto [half, w] = topKWords(c, xt.dtype, n);
  llvm::Type* halfTy = c.b.getIntNTy(half);
  llvm::Type* i64 = c.b.getInt64Ty();
  llvm::Value* heap = c.workspace(static_cast<uint64_t>(k) * (2 * half / 8));
  auto load = [&](llvm::Value* i) { return c.b.CreateLoad(w, c.b.CreateInBoundsGEP(w, heap, i)); };
  auto store = [&](llvm::Value* v, llvm::Value* i) { c.b.CreateStore(v, c.b.CreateInBoundsGEP(w, heap, i)); };
  auto word = [&](llvm::Value* r, llvm::Value* j) {
    llvm::Value* x = c.operand(0, Index::ofLinear(c.b.CreateAdd(c.b.CreateMul(r, c.i64(n)), j)));
    llvm::Value* key = c.b.CreateZExt(orderKey(c, xt.dtype, x, false), w);
    llvm::Value* pos = c.b.CreateZExt(c.b.CreateNot(c.b.CreateTrunc(j, halfTy)), w);
    return c.b.CreateOr(c.b.CreateShl(key, half), pos);
  };
  llvm::Value* iSlot = c.scalarSlot(DType::i64);
  llvm::Value* sizeSlot = c.scalarSlot(DType::i64);
  // Moves heap[i0] down until no child of it is smaller, in a heap of `size` words.
  auto siftDown = [&](llvm::Value* i0, llvm::Value* size) {
    c.b.CreateStore(i0, iSlot);
    llvm::Value *i = nullptr, *child = nullptr, *wi = nullptr, *wc = nullptr;
    whileLoop(
        c,
        [&] {
          i = c.b.CreateLoad(i64, iSlot);
          llvm::Value* l = c.b.CreateAdd(c.b.CreateShl(i, 1), c.i64(1));
          llvm::Value* r = c.b.CreateAdd(l, c.i64(1));
          llvm::Value* hasL = c.b.CreateICmpSLT(l, size);
          llvm::Value* hasR = c.b.CreateICmpSLT(r, size);
          // children read only where they exist (else i itself)
          llvm::Value* wl = load(c.b.CreateSelect(hasL, l, i));
          llvm::Value* wr = load(c.b.CreateSelect(hasR, r, i));
          llvm::Value* right = c.b.CreateAnd(hasR, c.b.CreateICmpULT(wr, wl));
          child = c.b.CreateSelect(right, r, l);
          wc = c.b.CreateSelect(right, wr, wl);
          wi = load(i);
          return c.b.CreateAnd(hasL, c.b.CreateICmpULT(wc, wi));
        },
        [&] {
          store(wc, i);
          store(wi, child);
          c.b.CreateStore(child, iSlot);
        });
  };
  c.loop(rows, [&](llvm::Value* r) {
    c.loop(k, [&](llvm::Value* j) { store(word(r, j), j); });
    c.loop(k / 2, [&](llvm::Value* t) { siftDown(c.b.CreateSub(c.i64(k / 2 - 1), t), c.i64(k)); });
    c.loopRange(c.i64(k), c.i64(n), [&](llvm::Value* j) {
      llvm::Value* wj = word(r, j);
      c.ifThen(c.b.CreateICmpUGT(wj, load(c.i64(0))), [&] {
        store(wj, c.i64(0));
        siftDown(c.i64(0), c.i64(k));
      });
    });
    // Smallest first, into the last free slot: the results descend.
    c.b.CreateStore(c.i64(k), sizeSlot);
    c.loop(k, [&](llvm::Value* t) {
      llvm::Value* size = c.b.CreateSub(c.b.CreateLoad(i64, sizeSlot), c.i64(1));
      llvm::Value* top = load(c.i64(0));
      llvm::Value* j = c.b.CreateZExt(c.b.CreateNot(c.b.CreateTrunc(top, halfTy)), i64);
      llvm::Value* dst = c.b.CreateAdd(c.b.CreateMul(r, c.i64(k)), c.b.CreateSub(c.i64(k - 1), t));
      c.store(xt.dtype, c.operand(0, Index::ofLinear(c.b.CreateAdd(c.b.CreateMul(r, c.i64(n)), j))), c.results[0], dst);
      const DType it = c.resultType(1).dtype;
      c.store(it, it == DType::i64 ? j : c.b.CreateTrunc(j, c.b.getInt32Ty()), c.results[1], dst);
      store(load(size), c.i64(0));
      c.b.CreateStore(size, sizeSlot);
      siftDown(c.i64(0), size);
    });
  });
}

/// Flat positions in top_k's operand of its results' elements: each
/// row's indices offset by the row's start.
Tensor topKSources(const Tensor& indices, int64_t n) {
  const Shape rs = indices.shape();
  const int64_t k = rs.back(), rows = k == 0 ? 0 : num_elements(rs) / k;
  Shape column = rs;
  column.back() = 1;
  Tensor start = reshape(iota({rows}, 0, DType::i64) * n, column);
  return reshape(cast(indices, DType::i64) + start, {rows * k});
}

/// The position of each element of a sort's result in its operand, a
/// flat index into the operand's elements: sort(keys, iota)'s second result
/// along the axis, made flat.
Tensor flatSource(const Tensor& keys, int64_t axis, bool descending) {
  const Shape s = keys.shape();
  const auto [outer, n, inner] = rowsOf(s, axis);
  std::vector<Tensor> sorted = sort(std::vector<Tensor>{keys, iota(s, axis, DType::i64)}, axis, descending);
  // (o * n + perm) * inner + i = linear position + (perm - k) * inner
  Tensor linear = reshape(iota({num_elements(s)}, 0, DType::i64), s);
  return reshape(linear + (sorted[1] - iota(s, axis, DType::i64)) * inner, {num_elements(s)});
}

} // namespace

void defineSortOps(Table& t) {
  // sort(k, p_1, ..., p_m) {axis, descending}: every operand permuted along
  // `axis` by the stable order of k's elements; results in operand order.
  set(t, OpKind::Sort, {
      .infer = [](const InferCtx& c) {
        if (c.operands.empty()) c.fail("expected keys and payloads, got no operand");
        const Type& k = c.operands[0];
        if (k.dtype == DType::i1) c.fail("expected numeric keys, got {}", k.str());
        if (k.rank() == 0) c.fail("expected keys of rank >= 1, got {}", k.str());
        c.axis("axis", k.rank());
        c.boolean("descending");
        for (std::size_t i = 1; i < c.operands.size(); ++i)
          if (c.operands[i].shape != k.shape)
            c.fail("payload {} must have the keys' shape {}, got {}", i, shape_str(k.shape), c.operands[i].str());
        return std::vector<Type>(c.operands.begin(), c.operands.end());
      },
      .eval = [](const EvalCtx& c) {
        const Array& k = c.args[0];
        const int64_t axis = c.op.attrs.integer("axis");
        const bool descending = c.op.attrs.boolean("descending");
        const auto [outer, n, inner] = rowsOf(k.shape(), axis);
        std::vector<Array> r;
        for (const Array& a : c.args) r.emplace_back(a.type());
        std::vector<int64_t> perm(static_cast<std::size_t>(n));
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            auto lin = [&](int64_t j) { return (o * n + j) * inner + i; };
            std::iota(perm.begin(), perm.end(), 0);
            dispatch(k.dtype(), [&](auto tag) {
              using T = decltype(tag);
              const T* v = elems<T>(k);
              std::stable_sort(perm.begin(), perm.end(),
                               [&](int64_t a, int64_t b) { return before(v[lin(a)], v[lin(b)], descending); });
            });
            for (std::size_t q = 0; q < r.size(); ++q) {
              const std::size_t w = size_of(r[q].dtype());
              for (int64_t j = 0; j < n; ++j)
                std::memcpy(static_cast<char*>(r[q].raw()) + lin(j) * w,
                            static_cast<const char*>(c.args[q].raw()) + lin(perm[static_cast<std::size_t>(j)]) * w, w);
            }
          }
        return r;
      },
      .fold = noFold,
      .lower = lowerSort,
      // d sort(k, p...) = the tangents moved as their primals: a sort of
      // them by the same keys (linear in the tangents)
      .jvp = [](const autodiff::JvpCtx& c) {
        std::vector<Tensor> in{c.x(0)};
        std::vector<std::size_t> which;
        for (std::size_t i = 0; i < c.op.operands.size(); ++i)
          if (std::optional<Tensor> d = c.dx(i)) {
            in.push_back(*d);
            which.push_back(i);
          }
        if (which.empty()) return;
        std::vector<Tensor> sorted = sort(in, c.op.attrs.integer("axis"), c.op.attrs.boolean("descending"));
        for (std::size_t j = 0; j < which.size(); ++j) c.tangent(which[j], sorted[j + 1]);
      },
      // each operand's cotangent: the result's scattered back to where its
      // elements came from (the permutation, from sorting the keys with
      // their positions again)
      .vjp = [](const autodiff::VjpCtx& c) {
        std::optional<Tensor> from;
        for (std::size_t i = 0; i < c.op.operands.size(); ++i) {
          std::optional<Tensor> ct = c.ct(i);
          if (!ct || !is_floating(ct->dtype())) continue;
          c.grad(i, [&] {
            Tensor k = c.x(0);
            if (!from) from = flatSource(k, c.op.attrs.integer("axis"), c.op.attrs.boolean("descending"));
            const int64_t size = num_elements(k.shape());
            Tensor zero = zeros_like(reshape(*ct, {size}));
            return reshape(scatter_add(zero, *from, reshape(*ct, {size})), k.shape());
          });
        }
      },
      // along the shifted axis, every operand given the batch axis
      .batch = [](const batching::BatchCtx& c) { batching::shiftedBatch(c, {"axis"}); },
      // result k's element reads operand k's row: the order's derivative is zero
      .deps = sparsity::alongAxisDeps,
  });

  // top_k(x) {k, dtype}: the k first elements of x's last axis in the order
  // of a stable descending sort (larger first, NaN first, ties by lower
  // position: lax.top_k's), and their positions (dtype i32 or i64).
  set(t, OpKind::TopK, {
      .infer = [](const InferCtx& c) {
        const Type& x = c.operands[0];
        if (x.dtype == DType::i1) c.fail("expected a numeric operand, got {}", x.str());
        if (x.rank() == 0) c.fail("expected an operand of rank >= 1, got {}", x.str());
        const int64_t k = c.integer("k");
        if (k < 0 || k > x.shape.back()) c.fail("k must be in [0, {}] (the last axis of {}), got {}", x.shape.back(), x.str(), k);
        const DType dt = c.dtype("dtype");
        if (dt != DType::i32 && dt != DType::i64) c.fail("dtype must be i32 or i64, got {}", name_of(dt));
        Shape s = x.shape;
        s.back() = k;
        return std::vector<Type>{Type{x.dtype, s}, Type{dt, s}};
      },
      .eval = [](const EvalCtx& c) {
        const Array& x = c.args[0];
        const int64_t n = x.shape().back(), k = c.op.attrs.integer("k");
        const int64_t rows = n == 0 ? 0 : x.size() / n;
        Array values(c.resultType(0)), indices(c.resultType(1));
        std::vector<int64_t> perm(static_cast<std::size_t>(n));
        dispatch(x.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T* v = elems<T>(x);
          for (int64_t r = 0; r < rows; ++r) {
            const T* row = v + r * n;
            std::iota(perm.begin(), perm.end(), 0);
            // before in a stable descending sort: a total order
            std::partial_sort(perm.begin(), perm.begin() + k, perm.end(), [&](int64_t a, int64_t b) {
              return before(row[a], row[b], true) || (!before(row[b], row[a], true) && a < b);
            });
            for (int64_t e = 0; e < k; ++e) {
              const int64_t j = perm[static_cast<std::size_t>(e)];
              std::memcpy(static_cast<char*>(values.raw()) + (r * k + e) * sizeof(T), row + j, sizeof(T));
              indices.set(r * k + e, static_cast<double>(j));
            }
          }
        });
        return std::vector<Array>{std::move(values), std::move(indices)};
      },
      .fold = noFold,
      .lower = lowerTopK,
      // d values = the tangent at the selected positions (the selection's
      // derivative is zero)
      .jvp = [](const autodiff::JvpCtx& c) {
        std::optional<Tensor> d = c.dx(0);
        if (!d) return;
        const Shape xs = d->shape();
        Tensor flat = reshape(*d, {num_elements(xs)});
        c.tangent(0, reshape(take(flat, topKSources(c.y(1), xs.back()), 0), c.y(1).shape()));
      },
      // the values' cotangent added at the positions they were taken from
      .vjp = [](const autodiff::VjpCtx& c) {
        std::optional<Tensor> ct = c.ct(0);
        if (!ct || !is_floating(ct->dtype())) return;
        c.grad(0, [&] {
          const Shape xs = c.x(0).shape();
          const int64_t size = num_elements(xs);
          Tensor zero = zeros_like(reshape(c.x(0), {size}));
          return reshape(scatter_add(zero, topKSources(c.y(1), xs.back()), reshape(*ct, {num_elements(ct->shape())})), xs);
        });
      },
      // over the last axis, the leading ones alike: the batch axis leads
      .batch = batching::leadingAxesBatch,
      // each value reads its whole row (which one is taken depends on the point)
      .deps = [](const sparsity::SparsityCtx& c) {
        if (!is_floating(c.resultType(0).dtype)) return;
        const int64_t n = c.type(0).shape.back(), k = c.resultType(0).shape.back();
        const int64_t rows = n == 0 ? 0 : num_elements(c.type(0).shape) / n;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t e = 0; e < k; ++e)
            for (int64_t j = 0; j < n; ++j)
              c.term(0, r * k + e, {sparsity::Read{0, r * n + j}}, sparsity::Couples::nothing);
      },
  });

  // searchsorted(a, v) {right, dtype}: per element of v, the number of
  // elements of the sorted 1-D a before it (a[j] < v, or a[j] <= v when
  // `right`), in sort's order (NaN last): where v would be inserted.
  set(t, OpKind::SearchSorted, {
      .infer = [](const InferCtx& c) {
        const Type &a = c.operands[0], &v = c.operands[1];
        if (a.rank() != 1) c.fail("the sorted sequence must be 1-D, got {}", a.str());
        if (a.dtype == DType::i1 || a.dtype != v.dtype)
          c.fail("expected numeric operands of one dtype, got {} and {}", a.str(), v.str());
        c.boolean("right");
        const DType dt = c.dtype("dtype");
        if (dt != DType::i32 && dt != DType::i64) c.fail("dtype must be i32 or i64, got {}", name_of(dt));
        return std::vector<Type>{Type{dt, v.shape}};
      },
      .eval = [](const EvalCtx& c) {
        const Array &a = c.args[0], &v = c.args[1];
        const bool right = c.op.attrs.boolean("right");
        Array r(c.resultType());
        dispatch(a.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T* s = elems<T>(a);
          const T* x = elems<T>(v);
          for (int64_t i = 0; i < v.size(); ++i) {
            const T* p = right ? std::upper_bound(s, s + a.size(), x[i], [](T u, T e) { return before(u, e, false); })
                               : std::lower_bound(s, s + a.size(), x[i], [](T e, T u) { return before(e, u, false); });
            r.set(i, static_cast<double>(p - s));
          }
        });
        return std::vector<Array>{std::move(r)};
      },
      .fold = noFold,
      // A branch-free binary search: the lengths it halves depend on the
      // size only, so it is straight-line code of log2(n) steps.
      .element = [](ElementCtx& c) -> llvm::Value* {
        const Type& at = c.operandType(0);
        const DType dt = at.dtype;
        const bool right = c.op.attrs.boolean("right");
        const int64_t n = at.shape[0];
        llvm::Value* v = c.operand(1, c.index);
        // a[j] sorts before v (left), or v does not sort before a[j] (right)
        auto counts = [&](llvm::Value* e) -> llvm::Value* {
          if (!is_floating(dt)) return right ? c.b.CreateICmpSLE(e, v) : c.b.CreateICmpSLT(e, v);
          if (!right) return c.b.CreateOr(c.b.CreateFCmpOLT(e, v), c.b.CreateAnd(c.b.CreateFCmpUNO(v, v), c.b.CreateFCmpORD(e, e)));
          llvm::Value* vBefore = c.b.CreateOr(c.b.CreateFCmpOLT(v, e), c.b.CreateAnd(c.b.CreateFCmpUNO(e, e), c.b.CreateFCmpORD(v, v)));
          return c.b.CreateNot(vBefore);
        };
        llvm::Value* base = c.i64(0);
        llvm::Type* rt = c.scalarType(c.resultType().dtype);
        if (n == 0) return llvm::ConstantInt::get(rt, 0);
        for (int64_t len = n; len > 1; len -= len / 2) {
          llvm::Value* mid = c.b.CreateAdd(base, c.i64(len / 2));
          base = c.b.CreateSelect(counts(c.operand(0, Index::ofLinear(mid))), mid, base);
        }
        llvm::Value* r = c.b.CreateAdd(base, c.b.CreateZExt(counts(c.operand(0, Index::ofLinear(base))), c.b.getInt64Ty()));
        return c.b.CreateTrunc(r, rt);
      },
      // Sequence shared: the values carry the batch. A sequence per example:
      // the compiled op's binary search (the same probes, log2(n) of them)
      // written with Tensor ops on the whole batch, each probe a gather from
      // the sequences laid end to end: exact, even for unsorted sequences.
      .batch = [](const batching::BatchCtx& c) {
        if (!c.batched(0)) {
          c.result(0, c.reapply({c.x(0), c.x(1)}).at(0));
          return;
        }
        const int64_t n = c.type(0).shape[0];
        const bool right = c.op.attrs.boolean("right");
        const DType rt = c.op.attrs.dtype("dtype");
        Tensor v = c.bx(1);
        const Shape vs = v.shape();
        if (n == 0) {
          c.result(0, full(vs, 0.0, rt));
          return;
        }
        const bool fp = is_floating(v.dtype());
        // a[j] sorts before v (left), or v does not sort before a[j] (right); NaN sorts last
        auto counts = [&](const Tensor& e) {
          if (!fp) return right ? le(e, v) : lt(e, v);
          if (!right) return logical_or(lt(e, v), logical_and(isnan(v), !isnan(e)));
          return !logical_or(lt(v, e), logical_and(isnan(e), !isnan(v)));
        };
        Tensor flat = reshape(c.x(0), {c.size * n});
        Tensor row = iota(vs, 0, DType::i64) * n;
        Tensor base = full(vs, 0.0, DType::i64);
        for (int64_t len = n; len > 1; len -= len / 2) {
          Tensor mid = base + len / 2;
          base = where(counts(take(flat, row + mid, 0)), mid, base);
        }
        Tensor r = base + cast(counts(take(flat, row + base, 0)), DType::i64);
        c.result(0, rt == DType::i64 ? r : cast(r, rt));
      },
  });
}

} // namespace adjit::ops
