// ops/Reduce.cpp — reduce_sum, reduce_prod, reduce_max, reduce_min over `axes`,
// with `keepdims`; argmax and argmin, cumsum and cumprod along an axis.
// Compiled reductions may reassociate (sums are vectorised with several
// partial accumulators), so float results can differ from the sequential
// reference in the last bits; max and min are exact and propagate NaN (as
// the default quiet NaN), with -0 below +0, in any order of the elements.
#include "codegen/Emitter.h"
#include "autodiff/JvpCtx.h"
#include "autodiff/VjpCtx.h"
#include "ops/Common.h"

#include <limits>

namespace adjit::ops {
namespace {

using codegen::Index;
using codegen::LowerCtx;
using ir::EvalCtx;
using ir::InferCtx;

std::vector<Type> inferReduce(const InferCtx& c) {
  const Type& in = c.operands[0];
  if (in.dtype == DType::i1) c.fail("expected a numeric operand, got {}", in.str());
  std::vector<int64_t> axes = readAxes(c, in.rank());
  bool keep = c.boolean("keepdims");
  Shape out;
  for (int64_t d = 0; d < in.rank(); ++d) {
    bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!reduced) out.push_back(in.shape[d]);
    else if (keep) out.push_back(1);
  }
  return {Type{in.dtype, out}};
}

enum Kind { kSum, kProd, kMax, kMin };

template <class T> T combine(Kind k, T a, T b) {
  switch (k) {
  case kSum: return wrap(a, b, [](auto x, auto y) { return x + y; }); // integers wrap, as compiled code does
  case kProd: return wrap(a, b, [](auto x, auto y) { return x * y; });
  case kMax:
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
      if (a == 0 && b == 0) return std::signbit(a) ? b : a; // +0 above -0
    }
    return a > b ? a : b;
  case kMin:
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
      if (a == 0 && b == 0) return std::signbit(a) ? a : b;
    }
    return a < b ? a : b;
  }
  return a;
}

/// The identity of reduction k in T: max starts at the lowest T, min at the highest.
template <class T> T identity(Kind k) {
  constexpr bool f = std::is_floating_point_v<T>;
  switch (k) {
  case kSum: return T(0);
  case kProd: return T(1);
  case kMax: return f ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
  case kMin: return f ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max();
  }
  return T(0);
}

/// The identity as a constant of dtype t.
llvm::Value* identityConstant(codegen::EmitBase& c, Kind k, DType t) {
  llvm::Type* ty = c.scalarType(t);
  switch (t) {
  case DType::f32: return llvm::ConstantFP::get(ty, identity<float>(k));
  case DType::f64: return llvm::ConstantFP::get(ty, identity<double>(k));
  case DType::i32: return llvm::ConstantInt::getSigned(ty, identity<int32_t>(k));
  case DType::i64: return llvm::ConstantInt::getSigned(ty, identity<int64_t>(k));
  case DType::i1: break;
  }
  ADJIT_UNREACHABLE("reductions of i1 are rejected by the type rule");
}

/// Maps an operand multi-index to the result's linear index.
int64_t outIndex(const std::vector<int64_t>& in, const std::vector<bool>& reduced, bool keep, const Shape& out) {
  std::vector<int64_t> o;
  for (std::size_t d = 0; d < in.size(); ++d) {
    if (!reduced[d]) o.push_back(in[d]);
    else if (keep) o.push_back(0);
  }
  return ravel(o, out);
}

template <Kind K> std::vector<Array> evalReduce(const EvalCtx& c) {
  const Array& x = c.args[0];
  const Type& rt = c.resultType();
  std::vector<bool> reduced(x.shape().size());
  for (int64_t a : c.op.attrs.ints("axes")) reduced[a < 0 ? a + x.shape().size() : a] = true;
  const bool keep = c.op.attrs.boolean("keepdims");
  Array r(rt);
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = elems<T>(r);
    for (int64_t i = 0; i < r.size(); ++i) o[i] = identity<T>(K);
    for (int64_t i = 0; i < x.size(); ++i) {
      int64_t j = outIndex(unravel(i, x.shape()), reduced, keep, rt.shape);
      o[j] = combine<T>(K, o[j], elems<T>(x)[i]);
    }
  });
  return {std::move(r)};
}

