// test/unit/test_conv.cpp — convolution and pooling: values against a naive
// loop written here (strides, padding, dilations, groups; 1-d, 2-d, 3-d;
// interpreter and JIT, both lowerings), gradients against finite differences
// in f64 (both operands, second order, forward and reverse), max pooling's
// ties, and values and gradients against PyTorch's float64 autograd (conv1d,
// conv2d, conv3d, conv_transpose2d, 1-d and 2-d max and average pooling,
// reduce_window with uneven padding; torch_conv_expected.inc, written by
// torch_conv.py).
#include "Check.h"

#include <adjit/adjit.h>

#include <cmath>
#include <limits>
#include <random>

using namespace adjit;
using namespace adjit::test;
using V = std::vector<Tensor>;

namespace {

/// Row-major strides of `s`.
std::vector<int64_t> stridesOf(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (std::size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

/// The convolution by its definition, one output element at a time: for
/// each tap, the position in the dilated, padded input, read when it is an
/// input element.
struct ConvRef {
  std::vector<int64_t> strides, padding, lhs, rhs;
  int64_t groups = 1;
  Array operator()(const Array& x, const Array& w) const {
    const Shape xs = x.shape(), ws = w.shape();
    const std::size_t sd = xs.size() - 2;
    Shape ys{xs[0], ws[0]};
    for (std::size_t d = 0; d < sd; ++d) {
      const int64_t in = (xs[2 + d] - 1) * lhs[d] + 1 + padding[2 * d] + padding[2 * d + 1];
      const int64_t k = (ws[2 + d] - 1) * rhs[d] + 1;
      ys.push_back(in >= k ? (in - k) / strides[d] + 1 : 0);
    }
    Array y(Type{x.dtype(), ys});
    const auto xst = stridesOf(xs), wst = stridesOf(ws), yst = stridesOf(ys);
    const int64_t og = ws[0] / groups;
    for (int64_t i = 0; i < y.size(); ++i) {
      std::vector<int64_t> yi(ys.size());
      for (std::size_t d = 0; d < ys.size(); ++d) yi[d] = i / yst[d] % ys[d];
      const int64_t g = yi[1] / og;
      double s = 0;
      for (int64_t j = 0; j < w.size() / ws[0]; ++j) { // (c, taps...) of kernel row yi[1]
        int64_t rest = j, xi = yi[0] * xst[0];
        const int64_t c = rest / wst[1];
        rest %= wst[1];
        xi += (g * ws[1] + c) * xst[1];
        bool valid = true;
        for (std::size_t d = 0; d < sd; ++d) {
          const int64_t k = rest / wst[2 + d] % ws[2 + d];
          const int64_t p = yi[2 + d] * strides[d] + k * rhs[d] - padding[2 * d];
          if (p < 0 || p % lhs[d] != 0 || p / lhs[d] >= xs[2 + d]) valid = false;
          else xi += p / lhs[d] * xst[2 + d];
        }
        if (valid) s += x.at(xi) * w.at(yi[1] * wst[0] + j);
      }
      y.set(i, s);
    }
    return y;
  }
  ConvOptions options() const {
    ConvOptions o{.strides = strides, .lhs_dilation = lhs, .rhs_dilation = rhs, .feature_group_count = groups};
    o.padding.mode.clear();
    for (std::size_t d = 0; d + 1 < padding.size(); d += 2) o.padding.pairs.emplace_back(padding[d], padding[d + 1]);
    return o;
  }
};

Array randomArray(Type t, std::mt19937& rng) {
  Array a(std::move(t));
  std::normal_distribution<double> n;
  for (int64_t i = 0; i < a.size(); ++i) a.set(i, n(rng));
  return a;
}

/// Checks conv(x, w, ref's options) against ref in the interpreter and JIT;
/// in f32 within `f32tol` (sums of thousands of products need more than the default).
void checkConv(const ConvRef& ref, Shape xs, Shape ws, DType t, unsigned seed, double f32tol = 2e-5) {
  std::mt19937 rng(seed);
  const Array x = randomArray({t, std::move(xs)}, rng), w = randomArray({t, std::move(ws)}, rng);
  const ConvOptions o = ref.options();
  INFO("x " << x.type().str() << " w " << w.type().str());
  check3([o](V v) { return conv(v[0], v[1], o); }, {x, w}, ref(x, w), t == DType::f32 ? f32tol : 1e-12);
}

} // namespace

TEST_CASE("conv computes the convolution's definition: strides, padding, dilations, groups, 1-d to 3-d") {
  for (DType t : {DType::f64, DType::f32}) {
    checkConv({{1}, {0, 0}, {1}, {1}, 1}, {2, 3, 9}, {4, 3, 3}, t, 1);
    checkConv({{2}, {1, 2}, {1}, {2}, 1}, {2, 4, 9}, {6, 4, 3}, t, 2);
    checkConv({{2}, {1, 2}, {1}, {2}, 2}, {2, 4, 9}, {6, 2, 3}, t, 3);
    checkConv({{1, 2}, {1, 1, 0, 2}, {1, 1}, {2, 1}, 1}, {2, 3, 7, 6}, {5, 3, 3, 2}, t, 4);
    checkConv({{2, 1}, {2, -1, 0, 1}, {2, 3}, {1, 1}, 3}, {1, 6, 5, 4}, {3, 2, 2, 3}, t, 5); // lhs dilation, negative padding
    checkConv({{1, 2, 1}, {1, 0, 0, 1, 1, 1}, {1, 1, 1}, {1, 1, 2}, 2}, {2, 4, 4, 5, 5}, {4, 2, 2, 3, 2}, t, 6);
    checkConv({{1, 1}, {1, 1, 1, 1}, {1, 1}, {1, 1}, 1}, {2, 8, 12, 12}, {32, 8, 3, 3}, t, 7); // im2col + packed matmul
    checkConv({{2, 2}, {0, 1, 1, 0}, {1, 1}, {1, 2}, 2}, {1, 16, 13, 11}, {64, 8, 3, 2}, t, 8); // im2col, groups
    checkConv({{1, 1}, {0, 0, 0, 0}, {1, 1}, {1, 1}, 1}, {2, 24, 10, 10}, {40, 24, 1, 1}, t, 9); // 1x1: the input is the matrix
    checkConv({{1, 1}, {1, 0, 0, 1}, {1, 1}, {1, 1}, 1}, {6, 4, 12, 12}, {16, 4, 10, 10}, t, 10); // few positions: images side by side
    checkConv({{1, 1}, {0, 0, 0, 0}, {1, 1}, {1, 1}, 1}, {8, 16, 3, 3}, {32, 16, 1, 1}, t, 11);   // 1x1, images side by side
    // the kernel gradient's shape (a window wider than its outputs): all images in one product, channels in chunks
    checkConv({{1, 1}, {1, 1, 1, 1}, {1, 1}, {1, 1}, 1}, {16, 48, 12, 12}, {8, 48, 11, 11}, t, 12, 1e-3); // 2 chunks of 24 channels; sums of 5808 products of ~1
    checkConv({{1, 2}, {0, 1, 2, 0}, {1, 1}, {2, 1}, 2}, {12, 40, 14, 13}, {6, 20, 6, 6}, t, 13, 2e-4); // groups, stride, dilation
  }
}

TEST_CASE("SAME and VALID padding, and torch's spellings, shape their results as JAX and PyTorch do") {
  trace(
      [](Tensor x, Tensor w) {
        const V v{x, w};
        CHECK(conv(v[0], v[1], {.strides = {2, 3}, .padding = "SAME"}).shape() == Shape{2, 5, 5, 3});
        CHECK(conv(v[0], v[1], {.padding = "VALID"}).shape() == Shape{2, 5, 7, 7});
        CHECK(conv2d(v[0], v[1], {.stride = {2}, .padding = {1}}).shape() == Shape{2, 5, 5, 5});
        CHECK(conv2d(v[0], v[1], {.dilation = {2}}).shape() == Shape{2, 5, 5, 5});
        CHECK(max_pool2d(v[0], {2}).shape() == Shape{2, 3, 4, 4});
        CHECK(avg_pool2d(v[0], {3}, {.stride = {1}, .padding = {1}}).shape() == Shape{2, 3, 9, 9});
        CHECK(max_pool(v[0], {3, 3}, {.strides = {2, 2}, .padding = "SAME"}).shape() == Shape{2, 3, 5, 5});
        CHECK(conv_transpose(v[0], transpose(v[1], {1, 0, 2, 3}), {.strides = {2, 2}, .padding = "SAME"}).shape() ==
              Shape{2, 5, 18, 18});
        return sum(v[0]);
      },
      Type{DType::f64, {2, 3, 9, 9}}, Type{DType::f64, {5, 3, 3, 3}});
}

TEST_CASE("conv and pooling gradients match finite differences in f64, both operands, to second order") {
  std::mt19937 rng(11);
  const CheckGradsOptions o{.order = 2, .modes = {"rev", "fwd"}, .rtol = 1e-5};
  const Array x2 = randomArray({DType::f64, {2, 4, 6, 5}}, rng), w2 = randomArray({DType::f64, {6, 2, 3, 2}}, rng);
  check_grads([](Tensor x, Tensor w) { return conv(x, w, {.strides = {2, 1}, .padding = {{1, 0}, {2, 1}}, .rhs_dilation = {1, 2}, .feature_group_count = 2}); },
              std::tuple{x2, w2}, o);
  check_grads([](Tensor x, Tensor w) { return conv(x, w, {.strides = {1, 2}, .padding = {{0, 1}, {-1, 1}}, .lhs_dilation = {2, 1}, .feature_group_count = 2}); },
              std::tuple{x2, w2}, o);
  const Array x1 = randomArray({DType::f64, {2, 3, 8}}, rng), w1 = randomArray({DType::f64, {2, 3, 3}}, rng);
  check_grads([](Tensor x, Tensor w) { return conv1d(x, w, {.stride = {3}, .padding = {2}}); }, std::tuple{x1, w1}, o);
  const Array x3 = randomArray({DType::f64, {1, 2, 4, 3, 4}}, rng), w3 = randomArray({DType::f64, {2, 1, 2, 2, 3}}, rng);
  check_grads([](Tensor x, Tensor w) { return conv3d(x, w, {.stride = {1, 2, 1}, .padding = {1}, .groups = 2}); },
              std::tuple{x3, w3}, o);
  const Array wt = randomArray({DType::f64, {4, 3, 3, 2}}, rng), b = randomArray({DType::f64, {6}}, rng);
  check_grads([](Tensor x, Tensor w, Tensor bias) {
    return conv_transpose2d(x, w, bias, {.stride = {2, 1}, .padding = {1, 0}, .output_padding = {1, 0}, .groups = 2});
  }, std::tuple{x2, wt, b}, o);
  // Pooling on distinct random values: the maxima do not move within the finite-difference step.
  check_grads([](Tensor x) { return max_pool2d(x, {3, 2}, {.stride = {2, 1}, .padding = {1}}); }, x2, o);
  check_grads([](Tensor x) { return avg_pool2d(x, {2, 3}, {.stride = {1, 2}, .padding = {1}, .count_include_pad = false}); }, x2, o);
  check_grads([](Tensor x) { return reduce_window_sum(x, {2, 1, 3, 2}, {.strides = {1, 1, 2, 2}, .padding = {{1, 0}, {0, 0}, {2, 3}, {0, 1}}}); },
              x2, o);
}

TEST_CASE("max pooling's gradient goes to the first maximum of each window, ties to the first") {
  // Each 2x2 window of ones: the gradient lands on its top-left element only.
  const Array ones = f64(std::vector<double>(16, 1.0), {1, 1, 4, 4});
  const Array want = f64({1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0}, {1, 1, 4, 4});
  check3([](V v) { return grad([](Tensor x) { return sum(max_pool2d(x, {2})); })(v[0]); }, {ones}, want, 0);
  // Overlapping windows (stride 1) with a tie across windows: each window's first maximum gets its 1.
  const Array x = f64({3, 1, 3, 2, 3, 0}, {1, 1, 1, 6});
  // windows of 3: [3,1,3] -> 0, [1,3,2] -> 2, [3,2,3] -> 2, [2,3,0] -> 4
  check3([](V v) { return grad([](Tensor t) { return sum(max_pool(t, {1, 3}, {.strides = {1, 1}})); })(v[0]); }, {x},
         f64({1, 0, 2, 0, 1, 0}, {1, 1, 1, 6}), 0);
  // Its second derivative (the gradient of select_and_scatter_add, through select_and_gather_add).
  check3([](V v) {
    return grad([](Tensor t) {
      Tensor g = grad([](Tensor u) { return sum(max_pool(u * u, {1, 3}, {.strides = {1, 1}})); })(t);
      return sum(g * g);
    })(v[0]);
  }, {x}, f64({24, 0, 96, 0, 24, 0}, {1, 1, 1, 6}), 1e-12); // d/dt sum((2 t c)^2) = 8 c^2 t, c = [1, 0, 2, 0, 1, 0]
}

TEST_CASE("the windowed ops, forward and backward, agree compiled and interpreted (select_and_gather_add too)") {
  std::mt19937 rng(3);
  const Array x = randomArray({DType::f32, {2, 3, 7, 6}}, rng), t = randomArray({DType::f32, {2, 3, 7, 6}}, rng);
  auto ref = [](const Array& a, const Array& b) {
    // the tangent at each 3x2 window's first maximum (stride 2, no padding): a naive search
    Array r(Type{DType::f32, {2, 3, 3, 3}});
    for (int64_t nc = 0; nc < 6; ++nc)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 3; ++j) {
          int64_t best = -1;
          for (int64_t di = 0; di < 3; ++di)
            for (int64_t dj = 0; dj < 2; ++dj) {
              const int64_t at = nc * 42 + (2 * i + di) * 6 + 2 * j + dj;
              if (best < 0 || b.at(at) > b.at(best)) best = at;
            }
          r.set(nc * 9 + i * 3 + j, a.at(best));
        }
    return r;
  };
  check3([](V v) { return select_and_gather_add(v[0], v[1], {1, 1, 3, 2}, {.strides = {1, 1, 2, 2}}); }, {t, x}, ref(t, x));
  check3([](V v) { return reduce_window(v[1], "max", {1, 1, 3, 2}, {.strides = {1, 1, 2, 2}}); }, {t, x}, ref(x, x));
}

TEST_CASE("conv's kernel gradient at a size its lowering takes as one product over all images agrees compiled and interpreted") {
  std::mt19937 rng(12);
  for (DType t : {DType::f64, DType::f32}) {
    // dk correlates x [16, 24, 14, 14] with dy [16, 32, 7, 7]: 9 outputs of a 7x7 window (stride 2 becomes rhs_dilation)
    const Array x = randomArray({t, {16, 24, 14, 14}}, rng), w = randomArray({t, {32, 12, 3, 3}}, rng),
                dy = randomArray({t, {16, 32, 7, 7}}, rng);
    auto f = [](V v) {
      auto [y, back] = vjp([](Tensor a, Tensor k) { return conv2d(a, k, {.stride = {2}, .padding = {1}, .groups = 2}); }, v[0], v[1]);
      return back(v[2])[1];
    };
    std::vector<Type> types{x.type(), w.type(), dy.type()};
    const Array want = trace(f, types).interpret("f", {x, w, dy}).at(0);
    check3(f, {x, w, dy}, want, t == DType::f32 ? 2e-4 : 1e-12); // sums of 784 products
  }
}

TEST_CASE("conv's kernel gradient as dot products along the window's rows agrees compiled and interpreted; padding is never multiplied") {
  // dk correlates x with dy: a window of dy's size over the kernel's 3x3 (or 5 or 2x3x3) positions,
  // the shape lib/codegen/WindowDot.cpp takes (rows wider and narrower than a vector, groups, a
  // batch and outputs that leave partial register tiles, padding on both sides, 1-d to 3-d)
  struct Case {
    Shape x, w;
    ConvOptions o;
  };
  const std::vector<Case> cases{
      {{5, 6, 13, 37}, {10, 6, 3, 3}, {.padding = {{1, 1}, {1, 1}}}},
      {{3, 4, 9, 21}, {6, 2, 3, 5}, {.padding = {{2, 0}, {1, 3}}, .feature_group_count = 2}},
      {{4, 3, 40}, {5, 3, 5}, {.padding = {{2, 2}}}},
      {{2, 2, 5, 6, 18}, {4, 2, 2, 3, 3}, {.strides = {2, 1, 1}, .padding = {{1, 1}, {1, 1}, {1, 1}}}},
      // a dilated kernel (its gradient's window strides along the rows) and a crop
      {{3, 4, 12, 30}, {5, 4, 3, 3}, {.padding = {{2, 2}, {2, 2}}, .rhs_dilation = {2, 2}}},
      {{3, 4, 12, 30}, {5, 4, 3, 3}, {.padding = {{1, -1}, {-1, 2}}}},
  };
  std::mt19937 rng(21);
  for (DType t : {DType::f64, DType::f32})
    for (const Case& c : cases) {
      const Array x = randomArray({t, c.x}, rng), w = randomArray({t, c.w}, rng);
      const ConvOptions o = c.o;
      const Shape ys = trace([o](Tensor a, Tensor k) { return conv(a, k, o); }, x.type(), w.type()).interpret("f", {x, w}).at(0).shape();
      const Array dy = randomArray({t, ys}, rng);
      auto f = [o](V v) { return vjp([o](Tensor a, Tensor k) { return conv(a, k, o); }, v[0], v[1]).second(v[2])[1]; };
      INFO("x " << x.type().str() << " w " << w.type().str());
      std::vector<Type> types{x.type(), w.type(), dy.type()};
      const Array want = trace(f, types).interpret("f", {x, w, dy}).at(0);
      check3(f, {x, w, dy}, want, t == DType::f32 ? 2e-4 : 1e-12);
    }
  // Enough work per row block that the blocks of outputs run on threads (kParallelWork)
  {
    const Array x = randomArray({DType::f32, {4, 8, 40, 40}}, rng), w = randomArray({DType::f32, {16, 8, 3, 3}}, rng),
                dy = randomArray({DType::f32, {4, 16, 40, 40}}, rng);
    auto f = [](Tensor a, Tensor k, Tensor u) {
      return vjp([](Tensor p, Tensor q) { return conv2d(p, q, {.padding = {1}}); }, a, k).second(u)[1];
    };
    const Array want = trace(f, x.type(), w.type(), dy.type()).interpret("f", {x, w, dy}).at(0);
    ADJIT_CHECK_CLOSE(jit(f, {.threads = 2})(x, w, dy), want, 2e-4);
    ADJIT_CHECK_CLOSE(jit(f, {.threads = 1})(x, w, dy), want, 2e-4);
  }
  // An infinity in dy's first column: the taps left of it read padding, so the
  // kernel's first column of taps never multiplies it and stays finite.
  const Array x = randomArray({DType::f32, {2, 3, 8, 20}}, rng), w = randomArray({DType::f32, {4, 3, 3, 3}}, rng);
  Array dy = randomArray({DType::f32, {2, 4, 8, 20}}, rng);
  dy.set(5 * 20, std::numeric_limits<double>::infinity()); // dy[0, 0, 5, 0]
  auto f = [](Tensor a, Tensor k, Tensor u) {
    return vjp([](Tensor p, Tensor q) { return conv2d(p, q, {.padding = {1}}); }, a, k).second(u)[1];
  };
  const Array want = trace(f, x.type(), w.type(), dy.type()).interpret("f", {x, w, dy}).at(0);
  auto jf = jit(f);
  // Vector units narrower than 256 bits (ADJIT_CPU=x86-64-v2) take the
  // correlation kernel, whose im2col matrix multiplies dy by the padding's zeros.
  if (jf.lower(x, w, dy).llvm_ir.find("adjit.windowdot") == std::string::npos) return;
  const Array got = jf(x, w, dy);
  for (int64_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(std::isfinite(got.at(i)) == std::isfinite(want.at(i)));
    if (std::isfinite(want.at(i))) CHECK(got.at(i) == doctest::Approx(want.at(i)).epsilon(1e-4));
  }
  CHECK(std::isfinite(want.at(0)));   // dk[0, 0, 0, 0]: kx = 0
  CHECK(!std::isfinite(want.at(1)));  // dk[0, 0, 0, 1]
}

TEST_CASE("a conv's bias and activation run on its tiles (every lowering), as the interpreter computes them") {
  struct Case {
    const char* what;
    Shape x, w;
    TorchConvOptions o;
  };
  const std::vector<Case> cases{
      {"im2col per image, groups", {2, 8, 20, 20}, {32, 4, 3, 3}, {.padding = {1}, .groups = 2}},
      {"images side by side", {8, 16, 6, 6}, {32, 16, 3, 3}, {.padding = {1}}},
      {"the kernel gradient's shape", {6, 4, 12, 12}, {16, 4, 10, 10}, {.padding = {1}}},
      {"direct loops", {2, 3, 7, 6}, {5, 3, 3, 2}, {.stride = {2}}},
      {"1x1", {2, 24, 10, 10}, {40, 24, 1, 1}, {}},
  };
  std::mt19937 rng(52);
  for (DType t : {DType::f64, DType::f32})
    for (const Case& c : cases) {
      INFO(c.what << " " << name_of(t));
      const Array x = randomArray({t, c.x}, rng), w = randomArray({t, c.w}, rng), b = randomArray({t, {c.w[0]}}, rng);
      const TorchConvOptions o = c.o;
      auto f = [o](Tensor a, Tensor k, Tensor bias) { return tanh(relu(conv2d(a, k, bias, o)) * 0.1); };
      auto jf = jit(f);
      const std::string plan = jf.lower(x, w, b).plan;
      INFO(plan);
      CHECK(plan.find("tile epilogue") != std::string::npos);
      const Array want = trace(f, x.type(), w.type(), b.type()).interpret("f", {x, w, b}).at(0);
      ADJIT_CHECK_CLOSE(jf(x, w, b), want, t == DType::f32 ? 1e-5 : 1e-12);
    }
  // three spatial axes: the tiles' columns span all three
  const Array x = randomArray({DType::f32, {2, 4, 7, 6, 8}}, rng), w = randomArray({DType::f32, {8, 4, 3, 3, 3}}, rng),
              b = randomArray({DType::f32, {8}}, rng);
  auto f3 = [](Tensor a, Tensor k, Tensor bias) { return relu(conv3d(a, k, bias, {.padding = {1}})); };
  auto jf3 = jit(f3);
  CHECK(jf3.lower(x, w, b).plan.find("tile epilogue") != std::string::npos);
  ADJIT_CHECK_CLOSE(jf3(x, w, b), trace(f3, x.type(), w.type(), b.type()).interpret("f", {x, w, b}).at(0), 1e-5);
}

TEST_CASE("sum and average pooling by hand") {
  const Array x = f64({1, 2, 3, 4, 5, 6}, {1, 1, 2, 3});
  check3([](V v) { return avg_pool2d(v[0], {2}, {.stride = {1}}); }, {x}, f64({3, 4}, {1, 1, 1, 2}));
  // padding 1 along the last axis: windows [0,1] [1,2] [2,3] [3,0] of the first row, counted with or without the padding
  check3([](V v) { return reduce_window_sum(v[0], {1, 1, 1, 2}, {.padding = {{0, 0}, {0, 0}, {0, 0}, {1, 1}}}); }, {x},
         f64({1, 3, 5, 3, 4, 9, 11, 6}, {1, 1, 2, 4}));
  check3([](V v) { return avg_pool2d(v[0], {1, 2}, {.stride = {1}, .padding = {0, 1}, .count_include_pad = false}); }, {x},
         f64({1, 1.5, 2.5, 3, 4, 4.5, 5.5, 6}, {1, 1, 2, 4}));
}

TEST_CASE("conv reports what it expected at the user's line") {
  const Type x{DType::f64, {2, 3, 9, 9}}, w{DType::f64, {5, 2, 3, 3}};
  CHECK_THROWS_WITH_AS(trace([](Tensor a, Tensor b) { const V v{a, b}; return conv2d(v[0], v[1]); }, x, w),
                       doctest::Contains("conv2d: the kernel f64[5,2,3,3] takes 2 channels per group, but the input f64[2,3,9,9] has 3 channels in 1 group(s)"),
                       Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor a, Tensor b) { const V v{a, b}; return conv(v[0], v[1], {.strides = {1}}); }, x, w),
                       doctest::Contains("conv: strides must have 2 entries (one per axis), got [1]"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor a, Tensor b) { const V v{a, b}; return max_pool2d(v[0], {2}, {.padding = {-12}}); }, x, w),
                       doctest::Contains("test_conv.cpp"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor a, Tensor b) { const V v{a, b}; return conv(v[0], v[0], {.padding = "FULL"}); }, x, w),
                       doctest::Contains("conv: padding must be \"SAME\", \"VALID\" or (low, high) pairs, got \"FULL\""), Error);
}

