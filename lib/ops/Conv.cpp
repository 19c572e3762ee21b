// ops/Conv.cpp — convolution and windowed reductions. conv is XLA's
// conv_general_dilated in PyTorch's layout (input [N, C, spatial...], kernel
// [O, C/groups, spatial...], result [N, O, spatial...]); reduce_window_sum
// and reduce_window_max slide a window over every axis of their operand;
// select_and_scatter_add and select_and_gather_add route values to or from
// each window's first maximum (max pooling's derivatives).
#include "codegen/Emitter.h"
#include "autodiff/JvpCtx.h"
#include "autodiff/VjpCtx.h"
#include "ops/Common.h"
#include "ops/ConvWindow.h"

#include <adjit/conv.h>

#include <limits>
#include <numeric>

namespace adjit::ops {

namespace convwindow {

/// Where tap `k` of output position `o` reads along axis d of the window:
/// {whether it reads an element, its index (0 when it does not)}.
std::pair<llvm::Value*, llvm::Value*> emitTap(const codegen::EmitBase& c, const Window& w, std::size_t d, llvm::Value* o, llvm::Value* k) {
  llvm::Value* p = c.b.CreateSub(c.b.CreateAdd(c.b.CreateMul(o, c.i64(w.stride[d])), c.b.CreateMul(k, c.i64(w.rhsDil[d]))),
                           c.i64(w.lo[d]));
  llvm::Value* valid = c.b.CreateICmpULT(p, c.i64(dilated(w.in[d], w.lhsDil[d]))); // unsigned: p < 0 fails too
  if (w.lhsDil[d] > 1) {
    valid = c.b.CreateAnd(valid, c.b.CreateICmpEQ(c.b.CreateURem(p, c.i64(w.lhsDil[d])), c.i64(0)));
    p = c.b.CreateUDiv(p, c.i64(w.lhsDil[d]));
  }
  return {valid, c.b.CreateSelect(valid, p, c.i64(0))};
}

} // namespace convwindow

namespace {

using codegen::Index;
using codegen::LowerCtx;
using ir::EvalCtx;
using ir::InferCtx;
using llvm::Value;
using convwindow::dilated;
using convwindow::emitTap;
using convwindow::Window;

/// The window's geometry, or a message saying what is wrong with it.
std::variant<Window, std::string> geometry(const Shape& in, const Shape& k, const std::vector<int64_t>& strides,
                                           const std::vector<int64_t>& padding, const std::vector<int64_t>& lhsDil,
                                           const std::vector<int64_t>& rhsDil) {
  const std::size_t r = in.size();
  auto count = [&](const std::vector<int64_t>& v, std::size_t n, const char* name) -> std::string {
    return v.size() == n ? "" : fmt::format("{} must have {} entries, got {}", name, n, v.size());
  };
  for (const std::string& m : {count(strides, r, "strides"), count(padding, 2 * r, "padding"),
                               count(lhsDil, r, "lhs_dilation"), count(rhsDil, r, "rhs_dilation")})
    if (!m.empty()) return m;
  Window w;
  for (std::size_t d = 0; d < r; ++d) {
    if (strides[d] < 1 || lhsDil[d] < 1 || rhsDil[d] < 1)
      return fmt::format("strides and dilations must be positive, got strides {}, lhs_dilation {}, rhs_dilation {}",
                         shape_str(strides), shape_str(lhsDil), shape_str(rhsDil));
    if (k[d] < 1) return fmt::format("window dimensions must be positive, got {}", shape_str(k));
    const int64_t padded = dilated(in[d], lhsDil[d]) + padding[2 * d] + padding[2 * d + 1];
    if (padded < 0)
      return fmt::format("padding ({}, {}) leaves less than nothing of spatial axis {} of size {}", padding[2 * d],
                         padding[2 * d + 1], d, in[d]);
    const int64_t dk = dilated(k[d], rhsDil[d]);
    w.in.push_back(in[d]);
    w.k.push_back(k[d]);
    w.out.push_back(padded >= dk ? (padded - dk) / strides[d] + 1 : 0);
    w.stride.push_back(strides[d]);
    w.lo.push_back(padding[2 * d]);
    w.hi.push_back(padding[2 * d + 1]);
    w.lhsDil.push_back(lhsDil[d]);
    w.rhsDil.push_back(rhsDil[d]);
  }
  return w;
}

Window mustGeometry(const Shape& in, const Shape& k, const std::vector<int64_t>& strides, const std::vector<int64_t>& padding,
                    const std::vector<int64_t>& lhsDil, const std::vector<int64_t>& rhsDil) {
  auto g = geometry(in, k, strides, padding, lhsDil, rhsDil);
  ADJIT_ASSERT(std::holds_alternative<Window>(g), "conv: geometry of verified IR fails");
  return std::get<Window>(std::move(g));
}

Shape spatial(const Shape& s) { return Shape(s.begin() + 2, s.end()); }

/// conv's window over the spatial axes of its operands.
Window convWindow(const Shape& x, const Shape& w, const ir::Attrs& a) {
  return mustGeometry(spatial(x), spatial(w), a.ints("strides"), a.ints("padding"), a.ints("lhs_dilation"),
                      a.ints("rhs_dilation"));
}

/// A reduce_window's (or select_and_*'s) window over every axis of `x`.
Window poolWindow(const Shape& x, const ir::Attrs& a) {
  const std::vector<int64_t> ones(x.size(), 1);
  return mustGeometry(x, a.ints("window"), a.ints("strides"), a.ints("padding"), ones, ones);
}

/// Calls tap(j, i) for every tap j (row-major over the window) of output
/// position `o` (a multi-index) that reads input element i (row-major over
/// w.in): taps in padding or between dilated elements are skipped.
template <class Tap> void forEachTap(const Window& w, std::span<const int64_t> o, Tap tap) {
  const std::size_t r = w.rank();
  std::vector<int64_t> k(r, 0);
  for (int64_t j = 0; j < w.taps(); ++j) {
    int64_t lin = 0;
    bool valid = true;
    for (std::size_t d = 0; d < r && valid; ++d) {
      const int64_t p = o[d] * w.stride[d] + k[d] * w.rhsDil[d] - w.lo[d];
      valid = p >= 0 && p < dilated(w.in[d], w.lhsDil[d]) && p % w.lhsDil[d] == 0;
      lin = lin * w.in[d] + p / w.lhsDil[d];
    }
    if (valid) tap(j, lin);
    for (std::size_t d = r; d-- > 0;) { // next tap
      if (++k[d] < w.k[d]) break;
      k[d] = 0;
    }
  }
}

/// For a window over every axis of its operand: for each output position
/// (row-major), begin(o), then tap(valid, i) for each tap in row-major order
/// with i the linear input index it reads (0 where !valid), then end(o).
void emitWindows(LowerCtx& c, const Window& w, const std::function<void(const Index&)>& begin,
                 const std::function<void(Value*, Value*)>& tap, const std::function<void(const Index&)>& end) {
  const Shape out(w.out.begin(), w.out.end()), taps(w.k.begin(), w.k.end());
  c.loopNest(out, [&](const Index& oi) {
    const std::vector<Value*> o = c.dims(oi, out);
    begin(oi);
    c.loopNest(taps, [&](const Index& ki) {
      const std::vector<Value*> k = c.dims(ki, taps);
      Value* valid = c.b.getTrue();
      Value* lin = c.i64(0);
      for (std::size_t d = 0; d < w.rank(); ++d) {
        auto [v, i] = emitTap(c, w, d, o[d], k[d]);
        valid = c.b.CreateAnd(valid, v);
        lin = c.b.CreateAdd(c.b.CreateMul(lin, c.i64(w.in[d])), i);
      }
      tap(valid, lin);
    });
    end(oi);
  });
}

/// Whether value v at tap `index` replaces the window's best so far: the
/// first tap, a greater value, or the first NaN (NaN wins, as in argmax).
template <class T> bool replaces(T v, T best, int64_t bestIndex) {
  return bestIndex < 0 || v > best || (std::isnan(v) && !std::isnan(best));
}

/// The linear input index of each window's first maximum of x (-1 when the
/// window reads nothing), row-major over the output positions.
template <class T> std::vector<int64_t> argmaxes(const Window& w, const T* x) {
  std::vector<int64_t> best(static_cast<std::size_t>(w.outs()), -1);
  const Shape out(w.out.begin(), w.out.end());
  for (int64_t o = 0; o < w.outs(); ++o) {
    const std::vector<int64_t> oi = unravel(o, out);
    int64_t& b = best[static_cast<std::size_t>(o)];
    forEachTap(w, oi, [&](int64_t, int64_t i) {
      if (replaces(x[i], b < 0 ? T{} : x[b], b)) b = i;
    });
  }
  return best;
}

/// Emits the search for the window's first maximum of operand 1 (x): per
/// output position, found(o, valid, index) with the best linear index.
void emitArgmaxes(LowerCtx& c, const Window& w, const std::function<void(const Index&, Value*)>& found) {
  const DType t = c.operandType(1).dtype;
  Value* X = c.operandBuffer(1);
  Value* bestSlot = c.scalarSlot(t);
  Value* indexSlot = c.scalarSlot(DType::i64);
  llvm::Type* vt = c.scalarType(t);
  emitWindows(
      c, w,
      [&](const Index&) {
        c.b.CreateStore(c.constant(t, -std::numeric_limits<double>::infinity()), bestSlot);
        c.b.CreateStore(c.i64(-1), indexSlot);
      },
      [&](Value* valid, Value* i) {
        Value* v = c.load(t, X, i);
        Value* best = c.b.CreateLoad(vt, bestSlot);
        Value* index = c.b.CreateLoad(c.b.getInt64Ty(), indexSlot);
        Value* firstNaN = c.b.CreateAnd(c.b.CreateFCmpUNO(v, v), c.b.CreateFCmpORD(best, best));
        Value* better = c.b.CreateOr(c.b.CreateOr(c.b.CreateICmpSLT(index, c.i64(0)), c.b.CreateFCmpOGT(v, best)), firstNaN);
        better = c.b.CreateAnd(valid, better);
        c.b.CreateStore(c.b.CreateSelect(better, v, best), bestSlot);
        c.b.CreateStore(c.b.CreateSelect(better, i, index), indexSlot);
      },
      [&](const Index& oi) { found(oi, c.b.CreateLoad(c.b.getInt64Ty(), indexSlot)); });
}

/// The dependency rule of the ops that pick from each window of operand
/// `x` (reduce_window_max, select_and_gather_add: result q reads operand
/// `from`'s elements; select_and_scatter_add, `scatter`: operand `from`'s
/// element q is a term of the result's elements). With x known, the window's
/// first maximum alone (exact); else every element of the window, which the
/// op's derivative picks from at each point (conservative). No couplings:
/// piecewise linear.
void windowDeps(const sparsity::SparsityCtx& c, uint32_t from, std::size_t x, bool scatter) {
  const Window w = poolWindow(c.type(x).shape, c.op.attrs);
  const Shape out(w.out.begin(), w.out.end());
  auto add = [&](int64_t o, int64_t i) {
    if (scatter) c.term(0, i, {sparsity::Read{from, o}}, sparsity::Couples::nothing);
    else c.term(0, o, {sparsity::Read{from, i}}, sparsity::Couples::nothing);
  };
  if (const Array* known = x != 0 ? c.known(x) : nullptr) {
    dispatch(known->dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_floating_point_v<T>) {
        const std::vector<int64_t> best = argmaxes(w, elems<T>(*known));
        for (std::size_t o = 0; o < best.size(); ++o)
          if (best[o] >= 0) add(static_cast<int64_t>(o), best[o]);
      }
    });
    return;
  }
  if (scatter) {
    for (int64_t o = 0; o < w.outs(); ++o) forEachTap(w, unravel(o, out), [&](int64_t, int64_t i) { add(o, i); });
    return;
  }
  std::vector<sparsity::Read> reads;
  for (int64_t o = 0; o < w.outs(); ++o) {
    reads.clear();
    forEachTap(w, unravel(o, out), [&](int64_t, int64_t i) { reads.push_back(sparsity::Read{from, i}); });
    c.term(0, o, reads, sparsity::Couples::nothing);
  }
}