// Float max and min accumulate an ordered integer key instead of a float:
// the float's bits, with the magnitude bits flipped when the sign is set,
// compare as signed integers as the floats do (-0 below +0), and a NaN is
// mapped past the end the reduction moves to (the largest key for max, the
// smallest for min). One integer max (min) per element is a reduction LLVM
// vectorises with several accumulators and a short horizontal tail, where
// llvm.maximum cost some six dependent instructions per vector and a long
// serial tail (B3: logsumexp). The key of the result does not depend on the
// order of the elements, so every vector width, chunking and thread count
// gives the same bits; any NaN gives the default quiet NaN.

/// The integer type of dtype t's keys (i32 for f32, i64 for f64).
llvm::IntegerType* keyType(codegen::EmitBase& c, DType t) { return c.b.getIntNTy(static_cast<unsigned>(8 * size_of(t))); }

/// Flips the magnitude bits of `bits` when its sign bit is set: float bits to
/// their ordered key, and back (the map is its own inverse).
llvm::Value* flipNegative(codegen::EmitBase& c, llvm::Value* bits) {
  const unsigned w = bits->getType()->getIntegerBitWidth();
  return c.b.CreateXor(bits, c.b.CreateLShr(c.b.CreateAShr(bits, w - 1), 1));
}

/// The key past every float's (max) or below it (min): where NaNs go.
llvm::ConstantInt* nanKey(codegen::EmitBase& c, Kind k, DType t) {
  const unsigned w = keyType(c, t)->getBitWidth();
  return llvm::ConstantInt::get(c.ctx(), k == kMax ? llvm::APInt::getSignedMaxValue(w) : llvm::APInt::getSignedMinValue(w));
}

/// The ordered key of float x; NaN to nanKey.
llvm::Value* orderedKey(codegen::EmitBase& c, Kind k, DType t, llvm::Value* x) {
  llvm::Value* key = flipNegative(c, c.b.CreateBitCast(x, keyType(c, t)));
  return c.b.CreateSelect(c.b.CreateFCmpUNO(x, x), nanKey(c, k, t), key);
}

bool keyed(Kind k, DType t) { return (k == kMax || k == kMin) && is_floating(t); }

llvm::Value* emitCombine(codegen::EmitBase& c, Kind k, DType t, llvm::Value* a, llvm::Value* b) {
  const bool f = is_floating(t);
  llvm::IRBuilder<>::FastMathFlagGuard guard(c.b);
  c.b.setFastMathFlags(c.reassocFlags());
  switch (k) {
  case kSum: return f ? c.b.CreateFAdd(a, b) : c.b.CreateAdd(a, b);
  case kProd: return f ? c.b.CreateFMul(a, b) : c.b.CreateMul(a, b);
  case kMax: return c.intrinsic(llvm::Intrinsic::smax, {{a, f ? orderedKey(c, k, t, b) : b}});
  case kMin: return c.intrinsic(llvm::Intrinsic::smin, {{a, f ? orderedKey(c, k, t, b) : b}});
  }
  return a;
}

/// A reduction over no axes is the identity.
std::optional<ir::Folded> foldNoAxes(const ir::FoldCtx& c) {
  return c.op.attrs.ints("axes").empty() ? foldIfSameType(c) : std::nullopt;
}

/// The accumulator of reduction K for the codegen driver's loops.
template <Kind K> const ReduceHooks* reducer() {
  static const ReduceHooks hooks{
      .identity = [](codegen::EmitBase& c, DType t) -> llvm::Value* {
        llvm::Value* id = identityConstant(c, K, t);
        if (!keyed(K, t)) return id;
        // the key of -inf (max) or +inf (min), folded
        const llvm::APInt bits = llvm::cast<llvm::ConstantFP>(id)->getValueAPF().bitcastToAPInt();
        const unsigned w = bits.getBitWidth();
        return llvm::ConstantInt::get(c.ctx(), bits.isNegative() ? bits ^ llvm::APInt::getSignedMaxValue(w) : bits);
      },
      .combine = [](codegen::EmitBase& c, DType t, llvm::Value* acc, llvm::Value* x) { return emitCombine(c, K, t, acc, x); },
      .state = [](codegen::EmitBase& c, DType t) -> llvm::Type* {
        return keyed(K, t) ? keyType(c, t) : c.scalarType(t);
      },
      .merge = [](codegen::EmitBase& c, DType t, llvm::Value* acc, llvm::Value* other) -> llvm::Value* {
        if (!keyed(K, t)) return emitCombine(c, K, t, acc, other);
        return c.intrinsic(K == kMax ? llvm::Intrinsic::smax : llvm::Intrinsic::smin, {{acc, other}});
      },
      .finish = [](codegen::EmitBase& c, DType t, llvm::Value* acc) -> llvm::Value* {
        if (!keyed(K, t)) return acc;
        llvm::Type* ft = c.scalarType(t);
        return c.b.CreateSelect(c.b.CreateICmpEQ(acc, nanKey(c, K, t)), llvm::ConstantFP::getQNaN(ft),
                                c.b.CreateBitCast(flipNegative(c, acc), ft));
      },
  };
  return &hooks;
}

