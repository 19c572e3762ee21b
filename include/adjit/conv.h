// adjit/conv.h — convolution and pooling: XLA's general convolution and
// windowed reductions in PyTorch's layout (input [N, C, spatial...], kernel
// [O, C/groups, spatial...]), and torch.nn.functional's spellings (conv2d,
// max_pool2d, ...). See docs/guide/convolution.md.
#pragma once

#include <adjit/tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace adjit {

#define ADJIT_HERE std::source_location loc = std::source_location::current()

/// Padding of a convolution or a window along its spatial axes: "SAME"
/// (the output has ceil(input / stride) positions, the padding split evenly
/// with the odd element at the end, as XLA's), "VALID" (none), or explicit
/// (low, high) pairs, one per spatial axis (negative pairs crop).
struct Padding {
  /// "SAME", "VALID", or empty when `pairs` are given.
  std::string mode = "VALID";
  /// Explicit (low, high) pairs, one per spatial axis (when `mode` is empty).
  std::vector<std::pair<int64_t, int64_t>> pairs;
  /// No padding ("VALID").
  Padding() = default;
  /// "SAME" or "VALID".
  Padding(const char* m) : mode(m) {} // NOLINT: implicit, `.padding = "SAME"`
  /// "SAME" or "VALID".
  Padding(std::string m) : mode(std::move(m)) {} // NOLINT
  /// Explicit pairs: `.padding = {{1, 1}, {2, 0}}`.
  Padding(std::initializer_list<std::pair<int64_t, int64_t>> p) : mode(), pairs(p) {} // NOLINT
  /// Explicit pairs.
  Padding(std::vector<std::pair<int64_t, int64_t>> p) : mode(), pairs(std::move(p)) {} // NOLINT
};

/// Options of `conv`, as XLA's conv_general_dilated. Empty vectors mean 1 on
/// every spatial axis.
struct ConvOptions {
  /// The window's step along each spatial axis.
  std::vector<int64_t> strides;
  /// Padding of the (lhs-dilated) input.
  Padding padding;
  /// Input dilation: lhs_dilation - 1 zeros between input elements (a transposed convolution).
  std::vector<int64_t> lhs_dilation;
  /// Kernel dilation: lhs_dilation - 1 holes between kernel taps (atrous convolution).
  std::vector<int64_t> rhs_dilation;
  /// Groups: input channels and output channels split into this many groups, each convolved apart.
  int64_t feature_group_count = 1;
};

/// N-d convolution (a correlation, as in deep learning: the kernel is not
/// flipped) of x [N, C, spatial...] with kernel [O, C/groups, spatial...]:
/// r[n, o, q...] = sum over c, k of x̃[n, g·C/G + c, q·strides + k·rhs_dilation] · kernel[o, c, k]
/// with g = o / (O/G) and x̃ the dilated, padded input. Floating dtypes;
/// gradients in both operands, of any order.
Tensor conv(const Tensor& x, const Tensor& kernel, ConvOptions options = {}, ADJIT_HERE);

/// Options of `conv_transpose`. Empty vectors mean 1 (0 for output_padding).
struct ConvTransposeOptions {
  /// The forward convolution's strides (the output is this much larger).
  std::vector<int64_t> strides;
  /// The forward convolution's padding: explicit pairs or "VALID" give
  /// (in - 1)·stride + dilated kernel - low - high (+ output_padding)
  /// positions, as PyTorch's conv_transpose; "SAME" gives in·stride.
  Padding padding;
  /// Extra positions at the high end of each spatial axis (PyTorch's output_padding).
  std::vector<int64_t> output_padding;
  /// Kernel dilation.
  std::vector<int64_t> rhs_dilation;
  /// Groups, as conv's.
  int64_t feature_group_count = 1;
};

/// The transposed convolution (the gradient of `conv` with respect to its
/// input) of x [N, C_in, spatial...] with kernel [C_in, C_out/groups,
/// spatial...], PyTorch's conv_transpose layout.
Tensor conv_transpose(const Tensor& x, const Tensor& kernel, ConvTransposeOptions options = {}, ADJIT_HERE);

/// Options of the windowed reductions, over every axis of the operand.
struct WindowOptions {
  /// The window's step along each axis (empty: 1).
  std::vector<int64_t> strides;
  /// Padding: "SAME", "VALID" or (low, high) pairs, one per axis. Padded
  /// elements are the reduction's identity (0 for sum, -inf for max).
  Padding padding;
};

/// Sum of x over each window of size `window` (one entry per axis of x).
Tensor reduce_window_sum(const Tensor& x, const std::vector<int64_t>& window, WindowOptions options = {}, ADJIT_HERE);
/// Maximum of x over each window (NaN wins; -inf for a window of padding only).
Tensor reduce_window_max(const Tensor& x, const std::vector<int64_t>& window, WindowOptions options = {}, ADJIT_HERE);
/// reduce_window_sum or reduce_window_max by name: `reduction` is "sum" or "max".
Tensor reduce_window(const Tensor& x, std::string_view reduction, const std::vector<int64_t>& window,
                     WindowOptions options = {}, ADJIT_HERE);