namespace {

struct TorchConvCase {
  const char* name;
  const char* op;
  Shape xs;
  std::vector<double> x;
  Shape ws;
  std::vector<double> w, b;
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups;
  std::vector<int64_t> output_padding;
  bool count_include_pad;
  std::vector<double> ct;
  Shape ys;
  std::vector<double> y, dx, dw, db;
};

const std::vector<TorchConvCase>& torchConvCases() {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN(); // max pooling's NaN case
  static const std::vector<TorchConvCase> cases = {
#include "torch_conv_expected.inc"
  };
  return cases;
}

} // namespace

TEST_CASE("conv1d/2d/3d, conv_transpose2d, pooling and reduce_window agree with PyTorch's float64 autograd") {
  REQUIRE(torchConvCases().size() == 25);
  for (const TorchConvCase& c : torchConvCases()) {
    INFO(std::string(c.name));
    const std::string op = c.op;
    const bool pool = op.find("pool") != std::string::npos || op.starts_with("reduce_window");
    auto apply = [&c, op](Tensor x, const Tensor* w, const Tensor* b) {
      if (op == "conv1d" || op == "conv2d" || op == "conv3d") {
        const TorchConvOptions o{.stride = c.stride, .padding = c.padding, .dilation = c.dilation, .groups = c.groups};
        if (op == "conv1d") return b ? conv1d(x, *w, *b, o) : conv1d(x, *w, o);
        if (op == "conv2d") return b ? conv2d(x, *w, *b, o) : conv2d(x, *w, o);
        return b ? conv3d(x, *w, *b, o) : conv3d(x, *w, o);
      }
      if (op == "conv SAME")
        return conv(x, *w, {.padding = "SAME", .rhs_dilation = c.dilation, .feature_group_count = c.groups});
      if (op == "conv_transpose2d") {
        const TorchConvTransposeOptions o{.stride = c.stride, .padding = c.padding, .output_padding = c.output_padding,
                                          .groups = c.groups, .dilation = c.dilation};
        return b ? conv_transpose2d(x, *w, *b, o) : conv_transpose2d(x, *w, o);
      }
      if (op == "max_pool" || op == "avg_pool") { // adjit's own spelling: padding as (low, high) pairs
        std::vector<std::pair<int64_t, int64_t>> pads;
        for (int64_t p : c.padding) pads.emplace_back(p, p);
        const PoolOptions o{.strides = c.stride, .padding = pads, .count_include_pad = c.count_include_pad};
        return op == "max_pool" ? max_pool(x, c.ws, o) : avg_pool(x, c.ws, o);
      }
      if (op.starts_with("reduce_window")) { // padding: low, high of each axis in turn
        std::vector<std::pair<int64_t, int64_t>> pads;
        for (std::size_t i = 0; i + 1 < c.padding.size(); i += 2) pads.emplace_back(c.padding[i], c.padding[i + 1]);
        return reduce_window(x, op == "reduce_window_max" ? "max" : "sum", c.ws, {.strides = c.stride, .padding = pads});
      }
      const TorchPoolOptions o{.stride = c.stride, .padding = c.padding, .count_include_pad = c.count_include_pad};
      return op == "max_pool2d" ? max_pool2d(x, c.ws, o) : avg_pool2d(x, c.ws, o);
    };
    const Array x = f64(c.x, c.xs), ct = f64(c.ct, c.ys);
    const double tol = 1e-10;
    if (pool) {
      auto f = jit([&](Tensor xt, Tensor u) {
        auto [y, back] = vjp([&](Tensor a) { return apply(a, nullptr, nullptr); }, xt);
        return std::make_tuple(y, back(u)[0]);
      });
      auto [y, dx] = f(x, ct);
      ADJIT_CHECK_CLOSE(y, f64(c.y, c.ys), tol);
      ADJIT_CHECK_CLOSE(dx, f64(c.dx, c.xs), tol);
    } else if (c.b.empty()) {
      auto f = jit([&](Tensor xt, Tensor wt, Tensor u) {
        auto [y, back] = vjp([&](Tensor a, Tensor k) { return apply(a, &k, nullptr); }, xt, wt);
        std::vector<Tensor> g = back(u);
        return std::make_tuple(y, g[0], g[1]);
      });
      auto [y, dx, dw] = f(x, f64(c.w, c.ws), ct);
      ADJIT_CHECK_CLOSE(y, f64(c.y, c.ys), tol);
      ADJIT_CHECK_CLOSE(dx, f64(c.dx, c.xs), tol);
      ADJIT_CHECK_CLOSE(dw, f64(c.dw, c.ws), tol);
    } else {
      auto f = jit([&](Tensor xt, Tensor wt, Tensor bt, Tensor u) {
        auto [y, back] = vjp([&](Tensor a, Tensor k, Tensor bias) { return apply(a, &k, &bias); }, xt, wt, bt);
        std::vector<Tensor> g = back(u);
        return std::make_tuple(y, g[0], g[1], g[2]);
      });
      auto [y, dx, dw, db] = f(x, f64(c.w, c.ws), f64(c.b), ct);
      ADJIT_CHECK_CLOSE(y, f64(c.y, c.ys), tol);
      ADJIT_CHECK_CLOSE(dx, f64(c.dx, c.xs), tol);
      ADJIT_CHECK_CLOSE(dw, f64(c.dw, c.ws), tol);
      ADJIT_CHECK_CLOSE(db, f64(c.db), tol);
    }
  }
}

