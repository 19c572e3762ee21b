// ops/ConvLowering.cpp — conv's lowering (the op's `lower` hook in
// ops/Conv.cpp calls lowerConv): its four kernels, window dot
// (codegen/WindowDot.cpp), im2col + the generated matmul, correlation and
// direct loops, and the rule choosing among them by shape.
#include "codegen/Gemm.h"
#include "codegen/WindowDot.h"
#include "ops/ConvWindow.h"

#include <algorithm>

namespace adjit::ops::convwindow {
namespace {

using codegen::Index;
using codegen::LowerCtx;
using llvm::Value;

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
//    products too small for the packed kernel (by the matmul's rule). Not
//    the best choice everywhere: forced through im2col, small forward
//    convolutions ran 3.5-35x faster (f32, one thread, padding 1; N C H O K:
//    direct / im2col µs: 1 1 8 4 3 0.67 / 0.18-0.26, 4 1 12 6 5 86-88 /
//    2.5-3.0, 2 4 10 4 3 26-29 / 1.6-2.1, 1 8 6 8 3 16.5-16.8 / 0.77-0.94),
//    but with im2col for every product LeNet-5's forward+backward took
//    3.9-4.1 ms against 2.9 (PyTorch 4.0 in both; its gradients have
//    products of one row). A rule by shape is still to be measured.
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
// load 2): the batch-4 kernel gradient, 0.66-1.28x, is the close one. At
// load 3 (same bench, 20 minutes later), batch 32 / batch 4: forward 54 ms
// 0.52x / 6.7 ms 0.49x; kernel gradient alone 50 ms 0.27x / 6.1 ms 1.14x
// [1.10-1.17] (PyTorch's 5.2 ms: 178 GFLOP/s, adjit's 152 of a 217-233
// peak: the window dot's lanes are 56/64 used on rows of 56, and each row
// block's 24 accumulators are summed across their lanes); forward +
// backward 157 ms 0.75x [0.51-0.83] / 20 ms 0.79x [0.58-1.16]. Before
// the window-dot kernel, the kernel gradient took twice the input
// gradient's time (415-570 ms alone at batch 32, load 20), its im2col
// copying each input element 9 times in a loop whose innermost axis was
// the 3 output columns; forward + backward was 1.65-1.72x PyTorch.
// LeNet-5 (batch 64, 32×32), same runs, batch 32's / batch 4's: forward
// 1.15 ms 0.44x / 0.78 ms 0.34x; gradient 4.1 ms 0.73x [0.60-0.84] / 4.7 ms
// 0.74x [0.70-0.79]; at load 3, 2.8 ms 0.71x [0.61-0.73] (8.8 ms, 2.1x
// PyTorch's 4.1 at load 2 before the window dot, im2col by rows and the
// direct product for few rows).

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

} // namespace

void lowerConv(LowerCtx& c, const Window& w, int64_t groups) {
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
}

} // namespace adjit::ops::convwindow