/// The type rule shared by the windowed ops: a floating operand and the
/// window, strides and padding attributes over all its axes.
Window inferPool(const InferCtx& c, const Type& x) {
  if (!is_floating(x.dtype)) c.fail("expected a floating-point operand, got {}", x.str());
  const std::vector<int64_t> ones(x.shape.size(), 1);
  auto g = geometry(x.shape, c.ints("window"), c.ints("strides"), c.ints("padding"), ones, ones);
  if (auto* m = std::get_if<std::string>(&g)) c.fail("{} (operand {})", *m, x.str());
  if (c.ints("window").size() != x.shape.size())
    c.fail("window must have {} entries, got {}", x.shape.size(), c.ints("window").size());
  return std::get<Window>(std::move(g));
}

/// The pooling ops' attributes as the Tensor API's options.
WindowOptions windowOptions(const ir::Attrs& a) {
  WindowOptions o;
  o.strides = a.ints("strides");
  const auto& p = a.ints("padding");
  for (std::size_t i = 0; i + 1 < p.size(); i += 2) o.padding.pairs.emplace_back(p[i], p[i + 1]);
  o.padding.mode.clear();
  return o;
}

/// conv's attributes as the Tensor API's options.
ConvOptions convOptions(const ir::Attrs& a) {
  ConvOptions o;
  o.strides = a.ints("strides");
  const auto& p = a.ints("padding");
  o.padding.mode.clear();
  for (std::size_t i = 0; i + 1 < p.size(); i += 2) o.padding.pairs.emplace_back(p[i], p[i + 1]);
  o.lhs_dilation = a.ints("lhs_dilation");
  o.rhs_dilation = a.ints("rhs_dilation");
  o.feature_group_count = a.integer("feature_group_count");
  return o;
}

