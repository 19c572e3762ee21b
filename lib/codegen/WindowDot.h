// codegen/WindowDot.h — a generated kernel for convolutions whose window is
// wider than its few outputs (conv's kernel gradient: a correlation of the
// input with the output's cotangent, the window as large as the image): dot
// products along the window's rows, vector lanes over the window's last axis,
// read where they lie (no im2col matrix, no packing). conv's lowering
// (ops/ConvLowering.cpp) calls it, as matmul's calls the packed product.
#pragma once

#include "codegen/Emitter.h"

namespace adjit::codegen {

/// R[b, o, q] = Σ_{c < C/G, t} X[b, g·C/G + c, p(q, t)] · K[o, c, t], with
/// g = o / (O/G) and p_d = q_d·stride_d + t_d·rhsDil_d − lo_d read where
/// 0 ≤ p_d < in_d (padding reads nothing): conv without lhs dilation, X
/// [batch, channels, in...], K [outputs, channels / groups, window...], R
/// [batch, outputs, out...], all row-major.
struct WindowDotShape {
  DType dtype;
  int64_t batch, channels, groups, outputs;
  std::vector<int64_t> in, window, out, stride, lo, rhsDil;
};

/// Whether the kernel takes s: floating, no lhs dilation (the caller's
/// check), no dilation along the window's last axis (its rows are read as
/// vectors), at most 8 outputs along that axis (one register tile holds
/// them all), rows of at least half a vector, and a window of more taps
/// than the outputs it slides over.
bool useWindowDot(const WindowDotShape& s, const VectorUnit& unit);

/// Emits R = the correlation of s at the insertion point.
void emitWindowDot(const LowerCtx& c, const WindowDotShape& s, llvm::Value* X, llvm::Value* K, llvm::Value* R);

} // namespace adjit::codegen
