// bench/conv_bench.cpp — adjit's conv next to a straightforward im2col +
// OpenBLAS sgemm baseline in the same process (one thread each, interleaved
// runs): a ResNet-style 3×3 convolution (batch 32, 64→64 channels, 56×56,
// stride 1, padding 1, f32), forward, forward with bias and relu, and
// backward (input and kernel gradients); then LeNet-5 (batch 64, 32×32)
// forward and gradient, adjit alone. PyTorch (oneDNN) cannot run in-process
// from C++: bench/conv_torch.py times the same cases, run it right after this
// and divide. Not a test. `--quick` uses batch 4 for the ResNet conv.
#include <adjit/adjit.h>

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

extern "C" void openblas_set_num_threads(int);

using namespace adjit;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(const std::function<void()>& fn) {
  const auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Best times of a and b over `reps` interleaved runs each; `ready`, after
/// the first (compiling) calls, waits for the optimised tiers (JitOptions::tiers).
std::pair<double, double> interleaved(const std::function<void()>& a, const std::function<void()>& b, int reps,
                                      const std::function<void()>& ready = {}) {
  a();
  b();
  if (ready) ready();
  double ta = 1e30, tb = 1e30;
  for (int i = 0; i < reps; ++i) {
    ta = std::min(ta, seconds(a));
    tb = std::min(tb, seconds(b));
  }
  return {ta, tb};
}

std::vector<float> filled(std::size_t n, double phase) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(0.37 * double(i) + phase));
  return v;
}

struct Geometry {
  int64_t n, c, o, h, w, k, pad; // stride 1
  int64_t rows() const { return c * k * k; }
  int64_t cols() const { return h * w; } // same-size output
};

/// col[(ci, ky, kx), (y, x)] = image[ci, y + ky - pad, x + kx - pad] (0 outside).
void im2col(const Geometry& g, const float* image, float* col) {
  for (int64_t ci = 0; ci < g.c; ++ci)
    for (int64_t ky = 0; ky < g.k; ++ky)
      for (int64_t kx = 0; kx < g.k; ++kx) {
        float* row = col + ((ci * g.k + ky) * g.k + kx) * g.cols();
        for (int64_t y = 0; y < g.h; ++y) {
          const int64_t iy = y + ky - g.pad;
          float* out = row + y * g.w;
          if (iy < 0 || iy >= g.h) {
            std::memset(out, 0, sizeof(float) * std::size_t(g.w));
            continue;
          }
          for (int64_t x = 0; x < g.w; ++x) {
            const int64_t ix = x + kx - g.pad;
            out[x] = ix < 0 || ix >= g.w ? 0.0f : image[(ci * g.h + iy) * g.w + ix];
          }
        }
      }
}

