// ops/ConvWindow.h — what conv's op block (ops/Conv.cpp) and its lowering
// (ops/ConvLowering.cpp) share: the window's geometry, where a tap reads, and
// the lowering itself, which chooses among conv's kernels by shape.
#pragma once

#include "codegen/Emitter.h"

#include <utility>
#include <vector>

namespace adjit::ops::convwindow {

/// n elements dilated by d: (n - 1)·d + 1, or 0.
inline int64_t dilated(int64_t n, int64_t d) { return n == 0 ? 0 : (n - 1) * d + 1; }

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

/// Where tap `k` of output position `o` reads along axis d of the window:
/// {whether it reads an element, its index (0 when it does not)}.
std::pair<llvm::Value*, llvm::Value*> emitTap(const codegen::EmitBase& c, const Window& w, std::size_t d, llvm::Value* o, llvm::Value* k);

/// conv's `lower` hook: the result of conv over window w with `groups`
/// feature groups, by the kernel its shape class takes (ConvLowering.cpp).
void lowerConv(codegen::LowerCtx& c, const Window& w, int64_t groups);

} // namespace adjit::ops::convwindow