/// x reversed along axes [2, rank): the kernel of a transposed convolution.
Tensor flipSpatial(Tensor x) {
  const Shape s = x.shape();
  for (std::size_t d = 2; d < s.size(); ++d) {
    const int64_t n = s[d];
    Tensor idx = full({n}, static_cast<double>(n - 1), DType::i32) - iota({n}, 0, DType::i32);
    x = take(x, idx, static_cast<int64_t>(d));
  }
  return x;
}

/// Permutation moving axes 0 and 1 of a rank-r tensor past each other.
std::vector<int64_t> swap01(std::size_t r) {
  std::vector<int64_t> p(r);
  std::iota(p.begin(), p.end(), 0);
  std::swap(p[0], p[1]);
  return p;
}

/// `head` followed by s[from:].
Shape joinShape(std::initializer_list<int64_t> head, const Shape& s, std::size_t from) {
  Shape r(head);
  r.insert(r.end(), s.begin() + static_cast<std::ptrdiff_t>(from), s.end());
  return r;
}

/// conv's batching rule (JAX's _conv_general_dilated_batch_rule, in
/// PyTorch's layout), every case one conv and exact (the same products and
/// sums per output element):
/// - only x batched, [B, N, C, s...]: the batch folds into the images, [B·N, C, s...];
/// - only the kernel, [B, O, C/G, k...]: the batch folds into the output
///   channels, group-major ([G, B, O/G] flattened, so each group's channels
///   stay together), the result's channels unfolded back;
/// - both: the batch folds into the groups: x as [N, B·C, s...] and the
///   kernel as [B·O, C/G, k...] with B·G groups (example b's channels are
///   groups b·G .. b·G + G - 1 of both).
/// Moving the batch past N is a reshape when N = 1 (one image per example).
void batchConv(const batching::BatchCtx& c) {
  using batching::permuteAxes;
  const Shape &xs = c.type(0).shape, &ks = c.type(1).shape, &rs = c.resultType().shape;
  const int64_t B = c.size, N = xs[0], C = xs[1], O = ks[0], G = c.op.attrs.integer("feature_group_count"), Og = O / G;
  const int64_t r = static_cast<int64_t>(xs.size()); // per-example rank
  auto identityFrom = [&](int64_t from, int64_t to, std::vector<int64_t> p) {
    for (int64_t d = from; d < to; ++d) p.push_back(d);
    return p;
  };
  if (!c.batched(1)) {
    const Tensor x = reshape(c.x(0), joinShape({B * N}, xs, 1));
    const Tensor y = c.reapply({x, c.x(1)}).at(0);
    return c.result(0, reshape(y, joinShape({B, N}, rs, 1)));
  }
  if (!c.batched(0)) {
    // kernel [B, G, Og, Cg, k...] -> [G, B, Og, Cg, k...] -> [G·B·Og, Cg, k...]
    const Tensor k5 = reshape(c.x(1), joinShape({B, G, Og}, ks, 1));
    const Tensor k = reshape(permuteAxes(k5, identityFrom(2, r + 2, {1, 0})), joinShape({G * B * Og}, ks, 1));
    const Tensor y = c.reapply({c.x(0), k}).at(0); // [N, G·B·Og, q...]
    // [N, G, B, Og, q...] -> [B, N, G, Og, q...] -> [B, N, O, q...]
    const Tensor y5 = reshape(y, joinShape({N, G, B, Og}, rs, 2));
    return c.result(0, reshape(permuteAxes(y5, identityFrom(3, r + 2, {2, 0, 1})), joinShape({B}, rs, 0)));
  }
  // x [B, N, C, s...] -> [N, B·C, s...]; kernel [B·O, Cg, k...]; B·G groups.
  const Tensor x = reshape(permuteAxes(c.x(0), identityFrom(2, r + 1, {1, 0})), joinShape({N, B * C}, xs, 2));
  const Tensor k = reshape(c.x(1), joinShape({B * O}, ks, 1));
  ir::Attrs attrs = c.op.attrs;
  attrs.set("feature_group_count", B * G);
  const Tensor y = c.reapply({x, k}, attrs).at(0); // [N, B·O, q...]
  c.result(0, permuteAxes(reshape(y, joinShape({N, B, O}, rs, 2)), identityFrom(2, r + 1, {1, 0})));
}