/// The operand's shape with the reduced axes kept as 1.
Shape keptShape(const autodiff::VjpCtx& c) {
  Shape s = c.x(0).shape();
  const auto rank = static_cast<int64_t>(s.size());
  for (int64_t a : c.op.attrs.ints("axes")) s[static_cast<std::size_t>(a < 0 ? a + rank : a)] = 1;
  return s;
}

/// A result-shaped tensor broadcast back over the operand's shape.
Tensor spread(const autodiff::VjpCtx& c, const Tensor& r) {
  return broadcast_to(reshape(r, keptShape(c)), c.x(0).shape());
}

/// max/min: the cotangent goes to the extremal elements, split equally among ties.
void vjpExtremum(const autodiff::VjpCtx& c) {
  c.grad(0, [&] {
    Tensor x = c.x(0);
    Tensor hit = x == spread(c, c.y());
    Tensor count = sum(cast(hit, x.dtype()), c.op.attrs.ints("axes"), true);
    Tensor share = broadcast_to(reshape(c.dy(), keptShape(c)) / count, x.shape());
    return where(hit, share, zeros_like(x));
  });
}

} // namespace

/// A shape split at `axis`: the elements before it (outer), along it (n) and
/// after it (inner); element (o, k, i) is at (o * n + k) * inner + i.
struct AxisSplit {
  int64_t outer, n, inner;
};
AxisSplit splitAt(const Shape& s, std::size_t axis) {
  const int64_t n = s[axis], inner = num_elements(Shape(s.begin() + static_cast<std::ptrdiff_t>(axis) + 1, s.end()));
  return {n * inner == 0 ? 0 : num_elements(s) / (n * inner), n, inner};
}

/// Whether x replaces the best so far: larger (Max) or smaller, or the first
/// NaN (NaN wins, as numpy's and JAX's argmax); ties keep the first.
template <bool Max, class T> bool replaces(T x, T best) {
  if constexpr (std::is_floating_point_v<T>)
    if (std::isnan(x) || std::isnan(best)) return std::isnan(x) && !std::isnan(best);
  return Max ? x > best : x < best;
}

