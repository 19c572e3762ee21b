// trace/Conv.cpp — the convolution and pooling API (adjit/conv.h): checks the
// user's options, resolves "SAME"/"VALID" padding into pairs, and records the
// conv and windowed-reduction ops; PyTorch's spellings are written on them.
#include "ir/OpInfo.h"
#include "trace/Tracer.h"

#include <adjit/conv.h>

#include <fmt/format.h>

#include <numeric>

namespace adjit {

using ir::OpKind;

namespace {

int64_t dilated(int64_t n, int64_t d) { return n == 0 ? 0 : (n - 1) * d + 1; }

/// Records op k on `in`; errors name `api` where it is not the op's own name.
Tensor record(std::string_view api, OpKind k, std::initializer_list<Tensor> in, ir::Attrs attrs, const Location& loc) {
  detail::TraceState* s = nullptr;
  for (const Tensor& t : in) s = &detail::traceOf(t, api, loc);
  std::vector<ir::ValueId> ids;
  for (const Tensor& t : in) ids.push_back(detail::valueOf(t, api, loc));
  try {
    return detail::wrap(*s, s->builder.create1(k, std::move(ids), std::move(attrs), s->locOverride ? *s->locOverride : loc));
  } catch (const Error& e) {
    const std::string prefix = std::string(ir::info(k).name) + ": ";
    if (api == ir::info(k).name || e.message().rfind(prefix, 0) != 0) throw;
    throw Error(std::string(api) + ": " + e.message().substr(prefix.size()), e.location());
  }
}

/// `v`, or `dflt` repeated n times when empty; an error unless it has n entries.
std::vector<int64_t> perAxis(std::string_view api, const char* name, const std::vector<int64_t>& v, std::size_t n,
                             int64_t dflt, const Location& loc, bool broadcastOne = false) {
  if (v.empty()) return std::vector<int64_t>(n, dflt);
  if (broadcastOne && v.size() == 1) return std::vector<int64_t>(n, v[0]);
  if (v.size() != n)
    throw Error(fmt::format("{}: {} must have {} entries (one per {}axis), got {}", api, name, n,
                            broadcastOne ? "spatial " : "", shape_str(v)),
                loc);
  return v;
}

/// Flat (low, high) pairs for `p` over axes of (dilated) sizes `in`, windows
/// `dk` (dilated) and strides.
std::vector<int64_t> resolvePadding(std::string_view api, const Padding& p, const std::vector<int64_t>& in,
                                    const std::vector<int64_t>& dk, const std::vector<int64_t>& strides, const Location& loc) {
  std::vector<int64_t> flat;
  if (p.mode.empty()) {
    if (p.pairs.size() != in.size())
      throw Error(fmt::format("{}: padding must have {} (low, high) pairs, got {}", api, in.size(), p.pairs.size()), loc);
    for (auto [lo, hi] : p.pairs) {
      flat.push_back(lo);
      flat.push_back(hi);
    }
  } else if (p.mode == "VALID") {
    flat.assign(2 * in.size(), 0);
  } else if (p.mode == "SAME") {
    for (std::size_t d = 0; d < in.size(); ++d) {
      const int64_t out = (in[d] + strides[d] - 1) / strides[d];
      const int64_t total = std::max<int64_t>((out - 1) * strides[d] + dk[d] - in[d], 0);
      flat.push_back(total / 2);
      flat.push_back(total - total / 2);
    }
  } else {
    throw Error(fmt::format("{}: padding must be \"SAME\", \"VALID\" or (low, high) pairs, got \"{}\"", api, p.mode), loc);
  }
  return flat;
}

void expectRank(std::string_view api, const Tensor& x, const char* what, int64_t rank, const Location& loc) {
  if (rank > 0 ? x.rank() != rank : x.rank() < -rank)
    throw Error(fmt::format("{}: expected {} of rank {}{}, got {}", api, what, rank > 0 ? "" : "at least ", std::abs(rank),
                            x.type().str()),
                loc);
}

Tensor convImpl(std::string_view api, const Tensor& x, const Tensor& k, const ConvOptions& o, const Location& loc) {
  if (!x.valid() || !k.valid()) throw Error(fmt::format("{}: an operand is an empty Tensor", api), loc);
  expectRank(api, x, "an input [N, C, spatial...]", -3, loc);
  if (k.rank() != x.rank())
    throw Error(fmt::format("{}: expected a kernel [O, C/groups, spatial...] of the input's rank {}, got {}", api, x.rank(),
                            k.type().str()),
                loc);
  const std::size_t sd = static_cast<std::size_t>(x.rank() - 2);
  const Shape xs = x.shape(), ks = k.shape();
  const std::vector<int64_t> strides = perAxis(api, "strides", o.strides, sd, 1, loc);
  const std::vector<int64_t> ld = perAxis(api, "lhs_dilation", o.lhs_dilation, sd, 1, loc);
  const std::vector<int64_t> rd = perAxis(api, "rhs_dilation", o.rhs_dilation, sd, 1, loc);
  std::vector<int64_t> in, dk;
  for (std::size_t d = 0; d < sd; ++d) {
    in.push_back(dilated(xs[2 + d], std::max<int64_t>(ld[d], 1)));
    dk.push_back(dilated(ks[2 + d], std::max<int64_t>(rd[d], 1)));
  }
  ir::Attrs a;
  a.set("strides", strides);
  a.set("padding", resolvePadding(api, o.padding, in, dk, strides, loc));
  a.set("lhs_dilation", ld);
  a.set("rhs_dilation", rd);
  a.set("feature_group_count", o.feature_group_count);
  return record(api, OpKind::Conv, {x, k}, std::move(a), loc);
}

ir::Attrs windowAttrs(std::string_view api, const Tensor& x, const std::vector<int64_t>& window, const WindowOptions& o,
                      const Location& loc) {
  const std::size_t r = static_cast<std::size_t>(x.rank());
  if (window.size() != r)
    throw Error(fmt::format("{}: window must have {} entries (one per axis of {}), got {}", api, r, x.type().str(),
                            shape_str(window)),
                loc);
  const std::vector<int64_t> strides = perAxis(api, "strides", o.strides, r, 1, loc);
  ir::Attrs a;
  a.set("window", window);
  a.set("strides", strides);
  a.set("padding", resolvePadding(api, o.padding, x.shape(), window, strides, loc));
  return a;
}

/// A pooling window over the spatial axes of x [N, C, spatial...] as options over all its axes.
struct Pool {
  std::vector<int64_t> window;
  WindowOptions options;
};
Pool poolOver(std::string_view api, const Tensor& x, const std::vector<int64_t>& window, const PoolOptions& o,
              const Location& loc) {
  if (!x.valid()) throw Error(fmt::format("{}: the operand is an empty Tensor", api), loc);
  expectRank(api, x, "an input [N, C, spatial...]", -3, loc);
  const std::size_t sd = static_cast<std::size_t>(x.rank() - 2);
  if (window.size() != sd)
    throw Error(fmt::format("{}: window must have {} entries (one per spatial axis of {}), got {}", api, sd, x.type().str(),
                            shape_str(window)),
                loc);
  const std::vector<int64_t> strides = o.strides.empty() ? window : perAxis(api, "strides", o.strides, sd, 1, loc);
  const Shape xs = x.shape();
  const std::vector<int64_t> in(xs.begin() + 2, xs.end());
  const std::vector<int64_t> pads = resolvePadding(api, o.padding, in, window, strides, loc);
  Pool p;
  p.window = {1, 1};
  p.window.insert(p.window.end(), window.begin(), window.end());
  p.options.strides = {1, 1};
  p.options.strides.insert(p.options.strides.end(), strides.begin(), strides.end());
  p.options.padding.mode.clear();
  p.options.padding.pairs = {{0, 0}, {0, 0}};
  for (std::size_t d = 0; d < sd; ++d) p.options.padding.pairs.emplace_back(pads[2 * d], pads[2 * d + 1]);
  return p;
}

TorchConvOptions spatialOptions(std::string_view api, const TorchConvOptions& o, std::size_t sd, const Location& loc) {
  TorchConvOptions r = o;
  r.stride = perAxis(api, "stride", o.stride, sd, 1, loc, true);
  r.padding = perAxis(api, "padding", o.padding, sd, 0, loc, true);
  r.dilation = perAxis(api, "dilation", o.dilation, sd, 1, loc, true);
  return r;
}

Tensor addBias(std::string_view api, const Tensor& y, const Tensor& bias, SrcLoc l) {
  const Location loc = Location::from(l);
  if (bias.rank() != 1 || bias.shape()[0] != y.shape()[1])
    throw Error(fmt::format("{}: expected a bias of shape [{}], got {}", api, y.shape()[1], bias.type().str()), loc);
  std::vector<int64_t> bs(static_cast<std::size_t>(y.rank()), 1);
  bs[1] = y.shape()[1];
  return add(y, reshape(bias, bs, l), l);
}

Tensor torchConv(std::string_view api, int64_t rank, const Tensor& x, const Tensor& w, const Tensor* bias,
                 const TorchConvOptions& t, SrcLoc l) {
  const Location loc = Location::from(l);
  if (!x.valid() || !w.valid()) throw Error(fmt::format("{}: an operand is an empty Tensor", api), loc);
  expectRank(api, x, "an input [N, C, spatial...]", rank, loc);
  const TorchConvOptions s = spatialOptions(api, t, static_cast<std::size_t>(rank - 2), loc);
  ConvOptions o;
  o.strides = s.stride;
  o.rhs_dilation = s.dilation;
  o.feature_group_count = t.groups;
  o.padding.mode.clear();
  for (int64_t p : s.padding) o.padding.pairs.emplace_back(p, p);
  Tensor y = convImpl(api, x, w, o, loc);
  return bias ? addBias(api, y, *bias, l) : y;
}

Tensor convTransposeImpl(std::string_view api, const Tensor& x, const Tensor& k, const ConvTransposeOptions& o,
                         SrcLoc l) {
  const Location loc = Location::from(l);
  if (!x.valid() || !k.valid()) throw Error(fmt::format("{}: an operand is an empty Tensor", api), loc);
  expectRank(api, x, "an input [N, C_in, spatial...]", -3, loc);
  if (k.rank() != x.rank())
    throw Error(fmt::format("{}: expected a kernel [C_in, C_out/groups, spatial...] of the input's rank {}, got {}", api,
                            x.rank(), k.type().str()),
                loc);
  const std::size_t sd = static_cast<std::size_t>(x.rank() - 2);
  const Shape xs = x.shape(), ks = k.shape();
  const int64_t G = o.feature_group_count;
  if (G < 1 || ks[0] % G != 0 || xs[1] != ks[0])
    throw Error(fmt::format("{}: the kernel {} must have the input's {} channels in axis 0, divisible by {} group(s); input {}",
                            api, k.type().str(), xs[1], G, x.type().str()),
                loc);
  const std::vector<int64_t> strides = perAxis(api, "strides", o.strides, sd, 1, loc);
  const std::vector<int64_t> rd = perAxis(api, "rhs_dilation", o.rhs_dilation, sd, 1, loc);
  const std::vector<int64_t> extra = perAxis(api, "output_padding", o.output_padding, sd, 0, loc);
  std::vector<int64_t> dk;
  for (std::size_t d = 0; d < sd; ++d) dk.push_back(dilated(ks[2 + d], std::max<int64_t>(rd[d], 1)));
  // The forward convolution's padding, as pairs.
  std::vector<std::pair<int64_t, int64_t>> fwd;
  std::vector<int64_t> more(extra);
  if (o.padding.mode == "SAME") {
    for (std::size_t d = 0; d < sd; ++d) {
      const int64_t total = std::max<int64_t>(dk[d] - strides[d], 0);
      fwd.emplace_back(total / 2, total - total / 2);
      more[d] += std::max<int64_t>(strides[d] - dk[d], 0);
    }
  } else {
    std::vector<int64_t> ones(sd, 1), flat = resolvePadding(api, o.padding, ones, dk, strides, loc);
    for (std::size_t d = 0; d < sd; ++d) fwd.emplace_back(flat[2 * d], flat[2 * d + 1]);
  }
  // kernel [G·Ci, Co, k] -> [G·Co, Ci, k], flipped in space
  const int64_t Ci = ks[0] / G, Co = ks[1];
  std::vector<int64_t> split{G, Ci, Co}, perm{0, 2, 1}, joined{G * Co, Ci};
  for (std::size_t d = 0; d < sd; ++d) {
    split.push_back(ks[2 + d]);
    perm.push_back(static_cast<int64_t>(3 + d));
    joined.push_back(ks[2 + d]);
  }
  Tensor kt = reshape(transpose(reshape(k, split, l), perm, l), joined, l);
  for (std::size_t d = 0; d < sd; ++d) {
    const int64_t n = ks[2 + d];
    Tensor idx = sub(full({n}, static_cast<double>(n - 1), DType::i32, l), iota({n}, 0, DType::i32, l), l);
    kt = take(kt, idx, static_cast<int64_t>(2 + d), l);
  }
  ConvOptions c;
  c.strides.assign(sd, 1);
  c.lhs_dilation = strides;
  c.rhs_dilation = rd;
  c.feature_group_count = G;
  c.padding.mode.clear();
  for (std::size_t d = 0; d < sd; ++d)
    c.padding.pairs.emplace_back(dk[d] - 1 - fwd[d].first, dk[d] - 1 - fwd[d].second + more[d]);
  return convImpl(api, x, kt, c, loc);
}

} // namespace

Tensor conv(const Tensor& x, const Tensor& kernel, ConvOptions options, SrcLoc l) {
  return convImpl("conv", x, kernel, options, Location::from(l));
}

Tensor conv_transpose(const Tensor& x, const Tensor& kernel, ConvTransposeOptions options, SrcLoc l) {
  return convTransposeImpl("conv_transpose", x, kernel, options, l);
}

Tensor reduce_window_sum(const Tensor& x, const std::vector<int64_t>& window, WindowOptions options, SrcLoc l) {
  const Location loc = Location::from(l);
  if (!x.valid()) throw Error("reduce_window_sum: the operand is an empty Tensor", loc);
  return record("reduce_window_sum", OpKind::ReduceWindowSum, {x}, windowAttrs("reduce_window_sum", x, window, options, loc), loc);
}

Tensor reduce_window_max(const Tensor& x, const std::vector<int64_t>& window, WindowOptions options, SrcLoc l) {
  const Location loc = Location::from(l);
  if (!x.valid()) throw Error("reduce_window_max: the operand is an empty Tensor", loc);
  return record("reduce_window_max", OpKind::ReduceWindowMax, {x}, windowAttrs("reduce_window_max", x, window, options, loc), loc);
}

Tensor reduce_window(const Tensor& x, std::string_view reduction, const std::vector<int64_t>& window, WindowOptions options,
                     SrcLoc l) {
  if (reduction == "sum") return reduce_window_sum(x, window, std::move(options), l);
  if (reduction == "max") return reduce_window_max(x, window, std::move(options), l);
  throw Error(fmt::format("reduce_window: the reduction must be \"sum\" or \"max\", got \"{}\"", reduction), Location::from(l));
}

Tensor select_and_scatter_add(const Tensor& source, const Tensor& x, const std::vector<int64_t>& window,
                              WindowOptions options, SrcLoc l) {
  const Location loc = Location::from(l);
  if (!x.valid() || !source.valid()) throw Error("select_and_scatter_add: an operand is an empty Tensor", loc);
  return record("select_and_scatter_add", OpKind::SelectAndScatterAdd, {source, x},
                windowAttrs("select_and_scatter_add", x, window, options, loc), loc);
}

Tensor select_and_gather_add(const Tensor& t, const Tensor& x, const std::vector<int64_t>& window, WindowOptions options,
                             SrcLoc l) {
  const Location loc = Location::from(l);
  if (!x.valid() || !t.valid()) throw Error("select_and_gather_add: an operand is an empty Tensor", loc);
  return record("select_and_gather_add", OpKind::SelectAndGatherAdd, {t, x},
                windowAttrs("select_and_gather_add", x, window, options, loc), loc);
}

Tensor max_pool(const Tensor& x, const std::vector<int64_t>& window, PoolOptions options, SrcLoc l) {
  const Location loc = Location::from(l);
  const Pool p = poolOver("max_pool", x, window, options, loc);
  return record("max_pool", OpKind::ReduceWindowMax, {x}, windowAttrs("max_pool", x, p.window, p.options, loc), loc);
}

Tensor avg_pool(const Tensor& x, const std::vector<int64_t>& window, PoolOptions options, SrcLoc l) {
  const Location loc = Location::from(l);
  const Pool p = poolOver("avg_pool", x, window, options, loc);
  Tensor sum = record("avg_pool", OpKind::ReduceWindowSum, {x}, windowAttrs("avg_pool", x, p.window, p.options, loc), loc);
  if (options.count_include_pad) {
    const int64_t n = std::accumulate(window.begin(), window.end(), int64_t{1}, std::multiplies<>());
    return div(sum, full(sum.shape(), static_cast<double>(n), sum.dtype(), l), l);
  }
  // the number of x's elements each window covers (a window sum of ones, computed at run time)
  Tensor count = reduce_window_sum(ones_like(x, l), p.window, p.options, l);
  return div(sum, count, l);
}

Tensor conv1d(const Tensor& x, const Tensor& w, TorchConvOptions o, SrcLoc l) {
  return torchConv("conv1d", 3, x, w, nullptr, o, l);
}
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b, TorchConvOptions o, SrcLoc l) {
  return torchConv("conv1d", 3, x, w, &b, o, l);
}
Tensor conv2d(const Tensor& x, const Tensor& w, TorchConvOptions o, SrcLoc l) {
  return torchConv("conv2d", 4, x, w, nullptr, o, l);
}
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, TorchConvOptions o, SrcLoc l) {
  return torchConv("conv2d", 4, x, w, &b, o, l);
}
Tensor conv3d(const Tensor& x, const Tensor& w, TorchConvOptions o, SrcLoc l) {
  return torchConv("conv3d", 5, x, w, nullptr, o, l);
}
Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor& b, TorchConvOptions o, SrcLoc l) {
  return torchConv("conv3d", 5, x, w, &b, o, l);
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& w, TorchConvTransposeOptions o, SrcLoc l) {
  const Location loc = Location::from(l);
  if (!x.valid() || !w.valid()) throw Error("conv_transpose2d: an operand is an empty Tensor", loc);
  expectRank("conv_transpose2d", x, "an input [N, C_in, H, W]", 4, loc);
  ConvTransposeOptions c;
  c.strides = perAxis("conv_transpose2d", "stride", o.stride, 2, 1, loc, true);
  c.rhs_dilation = perAxis("conv_transpose2d", "dilation", o.dilation, 2, 1, loc, true);
  c.output_padding = perAxis("conv_transpose2d", "output_padding", o.output_padding, 2, 0, loc, true);
  c.feature_group_count = o.groups;
  c.padding.mode.clear();
  for (int64_t p : perAxis("conv_transpose2d", "padding", o.padding, 2, 0, loc, true)) c.padding.pairs.emplace_back(p, p);
  return convTransposeImpl("conv_transpose2d", x, w, c, l);
}
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b, TorchConvTransposeOptions o, SrcLoc l) {
  const Tensor y = conv_transpose2d(x, w, std::move(o), l);
  return addBias("conv_transpose2d", y, b, l);
}

