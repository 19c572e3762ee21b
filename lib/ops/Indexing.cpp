// ops/Indexing.cpp — gather (take along an axis) and scatter_add; dynamic_slice
// and dynamic_update_slice (a window at run-time offsets).
// Index semantics of gather and scatter_add: a negative index i counts from
// the end (i + n); gather clamps what is still out of range to [0, n-1],
// scatter_add drops updates whose index is out of range. The dynamic slices
// clamp each start into [0, n - size] as XLA does (a negative start is 0), so
// the window always lies inside the operand.
#include "codegen/Emitter.h"
#include "autodiff/JvpCtx.h"
#include "autodiff/VjpCtx.h"
#include "ops/Common.h"

namespace adjit::ops {
namespace {

using codegen::ElementCtx;
using codegen::Index;
using codegen::LowerCtx;
using ir::EvalCtx;
using ir::InferCtx;

/// Shape of gather(x, idx, axis): x[:axis] + idx + x[axis+1:].
Shape gatherShape(const Shape& x, const Shape& idx, int64_t axis) {
  Shape s(x.begin(), x.begin() + axis);
  s.insert(s.end(), idx.begin(), idx.end());
  s.insert(s.end(), x.begin() + axis + 1, x.end());
  return s;
}

void expectIndices(const InferCtx& c, std::size_t i) {
  DType d = c.operands[i].dtype;
  if (d != DType::i32 && d != DType::i64) c.fail("indices must be i32 or i64, got {}", c.operands[i].str());
}

/// Splits a gather-shaped index into (operand index, indices index) for `axis`.
struct Split {
  std::vector<int64_t> x, idx;
};
Split split(const std::vector<int64_t>& o, std::size_t axis, std::size_t idxRank) {
  Split s;
  s.x.assign(o.begin(), o.begin() + axis);
  s.idx.assign(o.begin() + axis, o.begin() + axis + idxRank);
  s.x.push_back(0);
  s.x.insert(s.x.end(), o.begin() + axis + idxRank, o.end());
  return s;
}

/// Normalises a negative index: i < 0 ? i + n : i.
llvm::Value* wrapNegative(codegen::EmitBase& c, llvm::Value* i, int64_t n) {
  return c.b.CreateSelect(c.b.CreateICmpSLT(i, c.i64(0)), c.b.CreateAdd(i, c.i64(n)), i);
}

/// Whether a gather's or scatter_add's indices (operand 1) are known to be
/// 0, 1, ..., n-1 for the n positions along the op's axis of operand 0: the
/// op then maps each position to itself.
bool identityIndices(const ir::FoldCtx& c) {
  const Type& x = c.type(c.op.operands[0]);
  const Type& idx = c.type(c.op.operands[1]);
  const auto axis = static_cast<std::size_t>(c.op.attrs.integer("axis"));
  const int64_t n = x.shape[axis];
  return idx.rank() == 1 && idx.shape[0] == n && n > 0 && c.known[1].ramp == n;
}

/// The indices gather actually reads: negatives wrapped, the rest clamped to [0, n-1].
Tensor effectiveIndices(const Tensor& idx, int64_t n) {
  Tensor k = where(idx < 0, idx + n, idx);
  return minimum(maximum(k, zeros_like(k)), full(k.shape(), static_cast<double>(n - 1), k.dtype()));
}

/// The integer scalar starts of a dynamic slice, operands [first, first + rank).
void expectStarts(const InferCtx& c, std::size_t first, int64_t rank) {
  if (c.operands.size() != first + static_cast<std::size_t>(rank))
    c.fail("expected {} start indices (one per axis of {}), got {}", rank, c.operands[0].str(),
           c.operands.size() - first);
  for (std::size_t i = first; i < c.operands.size(); ++i) {
    const Type& t = c.operands[i];
    if ((t.dtype != DType::i32 && t.dtype != DType::i64) || t.rank() != 0)
      c.fail("start index {} must be an i32 or i64 scalar, got {}", i - first, t.str());
  }
}

/// The clamped starts of a window of `size` in `shape` (reference evaluation).
std::vector<int64_t> clampedStarts(const EvalCtx& c, std::size_t first, const Shape& shape, const Shape& size) {
  std::vector<int64_t> s(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d)
    s[d] = std::clamp<int64_t>(c.args[first + d].get<int64_t>(0), 0, shape[d] - size[d]);
  return s;
}

/// The clamped starts in generated code: max(0, min(start, n - size)) per axis.
std::vector<llvm::Value*> emitStarts(codegen::EmitBase& c, const std::function<llvm::Value*(std::size_t)>& start,
                                     const Shape& shape, const Shape& size) {
  std::vector<llvm::Value*> s(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    llvm::Value* k = c.b.CreateSExt(start(d), c.b.getInt64Ty());
    k = c.intrinsic(llvm::Intrinsic::smin, {{k, c.i64(shape[d] - size[d])}});
    s[d] = c.intrinsic(llvm::Intrinsic::smax, {{k, c.i64(0)}});
  }
  return s;
}

/// The start operands of a dynamic slice op, as Tensors (for derivative rules).
std::vector<StartIndex> startsOf(const autodiff::VjpCtx& c, std::size_t first) {
  std::vector<StartIndex> s;
  for (std::size_t i = first; i < c.op.operands.size(); ++i) s.push_back(c.x(i));
  return s;
}

// Batching with indices that differ per example: the operand [B, pre...,
// n, post...] read as [B * P * n, post...] (P the product of pre; a view of
// the same elements), where row (b, p) of the indexed axis starts at
// (b * P + p) * n, so one gather or scatter along axis 0 serves the whole
// batch without moving an element.

/// Shape `s` with axes [from, to) merged into one.
Shape merged(const Shape& s, std::size_t from, std::size_t to) {
  Shape r(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(from));
  int64_t m = 1;
  for (std::size_t d = from; d < to; ++d) m *= s[d];
  r.push_back(m);
  r.insert(r.end(), s.begin() + static_cast<std::ptrdiff_t>(to), s.end());
  return r;
}

/// Positions along the merged axis of a batch of operands of per-example
/// shape `xs`, for per-example indices `k` ([B, I...], each in [0, n))
/// along `axis`: (b * P + p) * n + k[b, i...], of shape [B, P, I...], as i64.
Tensor rowIndices(const Tensor& k, const Shape& xs, int64_t axis, int64_t size) {
  const auto a = static_cast<std::size_t>(axis);
  const int64_t n = xs[a], pre = merged(xs, 0, a).at(0);
  const Shape& ks = k.shape();
  Shape s{size, pre}, one{size, 1};
  s.insert(s.end(), ks.begin() + 1, ks.end());
  one.insert(one.end(), ks.begin() + 1, ks.end());
  Tensor k64 = k.dtype() == DType::i64 ? k : cast(k, DType::i64);
  return (iota(s, 0, DType::i64) * pre + iota(s, 1, DType::i64)) * n + reshape(k64, one);
}

/// The clamped start of a dynamic slice along an axis of extent n for a
/// window of `size` (max(0, min(s, n - size)), as i64), batched along axis 0
/// of rank `rank` (extents 1 after the batch) if `batched`.
Tensor clampedStart(const Tensor& s, bool batched, int64_t n, int64_t size, std::size_t rank) {
  Tensor k = clip(s.dtype() == DType::i64 ? s : cast(s, DType::i64), 0, n - size);
  if (!batched) return k;
  Shape one(rank, 1);
  one[0] = k.shape()[0];
  return reshape(k, one);
}

/// A dynamic slice's operands with the batch axis: the operands before the
/// starts (`first` of them, given the batch axis), a start 0 along it, then
/// the op's starts (all unbatched).
std::vector<Tensor> withLeadingStart(const batching::BatchCtx& c, std::size_t first) {
  std::vector<Tensor> xs;
  for (std::size_t i = 0; i < first; ++i) xs.push_back(c.bx(i));
  xs.push_back(full({}, 0.0, DType::i64));
  for (std::size_t i = first; i < c.arity(); ++i) xs.push_back(c.x(i));
  return xs;
}

bool anyBatched(const batching::BatchCtx& c, std::size_t first) {
  for (std::size_t i = first; i < c.arity(); ++i)
    if (c.batched(i)) return true;
  return false;
}

/// Where scatter_add's indices are known when compiling: for each position k
/// along the axis, the positions j of the index array (row-major) that land
/// on k (a negative index wrapped, out-of-range ones dropped), in increasing
/// order: `at[start[k] .. start[k + 1])`.
struct ScatterRuns {
  std::vector<int64_t> start; ///< [n + 1]
  std::vector<int32_t> at;    ///< positions in idx, grouped by where they land
};

ScatterRuns scatterRuns(const Array& idx, int64_t n) {
  ScatterRuns r;
  r.start.assign(static_cast<std::size_t>(n + 1), 0);
  std::vector<int64_t> land(static_cast<std::size_t>(idx.size()), -1);
  for (int64_t j = 0; j < idx.size(); ++j) {
    int64_t k = idx.get<int64_t>(j);
    if (k < 0) k += n;
    if (k < 0 || k >= n) continue;
    land[static_cast<std::size_t>(j)] = k;
    ++r.start[static_cast<std::size_t>(k + 1)];
  }
  for (int64_t k = 0; k < n; ++k) r.start[static_cast<std::size_t>(k + 1)] += r.start[static_cast<std::size_t>(k)];
  r.at.resize(static_cast<std::size_t>(r.start.back()));
  std::vector<int64_t> next(r.start.begin(), r.start.end() - 1);
  for (int64_t j = 0; j < idx.size(); ++j)
    if (land[static_cast<std::size_t>(j)] >= 0)
      r.at[static_cast<std::size_t>(next[static_cast<std::size_t>(land[static_cast<std::size_t>(j)])]++)] = static_cast<int32_t>(j);
  return r;
}

/// The longest axis scatter_add groups known indices along (its table of runs
/// holds one start per position along it).
constexpr int64_t kMaxScatterRuns = int64_t(1) << 16;

/// How many partial sums scatter_add keeps per element where its indices are known.
constexpr int64_t kScatterPartials = 4;

/// The most updates (per position of the axes around its axis), and the
/// longest axis, scatter_add emits unrolled where its indices are known:
/// each update is then a load at a position known when compiling and an
/// add, with no table of runs and no loop per element. det at ell = 5 (scatters of 5 to 120 updates into a
/// 5 x 5 matrix), gradient/primal 4.57 -> 3.94 (interleaved rounds), 10,477
/// -> 6,718 instructions per call (callgrind). At 1024 (ell = 6's scatters
/// of 360 and 720 too) the first call's LLVM time went 70 -> 240 ms for no
/// gain in run time: register allocation over one long block.
constexpr int64_t kUnrolledScatterUpdates = 128;

/// scatter_add with indices known when compiling (constants, in code of this
/// op alone), r[pre, k, post] = x[pre, k, post] + the updates that land on k.
/// Each element reads its own run of updates (ScatterRuns) and sums it in
/// registers: no element is stored before its last update, so updates that
/// hit one element again and again (a gather's gradient into a small matrix)
/// do not wait for each other's stores, and nothing is bounds-checked at run
/// time. The order is fixed, the same on every machine and every run: with
/// u_0 .. u_{m-1} the updates landing on an element in row-major order and
/// q = m div 4, s_p = sum_{i<q} u_{4i+p} (p = 0..3, in increasing i, from 0),
/// t = u_{4q} + ... + u_{m-1} (from 0), and
///   r = x + (((s_0 + s_1) + (s_2 + s_3)) + t).
/// (The one-accumulator order, x + u_0 + u_1 + ..., is the interpreter's:
/// the two differ only by rounding, as any reassociation does.)
void lowerScatterAddKnown(LowerCtx& c, const Array& idx) {
  const auto axis = static_cast<std::size_t>(c.op.attrs.integer("axis"));
  const Type& rt = c.resultType();
  const DType t = rt.dtype;
  const int64_t n = rt.shape[axis], count = idx.size();
  const int64_t pre = num_elements(Shape(rt.shape.begin(), rt.shape.begin() + static_cast<std::ptrdiff_t>(axis)));
  const int64_t post = num_elements(Shape(rt.shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, rt.shape.end()));
  const ScatterRuns runs = scatterRuns(idx, n);
  auto add = [&](llvm::Value* a, llvm::Value* b, const char* name = "") {
    return is_floating(t) ? c.b.CreateFAdd(a, b, name) : c.b.CreateAdd(a, b, name);
  };
  // Few updates along a short axis: every element's run unrolled, each
  // update read at a position known when compiling, in the same order and
  // with the same partial sums as the loop below, so the same bits.
  if (static_cast<int64_t>(runs.at.size()) <= kUnrolledScatterUpdates && n <= kUnrolledScatterUpdates) {
    auto unrolled = [&](llvm::Value* d0, llvm::Value* d2) {
      for (int64_t k = 0; k < n; ++k) {
        llvm::Value* e = c.b.CreateAdd(c.b.CreateMul(c.b.CreateAdd(c.b.CreateMul(d0, c.i64(n)), c.i64(k)), c.i64(post)), d2);
        llvm::Value* r = c.operand(0, Index::ofLinear(e));
        if (!runs.at.empty()) {
          const int64_t begin = runs.start[static_cast<std::size_t>(k)], end = runs.start[static_cast<std::size_t>(k) + 1];
          const int64_t quads = (end - begin) / kScatterPartials;
          auto update = [&](int64_t run) {
            const int64_t j = runs.at[static_cast<std::size_t>(run)];
            llvm::Value* u = c.b.CreateAdd(c.b.CreateMul(c.b.CreateAdd(c.b.CreateMul(d0, c.i64(count)), c.i64(j)), c.i64(post)), d2);
            return c.operand(2, Index::ofLinear(u));
          };
          std::vector<llvm::Value*> v(static_cast<std::size_t>(kScatterPartials) + 1, c.constant(t, 0));
          for (int64_t q = 0; q < quads; ++q)
            for (int64_t p = 0; p < kScatterPartials; ++p)
              v[static_cast<std::size_t>(p)] = add(v[static_cast<std::size_t>(p)], update(begin + q * kScatterPartials + p));
          for (int64_t run = begin + quads * kScatterPartials; run < end; ++run) v.back() = add(v.back(), update(run));
          llvm::Value* s01 = add(v[0], v[1], "scatter.s01");
          llvm::Value* s23 = add(v[2], v[3], "scatter.s23");
          llvm::Value* updates = add(add(s01, s23, "scatter.parts"), v[4], "scatter.updates");
          r = add(r, updates, "scatter.r");
        }
        c.store(t, r, c.results[0], e);
      }
    };
    if (pre == 1 && post == 1) unrolled(c.i64(0), c.i64(0));
    else
      c.loopNest(Shape{pre, post}, [&](const Index& i) {
        const auto& d = c.dims(i, Shape{pre, post});
        unrolled(d[0], d[1]);
      });
    return;
  }
  llvm::Value* start = c.globalConstant(Array(runs.start, Shape{n + 1}));
  llvm::Value* at = runs.at.empty() ? nullptr : c.globalConstant(Array(runs.at, Shape{static_cast<int64_t>(runs.at.size())}));
  std::vector<llvm::Value*> slots;
  for (int64_t p = 0; p <= kScatterPartials; ++p) slots.push_back(c.scalarSlot(t));
  llvm::Type* elem = c.scalarType(t);
  c.loopNest(Shape{pre, n, post}, [&](const Index& i) {
    const auto& d = c.dims(i, Shape{pre, n, post});
    llvm::Value* e = c.linear(i, Shape{pre, n, post}); // the result's element, row-major
    llvm::Value* r = c.operand(0, Index::ofLinear(e));
    if (at) {
      llvm::Value* begin = c.load(DType::i64, start, d[1]);
      llvm::Value* end = c.load(DType::i64, start, c.b.CreateAdd(d[1], c.i64(1)));
      for (llvm::Value* s : slots) c.b.CreateStore(c.constant(t, 0), s);
      // The update at position j of idx: upd[pre, j, post], row-major.
      auto update = [&](llvm::Value* run) {
        llvm::Value* j = c.b.CreateSExt(c.load(DType::i32, at, run), c.b.getInt64Ty());
        llvm::Value* u = c.b.CreateAdd(c.b.CreateMul(c.b.CreateAdd(c.b.CreateMul(d[0], c.i64(count)), j), c.i64(post)), d[2]);
        return c.operand(2, Index::ofLinear(u));
      };
      auto accumulate = [&](llvm::Value* slot, llvm::Value* run) {
        c.b.CreateStore(add(c.b.CreateLoad(elem, slot), update(run)), slot);
      };
      llvm::Value* quads = c.b.CreateLShr(c.b.CreateSub(end, begin), c.i64(2));
      c.loopRange(c.i64(0), quads, [&](llvm::Value* q) {
        llvm::Value* first = c.b.CreateAdd(begin, c.b.CreateShl(q, c.i64(2)));
        for (int64_t p = 0; p < kScatterPartials; ++p)
          accumulate(slots[static_cast<std::size_t>(p)], c.b.CreateAdd(first, c.i64(p)));
      });
      c.loopRange(c.b.CreateAdd(begin, c.b.CreateShl(quads, c.i64(2))), end,
                  [&](llvm::Value* run) { accumulate(slots.back(), run); });
      // Named, so that tests can read the order (test/ir/scatter-add.adj).
      const char* names[] = {"scatter.s0", "scatter.s1", "scatter.s2", "scatter.s3", "scatter.tail"};
      std::vector<llvm::Value*> v;
      for (int64_t p = 0; p <= kScatterPartials; ++p)
        v.push_back(c.b.CreateLoad(elem, slots[static_cast<std::size_t>(p)], names[p]));
      llvm::Value* s01 = add(v[0], v[1], "scatter.s01");
      llvm::Value* s23 = add(v[2], v[3], "scatter.s23");
      llvm::Value* updates = add(add(s01, s23, "scatter.parts"), v[4], "scatter.updates");
      r = add(r, updates, "scatter.r");
    }
    c.store(t, r, c.results[0], e);
  });
}

/// scatter_add's lowering: r = x, then r[pre, idx[j...], post] += upd[pre,
/// j..., post] for every update in row-major order; an update whose index is
/// out of range (after wrapping a negative one) is dropped. With indices
/// known when compiling (and an axis of at most kMaxScatterRuns), lowerScatterAddKnown.
void lowerScatterAdd(LowerCtx& c) {
  // (Along an axis of at most kMaxScatterRuns, which bounds the table of where runs start.)
  const int64_t along = c.resultType().shape[static_cast<std::size_t>(c.op.attrs.integer("axis"))];
  if (along <= kMaxScatterRuns)
    if (const std::optional<Array> idx = c.knownOperand(1)) return lowerScatterAddKnown(c, *idx);
  const auto axis = static_cast<std::size_t>(c.op.attrs.integer("axis"));
  const Type& rt = c.resultType();
  const Shape& us = c.operandType(2).shape;
  const std::size_t idxRank = c.operandType(1).shape.size();
  const int64_t n = rt.shape[axis];
  c.loopNest(rt.shape, [&](const Index& i) { c.store(rt.dtype, c.operand(0, i), c.results[0], c.linear(i, rt.shape)); });
  c.loopNest(us, [&](const Index& ui) {
    const auto& o = c.dims(ui, us);
    std::vector<llvm::Value*> xi(o.begin(), o.begin() + axis), ii(o.begin() + axis, o.begin() + axis + idxRank);
    llvm::Value* k = wrapNegative(c, c.b.CreateSExt(c.operand(1, Index::ofDims(ii)), c.b.getInt64Ty()), n);
    llvm::Value* u = c.operand(2, ui);
    c.ifThen(c.b.CreateICmpULT(k, c.i64(n)), [&] {
      xi.push_back(k);
      xi.insert(xi.end(), o.begin() + axis + idxRank, o.end());
      llvm::Value* dst = c.linear(Index::ofDims(xi), rt.shape);
      llvm::Value* old = c.load(rt.dtype, c.results[0], dst);
      c.store(rt.dtype, is_floating(rt.dtype) ? c.b.CreateFAdd(old, u) : c.b.CreateAdd(old, u), c.results[0], dst);
    });
  });
}

} // namespace

void defineIndexingOps(Table& t) {
  // dynamic_slice(x, s_0, ..., s_{r-1}) {sizes}: r[i] = x[i + clamp(s, 0, shape - sizes)]
  set(t, OpKind::DynamicSlice, {
      .infer = [](const InferCtx& c) {
        if (c.operands.empty()) c.fail("expected an operand and its start indices, got none");
        const Type& x = c.operands[0];
        expectStarts(c, 1, x.rank());
        const std::vector<int64_t>& sizes = c.ints("sizes");
        if (static_cast<int64_t>(sizes.size()) != x.rank())
          c.fail("expected {} sizes (one per axis of {}), got {}", x.rank(), x.str(), shape_str(sizes));
        for (std::size_t d = 0; d < sizes.size(); ++d)
          if (sizes[d] < 0 || sizes[d] > x.shape[d])
            c.fail("size {} along axis {} does not fit in {}", sizes[d], d, x.str());
        return std::vector<Type>{Type{x.dtype, sizes}};
      },
      .eval = [](const EvalCtx& c) {
        const Array& x = c.args[0];
        Array r(c.resultType());
        const std::vector<int64_t> s = clampedStarts(c, 1, x.shape(), r.shape());
        const std::size_t w = size_of(x.dtype());
        for (int64_t i = 0; i < r.size(); ++i) {
          std::vector<int64_t> at = unravel(i, r.shape());
          for (std::size_t d = 0; d < at.size(); ++d) at[d] += s[d];
          std::memcpy(static_cast<char*>(r.raw()) + i * w, static_cast<const char*>(x.raw()) + ravel(at, x.shape()) * w, w);
        }
        return std::vector<Array>{std::move(r)};
      },
      // a window as large as the operand starts at 0: it is the operand
      .fold = foldIfSameType,
      .element = [](ElementCtx& c) -> llvm::Value* {
        const Shape& xs = c.operandType(0).shape;
        const Shape& rs = c.resultType().shape;
        const auto& o = c.dims(c.index, rs);
        std::vector<llvm::Value*> s = emitStarts(c, [&](std::size_t d) { return c.operand(1 + d, Index::ofLinear(c.i64(0))); }, xs, rs);
        std::vector<llvm::Value*> at(o.size());
        for (std::size_t d = 0; d < o.size(); ++d) at[d] = c.b.CreateAdd(o[d], s[d]);
        return c.operand(0, Index::ofDims(std::move(at)));
      },
      // the window's cotangent put back in place in zeros: the same clamped starts
      .jvp = autodiff::linearJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] { return dynamic_update_slice(zeros_like(c.x(0)), c.dy(), startsOf(c, 1)); });
      },
      // Starts shared by the batch: one more axis, start 0, the whole batch.
      // Starts per example: each result element's linear position in the
      // operand (its batch row's offset, plus the clamped start plus its
      // index along each axis, times the stride), read by one gather from
      // the flattened operand: exact, of the result's size (JAX makes it a
      // gather too).
      .batch = [](const batching::BatchCtx& c) {
        if (!anyBatched(c, 1)) {
          c.result(0, c.reapply(withLeadingStart(c, 1), batching::prependDim(c.op.attrs, "sizes", c.size)).at(0));
          return;
        }
        const Shape& xs = c.type(0).shape;
        const std::vector<int64_t>& sizes = c.op.attrs.ints("sizes");
        Shape out{c.size};
        out.insert(out.end(), sizes.begin(), sizes.end());
        const std::vector<int64_t> strides = stridesOf(xs);
        const int64_t n = num_elements(xs);
        Tensor at = c.batched(0) ? iota(out, 0, DType::i64) * n : full(out, 0.0, DType::i64);
        for (std::size_t d = 0; d < xs.size(); ++d) {
          Tensor s = clampedStart(c.x(1 + d), c.batched(1 + d), xs[d], sizes[d], out.size());
          at = at + (iota(out, static_cast<int64_t>(d) + 1, DType::i64) + s) * strides[d];
        }
        Tensor flat = reshape(c.x(0), {c.batched(0) ? c.size * n : n});
        c.result(0, take(flat, at, 0));
      },
      .deps = sparsity::movementDeps,
  });

  // dynamic_update_slice(x, u, s_0, ..., s_{r-1}): r = x with the window at
  // clamp(s, 0, shape - u.shape) replaced by u
  set(t, OpKind::DynamicUpdateSlice, {
      .infer = [](const InferCtx& c) {
        if (c.operands.size() < 2) c.fail("expected an operand, an update and start indices, got {} operands", c.operands.size());
        const Type &x = c.operands[0], &u = c.operands[1];
        if (u.dtype != x.dtype || u.rank() != x.rank())
          c.fail("the update must have the operand's dtype and rank, got {} for {}", u.str(), x.str());
        for (std::size_t d = 0; d < u.shape.size(); ++d)
          if (u.shape[d] > x.shape[d]) c.fail("the update {} does not fit in {}", u.str(), x.str());
        expectStarts(c, 2, x.rank());
        return std::vector<Type>{x};
      },
      .eval = [](const EvalCtx& c) {
        const Array& u = c.args[1];
        Array r = c.args[0];
        const std::vector<int64_t> s = clampedStarts(c, 2, r.shape(), u.shape());
        const std::size_t w = size_of(r.dtype());
        for (int64_t i = 0; i < u.size(); ++i) {
          std::vector<int64_t> at = unravel(i, u.shape());
          for (std::size_t d = 0; d < at.size(); ++d) at[d] += s[d];
          std::memcpy(static_cast<char*>(r.raw()) + ravel(at, r.shape()) * w, static_cast<const char*>(u.raw()) + i * w, w);
        }
        return std::vector<Array>{std::move(r)};
      },
      // an update as large as the operand replaces all of it
      .fold = [](const ir::FoldCtx& c) -> std::optional<ir::Folded> {
        if (c.type(c.op.operands[1]) == c.type(c.op.results[0])) return ir::Folded{c.op.operands[1]};
        return std::nullopt;
      },
      // Each element is the update's inside the window and the operand's
      // outside; the update is read at an index clamped into it (never out
      // of bounds), and the select keeps the loop branch-free.
      .element = [](ElementCtx& c) -> llvm::Value* {
        const Shape& xs = c.resultType().shape;
        const Shape& us = c.operandType(1).shape;
        const auto& o = c.dims(c.index, xs);
        std::vector<llvm::Value*> s = emitStarts(c, [&](std::size_t d) { return c.operand(2 + d, Index::ofLinear(c.i64(0))); }, xs, us);
        std::vector<llvm::Value*> ui(o.size());
        llvm::Value* inside = c.b.getTrue();
        for (std::size_t d = 0; d < o.size(); ++d) {
          llvm::Value* k = c.b.CreateSub(o[d], s[d]);
          inside = c.b.CreateAnd(inside, c.b.CreateICmpULT(k, c.i64(us[d])));
          k = c.intrinsic(llvm::Intrinsic::smax, {{k, c.i64(0)}});
          ui[d] = c.intrinsic(llvm::Intrinsic::smin, {{k, c.i64(std::max<int64_t>(us[d] - 1, 0))}});
        }
        llvm::Value* x = c.operand(0, c.index);
        if (num_elements(us) == 0) return x;
        return c.b.CreateSelect(inside, c.operand(1, Index::ofDims(std::move(ui))), x);
      },
      // In place (codegen::InPlace): the window only, into a result buffer
      // that already holds x. The planner gives the result x's buffer when
      // this op is x's last reader and x is a value the function computes
      // (not an argument, a constant or an output), computes x into the
      // caller's buffer when the result is an output, and lets a loop pass a
      // body whose carry is x, updated last, one buffer as both
      // (FusionPlan::sharedOutputs): a ring buffer in scan costs its window
      // per step. adjit_sort_bench, rows x 8 f32 updated one row per step,
      // 200,000 steps, one thread, load 12-20 on 2 cores: 2.4-3.6 ns per
      // step at 16, 1,024 and 65,536 rows (a 2 MB carry), against 1.9-2.9 ns
      // for the same loop in C++ (1.15-1.5x); with the carry copied each
      // step instead, 8.6 ns, 1.8 us and 157 us. Where the buffers
      // differ at run time (x read again later, the update computed from x,
      // a caller passing distinct buffers) the op copies x first, what the
      // `element` hook's loop costs. Elsewhere (x an argument, or computed
      // by the loop that reads the result) the `element` hook computes the
      // result inside that loop.
      .inPlace = {0, [](LowerCtx& c) {
        const Type& rt = c.resultType();
        const Shape& us = c.operandType(1).shape;
        llvm::Value* r = c.results[0];
        auto copy = [&] {
          c.loopNest(rt.shape, [&](const Index& i) { c.store(rt.dtype, c.operand(0, i), r, c.linear(i, rt.shape)); });
        };
        if (c.hasBuffer(0)) {
          llvm::Function* f = c.b.GetInsertBlock()->getParent();
          auto* copyBB = llvm::BasicBlock::Create(c.ctx(), "dus.copy", f);
          auto* windowBB = llvm::BasicBlock::Create(c.ctx(), "dus.window", f);
          c.b.CreateCondBr(c.b.CreateICmpEQ(r, c.operandBuffer(0)), windowBB, copyBB);
          c.b.SetInsertPoint(copyBB);
          copy();
          c.b.CreateBr(windowBB);
          c.b.SetInsertPoint(windowBB);
        } else {
          copy();
        }
        if (num_elements(us) == 0) return;
        const std::vector<llvm::Value*> s =
            emitStarts(c, [&](std::size_t d) { return c.operand(2 + d, Index::ofLinear(c.i64(0))); }, rt.shape, us);
        c.loopNest(us, [&](const Index& ui) {
          const auto& o = c.dims(ui, us);
          std::vector<llvm::Value*> at(o.size());
          for (std::size_t d = 0; d < o.size(); ++d) at[d] = c.b.CreateAdd(o[d], s[d]);
          c.store(rt.dtype, c.operand(1, ui), r, c.linear(Index::ofDims(std::move(at)), rt.shape));
        });
      }},
      // d r = dynamic_update_slice(dx, du, s): x's cotangent with the window
      // zeroed, the update's the window of the cotangent
      .jvp = autodiff::linearJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] { return dynamic_update_slice(c.dy(), zeros_like(c.x(1)), startsOf(c, 2)); });
        c.grad(1, [&] { return dynamic_slice(c.dy(), startsOf(c, 2), c.x(1).shape()); });
      },
      // Starts shared by the batch: one more axis, start 0. Starts per
      // example: what the compiled op does per element, on the whole batch:
      // inside its example's window an element is the update's (one gather
      // from the flattened update), outside it the operand's (a select).
      // Exact, of the result's size (JAX makes it a scatter).
      .batch = [](const batching::BatchCtx& c) {
        if (!anyBatched(c, 2)) {
          c.result(0, c.reapply(withLeadingStart(c, 2)).at(0));
          return;
        }
        const Shape &xs = c.type(0).shape, &us = c.type(1).shape;
        const int64_t n = num_elements(us);
        if (n == 0) { // nothing replaced
          c.result(0, c.bx(0));
          return;
        }
        Shape out{c.size};
        out.insert(out.end(), xs.begin(), xs.end());
        const std::vector<int64_t> strides = stridesOf(us);
        Tensor at = c.batched(1) ? iota(out, 0, DType::i64) * n : full(out, 0.0, DType::i64);
        std::optional<Tensor> inside;
        for (std::size_t d = 0; d < xs.size(); ++d) {
          Tensor s = clampedStart(c.x(2 + d), c.batched(2 + d), xs[d], us[d], out.size());
          Tensor k = iota(out, static_cast<int64_t>(d) + 1, DType::i64) - s; // the index into the update
          Tensor in = logical_and(k >= 0, k < us[d]);
          inside = inside ? logical_and(*inside, in) : in;
          at = at + clip(k, 0, us[d] - 1) * strides[d];
        }
        Tensor flat = reshape(c.x(1), {c.batched(1) ? c.size * n : n});
        c.result(0, where(*inside, take(flat, at, 0), c.bx(0)));
      },
      // a copy of the operand or the update, element by element (known starts)
      .deps = sparsity::movementDeps,
  });

  // one_hot(indices) {depth, dtype}: r[..., j] = indices[...] == j ? 1 : 0.
  // An index outside [0, depth) gives a row of zeros (TensorFlow, JAX).
  set(t, OpKind::OneHot, {
      .infer = [](const InferCtx& c) {
        expectIndices(c, 0);
        const int64_t depth = c.integer("depth");
        if (depth < 0) c.fail("depth must not be negative, got {}", depth);
        const DType dt = c.dtype("dtype");
        Shape s = c.operands[0].shape;
        s.push_back(depth);
        return std::vector<Type>{Type{dt, s}};
      },
      .eval = [](const EvalCtx& c) {
        Array r(c.resultType());
        const int64_t depth = c.op.attrs.integer("depth");
        const Array& idx = c.args[0];
        for (int64_t i = 0; i < idx.size(); ++i) {
          const int64_t k = static_cast<int64_t>(idx.get(i));
          for (int64_t j = 0; j < depth; ++j) r.set(i * depth + j, k == j ? 1.0 : 0.0);
        }
        return std::vector<Array>{std::move(r)};
      },
      // nothing to fold; of a ramp 0..n-1 (an iota) at depth n it is identity
      // matrices (the basis jacfwd and jacrev batch over), for matmul's fold
      .fold = [](const ir::FoldCtx& c) -> std::optional<ir::Folded> {
        const int64_t depth = c.op.attrs.integer("depth");
        if (depth == 0 || c.known[0].ramp != depth || c.type(c.op.results[0]).dtype == DType::i1) return std::nullopt;
        return ir::Folded{ir::Known{.splat = {}, .eye = depth}};
      },
      .element = [](ElementCtx& c) -> llvm::Value* {
        const Type& rt = c.resultType();
        const auto& d = c.dims(c.index, rt.shape);
        std::vector<llvm::Value*> outer(d.begin(), d.end() - 1);
        llvm::Value* k = c.b.CreateSExt(c.operand(0, Index::ofDims(std::move(outer))), c.b.getInt64Ty());
        return c.b.CreateSelect(c.b.CreateICmpEQ(k, d.back()), c.constant(rt.dtype, 1), c.constant(rt.dtype, 0));
      },
      // the new axis is the last one
      .keepsRows = [](const Type&, std::size_t, const Type&, const ir::Attrs&) { return true; },
      // the new axis is last, the batch stays first
      .batch = [](const batching::BatchCtx& c) { c.result(0, c.reapply({c.x(0)}).at(0)); },
  });

  // gather(x, idx) {axis}: r[pre, j..., post] = x[pre, idx[j...], post]
  set(t, OpKind::Gather, {
      .infer = [](const InferCtx& c) {
        expectIndices(c, 1);
        int64_t axis = c.axis("axis", c.operands[0].rank());
        return std::vector<Type>{Type{c.operands[0].dtype, gatherShape(c.operands[0].shape, c.operands[1].shape, axis)}};
      },
      .eval = [](const EvalCtx& c) {
        const Array &x = c.args[0], &ix = c.args[1];
        const auto axis = static_cast<std::size_t>(c.op.attrs.integer("axis"));
        const int64_t n = x.shape()[axis];
        Array r(c.resultType());
        const std::size_t w = size_of(x.dtype());
        for (int64_t i = 0; i < r.size(); ++i) {
          Split s = split(unravel(i, r.shape()), axis, ix.shape().size());
          int64_t k = ix.get<int64_t>(ravel(s.idx, ix.shape()));
          if (k < 0) k += n;
          s.x[axis] = std::clamp<int64_t>(k, 0, n - 1);
          std::memcpy(static_cast<char*>(r.raw()) + i * w, static_cast<const char*>(x.raw()) + ravel(s.x, x.shape()) * w, w);
        }
        return std::vector<Array>{std::move(r)};
      },
      // gather(x, [0, 1, ..., n-1]) along an axis of n = x: each element reads itself
      .fold = [](const ir::FoldCtx& c) -> std::optional<ir::Folded> {
        if (identityIndices(c)) return ir::Folded{c.op.operands[0]};
        return std::nullopt;
      },
      .element = [](ElementCtx& c) -> llvm::Value* {
        const auto axis = static_cast<std::size_t>(c.op.attrs.integer("axis"));
        const Shape& xs = c.operandType(0).shape;
        const std::size_t idxRank = c.operandType(1).shape.size();
        const auto& o = c.dims(c.index, c.resultType().shape);
        std::vector<llvm::Value*> xi(o.begin(), o.begin() + axis), ii(o.begin() + axis, o.begin() + axis + idxRank);
        llvm::Value* k = c.b.CreateSExt(c.operand(1, Index::ofDims(ii)), c.b.getInt64Ty());
        // Indices known when compiling to lie in [0, n) are used as they are:
        // wrapping and clamping cost about 9 instructions per element read
        // (det's leaves read A through two gathers of constant indices).
        const auto bounds = c.operandBounds(1);
        if (!bounds || bounds->first < 0 || bounds->second >= xs[axis]) {
          k = wrapNegative(c, k, xs[axis]);
          k = c.intrinsic(llvm::Intrinsic::smax, {{k, c.i64(0)}});
          k = c.intrinsic(llvm::Intrinsic::smin, {{k, c.i64(xs[axis] - 1)}});
        }
        xi.push_back(k);
        xi.insert(xi.end(), o.begin() + axis + idxRank, o.end());
        return c.operand(0, Index::ofDims(std::move(xi)));
      },
      // Along axis 0, row r reads the index row r (and x anywhere); along a
      // later axis, row r of x (and the indices anywhere).
      .keepsRows = [](const Type&, std::size_t i, const Type&, const ir::Attrs& a) {
        return (a.integer("axis") == 0) == (i == 1);
      },
      // scatter the cotangent back to the elements that were read. One slice
      // (a scalar index, x[:, j]): dx = where(iota_axis == k, dy, 0), which
      // fuses with its neighbours where a scatter is a kernel of its own.
      .jvp = autodiff::linearJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] {
          const int64_t axis = c.op.attrs.integer("axis");
          Tensor x = c.x(0);
          Tensor k = effectiveIndices(c.x(1), x.shape()[axis]);
          if (k.rank() == 0) {
            const Shape s = x.shape();
            Shape kept = s;
            kept[static_cast<std::size_t>(axis)] = 1;
            Tensor hit = eq(iota(s, axis, k.dtype()), broadcast_to(k, s));
            return where(hit, broadcast_to(reshape(c.dy(), kept), s), zeros_like(x));
          }
          return scatter_add(zeros_like(x), k, c.dy(), axis);
        });
      },
      // Only x batched: the axis shifts. Only the indices: the gather reads
      // x along the same axis, and the batch axis (where the indices' axes
      // land) moves to the front. Both: one gather along axis 0 of x's
      // batch seen as [B * P * n, post...] (rowIndices), each example's
      // indices wrapped and clamped as the op does first, so each stays in
      // its own row. Exact.
      .batch = [](const batching::BatchCtx& c) {
        const int64_t axis = c.op.attrs.integer("axis");
        if (!c.batched(1)) {
          c.result(0, c.reapply({c.x(0), c.x(1)}, batching::shiftAxes(c.op.attrs, "axis")).at(0));
          return;
        }
        if (!c.batched(0)) {
          c.result(0, batching::moveAxis(c.reapply({c.x(0), c.x(1)}).at(0), axis, 0));
          return;
        }
        const Shape& xs = c.type(0).shape;
        const auto a = static_cast<std::size_t>(axis);
        Tensor at = rowIndices(effectiveIndices(c.x(1), xs[a]), xs, axis, c.size);
        Tensor r = take(reshape(c.x(0), merged(c.x(0).shape(), 0, a + 2)), at, 0); // [B, P, I..., post...]
        Shape out = c.resultType().shape;
        out.insert(out.begin(), c.size);
        c.result(0, reshape(r, out));
      },
      .deps = sparsity::movementDeps,
  });

  // scatter_add(x, idx, upd) {axis}: r = x; r[pre, idx[j...], post] += upd[pre, j..., post]
  set(t, OpKind::ScatterAdd, {
      .infer = [](const InferCtx& c) {
        expectIndices(c, 1);
        int64_t axis = c.axis("axis", c.operands[0].rank());
        Type want{c.operands[0].dtype, gatherShape(c.operands[0].shape, c.operands[1].shape, axis)};
        if (c.operands[2] != want) c.fail("updates must have type {}, got {}", want.str(), c.operands[2].str());
        if (c.operands[0].dtype == DType::i1) c.fail("expected a numeric operand, got {}", c.operands[0].str());
        return std::vector<Type>{c.operands[0]};
      },
      .eval = [](const EvalCtx& c) {
        const Array &ix = c.args[1], &up = c.args[2];
        const auto axis = static_cast<std::size_t>(c.op.attrs.integer("axis"));
        Array r = c.args[0];
        const int64_t n = r.shape()[axis];
        for (int64_t i = 0; i < up.size(); ++i) {
          Split s = split(unravel(i, up.shape()), axis, ix.shape().size());
          int64_t k = ix.get<int64_t>(ravel(s.idx, ix.shape()));
          if (k < 0) k += n;
          if (k < 0 || k >= n) continue;
          s.x[axis] = k;
          int64_t dst = ravel(s.x, r.shape());
          dispatch(r.dtype(), [&](auto tag) {
            using T = decltype(tag);
            elems<T>(r)[dst] = static_cast<T>(elems<T>(r)[dst] + elems<T>(up)[i]);
          });
        }
        return std::vector<Array>{std::move(r)};
      },
      // scatter_add(x, [0, 1, ..., n-1], u) along an axis of n = x + u (each
      // element gets its one update), folded in turn (x = 0 gives u)
      .fold = [](const ir::FoldCtx& c) -> std::optional<ir::Folded> {
        if (!identityIndices(c) || c.type(c.op.operands[2]) != c.type(c.op.operands[0])) return std::nullopt;
        return ir::Folded{ir::Rewrite{OpKind::Add, {c.op.operands[0], c.op.operands[2]}, {}}};
      },
      .lower = lowerScatterAdd,
      // The updates in a loop of their own (vectorised), read back by the
      // runs: det's gradient (a gather's gradient) at ell = 6 and 7 went
      // from 4.04 to 3.11 and 4.68 to 2.74 times its primal (interleaved
      // rounds), though it runs more instructions: computed fused, each
      // update was recomputed scalar in the runs' order.
      .materializedOperands = 1u << 2,
      // x: the cotangent; updates: the cotangent where they landed, 0 where dropped
      .jvp = autodiff::linearJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] { return c.dy(); });
        c.grad(2, [&] {
          const int64_t axis = c.op.attrs.integer("axis");
          const int64_t n = c.x(0).shape()[axis];
          Tensor idx = c.x(1);
          Tensor k = where(idx < 0, idx + n, idx);
          Tensor kept = logical_and(k >= 0, k < n);
          Shape upd = c.x(2).shape(), is = idx.shape(), maskShape(upd.size(), 1);
          for (std::size_t d = 0; d < is.size(); ++d) maskShape[static_cast<std::size_t>(axis) + d] = is[d];
          Tensor mask = broadcast_to(reshape(kept, maskShape), upd);
          Tensor g = take(c.dy(), idx, axis);
          return where(mask, g, zeros_like(g));
        });
      },
      // Indices shared: the axis shifts (x and updates given the batch axis).
      // Indices per example: one scatter along axis 0 of x's batch seen as
      // [B * P * n, post...] (rowIndices), the updates as [B, P, I...,
      // post...]; indices the op drops (out of range once wrapped) sent past
      // every row, so they are dropped too. Each element gets its example's
      // updates in the same order: bitwise equal to the loop.
      .batch = [](const batching::BatchCtx& c) {
        const int64_t axis = c.op.attrs.integer("axis");
        if (!c.batched(1)) {
          c.result(0, c.reapply({c.bx(0), c.x(1), c.bx(2)}, batching::shiftAxes(c.op.attrs, "axis")).at(0));
          return;
        }
        const Shape& xs = c.type(0).shape;
        const auto a = static_cast<std::size_t>(axis);
        const int64_t n = xs[a];
        Tensor idx = c.x(1);
        Tensor k = where(idx < 0, idx + n, idx);
        Tensor at = rowIndices(k, xs, axis, c.size);
        Shape one = k.shape();
        one.insert(one.begin() + 1, 1);
        Tensor kept = reshape(logical_and(k >= 0, k < n), one);
        at = where(kept, at, full(at.shape(), static_cast<double>(c.size * num_elements(xs)), DType::i64));
        const Shape xb = c.bx(0).shape();
        Tensor u = reshape(c.bx(2), merged(c.bx(2).shape(), 1, a + 1));                  // [B, P, I..., post...]
        Tensor r = scatter_add(reshape(c.bx(0), merged(xb, 0, a + 2)), at, u, 0); // [B * P * n, post...]
        c.result(0, reshape(r, xb));
      },
      // r[e] reads x[e], and each update is a term of the element it lands
      // on: exact with indices the analysis knows (updates out of range
      // dropped); with run-time indices, a term of every element along the
      // axis it could land on (conservative).
      .deps = [](const sparsity::SparsityCtx& c) {
        const auto axis = static_cast<std::size_t>(c.op.attrs.integer("axis"));
        const Shape& rs = c.resultType().shape;
        const Shape& us = c.type(2).shape;
        const std::size_t idxRank = c.type(1).shape.size();
        const int64_t n = rs[axis];
        const Array* ix = c.known(1);
        for (int64_t e = 0; e < num_elements(rs); ++e) c.term(0, e, {sparsity::Read{0, e}});
        for (int64_t u = 0; u < num_elements(us); ++u) {
          Split s = split(unravel(u, us), axis, idxRank);
          if (!ix) {
            for (int64_t k = 0; k < n; ++k) {
              s.x[axis] = k;
              c.term(0, ravel(s.x, rs), {sparsity::Read{2, u}});
            }
            continue;
          }
          int64_t k = ix->get<int64_t>(ravel(s.idx, ix->shape()));
          if (k < 0) k += n;
          if (k < 0 || k >= n) continue;
          s.x[axis] = k;
          c.term(0, ravel(s.x, rs), {sparsity::Read{2, u}});
        }
      },
  });
}

} // namespace adjit::ops