/// argmax (Max) or argmin {axis, dtype}: the index of the first largest
/// (smallest) element along `axis`, which is removed from the shape.
template <bool Max> Hooks argReduce() {
  return {
      .infer = [](const InferCtx& c) {
        const Type& in = c.operands[0];
        if (in.dtype == DType::i1) c.fail("expected a numeric operand, got {}", in.str());
        const int64_t axis = c.axis("axis", in.rank());
        if (in.shape[static_cast<std::size_t>(axis)] == 0)
          c.fail("axis {} of {} is empty: no element to pick", axis, in.str());
        const DType dt = c.dtype("dtype");
        if (dt != DType::i32 && dt != DType::i64) c.fail("dtype must be i32 or i64, got {}", name_of(dt));
        Shape out = in.shape;
        out.erase(out.begin() + axis);
        return std::vector<Type>{Type{dt, out}};
      },
      .eval = [](const EvalCtx& c) {
        const Array& x = c.args[0];
        const int64_t axis = c.op.attrs.integer("axis");
        const Shape& s = x.shape();
        const auto [outer, n, inner] = splitAt(s, static_cast<std::size_t>(axis));
        Array r(c.resultType());
        dispatch(x.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T* v = elems<T>(x);
          for (int64_t o = 0; o < r.size(); ++o) {
            const int64_t base = (o / inner) * n * inner + o % inner;
            int64_t best = 0;
            for (int64_t j = 1; j < n; ++j)
              if (replaces<Max>(v[base + j * inner], v[base + best * inner])) best = j;
            r.set(o, static_cast<double>(best));
          }
        });
        return std::vector<Array>{std::move(r)};
      },
      .fold = noFold,
      // For each result element, a loop along the axis keeping the best value
      // and its index in registers; the operand is read fused.
      .lower = [](LowerCtx& c) {
        const Type& in = c.operandType(0);
        const Type& rt = c.resultType();
        const std::size_t axis = static_cast<std::size_t>(c.op.attrs.integer("axis"));
        llvm::Value* bestSlot = c.scalarSlot(in.dtype);
        llvm::Value* indexSlot = c.scalarSlot(DType::i64);
        llvm::Type* vt = c.scalarType(in.dtype);
        c.loopNest(rt.shape, [&](const Index& o) {
          const auto& od = c.dims(o, rt.shape);
          auto at = [&](llvm::Value* j) {
            std::vector<llvm::Value*> d(od.begin(), od.end());
            d.insert(d.begin() + static_cast<std::ptrdiff_t>(axis), j);
            return Index::ofDims(std::move(d));
          };
          c.b.CreateStore(c.operand(0, at(c.i64(0))), bestSlot);
          c.b.CreateStore(c.i64(0), indexSlot);
          c.loop(in.shape[axis], [&](llvm::Value* j) {
            llvm::Value* x = c.operand(0, at(j));
            llvm::Value* best = c.b.CreateLoad(vt, bestSlot);
            llvm::Value* better;
            if (is_floating(in.dtype)) {
              llvm::Value* cmp = Max ? c.b.CreateFCmpOGT(x, best) : c.b.CreateFCmpOLT(x, best);
              llvm::Value* firstNaN = c.b.CreateAnd(c.b.CreateFCmpUNO(x, x), c.b.CreateFCmpORD(best, best));
              better = c.b.CreateOr(cmp, firstNaN);
            } else {
              better = Max ? c.b.CreateICmpSGT(x, best) : c.b.CreateICmpSLT(x, best);
            }
            c.b.CreateStore(c.b.CreateSelect(better, x, best), bestSlot);
            c.b.CreateStore(c.b.CreateSelect(better, j, c.b.CreateLoad(c.b.getInt64Ty(), indexSlot)), indexSlot);
          });
          llvm::Value* index = c.b.CreateLoad(c.b.getInt64Ty(), indexSlot);
          c.store(rt.dtype, c.b.CreateSExtOrTrunc(index, c.scalarType(rt.dtype)), c.results[0], c.linear(o, rt.shape));
        });
      },
      .batch = [](const batching::BatchCtx& c) { batching::shiftedBatch(c, {"axis"}); },
  };
}

/// The VJP of cumprod without dividing by zero. With z the first zero of x
/// along the axis (n if none), dx_i = sum_{j >= i} dy_j prod_{k <= j, k != i} x_k is
///   i < z:  sum_{i <= j < z} dy_j y_j / x_i       (x_i is not zero)
///   i = z:  prod_{k < z} x_k * sum_{j >= z} dy_j prod_{z < k <= j} x_k
///   i > z:  0                                      (the product holds x_z = 0)
/// in the scan's direction (reverse flips it). Built from cumsum and cumprod
/// itself, so it is differentiable in turn.
Tensor cumprodGrad(const Tensor& x, const Tensor& y, const Tensor& dy, int64_t axis, bool reverse) {
  const int64_t n = x.shape()[static_cast<std::size_t>(axis)];
  // Positions along the axis in the scan's order: 0 is where the scan starts.
  Tensor pos = iota(x.shape(), axis, DType::i64);
  if (reverse) pos = (n - 1) - pos;
  Tensor zero = x == 0;
  // z: the first zero's position, n where there is none.
  Tensor z = min(where(zero, pos, full(x.shape(), static_cast<double>(n), DType::i64)), {axis}, true);
  Tensor before = pos < z, at = pos == z;
  Tensor one = ones_like(x);
  Tensor safeX = where(before, x, one);
  Tensor dyY = where(before, dy * y, zeros_like(x));
  Tensor gBefore = cumsum(dyY, axis, !reverse) / safeX;
  // prod_{k < z} x_k: the product before z; prod_{z < k <= j} x_k: the scan restarted after z.
  Tensor prefix = sum(where(at, cumprod(where(pos < z, x, one), axis, reverse), zeros_like(x)), {axis}, true);
  Tensor restarted = cumprod(where(pos > z, x, one), axis, reverse);
  Tensor gAt = prefix * sum(where(pos >= z, dy * restarted, zeros_like(x)), {axis}, true);
  return where(before, gBefore, where(at, gAt, zeros_like(x)));
}

