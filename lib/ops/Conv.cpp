// ops/Conv.cpp — convolution and windowed reductions. conv is XLA's
// conv_general_dilated in PyTorch's layout (input [N, C, spatial...], kernel
// [O, C/groups, spatial...], result [N, O, spatial...]); reduce_window_sum
// and reduce_window_max slide a window over every axis of their operand;
// select_and_scatter_add and select_and_gather_add route values to or from
// each window's first maximum (max pooling's derivatives).
#include "codegen/Emitter.h"
#include "codegen/Gemm.h"
#include "codegen/WindowDot.h"
#include "autodiff/JvpCtx.h"
#include "autodiff/VjpCtx.h"
#include "ops/Common.h"

#include <adjit/conv.h>

#include <limits>
#include <numeric>

namespace adjit::ops {
namespace {

using codegen::Index;
using codegen::LowerCtx;
using ir::EvalCtx;
using ir::InferCtx;
using llvm::Value;

int64_t dilated(int64_t n, int64_t d) { return n == 0 ? 0 : (n - 1) * d + 1; }

/// A window sliding along some axes: output position o and tap k read the
/// input at p = o·stride + k·rhsDil - lo of the input dilated by lhsDil
/// (lhsDil - 1 zeros between elements) and padded by lo and hi; a p that
/// lands in padding or between dilated elements reads zero (or nothing).
struct Window {
  std::vector<int64_t> in, k, out, stride, lo, hi, lhsDil, rhsDil;
  std::size_t rank() const { return in.size(); }
  int64_t taps() const { return num_elements(Shape(k.begin(), k.end())); }
  int64_t outs() const { return num_elements(Shape(out.begin(), out.end())); }
};

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

/// Where tap `k` of output position `o` reads along axis d of the window:
/// {whether it reads an element, its index (0 when it does not)}.
std::pair<Value*, Value*> emitTap(const codegen::EmitBase& c, const Window& w, std::size_t d, Value* o, Value* k) {
  Value* p = c.b.CreateSub(c.b.CreateAdd(c.b.CreateMul(o, c.i64(w.stride[d])), c.b.CreateMul(k, c.i64(w.rhsDil[d]))),
                           c.i64(w.lo[d]));
  Value* valid = c.b.CreateICmpULT(p, c.i64(dilated(w.in[d], w.lhsDil[d]))); // unsigned: p < 0 fails too
  if (w.lhsDil[d] > 1) {
    valid = c.b.CreateAnd(valid, c.b.CreateICmpEQ(c.b.CreateURem(p, c.i64(w.lhsDil[d])), c.i64(0)));
    p = c.b.CreateUDiv(p, c.i64(w.lhsDil[d]));
  }
  return {valid, c.b.CreateSelect(valid, p, c.i64(0))};
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

// Convolution's lowering.
//
// Four kernels, by shape class, each with its own rule (useWindowDot, or
// the generated matmul's usePackedGemm) deciding between it and plain loops:
//  - window dot (codegen/WindowDot.cpp, useWindowDot): a window wider than
//    its few outputs, no lhs dilation, none along the window's last axis —
//    the kernel gradient of a stride-1 conv — as dot products along the
//    window's rows, lanes over its last axis, K's and X's rows read in place
//    (no im2col matrix, no packing, no transposing copy). Measured against
//    the correlation kernel below (bench/conv_bench.cpp, one thread, Zen 5
//    AVX-512 host shared, load 3-4): the ResNet 3×3 kernel gradient at
//    batch 4 22.4 ms -> 5.8-10.4 ms (PyTorch 1.13 in the same rounds: 5.2-9.7
//    ms, its own times varying 2x between rounds; im2col filling [taps,
//    images·9] column by column in a loop of 3 was 43% of the old time, its
//    product 25%, packing that matrix again 8%); LeNet-5's first kernel
//    gradient (x [64, 1, 32, 32]) 2.9 -> 0.22 ms, its second 0.89 -> 0.65 ms.
//  - im2col: per image (or chunk of images, imagesPerProduct) and group, the
//    window's taps copied into a matrix in the workspace (rows: channel and
//    tap; columns: output positions), then the packed matmul of
//    codegen/Gemm.cpp multiplies the kernel by it, writing the result rows in
//    place. A 1×1 convolution without stride, padding or dilation reads the
//    input as that matrix directly. Forward convolutions and input gradients.
//  - correlation (correlationChannels): a window wider than its few outputs
//    that the window dot does not take (the gradient of a strided conv):
//    one product over all images' positions, a few channels deep at a time,
//    the channels' products summed.
//  - direct: per output element a sum over the group's channels and the
//    window's taps (padding and dilation holes skipped by a select), for
//    products too small for the packed kernel (by the matmul's rule; not
//    measured against im2col at those sizes).
// A tile epilogue (bias, activation: kTileEpilogue, tiles [image][output
// channel][positions]) runs on each micro-tile inside the matmul in the
// per-image im2col kernel, and on each image's rows once final in the others.
// Measured (bench/conv_bench.cpp: PyTorch 1.13 (oneDNN) in a child process
// taking turns with adjit on the same inputs, and an im2col + OpenBLAS sgemm
// loop, every side in turn each round; one thread, f32, a 2-core Zen 5
// AVX-512 host shared with builds, load 4.7-5.4; medians of 5 rounds at
// batch 32, 9 at batch 4, ratios the median [quartiles] of the rounds'):
// ResNet 3×3 64→64 56×56, batch 32 / batch 4, adjit / PyTorch:
//   forward                 94 ms 0.53x [0.53-0.55] / 11 ms 0.36x [0.29-0.50]
//   input gradient alone    92 ms 0.54x [0.52-0.55] / 11 ms 0.47x [0.44-0.50]
//   kernel gradient alone   83 ms 0.29x [0.27-0.29] / 9.7 ms 0.97x [0.66-1.28]
//   both gradients         178 ms 0.39x [0.39-0.39] / 22 ms 0.47x [0.42-0.69]
//   forward + backward     244 ms 0.49x [0.39-0.59] / 31 ms 0.78x [0.50-1.09]
//   + bias + relu           97 ms 0.53x [0.50-0.64] (0.62x the sgemm loop + a pass)
// PyTorch's own times vary most with the load (2-3x those of a quiet
// machine at batch 32, where its forward took 62 ms against adjit's 71 at
// load 2): the batch-4 kernel gradient, 0.66-1.28x, is the close one. Before
// the window-dot kernel, the kernel gradient took twice the input
// gradient's time (415-570 ms alone at batch 32, load 20), its im2col
// copying each input element 9 times in a loop whose innermost axis was
// the 3 output columns; forward + backward was 1.65-1.72x PyTorch.
// LeNet-5 (batch 64, 32×32), same runs, batch 32's / batch 4's: forward
// 1.15 ms 0.44x / 0.78 ms 0.34x; gradient 4.1 ms 0.73x [0.60-0.84] / 4.7 ms
// 0.74x [0.70-0.79] (8.8 ms, 2.1x PyTorch's 4.1 at load 2 before the
// window dot, im2col by rows and the direct product for few rows).

/// The tile epilogue, if any, on images [first, first + count) of the
/// result, rows (output channels) [row0, row0 + rows) of each, all columns
/// (positions), once their values are final in the result's buffer.
void callEpilogueOnImages(LowerCtx& c, Value* first, int64_t count, Value* row0, int64_t rows) {
  if (!c.epilogue) return;
  const Shape& rs = c.resultType().shape;
  const int64_t O = rs[1], P = num_elements(Shape(rs.begin() + 2, rs.end()));
  c.loop(count, [&](Value* i) {
    Value* image = c.b.CreateAdd(first, i);
    Value* at = c.b.CreateMul(c.b.CreateAdd(c.b.CreateMul(image, c.i64(O)), row0), c.i64(P));
    c.callEpilogue(image, row0, c.b.CreateAdd(row0, c.i64(rows)), c.i64(0), c.i64(P),
                   c.b.CreateInBoundsGEP(c.scalarType(c.resultType().dtype), c.results[0], at), c.i64(P));
  });
}

/// `c` without its epilogue: for products whose tiles are not yet final.
LowerCtx withoutEpilogue(const LowerCtx& c) {
  LowerCtx plain = c;
  plain.epilogue = plain.epilogueCtx = nullptr;
  return plain;
}

void lowerConvDirect(LowerCtx& c, const Window& w, int64_t groups) {
  const Type& rt = c.resultType();
  const DType t = rt.dtype;
  const Shape &xs = c.operandType(0).shape, &ks = c.operandType(1).shape;
  const int64_t C = xs[1], Cg = ks[1], Og = ks[0] / groups, taps = w.taps();
  Value *X = c.operandBuffer(0), *K = c.operandBuffer(1), *R = c.results[0];
  Value* slot = c.scalarSlot(t);
  llvm::IRBuilder<>::FastMathFlagGuard guard(c.b);
  c.b.setFastMathFlags(c.reassocFlags());
  Shape inner{Cg};
  inner.insert(inner.end(), w.k.begin(), w.k.end());
  c.loopNest(rt.shape, [&](const Index& oi) {
    const std::vector<Value*> o = c.dims(oi, rt.shape);
    Value* g = c.b.CreateUDiv(o[1], c.i64(Og));
    c.b.CreateStore(c.constant(t, 0), slot);
    c.loopNest(inner, [&](const Index& ii) {
      const std::vector<Value*> k = c.dims(ii, inner);
      Value* valid = c.b.getTrue();
      // x[n, g·Cg + ci, p...] and kernel[o, ci, k...]
      Value* xi = c.b.CreateAdd(c.b.CreateMul(o[0], c.i64(C)), c.b.CreateAdd(c.b.CreateMul(g, c.i64(Cg)), k[0]));
      for (std::size_t d = 0; d < w.rank(); ++d) {
        auto [v, p] = emitTap(c, w, d, o[2 + d], k[1 + d]);
        valid = c.b.CreateAnd(valid, v);
        xi = c.b.CreateAdd(c.b.CreateMul(xi, c.i64(w.in[d])), p);
      }
      Value* ki = c.b.CreateAdd(c.b.CreateMul(o[1], c.i64(Cg * taps)), c.linear(ii, inner));
      Value* xv = c.b.CreateSelect(valid, c.load(t, X, xi), c.constant(t, 0));
      Value* acc = c.b.CreateLoad(c.scalarType(t), slot);
      c.b.CreateStore(c.intrinsic(llvm::Intrinsic::fmuladd, {{xv, c.load(t, K, ki), acc}}), slot);
    });
    c.store(t, c.b.CreateLoad(c.scalarType(t), slot), R, c.linear(oi, rt.shape));
  });
  callEpilogueOnImages(c, c.i64(0), rt.shape[0], c.i64(0), rt.shape[1]);
}

/// Whether conv's window reads its input as it is (1×1, no stride, padding or dilation).
bool pointwise(const Window& w) {
  for (std::size_t d = 0; d < w.rank(); ++d)
    if (w.k[d] != 1 || w.stride[d] != 1 || w.lo[d] != 0 || w.hi[d] != 0 || w.lhsDil[d] != 1) return false;
  return true;
}

/// How many images one product covers: all columns of one image when it
/// has enough output positions, else several images side by side (a kernel
/// gradient's few positions: 9 per image for a 3×3 kernel), so the matmul
/// has columns to fill its tiles and packs the shared kernel once per chunk.
/// A divisor of the batch, its im2col matrix within kChunkBytes.
int64_t imagesPerProduct(int64_t batch, int64_t positions, int64_t rows, std::size_t elem) {
  constexpr int64_t kWideEnough = 256, kChunkBytes = 16 << 20;
  if (positions >= kWideEnough || positions == 0) return 1;
  int64_t chunk = std::min(batch, (kWideEnough + positions - 1) / positions);
  while (chunk > 1 && (batch % chunk != 0 || chunk * positions * rows * static_cast<int64_t>(elem) > kChunkBytes)) --chunk;
  return std::max<int64_t>(chunk, 1);
}

/// The im2col matrix of images [first, first + chunk) and the group's
/// channels from channel0 (rows (ci, k...), columns (image, o...)), a row of
/// its last axis at a time, that axis without lhs dilation: the taps that
/// read an input element are one run of the output positions, [a, b), copied
/// from the input row (a contiguous copy LLVM vectorises, at stride 1); the
/// positions left and right of it read padding, and the rows whose other
/// axes read padding are zeros. Measured on LeNet-5's second input gradient
/// (a 5×5 window over 14×14 positions padded by 4, rows of 14), one thread:
/// filled element by element, each position's tap tested (LLVM vectorised
/// the loops into gathers and scatters), the gradient took 4.9 ms; filled
/// by rows in three loops (zeros, copy, zeros), 2.7 ms, about half of it
/// the product (1.4 ms once the product of 6 rows went direct: Gemm.cpp).
void fillIm2colRows(LowerCtx& c, const Window& w, Value* X, Value* col, Value* first, Value* channel0, int64_t C, int64_t Cg,
                    int64_t chunk) {
  const DType t = c.resultType().dtype;
  const std::size_t r = w.rank();
  const int64_t ox = w.out[r - 1], s = w.stride[r - 1], d = w.rhsDil[r - 1], lo = w.lo[r - 1], in = w.in[r - 1];
  Shape rows{Cg}; // [ci, k..., image, o... but the last]: the row's linear index times ox is its column 0
  rows.insert(rows.end(), w.k.begin(), w.k.end());
  rows.push_back(chunk);
  rows.insert(rows.end(), w.out.begin(), w.out.end() - 1);
  llvm::Type* elem = c.scalarType(t);
  // Rows of up to 2 vectors are written with masked vector loads and stores
  // (AVX and later; LeNet-5's second input gradient, rows of 14: 1.4 -> 0.8
  // ms), longer ones by loops LLVM vectorises (rows of 56, the ResNet 3×3
  // forward: masked / loops 1.02-1.04x, quartiles 0.84-1.38 at load 5, so
  // the loops stay).
  const int64_t vlanes = std::max<int64_t>(1, int64_t(c.vectorUnit().bits) / 8 / int64_t(size_of(t)));
  const int64_t lanes = c.vectorUnit().bits >= 256 && ox <= 2 * vlanes ? vlanes : 1;
  c.loopNest(rows, [&](const Index& ri) {
    const std::vector<Value*> q = c.dims(ri, rows);
    Value* valid = c.b.getTrue();
    Value* image = c.b.CreateAdd(first, q[1 + r]);
    Value* xi = c.b.CreateAdd(c.b.CreateAdd(c.b.CreateMul(image, c.i64(C)), channel0), q[0]);
    for (std::size_t a = 0; a + 1 < r; ++a) {
      auto [v, p] = emitTap(c, w, a, q[2 + r + a], q[1 + a]);
      valid = c.b.CreateAnd(valid, v);
      xi = c.b.CreateAdd(c.b.CreateMul(xi, c.i64(w.in[a])), p);
    }
    Value* src = c.b.CreateMul(xi, c.i64(in)); // the input row (element 0 of the last axis)
    Value* dst = c.b.CreateInBoundsGEP(elem, col, c.b.CreateMul(c.linear(ri, rows), c.i64(ox)));
    // positions o with 0 <= o·s + kx·d - lo < in: [a, b), clamped to [0, ox]
    Value* shift = c.b.CreateSub(c.b.CreateMul(q[r], c.i64(d)), c.i64(lo)); // kx·d - lo
    Value* need = c.b.CreateSub(c.i64(0), shift);                           // o·s >= -shift
    Value* a = c.b.CreateSelect(c.b.CreateICmpSGT(need, c.i64(0)), c.b.CreateUDiv(c.b.CreateAdd(need, c.i64(s - 1)), c.i64(s)), c.i64(0));
    Value* last = c.b.CreateSub(c.i64(in - 1), shift); // o·s <= in - 1 - shift
    Value* b = c.b.CreateSelect(c.b.CreateICmpSLT(last, c.i64(0)), c.i64(0), c.b.CreateAdd(c.b.CreateUDiv(last, c.i64(s)), c.i64(1)));
    b = c.b.CreateSelect(c.b.CreateICmpSLT(b, c.i64(ox)), b, c.i64(ox));
    a = c.b.CreateSelect(c.b.CreateICmpSLT(a, b), a, b);
    // a row that reads padding in another axis: all zeros
    a = c.b.CreateSelect(valid, a, c.i64(ox));
    b = c.b.CreateSelect(valid, b, c.i64(ox));
    Value* from = c.b.CreateAdd(src, shift);
    if (lanes > 1 && s == 1) {
      // A vector of the row at a time: lanes in [a, b) loaded from the input
      // row, the others zeros (a masked load reads none of them).
      auto* vt = llvm::FixedVectorType::get(elem, static_cast<unsigned>(lanes));
      std::vector<llvm::Constant*> iota;
      for (int64_t l = 0; l < lanes; ++l) iota.push_back(c.b.getInt64(static_cast<uint64_t>(l)));
      Value* lane = llvm::ConstantVector::get(iota);
      const llvm::Align align(size_of(t));
      for (int64_t v = 0; v < ox; v += lanes) {
        Value* at = c.b.CreateAdd(lane, c.b.CreateVectorSplat(static_cast<unsigned>(lanes), c.i64(v)));
        Value* in = c.b.CreateAnd(c.b.CreateICmpSGE(at, c.b.CreateVectorSplat(static_cast<unsigned>(lanes), a)),
                                  c.b.CreateICmpSLT(at, c.b.CreateVectorSplat(static_cast<unsigned>(lanes), b)));
        // lane 0's address may lie before the row (a masked lane): not inbounds
        Value* x = c.b.CreateMaskedLoad(vt, c.b.CreateGEP(elem, X, c.b.CreateAdd(from, c.i64(v))), align, in,
                                        llvm::Constant::getNullValue(vt));
        Value* out = c.b.CreateInBoundsGEP(elem, dst, c.i64(v));
        if (v + lanes <= ox) {
          c.b.CreateAlignedStore(x, out, align);
        } else {
          std::vector<llvm::Constant*> bits;
          for (int64_t l = 0; l < lanes; ++l) bits.push_back(c.b.getInt1(v + l < ox));
          c.b.CreateMaskedStore(x, out, align, llvm::ConstantVector::get(bits));
        }
      }
      return;
    }
    c.loopRange(c.i64(0), a, [&](Value* o) { c.store(t, c.constant(t, 0), dst, o); });
    c.loopRange(a, b, [&](Value* o) { c.store(t, c.load(t, X, c.b.CreateAdd(from, c.b.CreateMul(o, c.i64(s)))), dst, o); });
    c.loopRange(b, c.i64(ox), [&](Value* o) { c.store(t, c.constant(t, 0), dst, o); });
  });
}

void lowerConvIm2col(LowerCtx& c, const Window& w, int64_t groups, int64_t chunk, const codegen::GemmShape& gs) {
  const Type& rt = c.resultType();
  const DType t = rt.dtype;
  const Shape& xs = c.operandType(0).shape;
  const int64_t N = xs[0], C = xs[1], Cg = C / groups, O = rt.shape[1], Og = O / groups;
  const int64_t P = w.outs(), Kd = Cg * w.taps(), inSize = num_elements(Shape(w.in.begin(), w.in.end()));
  Value *X = c.operandBuffer(0), *K = c.operandBuffer(1), *R = c.results[0];
  llvm::Type* elem = c.scalarType(t);
  const bool direct = pointwise(w) && chunk == 1;
  const uint64_t gemmBytes = (codegen::gemmWorkspaceBytes(gs, c.vectorUnit(), c.parallel()) + 63) / 64 * 64;
  const uint64_t colBytes = direct ? 0 : (static_cast<uint64_t>(Kd * chunk * P) * size_of(t) + 63) / 64 * 64;
  const uint64_t tmpBytes = chunk > 1 ? static_cast<uint64_t>(Og * chunk * P) * size_of(t) : 0;
  Value* work = c.workspace(gemmBytes + colBytes + tmpBytes);
  Value* col = c.b.CreateConstInBoundsGEP1_64(c.b.getInt8Ty(), work, gemmBytes);
  Value* tmp = c.b.CreateConstInBoundsGEP1_64(c.b.getInt8Ty(), work, gemmBytes + colBytes);
  // rows (ci, k...), columns (image, o...): the loop nest's linear index is row · chunk·P + column
  Shape cols{Cg};
  cols.insert(cols.end(), w.k.begin(), w.k.end());
  cols.push_back(chunk);
  cols.insert(cols.end(), w.out.begin(), w.out.end());
  const std::size_t r = w.rank();
  c.loop(N / chunk, [&](Value* nc) {
    Value* first = c.b.CreateMul(nc, c.i64(chunk));
    c.loop(groups, [&](Value* g) {
      Value* channel0 = c.b.CreateMul(g, c.i64(Cg));
      Value* B = col;
      if (direct) {
        B = c.b.CreateInBoundsGEP(elem, X, c.b.CreateMul(c.b.CreateAdd(c.b.CreateMul(first, c.i64(C)), channel0), c.i64(inSize)));
      } else if (w.lhsDil[r - 1] == 1) {
        fillIm2colRows(c, w, X, col, first, channel0, C, Cg, chunk);
      } else {
        c.loopNest(cols, [&](const Index& ci) {
          const std::vector<Value*> d = c.dims(ci, cols);
          Value* valid = c.b.getTrue();
          Value* image = c.b.CreateAdd(first, d[1 + r]);
          Value* xi = c.b.CreateAdd(c.b.CreateAdd(c.b.CreateMul(image, c.i64(C)), channel0), d[0]);
          for (std::size_t a = 0; a < r; ++a) {
            auto [v, p] = emitTap(c, w, a, d[2 + r + a], d[1 + a]);
            valid = c.b.CreateAnd(valid, v);
            xi = c.b.CreateAdd(c.b.CreateMul(xi, c.i64(w.in[a])), p);
          }
          c.store(t, c.b.CreateSelect(valid, c.load(t, X, xi), c.constant(t, 0)), col, c.linear(ci, cols));
        });
      }
      Value* A = c.b.CreateInBoundsGEP(elem, K, c.b.CreateMul(g, c.i64(Og * Kd)));
      auto outRow = [&](Value* image, Value* o) { // R[image, g·Og + o, :]
        return c.b.CreateMul(c.b.CreateAdd(c.b.CreateMul(image, c.i64(O)), c.b.CreateAdd(c.b.CreateMul(g, c.i64(Og)), o)), c.i64(P));
      };
      Value* row0 = c.b.CreateMul(g, c.i64(Og));
      if (chunk == 1) // each micro-tile's epilogue runs on it in the matmul
        return codegen::emitPackedGemm(c, gs, A, B, c.b.CreateInBoundsGEP(elem, R, outRow(first, c.i64(0))), {first, row0});
      codegen::emitPackedGemm(withoutEpilogue(c), gs, A, B, tmp);
      const Shape moved{chunk, Og, P}; // tmp[o, image·P + q] -> R[first + image, g·Og + o, q]
      c.loopNest(moved, [&](const Index& mi) {
        const std::vector<Value*> d = c.dims(mi, moved);
        Value* from = c.b.CreateAdd(c.b.CreateMul(d[1], c.i64(chunk * P)), c.b.CreateAdd(c.b.CreateMul(d[0], c.i64(P)), d[2]));
        c.store(t, c.load(t, tmp, from), R, c.b.CreateAdd(outRow(c.b.CreateAdd(first, d[0]), d[1]), d[2]));
      });
      callEpilogueOnImages(c, first, chunk, row0, Og);
    });
  });
}

/// The kernel gradient's shape class: a window wider than its few output
/// positions (conv's VJP in the kernel correlates x with dy: 9 positions of
/// a 56×56 window over each of 32 "channels", the forward's images). Per
/// image, the im2col matrix would copy every input element once per output
/// position and its product would be a thin [O, C·taps] × [C·taps, P]; the
/// product instead runs over all images at once (columns: image and
/// position) and over a few channels at a time (rows: channel and tap),
/// the channels' products summed. The number of channels per product (a
/// divisor of the group's, the im2col matrix within kChunkBytes, the
/// product's depth within kDeep: deeper gains nothing, the matmul blocks k
/// anyway), or 0 when the shape is not of this class or does not fit.
int64_t correlationChannels(int64_t batch, int64_t Cg, int64_t Og, int64_t taps, int64_t positions, std::size_t elem) {
  constexpr int64_t kWideEnough = 256, kChunkBytes = 16 << 20, kDeep = 4096;
  const int64_t cols = batch * positions, e = static_cast<int64_t>(elem);
  if (positions == 0 || positions >= kWideEnough || taps <= positions || cols < kWideEnough / 4 ||
      Og * cols * e > kChunkBytes || taps * cols * e > kChunkBytes)
    return 0;
  int64_t cc = std::max<int64_t>(1, std::min({Cg, kChunkBytes / (taps * cols * e), kDeep / taps}));
  while (Cg % cc != 0) --cc;
  return cc;
}

/// conv as the kernel gradient's shape class (correlationChannels): per
/// group, acc[o, (n, q)] = sum over chunks of cc channels of the group's
/// kernel rows for those channels (copied contiguous) times their im2col
/// matrix [(c, k), (n, q)]; then acc moved to R[n, g·Og + o, q].
void lowerConvCorrelation(LowerCtx& c, const Window& w, int64_t groups, int64_t cc, const codegen::GemmShape& gs) {
  const Type& rt = c.resultType();
  const DType t = rt.dtype;
  const Shape& xs = c.operandType(0).shape;
  const int64_t N = xs[0], C = xs[1], Cg = C / groups, O = rt.shape[1], Og = O / groups;
  const int64_t P = w.outs(), taps = w.taps(), Kd = Cg * taps, cols = N * P;
  Value *X = c.operandBuffer(0), *K = c.operandBuffer(1), *R = c.results[0];
  const uint64_t e = size_of(t);
  auto aligned = [](uint64_t b) { return (b + 63) / 64 * 64; };
  const uint64_t gemmBytes = aligned(codegen::gemmWorkspaceBytes(gs, c.vectorUnit(), c.parallel()));
  const uint64_t aBytes = aligned(static_cast<uint64_t>(Og * cc * taps) * e), bBytes = aligned(static_cast<uint64_t>(cc * taps * cols) * e);
  const uint64_t accBytes = aligned(static_cast<uint64_t>(Og * cols) * e);
  Value* work = c.workspace(gemmBytes + aBytes + bBytes + 2 * accBytes);
  auto at = [&](uint64_t offset) { return c.b.CreateConstInBoundsGEP1_64(c.b.getInt8Ty(), work, offset); };
  Value *A = at(gemmBytes), *B = at(gemmBytes + aBytes), *acc = at(gemmBytes + aBytes + bBytes),
        *part = at(gemmBytes + aBytes + bBytes + accBytes);
  llvm::IRBuilder<>::FastMathFlagGuard guard(c.b);
  c.b.setFastMathFlags(c.reassocFlags());
  const std::size_t r = w.rank();
  Shape rows{cc}; // B's loop nest [c, k..., n, q...]: its linear index is B's
  rows.insert(rows.end(), w.k.begin(), w.k.end());
  rows.push_back(N);
  rows.insert(rows.end(), w.out.begin(), w.out.end());
  c.loop(groups, [&](Value* g) {
    c.loop(Cg / cc, [&](Value* chunk) {
      Value* channel0 = c.b.CreateAdd(c.b.CreateMul(g, c.i64(Cg)), c.b.CreateMul(chunk, c.i64(cc)));
      // A[o, j] = K[g·Og + o, chunk·cc·taps + j]
      c.loopNest({Og, cc * taps}, [&](const Index& ai) {
        const std::vector<Value*> d = c.dims(ai, {Og, cc * taps});
        Value* from = c.b.CreateAdd(c.b.CreateMul(c.b.CreateAdd(c.b.CreateMul(g, c.i64(Og)), d[0]), c.i64(Kd)),
                                    c.b.CreateAdd(c.b.CreateMul(chunk, c.i64(cc * taps)), d[1]));
        c.store(t, c.load(t, K, from), A, c.linear(ai, {Og, cc * taps}));
      });
      c.loopNest(rows, [&](const Index& bi) {
        const std::vector<Value*> d = c.dims(bi, rows);
        Value* valid = c.b.getTrue();
        Value* xi = c.b.CreateAdd(c.b.CreateMul(d[1 + r], c.i64(C)), c.b.CreateAdd(channel0, d[0]));
        for (std::size_t a = 0; a < r; ++a) {
          auto [v, p] = emitTap(c, w, a, d[2 + r + a], d[1 + a]);
          valid = c.b.CreateAnd(valid, v);
          xi = c.b.CreateAdd(c.b.CreateMul(xi, c.i64(w.in[a])), p);
        }
        c.store(t, c.b.CreateSelect(valid, c.load(t, X, xi), c.constant(t, 0)), B, c.linear(bi, rows));
      });
      Value* first = c.b.CreateICmpEQ(chunk, c.i64(0));
      codegen::emitPackedGemm(withoutEpilogue(c), gs, A, B, c.b.CreateSelect(first, acc, part));
      // acc += part after the first chunk (a loop of no iterations on the first)
      c.loopRange(c.i64(0), c.b.CreateSelect(first, c.i64(0), c.i64(Og * cols)), [&](Value* i) {
        c.store(t, c.b.CreateFAdd(c.load(t, acc, i), c.load(t, part, i)), acc, i);
      });
    });
    const Shape moved{N, Og, P}; // acc[o, n·P + q] -> R[n, g·Og + o, q]
    c.loopNest(moved, [&](const Index& mi) {
      const std::vector<Value*> d = c.dims(mi, moved);
      Value* from = c.b.CreateAdd(c.b.CreateMul(d[1], c.i64(cols)), c.b.CreateAdd(c.b.CreateMul(d[0], c.i64(P)), d[2]));
      Value* to = c.b.CreateAdd(c.b.CreateMul(c.b.CreateAdd(c.b.CreateMul(d[0], c.i64(O)), c.b.CreateAdd(c.b.CreateMul(g, c.i64(Og)), d[1])),
                                            c.i64(P)),
                                d[2]);
      c.store(t, c.load(t, acc, from), R, to);
    });
    callEpilogueOnImages(c, c.i64(0), N, c.b.CreateMul(g, c.i64(Og)), Og);
  });
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
        const Window w = convWindow(c.operandType(0).shape, c.operandType(1).shape, c.op.attrs);
        const int64_t groups = c.op.attrs.integer("feature_group_count");
        const Type& rt = c.resultType();
        const int64_t rows = c.operandType(1).shape[1] * w.taps();
        const int64_t Og = rt.shape[1] / groups;
        if (std::all_of(w.lhsDil.begin(), w.lhsDil.end(), [](int64_t d) { return d == 1; })) {
          const codegen::WindowDotShape ws{rt.dtype, rt.shape[0], c.operandType(0).shape[1], groups, rt.shape[1],
                                           w.in, w.k, w.out, w.stride, w.lo, w.rhsDil};
          if (codegen::useWindowDot(ws, c.vectorUnit())) {
            codegen::emitWindowDot(c, ws, c.operandBuffer(0), c.operandBuffer(1), c.results[0]);
            return callEpilogueOnImages(c, c.i64(0), rt.shape[0], c.i64(0), rt.shape[1]);
          }
        }
        if (const int64_t cc = correlationChannels(rt.shape[0], c.operandType(1).shape[1], Og, w.taps(), w.outs(), size_of(rt.dtype))) {
          const codegen::GemmShape gs{rt.dtype, 1, Og, rt.shape[0] * w.outs(), cc * w.taps()};
          if (codegen::usePackedGemm(gs, c.vectorUnit())) return lowerConvCorrelation(c, w, groups, cc, gs);
        }
        const int64_t chunk = imagesPerProduct(rt.shape[0], w.outs(), rows, size_of(rt.dtype));
        const codegen::GemmShape gs{rt.dtype, 1, rt.shape[1] / groups, chunk * w.outs(), rows};
        if (gs.m > 0 && gs.n > 0 && gs.k > 0 && codegen::usePackedGemm(gs, c.vectorUnit()))
          return lowerConvIm2col(c, w, groups, chunk, gs);
        lowerConvDirect(c, w, groups);
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