/// Zeros shaped as x, with source[q] added at the first maximum (row-major
/// within the window) of x's window q: the gradient of reduce_window_max.
Tensor select_and_scatter_add(const Tensor& source, const Tensor& x, const std::vector<int64_t>& window,
                              WindowOptions options = {}, ADJIT_HERE);
/// t at the first maximum of each window of x (t shaped as x): the tangent
/// of reduce_window_max, and the transpose of select_and_scatter_add.
Tensor select_and_gather_add(const Tensor& t, const Tensor& x, const std::vector<int64_t>& window,
                             WindowOptions options = {}, ADJIT_HERE);

/// Options of `max_pool` and `avg_pool`, over the spatial axes.
struct PoolOptions {
  /// The window's step (empty: the window, as PyTorch's default).
  std::vector<int64_t> strides;
  /// Padding of the spatial axes.
  Padding padding;
  /// avg_pool: divide by the whole window, padding included (PyTorch's
  /// default), or by the number of input elements it covers.
  bool count_include_pad = true;
};

/// Max pooling of x [N, C, spatial...] over windows of the spatial axes;
/// its gradient goes to each window's first maximum.
Tensor max_pool(const Tensor& x, const std::vector<int64_t>& window, PoolOptions options = {}, ADJIT_HERE);
/// Average pooling of x [N, C, spatial...]: the window's sum over its size
/// (see PoolOptions::count_include_pad).
Tensor avg_pool(const Tensor& x, const std::vector<int64_t>& window, PoolOptions options = {}, ADJIT_HERE);

/// torch.nn.functional.conv{1,2,3}d's options; one entry applies to every
/// spatial axis.
struct TorchConvOptions {
  /// Strides.
  std::vector<int64_t> stride = {1};
  /// Symmetric zero padding per spatial axis.
  std::vector<int64_t> padding = {0};
  /// Kernel dilation.
  std::vector<int64_t> dilation = {1};
  /// Groups.
  int64_t groups = 1;
};
/// torch.nn.functional.conv1d: x [N, C, L], weight [O, C/groups, K].
Tensor conv1d(const Tensor& x, const Tensor& weight, TorchConvOptions options = {}, ADJIT_HERE);
/// conv1d plus bias [O].
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, TorchConvOptions options = {}, ADJIT_HERE);
/// torch.nn.functional.conv2d: x [N, C, H, W] (NCHW), weight [O, C/groups, KH, KW] (OIHW).
Tensor conv2d(const Tensor& x, const Tensor& weight, TorchConvOptions options = {}, ADJIT_HERE);
/// conv2d plus bias [O].
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, TorchConvOptions options = {}, ADJIT_HERE);
/// torch.nn.functional.conv3d: x [N, C, D, H, W], weight [O, C/groups, KD, KH, KW].
Tensor conv3d(const Tensor& x, const Tensor& weight, TorchConvOptions options = {}, ADJIT_HERE);
/// conv3d plus bias [O].
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, TorchConvOptions options = {}, ADJIT_HERE);

/// torch.nn.functional.conv_transpose2d's options; one entry applies to every spatial axis.
struct TorchConvTransposeOptions {
  /// Strides.
  std::vector<int64_t> stride = {1};
  /// The forward convolution's symmetric padding.
  std::vector<int64_t> padding = {0};
  /// Extra positions at the high end.
  std::vector<int64_t> output_padding = {0};
  /// Groups.
  int64_t groups = 1;
  /// Kernel dilation.
  std::vector<int64_t> dilation = {1};
};
/// torch.nn.functional.conv_transpose2d: x [N, C_in, H, W], weight [C_in, C_out/groups, KH, KW].
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, TorchConvTransposeOptions options = {}, ADJIT_HERE);
/// conv_transpose2d plus bias [C_out].
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, TorchConvTransposeOptions options = {},
                        ADJIT_HERE);

/// torch.nn.functional.max_pool2d/avg_pool2d's options; one entry applies to both axes.
struct TorchPoolOptions {
  /// Strides (empty: the kernel size).
  std::vector<int64_t> stride = {};
  /// Symmetric padding (-inf for max, counted as zeros by avg unless count_include_pad is false).
  std::vector<int64_t> padding = {0};
  /// avg_pool2d: divide by the whole window (true, PyTorch's default) or by the elements of x it covers.
  bool count_include_pad = true;
};
/// torch.nn.functional.max_pool2d (ceil_mode = false, dilation = 1): x [N, C, H, W].
Tensor max_pool2d(const Tensor& x, const std::vector<int64_t>& kernel_size, TorchPoolOptions options = {}, ADJIT_HERE);
/// torch.nn.functional.avg_pool2d (ceil_mode = false): x [N, C, H, W].
Tensor avg_pool2d(const Tensor& x, const std::vector<int64_t>& kernel_size, TorchPoolOptions options = {}, ADJIT_HERE);

#undef ADJIT_HERE

} // namespace adjit