/// cumsum (Product false) or cumprod {axis, reverse}: r[.., j, ..] = the sum
/// (product) of x[.., k, ..] for k <= j (k >= j with reverse), combined in
/// that order, exactly as the interpreter.
template <bool Product> Hooks cumulative() {
  return {
      .infer = [](const InferCtx& c) {
        const Type& in = c.operands[0];
        if (in.dtype == DType::i1) c.fail("expected a numeric operand, got {}", in.str());
        c.axis("axis", in.rank());
        c.boolean("reverse");
        return std::vector<Type>{in};
      },
      .eval = [](const EvalCtx& c) {
        const Array& x = c.args[0];
        const Shape& s = x.shape();
        const std::size_t axis = static_cast<std::size_t>(c.op.attrs.integer("axis"));
        const bool reverse = c.op.attrs.boolean("reverse");
        const auto [outer, n, inner] = splitAt(s, axis);
        Array r(x.type());
        dispatch(x.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T* v = elems<T>(x);
          T* out = elems<T>(r);
          for (int64_t o = 0; o < outer; ++o)
            for (int64_t i = 0; i < inner; ++i) {
              T acc = T(Product ? 1 : 0);
              for (int64_t k = 0; k < n; ++k) {
                const int64_t at = (o * n + (reverse ? n - 1 - k : k)) * inner + i;
                acc = wrap(acc, v[at], [](auto a, auto b) { return Product ? a * b : a + b; });
                out[at] = acc;
              }
            }
        });
        return std::vector<Array>{std::move(r)};
      },
      .fold = noFold,
      // Row by row along the axis: each row is the previous result row plus
      // the operand's (read fused), so the innermost loop is contiguous.
      .lower = [](LowerCtx& c) {
        const Type& rt = c.resultType();
        const Shape& s = rt.shape;
        const std::size_t axis = static_cast<std::size_t>(c.op.attrs.integer("axis"));
        const bool reverse = c.op.attrs.boolean("reverse");
        const auto [outer, n, inner] = splitAt(s, axis);
        llvm::Value* out = c.results[0];
        c.loop(outer, [&](llvm::Value* o) {
          c.loop(n, [&](llvm::Value* k) {
            llvm::Value* row = reverse ? c.b.CreateSub(c.i64(n - 1), k) : k;
            llvm::Value* first = c.b.CreateICmpEQ(k, c.i64(0));
            llvm::Value* base = c.b.CreateMul(c.b.CreateAdd(c.b.CreateMul(o, c.i64(n)), row), c.i64(inner));
            // The previous row; at the first row, this row itself (read, then ignored).
            llvm::Value* prevBase = c.b.CreateSelect(first, base, reverse ? c.b.CreateAdd(base, c.i64(inner)) : c.b.CreateSub(base, c.i64(inner)));
            c.loop(inner, [&](llvm::Value* i) {
              llvm::Value* at = c.b.CreateAdd(base, i);
              llvm::Value* x = c.operand(0, Index::ofLinear(at));
              llvm::Value* prev =
                  c.b.CreateSelect(first, c.constant(rt.dtype, Product ? 1 : 0), c.load(rt.dtype, out, c.b.CreateAdd(prevBase, i)));
              const bool f = is_floating(rt.dtype);
              c.store(rt.dtype, Product ? (f ? c.b.CreateFMul(prev, x) : c.b.CreateMul(prev, x)) : (f ? c.b.CreateFAdd(prev, x) : c.b.CreateAdd(prev, x)),
                      out, at);
            });
          });
        });
      },
      // cumsum is linear; cumprod's product rule through its VJP, transposed
      .jvp = Product ? autodiff::transposedJvp : autodiff::linearJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        const int64_t axis = c.op.attrs.integer("axis");
        const bool reverse = c.op.attrs.boolean("reverse");
        // d cumsum = the cumulative sum of the cotangent the other way
        if (!Product) return c.grad(0, [&] { return cumsum(c.dy(), axis, !reverse); });
        c.grad(0, [&] { return cumprodGrad(c.x(0), c.y(), c.dy(), axis, reverse); });
      },
      .batch = [](const batching::BatchCtx& c) { batching::shiftedBatch(c, {"axis"}); },
      // element k reads elements 0..k along the axis
      .deps = [](const sparsity::SparsityCtx& c) { sparsity::cumulativeDeps(c, Product); },
  };
}