/// image[ci, y + ky - pad, x + kx - pad] += col[(ci, ky, kx), (y, x)].
void col2im(const Geometry& g, const float* col, float* image) {
  for (int64_t ci = 0; ci < g.c; ++ci)
    for (int64_t ky = 0; ky < g.k; ++ky)
      for (int64_t kx = 0; kx < g.k; ++kx) {
        const float* row = col + ((ci * g.k + ky) * g.k + kx) * g.cols();
        for (int64_t y = 0; y < g.h; ++y) {
          const int64_t iy = y + ky - g.pad;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t x = 0; x < g.w; ++x) {
            const int64_t ix = x + kx - g.pad;
            if (ix >= 0 && ix < g.w) image[(ci * g.h + iy) * g.w + ix] += row[y * g.w + x];
          }
        }
      }
}

} // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  openblas_set_num_threads(1);
  const Geometry g{quick ? 4 : 32, 64, 64, 56, 56, 3, 1};
  const Shape xs{g.n, g.c, g.h, g.w}, ws{g.o, g.c, g.k, g.k}, ys{g.n, g.o, g.h, g.w};
  const Array x(filled(std::size_t(num_elements(xs)), 0), xs), w(filled(std::size_t(num_elements(ws)), 1), ws),
      dy(filled(std::size_t(num_elements(ys)), 2), ys);
  const TorchConvOptions o{.padding = {1}};
  auto forward = jit([o](Tensor a, Tensor k) { return conv2d(a, k, o); }, {.threads = 1});
  auto backward = jit([o](Tensor a, Tensor k, Tensor u) {
    auto [y, back] = vjp([o](Tensor p, Tensor q) { return conv2d(p, q, o); }, a, k);
    std::vector<Tensor> grads = back(u);
    return std::make_tuple(grads[0], grads[1]);
  }, {.threads = 1});
  Array y = forward(x, w);
  auto [dx, dw] = backward(x, w, dy);
  forward.wait_optimized(); // time the optimised code (JitOptions::tiers)
  backward.wait_optimized();

  std::vector<float> col(std::size_t(g.rows() * g.cols())), out(std::size_t(num_elements(ys)));
  std::vector<float> bdx(std::size_t(num_elements(xs))), bdw(std::size_t(num_elements(ws)));
  const float* X = static_cast<const float*>(x.raw());
  const float* W = static_cast<const float*>(w.raw());
  const float* DY = static_cast<const float*>(dy.raw());
  const int64_t imageIn = g.c * g.h * g.w, imageOut = g.o * g.cols();
  auto blasForward = [&] {
    for (int64_t n = 0; n < g.n; ++n) {
      im2col(g, X + n * imageIn, col.data());
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(g.o), int(g.cols()), int(g.rows()), 1.0f, W, int(g.rows()),
                  col.data(), int(g.cols()), 0.0f, out.data() + n * imageOut, int(g.cols()));
    }
  };
  auto blasBackward = [&] {
    std::fill(bdx.begin(), bdx.end(), 0.0f);
    for (int64_t n = 0; n < g.n; ++n) {
      im2col(g, X + n * imageIn, col.data()); // dW += dY_n col^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(g.o), int(g.rows()), int(g.cols()), 1.0f, DY + n * imageOut,
                  int(g.cols()), col.data(), int(g.cols()), n == 0 ? 0.0f : 1.0f, bdw.data(), int(g.rows()));
      // dcol = W^T dY_n, then scattered back
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(g.rows()), int(g.cols()), int(g.o), 1.0f, W, int(g.rows()),
                  DY + n * imageOut, int(g.cols()), 0.0f, col.data(), int(g.cols()));
      col2im(g, col.data(), bdx.data() + n * imageIn);
    }
  };
  blasForward();
  blasBackward();
  double errY = 0, errX = 0, errW = 0, scaleW = 0;
  for (std::size_t i = 0; i < out.size(); ++i) errY = std::max(errY, std::fabs(double(y.at(int64_t(i))) - out[i]));
  for (std::size_t i = 0; i < bdx.size(); ++i) errX = std::max(errX, std::fabs(double(dx.at(int64_t(i))) - bdx[i]));
  for (std::size_t i = 0; i < bdw.size(); ++i) {
    errW = std::max(errW, std::fabs(double(dw.at(int64_t(i))) - bdw[i]));
    scaleW = std::max(scaleW, std::fabs(double(bdw[i])));
  }
  const double flops = 2.0 * double(g.n * g.o * g.cols() * g.rows());
  const int reps = quick ? 3 : 5;
  auto [tf, bf] = interleaved([&] { y = forward(x, w); }, blasForward, reps);
  std::printf("conv 3x3 %lldx64x56x56 -> 64 f32 forward   adjit %7.1f ms (%5.1f GFLOP/s)   im2col+sgemm %7.1f ms   ratio %.2fx   (max abs diff %.1e)\n",
              static_cast<long long>(g.n), tf * 1e3, flops / tf * 1e-9, bf * 1e3, tf / bf, errY);
  auto [tb, bb] = interleaved([&] { std::tie(dx, dw) = backward(x, w, dy); }, blasBackward, reps);
  std::printf("conv 3x3 %lldx64x56x56 -> 64 f32 backward  adjit %7.1f ms (%5.1f GFLOP/s)   im2col+sgemm %7.1f ms   ratio %.2fx   (max abs diff dx %.1e, dw %.1e of %.1e)\n",
              static_cast<long long>(g.n), tb * 1e3, 2 * flops / tb * 1e-9, bb * 1e3, tb / bb, errX, errW, scaleW);

  // where the backward's time goes: the input gradient (a conv of dy with the
  // flipped kernel) and the kernel gradient (a correlation of x with dy) apart
  auto onlyDx = jit([o](Tensor a, Tensor k, Tensor u) { return vjp([o](Tensor p, Tensor q) { return conv2d(p, q, o); }, a, k).second(u)[0]; },
                    {.threads = 1});
  auto onlyDw = jit([o](Tensor a, Tensor k, Tensor u) { return vjp([o](Tensor p, Tensor q) { return conv2d(p, q, o); }, a, k).second(u)[1]; },
                    {.threads = 1});
  auto [tdx, tdw] = interleaved([&] { dx = onlyDx(x, w, dy); }, [&] { dw = onlyDw(x, w, dy); }, reps, [&] {
    onlyDx.wait_optimized();
    onlyDw.wait_optimized();
  });
  std::printf("conv 3x3 %lldx64x56x56 -> 64 f32 backward: input gradient alone %7.1f ms, kernel gradient alone %7.1f ms\n",
              static_cast<long long>(g.n), tdx * 1e3, tdw * 1e3);

  // bias + relu after the conv (a tile epilogue of the conv's product when fused)
  const Shape bs{g.o};
  const Array bias(filled(std::size_t(g.o), 3), bs);
  auto forwardBiasRelu = jit([o](Tensor a, Tensor k, Tensor b) { return relu(conv2d(a, k, b, o)); }, {.threads = 1});
  Array yb = forwardBiasRelu(x, w, bias);
  forwardBiasRelu.wait_optimized();
  auto blasBiasRelu = [&] {
    blasForward();
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t oc = 0; oc < g.o; ++oc) {
        float* row = out.data() + n * imageOut + oc * g.cols();
        const float bv = static_cast<const float*>(bias.raw())[oc];
        for (int64_t q = 0; q < g.cols(); ++q) row[q] = std::max(row[q] + bv, 0.0f);
      }
  };
  auto [tr, br] = interleaved([&] { yb = forwardBiasRelu(x, w, bias); }, blasBiasRelu, reps);
  std::printf("conv 3x3 %lldx64x56x56 -> 64 f32 +bias+relu adjit %7.1f ms   im2col+sgemm+loop %7.1f ms   ratio %.2fx\n",
              static_cast<long long>(g.n), tr * 1e3, br * 1e3, tr / br);

  // the gradients of sum(conv(x, w) * dy) in x and w, forward included (as conv_torch.py's forward+backward)
  auto both = jit(value_and_grad([o](Tensor a, Tensor k, Tensor u) { return sum(conv2d(a, k, o) * u); }, argnums<0, 1>),
                  {.threads = 1});
  Array dx2, dw2;
  auto forwardBackward = [&] {
    auto [v, gr] = both(x, w, dy);
    std::tie(dx2, dw2) = gr;
  };
  auto [tfb, bfb] = interleaved(forwardBackward, [&] { blasForward(); blasBackward(); }, reps, [&] { both.wait_optimized(); });
  std::printf("conv 3x3 %lldx64x56x56 -> 64 f32 fwd+bwd   adjit %7.1f ms   im2col+sgemm %7.1f ms   ratio %.2fx\n",
              static_cast<long long>(g.n), tfb * 1e3, bfb * 1e3, tfb / bfb);

  // LeNet-5 as conv_torch.py's: conv 1->6 5x5, relu, max_pool 2, conv 6->16 5x5, relu, max_pool 2, 400->120->84->10
  const int64_t batch = 64;
  std::vector<Array> params;
  const std::vector<Shape> shapes{{6, 1, 5, 5}, {6}, {16, 6, 5, 5}, {16}, {400, 120}, {120}, {120, 84}, {84}, {84, 10}, {10}};
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    std::vector<float> v = filled(std::size_t(num_elements(shapes[i])), 4.0 + double(i));
    for (float& e : v) e *= 0.1f;
    params.emplace_back(v, shapes[i]);
  }
  const Shape is{batch, 1, 32, 32}, ls{batch, 10};
  const Array images(filled(std::size_t(num_elements(is)), 20), is), gl(filled(std::size_t(num_elements(ls)), 21), ls);
  auto lenet = [](Tensor im, Tensor c1, Tensor b1, Tensor c2, Tensor b2, Tensor f1, Tensor e1, Tensor f2, Tensor e2, Tensor f3,
                  Tensor e3) {
    Tensor h = max_pool2d(relu(conv2d(im, c1, b1)), {2});
    h = max_pool2d(relu(conv2d(h, c2, b2)), {2});
    h = reshape(h, {h.shape()[0], 400});
    h = relu(matmul(h, f1) + e1);
    h = relu(matmul(h, f2) + e2);
    return matmul(h, f3) + e3;
  };
  auto lenetForward = jit(lenet, {.threads = 1});
  auto lenetGrad = jit(value_and_grad([lenet](Tensor im, Tensor u, Tensor c1, Tensor b1, Tensor c2, Tensor b2, Tensor f1, Tensor e1,
                                              Tensor f2, Tensor e2, Tensor f3, Tensor e3) {
                         return sum(lenet(im, c1, b1, c2, b2, f1, e1, f2, e2, f3, e3) * u);
                       }, argnums<2, 3, 4, 5, 6, 7, 8, 9, 10, 11>),
                       {.threads = 1});
  const auto& P = params;
  auto runForward = [&] { lenetForward(images, P[0], P[1], P[2], P[3], P[4], P[5], P[6], P[7], P[8], P[9]); };
  auto runGrad = [&] { lenetGrad(images, gl, P[0], P[1], P[2], P[3], P[4], P[5], P[6], P[7], P[8], P[9]); };
  const int lreps = quick ? 21 : 201;
  auto [lf, lg] = interleaved(runForward, runGrad, lreps, [&] {
    lenetForward.wait_optimized();
    lenetGrad.wait_optimized();
  });
  std::printf("lenet-5 batch %lld f32 forward            adjit %8.3f ms\n", static_cast<long long>(batch), lf * 1e3);
  std::printf("lenet-5 batch %lld f32 forward+backward   adjit %8.3f ms\n", static_cast<long long>(batch), lg * 1e3);
  // where LeNet's gradient goes: the gradient of the network cut after its first and second conv blocks
  auto block1 = jit(value_and_grad([](Tensor im, Tensor u, Tensor c1, Tensor b1) {
                      return sum(max_pool2d(relu(conv2d(im, c1, b1)), {2}) * u);
                    }, argnums<2, 3>),
                    {.threads = 1});
  auto block2 = jit(value_and_grad([](Tensor im, Tensor u, Tensor c1, Tensor b1, Tensor c2, Tensor b2) {
                      Tensor h = max_pool2d(relu(conv2d(im, c1, b1)), {2});
                      return sum(max_pool2d(relu(conv2d(h, c2, b2)), {2}) * u);
                    }, argnums<2, 3, 4, 5>),
                    {.threads = 1});
  const Shape u1s{batch, 6, 14, 14}, u2s{batch, 16, 5, 5};
  const Array u1(filled(std::size_t(num_elements(u1s)), 22), u1s), u2(filled(std::size_t(num_elements(u2s)), 23), u2s);
  auto [b1t, b2t] = interleaved([&] { block1(images, u1, P[0], P[1]); }, [&] { block2(images, u2, P[0], P[1], P[2], P[3]); }, lreps,
                                [&] {
                                  block1.wait_optimized();
                                  block2.wait_optimized();
                                });
  std::printf("lenet-5 gradient cut after conv block 1 %8.3f ms, after conv block 2 %8.3f ms (the rest: the three layers of matmuls)\n",
              b1t * 1e3, b2t * 1e3);
  return 0;
}