Tensor max_pool2d(const Tensor& x, const std::vector<int64_t>& k, TorchPoolOptions o, SrcLoc l) {
  const Location loc = Location::from(l);
  if (!x.valid()) throw Error("max_pool2d: the operand is an empty Tensor", loc);
  expectRank("max_pool2d", x, "an input [N, C, H, W]", 4, loc);
  PoolOptions p;
  const std::vector<int64_t> window = perAxis("max_pool2d", "kernel_size", k, 2, 1, loc, true);
  p.strides = o.stride.empty() ? window : perAxis("max_pool2d", "stride", o.stride, 2, 1, loc, true);
  p.padding.mode.clear();
  for (int64_t q : perAxis("max_pool2d", "padding", o.padding, 2, 0, loc, true)) p.padding.pairs.emplace_back(q, q);
  const Pool pool = poolOver("max_pool2d", x, window, p, loc);
  return record("max_pool2d", OpKind::ReduceWindowMax, {x}, windowAttrs("max_pool2d", x, pool.window, pool.options, loc), loc);
}

Tensor avg_pool2d(const Tensor& x, const std::vector<int64_t>& k, TorchPoolOptions o, SrcLoc l) {
  const Location loc = Location::from(l);
  if (!x.valid()) throw Error("avg_pool2d: the operand is an empty Tensor", loc);
  expectRank("avg_pool2d", x, "an input [N, C, H, W]", 4, loc);
  PoolOptions p;
  const std::vector<int64_t> window = perAxis("avg_pool2d", "kernel_size", k, 2, 1, loc, true);
  p.strides = o.stride.empty() ? window : perAxis("avg_pool2d", "stride", o.stride, 2, 1, loc, true);
  p.padding.mode.clear();
  for (int64_t q : perAxis("avg_pool2d", "padding", o.padding, 2, 0, loc, true)) p.padding.pairs.emplace_back(q, q);
  p.count_include_pad = o.count_include_pad;
  return avg_pool(x, window, p, l);
}

} // namespace adjit