/// Reductions batch over their axes shifted past the batch axis.
void batchReduce(const batching::BatchCtx& c) { batching::shiftedBatch(c, {"axes"}); }

void defineReduceOps(Table& t) {
  set(t, OpKind::Cumsum, cumulative<false>());
  set(t, OpKind::Cumprod, cumulative<true>());

  set(t, OpKind::ArgMax, argReduce<true>());
  set(t, OpKind::ArgMin, argReduce<false>());
  // reduce_sum {axes, keepdims}: sum over axes
  set(t, OpKind::ReduceSum, {
      .infer = inferReduce,
      .eval = evalReduce<kSum>,
      .fold = foldNoAxes,
      .reduce = reducer<kSum>(),
      // d sum(x) = the cotangent broadcast over the summed axes
      .jvp = autodiff::linearJvp,
      .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return spread(c, c.dy()); }); },
      .batch = batchReduce,
      .deps = [](const sparsity::SparsityCtx& c) { sparsity::reduceDeps(c, "axes", false); },
  });

  // reduce_prod {axes, keepdims}: product over axes
  set(t, OpKind::ReduceProd, {
      .infer = inferReduce,
      .eval = evalReduce<kProd>,
      .fold = foldNoAxes,
      .reduce = reducer<kProd>(),
      // d/dx_i prod(x) = prod_{j != i} x_j, computed without dividing by zero
      .jvp = autodiff::transposedJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] {
          Tensor x = c.x(0);
          const auto& axes = c.op.attrs.ints("axes");
          Tensor isZero = x == 0;
          Tensor nonZero = where(isZero, ones_like(x), x);
          Tensor prodNonZero = spread(c, prod(nonZero, axes, false));
          Tensor zeros = spread(c, sum(cast(isZero, x.dtype()), axes, false));
          // no zero: prod / x_i; one zero: the others' product at it, 0 elsewhere; more: 0
          Tensor others = where(zeros == 0, prodNonZero / nonZero,
                                where(logical_and(zeros == 1, isZero), prodNonZero, zeros_like(x)));
          return spread(c, c.dy()) * others;
        });
      },
      .batch = batchReduce,
      .deps = [](const sparsity::SparsityCtx& c) { sparsity::reduceDeps(c, "axes", true, sparsity::Couples::distinct); },
  });

  // reduce_max {axes, keepdims}: maximum over axes (-inf for an empty axis)
  set(t, OpKind::ReduceMax, {
      .infer = inferReduce,
      .eval = evalReduce<kMax>,
      .fold = foldNoAxes,
      .reduce = reducer<kMax>(),
      .jvp = autodiff::transposedJvp,
      .vjp = vjpExtremum,
      .batch = batchReduce,
      .deps = [](const sparsity::SparsityCtx& c) { sparsity::reduceDeps(c, "axes", true, sparsity::Couples::nothing); },
  });

  // reduce_min {axes, keepdims}: minimum over axes (+inf for an empty axis)
  set(t, OpKind::ReduceMin, {
      .infer = inferReduce,
      .eval = evalReduce<kMin>,
      .fold = foldNoAxes,
      .reduce = reducer<kMin>(),
      .jvp = autodiff::transposedJvp,
      .vjp = vjpExtremum,
      .batch = batchReduce,
      .deps = [](const sparsity::SparsityCtx& c) { sparsity::reduceDeps(c, "axes", true, sparsity::Couples::nothing); },
  });
}

} // namespace adjit::ops