TEST_CASE("guide: a small convolutional network and its gradient") {
  // [snippet:cnn]
  // LeNet-like: conv 5x5 -> relu -> max pool 2x2 -> conv 3x3 -> avg pool -> a linear layer
  auto net = [](Tensor x, Tensor w1, Tensor b1, Tensor w2, Tensor fc) {
    Tensor h = maximum(conv2d(x, w1, b1, {.padding = {2}}), 0.0); // relu, [N, 6, 28, 28]
    h = max_pool2d(h, {2});                               // [N, 6, 14, 14]
    h = conv2d(h, w2, {.stride = {2}, .groups = 2});      // [N, 8, 6, 6]
    h = avg_pool2d(h, {2});                               // [N, 8, 3, 3]
    return matmul(reshape(h, {h.shape()[0], 72}), fc);   // [N, 10]
  };
  auto loss = [net](Tensor x, Tensor w1, Tensor b1, Tensor w2, Tensor fc) { return sum(net(x, w1, b1, w2, fc) * 0.5); };
  auto step = jit(value_and_grad(loss, argnums<1, 2, 3, 4>));
  // [/snippet:cnn]
  std::mt19937 rng(5);
  const Array x = randomArray({DType::f32, {4, 1, 28, 28}}, rng), w1 = randomArray({DType::f32, {6, 1, 5, 5}}, rng),
              b1 = randomArray({DType::f32, {6}}, rng), w2 = randomArray({DType::f32, {8, 3, 3, 3}}, rng),
              fc = randomArray({DType::f32, {72, 10}}, rng);
  // [snippet:cnn]
  auto [value, grads] = step(x, w1, b1, w2, fc); // grads: (dw1, db1, dw2, dfc)
  // [/snippet:cnn]
  CHECK(std::get<0>(grads).shape() == Shape{6, 1, 5, 5});
  CHECK(std::get<3>(grads).shape() == Shape{72, 10});
  CHECK(std::isfinite(value.at(0)));
}