/// The pooling ops' batching rule: their window covers every axis, so the
/// batch is one more axis with a window of 1, stride 1 and no padding
/// (exact: each window reads one example). Unbatched operands broadcast.
void batchPool(const batching::BatchCtx& c) {
  ir::Attrs attrs = batching::prependDim(batching::prependDim(c.op.attrs, "window", 1), "strides", 1);
  std::vector<int64_t> padding = c.op.attrs.ints("padding");
  padding.insert(padding.begin(), {0, 0});
  attrs.set("padding", padding);
  std::vector<Tensor> xs;
  for (std::size_t i = 0; i < c.arity(); ++i) xs.push_back(c.bx(i));
  c.result(0, c.reapply(xs, attrs).at(0));
}

} // namespace

void defineConvOps(Table& t) {
  // conv(x, kernel) {strides, padding, lhs_dilation, rhs_dilation, feature_group_count}:
  //   r[n, o, q...] = sum_{c < C/G, k...} x̃[n, g·C/G + c, q·strides + k·rhs_dilation - lo] · kernel[o, c, k...]
  // with g = o / (O/G) and x̃ the input dilated by lhs_dilation (zeros between
  // elements) and zero-padded by padding's (lo, hi) pairs (negative: cropped).
  set(t, OpKind::Conv, {
      .infer = [](const InferCtx& c) {
        const Type &x = c.operands[0], &k = c.operands[1];
        c.expectSameDtype(x, k);
        c.expectFloat(0);
        if (x.rank() < 3 || k.rank() != x.rank())
          c.fail("expected an input [N, C, spatial...] and a kernel [O, C/groups, spatial...] of equal rank >= 3, got {} and {}",
                 x.str(), k.str());
        const int64_t groups = c.integer("feature_group_count");
        if (groups < 1) c.fail("feature_group_count must be positive, got {}", groups);
        if (x.shape[1] % groups != 0 || k.shape[0] % groups != 0)
          c.fail("feature_group_count {} must divide the input's channels ({}) and the kernel's outputs ({})", groups,
                 x.shape[1], k.shape[0]);
        if (k.shape[1] * groups != x.shape[1])
          c.fail("the kernel {} takes {} channels per group, but the input {} has {} channels in {} group(s)", k.str(),
                 k.shape[1], x.str(), x.shape[1], groups);
        auto g = geometry(spatial(x.shape), spatial(k.shape), c.ints("strides"), c.ints("padding"), c.ints("lhs_dilation"),
                          c.ints("rhs_dilation"));
        if (auto* m = std::get_if<std::string>(&g)) c.fail("{} (input {}, kernel {})", *m, x.str(), k.str());
        Shape out{x.shape[0], k.shape[0]};
        for (int64_t o : std::get<Window>(g).out) out.push_back(o);
        return std::vector<Type>{Type{x.dtype, out}};
      },
      .eval = [](const EvalCtx& c) {
        const Array &x = c.args[0], &k = c.args[1];
        const Window w = convWindow(x.shape(), k.shape(), c.op.attrs);
        const int64_t groups = c.op.attrs.integer("feature_group_count");
        const int64_t N = x.shape()[0], C = x.shape()[1], O = k.shape()[0], Cg = k.shape()[1], Og = O / groups;
        const int64_t inSize = num_elements(Shape(w.in.begin(), w.in.end())), taps = w.taps(), P = w.outs();
        const Shape out(w.out.begin(), w.out.end());
        Array r(c.resultType());
        dispatch(x.dtype(), [&](auto tag) {
          using T = decltype(tag);
          if constexpr (std::is_floating_point_v<T>) {
            const T *X = elems<T>(x), *K = elems<T>(k);
            T* R = elems<T>(r);
            for (int64_t q = 0; q < P; ++q) {
              const std::vector<int64_t> oi = unravel(q, out);
              for (int64_t n = 0; n < N; ++n)
                for (int64_t o = 0; o < O; ++o) {
                  const int64_t g = o / Og;
                  T s{};
                  for (int64_t ci = 0; ci < Cg; ++ci)
                    forEachTap(w, oi, [&](int64_t j, int64_t i) {
                      s += X[(n * C + g * Cg + ci) * inSize + i] * K[(o * Cg + ci) * taps + j];
                    });
                  R[(n * O + o) * P + q] = s;
                }
            }
          }
        });
        return std::vector<Array>{std::move(r)};
      },
      .fold = noFold,
      .lower = [](LowerCtx& c) {
        convwindow::lowerConv(c, convWindow(c.operandType(0).shape, c.operandType(1).shape, c.op.attrs),
                        c.op.attrs.integer("feature_group_count"));
      },
      // The epilogue's tiles: matrices are images, rows output channels, columns positions (all spatial axes).
      .tileGrid = [](std::span<const Type>, const ir::Attrs&, const codegen::VectorUnit&) {
        return std::pair<int64_t, int64_t>{0, 0}; // no reducing epilogue: the lowering's tiles vary by path
      },
      .tileColumnAxes = [](const Type& result, const ir::Attrs&) -> std::size_t { return static_cast<std::size_t>(result.rank()) - 2; },
      // d conv(x, k) = conv(dx, k) + conv(x, dk)
      .jvp = autodiff::bilinearJvp,
      // As XLA's: dx = conv(dy dilated by the strides, the kernel flipped in
      // space with its in and out channels swapped per group); dk = a
      // correlation of x with dy, the batch axis contracted (x's channels are
      // the batch of that conv, dy's images its kernel's input channels, the
      // forward's strides its rhs_dilation, with the groups kept apart by
      // putting them ahead of the images in x's channel axis).
      .vjp = [](const autodiff::VjpCtx& c) {
        const Tensor x = c.x(0), k = c.x(1);
        const Shape xs = x.shape(), ks = k.shape();
        const Window w = convWindow(xs, ks, c.op.attrs);
        const ConvOptions f = convOptions(c.op.attrs);
        const int64_t G = f.feature_group_count, N = xs[0], C = xs[1], O = ks[0], Cg = ks[1], Og = O / G;
        const std::size_t r = xs.size(), sd = r - 2;
        const Shape kSp = spatial(ks), xSp = spatial(xs);
        c.grad(0, [&] {
          // kernel [G·Og, Cg, k] -> [G·Cg, Og, k], flipped
          std::vector<int64_t> split{G, Og, Cg}, perm{0, 2, 1};
          for (std::size_t d = 0; d < sd; ++d) {
            split.push_back(kSp[d]);
            perm.push_back(static_cast<int64_t>(3 + d));
          }
          std::vector<int64_t> joined{C, Og};
          joined.insert(joined.end(), kSp.begin(), kSp.end());
          Tensor kt = flipSpatial(reshape(transpose(reshape(k, split), perm), joined));
          ConvOptions o;
          o.strides = f.lhs_dilation;
          o.lhs_dilation = f.strides;
          o.rhs_dilation = f.rhs_dilation;
          o.feature_group_count = G;
          o.padding.mode.clear();
          for (std::size_t d = 0; d < sd; ++d) {
            const int64_t dk = dilated(w.k[d], w.rhsDil[d]), before = dk - 1 - w.lo[d];
            const int64_t after = dilated(w.in[d], w.lhsDil[d]) + dk - 1 - dilated(w.out[d], w.stride[d]) - before;
            o.padding.pairs.emplace_back(before, after);
          }
          return conv(c.dy(), kt, o);
        });
        c.grad(1, [&] {
          // x [N, G·Cg, s] -> [Cg, G·N, s]; dy [N, G·Og, q] -> [G·Og, N, q]
          std::vector<int64_t> split{N, G, Cg}, perm{2, 1, 0};
          for (std::size_t d = 0; d < sd; ++d) {
            split.push_back(xSp[d]);
            perm.push_back(static_cast<int64_t>(3 + d));
          }
          std::vector<int64_t> joined{Cg, G * N};
          joined.insert(joined.end(), xSp.begin(), xSp.end());
          Tensor lhs = reshape(transpose(reshape(x, split), perm), joined);
          Tensor rhs = transpose(c.dy(), swap01(r));
          ConvOptions o;
          o.strides = f.rhs_dilation;
          o.lhs_dilation = f.lhs_dilation;
          o.rhs_dilation = f.strides;
          o.feature_group_count = G;
          o.padding.mode.clear();
          for (std::size_t d = 0; d < sd; ++d) {
            const int64_t dk = dilated(w.k[d], w.rhsDil[d]);
            const int64_t hi = dilated(w.out[d], w.stride[d]) - dilated(w.in[d], w.lhsDil[d]) + dk - w.lo[d] - 1;
            o.padding.pairs.emplace_back(w.lo[d], hi);
          }
          return transpose(conv(lhs, rhs, o), swap01(r)); // [Cg, O, k] -> [O, Cg, k]
        });
      },
      .batch = batchConv,
      // r[n, o, q] = sum over c and k of x[n, g·C/G + c, tap k of q] · kernel[o, c, k]:
      // one term of two reads per channel and tap (coupling x with the kernel). Exact.
      .deps = [](const sparsity::SparsityCtx& c) {
        const Shape &xs = c.type(0).shape, &ks = c.type(1).shape;
        const Window w = convWindow(xs, ks, c.op.attrs);
        const int64_t groups = c.op.attrs.integer("feature_group_count");
        const int64_t N = xs[0], C = xs[1], O = ks[0], Cg = ks[1], Og = O / groups;
        const int64_t inSize = num_elements(Shape(w.in.begin(), w.in.end())), taps = w.taps(), P = w.outs();
        const Shape out(w.out.begin(), w.out.end());
        std::vector<std::pair<int64_t, int64_t>> read; // (tap, input element) of output position q
        for (int64_t q = 0; q < P; ++q) {
          read.clear();
          forEachTap(w, unravel(q, out), [&](int64_t j, int64_t i) { read.emplace_back(j, i); });
          for (int64_t n = 0; n < N; ++n)
            for (int64_t o = 0; o < O; ++o)
              for (int64_t ci = 0; ci < Cg; ++ci)
                for (const auto& [j, i] : read)
                  c.term(0, (n * O + o) * P + q,
                         {sparsity::Read{0, (n * C + o / Og * Cg + ci) * inSize + i}, sparsity::Read{1, (o * Cg + ci) * taps + j}});
        }
      },
  });

  // reduce_window_sum(x) {window, strides, padding}: r[q...] = sum of the
  // window at q·strides - lo of x zero-padded by padding's (lo, hi) pairs.
  set(t, OpKind::ReduceWindowSum, {
      .infer = [](const InferCtx& c) {
        const Window w = inferPool(c, c.operands[0]);
        return std::vector<Type>{Type{c.operands[0].dtype, Shape(w.out.begin(), w.out.end())}};
      },
      .eval = [](const EvalCtx& c) {
        const Window w = poolWindow(c.args[0].shape(), c.op.attrs);
        Array r(c.resultType());
        const Shape out(w.out.begin(), w.out.end());
        for (int64_t o = 0; o < r.size(); ++o) {
          double s = 0;
          forEachTap(w, unravel(o, out), [&](int64_t, int64_t i) { s += c.args[0].at(i); });
          r.set(o, s);
        }
        return std::vector<Array>{std::move(r)};
      },
      .fold = noFold,
      .lower = [](LowerCtx& c) {
        const Window w = poolWindow(c.operandType(0).shape, c.op.attrs);
        const DType t = c.resultType().dtype;
        Value* X = c.operandBuffer(0);
        Value* slot = c.scalarSlot(t);
        llvm::IRBuilder<>::FastMathFlagGuard guard(c.b);
        c.b.setFastMathFlags(c.reassocFlags());
        const Shape out(w.out.begin(), w.out.end());
        emitWindows(
            c, w, [&](const Index&) { c.b.CreateStore(c.constant(t, 0), slot); },
            [&](Value* valid, Value* i) {
              Value* v = c.b.CreateSelect(valid, c.load(t, X, i), c.constant(t, 0));
              c.b.CreateStore(c.b.CreateFAdd(c.b.CreateLoad(c.scalarType(t), slot), v), slot);
            },
            [&](const Index& o) { c.store(t, c.b.CreateLoad(c.scalarType(t), slot), c.results[0], c.linear(o, out)); });
      },
      .jvp = autodiff::linearJvp,
      // dx[i] = sum of dy over the windows that read i: dy dilated by the
      // strides, summed over windows of stride 1 padded by (window - 1 - lo, ...)
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] {
          const Window w = poolWindow(c.x(0).shape(), c.op.attrs);
          std::vector<int64_t> zero(w.rank(), 0), interior, window(w.k);
          WindowOptions o;
          o.strides.assign(w.rank(), 1);
          o.padding.mode.clear();
          for (std::size_t d = 0; d < w.rank(); ++d) {
            interior.push_back(w.stride[d] - 1);
            const int64_t before = w.k[d] - 1 - w.lo[d];
            o.padding.pairs.emplace_back(before, w.in[d] + w.k[d] - 1 - dilated(w.out[d], w.stride[d]) - before);
          }
          return reduce_window_sum(pad(c.dy(), zero, zero, interior), window, o);
        });
      },
      .batch = batchPool,
      // r[q] = the sum of window q: a term per element it reads. Exact.
      .deps = [](const sparsity::SparsityCtx& c) {
        const Window w = poolWindow(c.type(0).shape, c.op.attrs);
        const Shape out(w.out.begin(), w.out.end());
        for (int64_t o = 0; o < w.outs(); ++o)
          forEachTap(w, unravel(o, out), [&](int64_t, int64_t i) { c.term(0, o, {sparsity::Read{0, i}}); });
      },
  });

  // reduce_window_max(x) {window, strides, padding}: r[q...] = the maximum
  // of the window (padding is -inf; NaN wins, as in reduce_max).
  set(t, OpKind::ReduceWindowMax, {
      .infer = [](const InferCtx& c) {
        const Window w = inferPool(c, c.operands[0]);
        return std::vector<Type>{Type{c.operands[0].dtype, Shape(w.out.begin(), w.out.end())}};
      },
      .eval = [](const EvalCtx& c) {
        const Array& x = c.args[0];
        const Window w = poolWindow(x.shape(), c.op.attrs);
        Array r(c.resultType());
        dispatch(x.dtype(), [&](auto tag) {
          using T = decltype(tag);
          if constexpr (std::is_floating_point_v<T>) {
            const std::vector<int64_t> best = argmaxes(w, elems<T>(x));
            for (std::size_t o = 0; o < best.size(); ++o)
              elems<T>(r)[o] = best[o] < 0 ? -std::numeric_limits<T>::infinity() : elems<T>(x)[best[o]];
          }
        });
        return std::vector<Array>{std::move(r)};
      },
      .fold = noFold,
      .lower = [](LowerCtx& c) {
        const Window w = poolWindow(c.operandType(0).shape, c.op.attrs);
        const DType t = c.resultType().dtype;
        Value* X = c.operandBuffer(0);
        Value* slot = c.scalarSlot(t);
        const Shape out(w.out.begin(), w.out.end());
        emitWindows(
            c, w, [&](const Index&) { c.b.CreateStore(c.constant(t, -std::numeric_limits<double>::infinity()), slot); },
            [&](Value* valid, Value* i) {
              Value* v = c.load(t, X, i);
              Value* best = c.b.CreateLoad(c.scalarType(t), slot);
              Value* firstNaN = c.b.CreateAnd(c.b.CreateFCmpUNO(v, v), c.b.CreateFCmpORD(best, best));
              Value* better = c.b.CreateAnd(valid, c.b.CreateOr(c.b.CreateFCmpOGT(v, best), firstNaN));
              c.b.CreateStore(c.b.CreateSelect(better, v, best), slot);
            },
            [&](const Index& o) { c.store(t, c.b.CreateLoad(c.scalarType(t), slot), c.results[0], c.linear(o, out)); });
      },
      // d max = dx at the window's first maximum
      .jvp = [](const autodiff::JvpCtx& c) {
        if (auto d = c.dx(0)) c.tangent(0, select_and_gather_add(*d, c.x(0), c.op.attrs.ints("window"), windowOptions(c.op.attrs)));
      },
      // dx = dy routed to each window's first maximum (ties: the first in row-major order)
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] { return select_and_scatter_add(c.dy(), c.x(0), c.op.attrs.ints("window"), windowOptions(c.op.attrs)); });
      },
      .batch = batchPool,
      // r[q] reads every element of window q, coupling none: it picks one
      // (conservative, as reduce_max).
      .deps = [](const sparsity::SparsityCtx& c) { windowDeps(c, 0, 0, false); },
  });

  // select_and_scatter_add(s, x) {window, strides, padding}: zeros of x's
  // type, and s[q] added at the first maximum of x's window q (linear in s;
  // x only selects, so it gets no cotangent: piecewise constant in x).
  set(t, OpKind::SelectAndScatterAdd, {
      .infer = [](const InferCtx& c) {
        const Window w = inferPool(c, c.operands[1]);
        const Type want{c.operands[1].dtype, Shape(w.out.begin(), w.out.end())};
        if (c.operands[0] != want) c.fail("the source must have type {} (one element per window), got {}", want.str(), c.operands[0].str());
        return std::vector<Type>{c.operands[1]};
      },
      .eval = [](const EvalCtx& c) {
        const Array &s = c.args[0], &x = c.args[1];
        const Window w = poolWindow(x.shape(), c.op.attrs);
        Array r(c.resultType());
        dispatch(x.dtype(), [&](auto tag) {
          using T = decltype(tag);
          if constexpr (std::is_floating_point_v<T>) {
            const std::vector<int64_t> best = argmaxes(w, elems<T>(x));
            for (std::size_t o = 0; o < best.size(); ++o)
              if (best[o] >= 0) elems<T>(r)[best[o]] += elems<T>(s)[o];
          }
        });
        return std::vector<Array>{std::move(r)};
      },
      .fold = noFold,
      .lower = [](LowerCtx& c) {
        const Window w = poolWindow(c.operandType(1).shape, c.op.attrs);
        const Type& rt = c.resultType();
        const DType t = rt.dtype;
        Value *S = c.operandBuffer(0), *R = c.results[0];
        const Shape out(w.out.begin(), w.out.end());
        c.loop(num_elements(rt.shape), [&](Value* i) { c.store(t, c.constant(t, 0), R, i); });
        emitArgmaxes(c, w, [&](const Index& o, Value* best) {
          llvm::Function* f = c.b.GetInsertBlock()->getParent();
          auto* addBB = llvm::BasicBlock::Create(c.ctx(), "scatter.add", f);
          auto* contBB = llvm::BasicBlock::Create(c.ctx(), "scatter.cont", f);
          Value* s = c.load(t, S, c.linear(o, out));
          c.b.CreateCondBr(c.b.CreateICmpSGE(best, c.i64(0)), addBB, contBB);
          c.b.SetInsertPoint(addBB);
          c.store(t, c.b.CreateFAdd(c.load(t, R, best), s), R, best);
          c.b.CreateBr(contBB);
          c.b.SetInsertPoint(contBB);
        });
      },
      .jvp = [](const autodiff::JvpCtx& c) {
        if (auto d = c.dx(0)) c.tangent(0, select_and_scatter_add(*d, c.x(1), c.op.attrs.ints("window"), windowOptions(c.op.attrs)));
      },
      // ds[q] = dr at the first maximum of window q
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] { return select_and_gather_add(c.dy(), c.x(1), c.op.attrs.ints("window"), windowOptions(c.op.attrs)); });
      },
      .batch = batchPool,
      // s[q] lands on the first maximum of x's window q: exact when x is
      // known; else on any element of the window (conservative). x only selects.
      .deps = [](const sparsity::SparsityCtx& c) { windowDeps(c, 0, 1, true); },
  });

  // select_and_gather_add(t, x) {window, strides, padding}: r[q] = t at the
  // first maximum of x's window q (0 for a window of padding only); linear
  // in t, and x only selects.
  set(t, OpKind::SelectAndGatherAdd, {
      .infer = [](const InferCtx& c) {
        const Window w = inferPool(c, c.operands[1]);
        if (c.operands[0] != c.operands[1])
          c.fail("the tangent must have the operand's type {}, got {}", c.operands[1].str(), c.operands[0].str());
        return std::vector<Type>{Type{c.operands[1].dtype, Shape(w.out.begin(), w.out.end())}};
      },
      .eval = [](const EvalCtx& c) {
        const Array &s = c.args[0], &x = c.args[1];
        const Window w = poolWindow(x.shape(), c.op.attrs);
        Array r(c.resultType());
        dispatch(x.dtype(), [&](auto tag) {
          using T = decltype(tag);
          if constexpr (std::is_floating_point_v<T>) {
            const std::vector<int64_t> best = argmaxes(w, elems<T>(x));
            for (std::size_t o = 0; o < best.size(); ++o) elems<T>(r)[o] = best[o] < 0 ? T{} : elems<T>(s)[best[o]];
          }
        });
        return std::vector<Array>{std::move(r)};
      },
      .fold = noFold,
      .lower = [](LowerCtx& c) {
        const Window w = poolWindow(c.operandType(1).shape, c.op.attrs);
        const DType t = c.resultType().dtype;
        Value* S = c.operandBuffer(0);
        const Shape out(w.out.begin(), w.out.end());
        emitArgmaxes(c, w, [&](const Index& o, Value* best) {
          Value* found = c.b.CreateICmpSGE(best, c.i64(0));
          Value* v = c.load(t, S, c.b.CreateSelect(found, best, c.i64(0)));
          c.store(t, c.b.CreateSelect(found, v, c.constant(t, 0)), c.results[0], c.linear(o, out));
        });
      },
      .jvp = [](const autodiff::JvpCtx& c) {
        if (auto d = c.dx(0)) c.tangent(0, select_and_gather_add(*d, c.x(1), c.op.attrs.ints("window"), windowOptions(c.op.attrs)));
      },
      // dt = dr scattered to each window's first maximum
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] { return select_and_scatter_add(c.dy(), c.x(1), c.op.attrs.ints("window"), windowOptions(c.op.attrs)); });
      },
      .batch = batchPool,
      // r[q] = t at the first maximum of x's window q: exact when x is known;
      // else any element of the window (conservative). x only selects.
      .deps = [](const sparsity::SparsityCtx& c) { windowDeps(c, 0, 1, false); },
  });
}

} // namespace adjit::ops
