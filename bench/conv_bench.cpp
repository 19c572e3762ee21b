// bench/conv_bench.cpp — adjit's conv against PyTorch 1.13 (oneDNN
// underneath) and against a straightforward im2col + OpenBLAS sgemm
// baseline, one thread each: a ResNet-style 3×3 convolution (batch 32,
// 64→64 channels, 56×56, stride 1, padding 1, f32), forward, forward with
// bias and relu, both gradients, each gradient alone, and forward+backward;
// then LeNet-5 (batch 64, 32×32) forward, gradient, and the gradient cut
// after each conv block. PyTorch runs bench/conv_torch.py --serve in a child
// process (bench/torch_peer.h) taking turns with this one on the same inputs:
// every side of a row runs in turn, round after round (bench/compare.h);
// times are medians of the rounds, ratios medians [quartiles] of the rounds'
// ratios, and a relative difference of checksums (sums of squares of the
// results) says both computed the same thing. Not a test.
//
//   adjit_conv_bench [--quick] [--rounds R] [--only ROW,ROW...]
// --quick: batch 4 for the ResNet conv and fewer rounds. Rows: fwd, bwd,
// dx, dw, bias, fwdbwd, lenet, blocks. ADJIT_BENCH_PYTHON names the Python
// with torch (default /usr/bin/python3; empty: no PyTorch column).
#include <adjit/adjit.h>

#include <cblas.h>
#include <stdlib.h>

#include "compare.h"
#include "torch_peer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

extern "C" void openblas_set_num_threads(int);

using namespace adjit;

namespace {

std::vector<float> filled(std::size_t n, double phase, float scale = 1.0f) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(std::sin(0.37 * double(i) + phase));
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


/// The sum of squares of the arrays' elements: the checksum conv_torch.py prints.
double checksum(const std::vector<Array>& results) {
  double s = 0;
  for (const Array& a : results)
    for (int64_t i = 0; i < a.size(); ++i) s += a.at(i) * a.at(i);
  return s;
}

std::string only;

bool wanted(const char* row) {
  if (only.empty()) return true;
  const std::string list = "," + only + ",";
  return list.find("," + std::string(row) + ",") != std::string::npos;
}

} // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int rounds = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
  }
  if (rounds < 1) rounds = quick ? 5 : 7;
  openblas_set_num_threads(1);
  const Geometry g{quick ? 4 : 32, 64, 64, 56, 56, 3, 1};
  const Shape xs{g.n, g.c, g.h, g.w}, ws{g.o, g.c, g.k, g.k}, ys{g.n, g.o, g.h, g.w}, bs{g.o};
  const Array x(filled(std::size_t(num_elements(xs)), 0), xs), w(filled(std::size_t(num_elements(ws)), 1, 0.05f), ws),
      dy(filled(std::size_t(num_elements(ys)), 2), ys), bias(filled(std::size_t(g.o), 3, 0.1f), bs);

  // LeNet-5 as conv_torch.py's: conv 1->6 5x5, relu, max_pool 2, conv 6->16 5x5, relu, max_pool 2, 400->120->84->10
  const int64_t batch = 64;
  std::vector<Array> P;
  const std::vector<Shape> shapes{{6, 1, 5, 5}, {6}, {16, 6, 5, 5}, {16}, {400, 120}, {120}, {120, 84}, {84}, {84, 10}, {10}};
  for (std::size_t i = 0; i < shapes.size(); ++i) P.emplace_back(filled(std::size_t(num_elements(shapes[i])), 4.0 + double(i), 0.1f), shapes[i]);
  const Shape is{batch, 1, 32, 32}, ls{batch, 10}, u1s{batch, 6, 14, 14}, u2s{batch, 16, 5, 5};
  const Array images(filled(std::size_t(num_elements(is)), 20), is), gl(filled(std::size_t(num_elements(ls)), 21), ls),
      u1(filled(std::size_t(num_elements(u1s)), 22), u1s), u2(filled(std::size_t(num_elements(u2s)), 23), u2s);

  // PyTorch in a child process, on the same inputs
  std::unique_ptr<bench::TorchPeer> torch;
  const char* py = std::getenv("ADJIT_BENCH_PYTHON");
  std::string folder = "/tmp/adjit_conv_bench.XXXXXX";
  if ((!py || *py) && mkdtemp(folder.data())) {
    auto raw = [](const Array& a) { return static_cast<const float*>(a.raw()); };
    std::vector<bench::TorchPeer::Input> inputs{{"x.f32", raw(x), long(x.size())},          {"w.f32", raw(w), long(w.size())},
                                                {"b.f32", raw(bias), long(bias.size())},    {"g.f32", raw(dy), long(dy.size())},
                                                {"images.f32", raw(images), long(images.size())}, {"gl.f32", raw(gl), long(gl.size())},
                                                {"u1.f32", raw(u1), long(u1.size())},       {"u2.f32", raw(u2), long(u2.size())}};
    for (std::size_t i = 0; i < P.size(); ++i) inputs.push_back({"p" + std::to_string(i) + ".f32", raw(P[i]), long(P[i].size())});
    torch = std::make_unique<bench::TorchPeer>(py ? py : "/usr/bin/python3", ADJIT_BENCH_DIR "/conv_torch.py", folder, inputs,
                                               std::vector<std::string>{std::to_string(g.n)});
  }
  const bool withTorch = torch && torch->available();
  std::printf("adjit against PyTorch (%s) and im2col + OpenBLAS sgemm, one thread each; times are medians of %d rounds in which "
              "every side runs in turn, ratios = adjit / other, median [quartiles] of the rounds' ratios\n",
              torch ? torch->status().c_str() : "unavailable: disabled by ADJIT_BENCH_PYTHON", rounds);

  // One row: adjit's side (its results' checksum from `results`), PyTorch's case `torchCase` (or none), and a local baseline (or none).
  auto row = [&](const char* label, int calls, const std::function<void()>& adjitCall, const std::function<std::vector<Array>()>& results,
                 const char* torchCase, const std::function<void()>& baseline, const char* baselineName) {
    bench::Side a{bench::batchOf(adjitCall, calls + 1)}, b, t;
    double torchSum = 0;
    if (baseline) b.round = bench::batchOf(baseline, calls + 1);
    if (withTorch && torchCase)
      t.round = [&, torchCase, calls] {
        std::vector<double> times = torch->run(torchCase, calls + 1, torchSum);
        if (times.size() < 2) return 0.0;
        double sum = 0;
        for (std::size_t i = 1; i < times.size(); ++i) sum += times[i];
        return sum / double(times.size() - 1);
      };
    std::vector<bench::Side*> sides{&a};
    if (b.round) sides.push_back(&b);
    if (t.round) sides.push_back(&t);
    bench::interleave(sides, rounds);
    std::printf("%-44s adjit %8.3f ms", label, bench::median(a));
    if (t.round && torch->available()) {
      const double mine = checksum(results());
      std::printf("   PyTorch %8.3f ms  ratio %s (checksums differ by %.1e)", bench::median(t),
                  bench::ratioText(bench::ratioOf(a, t)).c_str(), std::fabs(mine - torchSum) / std::max(std::fabs(torchSum), 1e-300));
    }
    if (b.round) std::printf("   %s %8.3f ms  ratio %s", baselineName, bench::median(b), bench::ratioText(bench::ratioOf(a, b)).c_str());
    std::printf("\n");
    std::fflush(stdout);
  };

  const TorchConvOptions o{.padding = {1}};
  const std::string conv = "conv 3x3 " + std::to_string(g.n) + "x64x56x56 -> 64 f32 ";
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
  auto gradOf = [o](int which) {
    return jit([o, which](Tensor a, Tensor k, Tensor u) {
      return vjp([o](Tensor p, Tensor q) { return conv2d(p, q, o); }, a, k).second(u)[static_cast<std::size_t>(which)];
    }, {.threads = 1});
  };
  if (wanted("fwd")) {
    auto forward = jit([o](Tensor a, Tensor k) { return conv2d(a, k, o); }, {.threads = 1});
    Array y = forward(x, w);
    forward.wait_optimized(); // time the optimised code (JitOptions::tiers)
    blasForward();
    double err = 0;
    for (std::size_t i = 0; i < out.size(); ++i) err = std::max(err, std::fabs(double(y.at(int64_t(i))) - out[i]));
    std::printf("%sforward: max abs diff from im2col+sgemm %.1e\n", conv.c_str(), err);
    row((conv + "forward").c_str(), 1, [&] { y = forward(x, w); }, [&] { return std::vector<Array>{y}; }, "fwd", blasForward, "im2col+sgemm");
  }
  if (wanted("bwd")) {
    auto backward = jit([o](Tensor a, Tensor k, Tensor u) {
      auto [y, back] = vjp([o](Tensor p, Tensor q) { return conv2d(p, q, o); }, a, k);
      std::vector<Tensor> grads = back(u);
      return std::make_tuple(grads[0], grads[1]);
    }, {.threads = 1});
    auto [dx, dw] = backward(x, w, dy);
    backward.wait_optimized();
    blasBackward();
    double errX = 0, errW = 0, scaleW = 0;
    for (std::size_t i = 0; i < bdx.size(); ++i) errX = std::max(errX, std::fabs(double(dx.at(int64_t(i))) - bdx[i]));
    for (std::size_t i = 0; i < bdw.size(); ++i) {
      errW = std::max(errW, std::fabs(double(dw.at(int64_t(i))) - bdw[i]));
      scaleW = std::max(scaleW, std::fabs(double(bdw[i])));
    }
    std::printf("%sbackward: max abs diff from im2col+sgemm dx %.1e, dw %.1e of %.1e\n", conv.c_str(), errX, errW, scaleW);
    row((conv + "backward (dx, dw)").c_str(), 1, [&] { std::tie(dx, dw) = backward(x, w, dy); },
        [&] { return std::vector<Array>{dx, dw}; }, "bwd", blasBackward, "im2col+sgemm");
  }
  if (wanted("dx")) { // the input gradient: a conv of dy with the flipped kernel
    auto onlyDx = gradOf(0);
    Array dx = onlyDx(x, w, dy);
    onlyDx.wait_optimized();
    row((conv + "input gradient alone").c_str(), 1, [&] { dx = onlyDx(x, w, dy); }, [&] { return std::vector<Array>{dx}; }, "dx", {}, "");
  }
  if (wanted("dw")) { // the kernel gradient: a correlation of x with dy
    auto onlyDw = gradOf(1);
    Array dw = onlyDw(x, w, dy);
    onlyDw.wait_optimized();
    row((conv + "kernel gradient alone").c_str(), 1, [&] { dw = onlyDw(x, w, dy); }, [&] { return std::vector<Array>{dw}; }, "dw", {}, "");
  }
  if (wanted("bias")) { // bias + relu after the conv (a tile epilogue of the conv's product)
    auto forwardBiasRelu = jit([o](Tensor a, Tensor k, Tensor b) { return relu(conv2d(a, k, b, o)); }, {.threads = 1});
    Array yb = forwardBiasRelu(x, w, bias);
    forwardBiasRelu.wait_optimized();
    auto blasBiasRelu = [&] {
      blasForward();
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t oc = 0; oc < g.o; ++oc) {
          float* r = out.data() + n * imageOut + oc * g.cols();
          const float bv = static_cast<const float*>(bias.raw())[oc];
          for (int64_t q = 0; q < g.cols(); ++q) r[q] = std::max(r[q] + bv, 0.0f);
        }
    };
    row((conv + "+bias+relu").c_str(), 1, [&] { yb = forwardBiasRelu(x, w, bias); }, [&] { return std::vector<Array>{yb}; },
        "fwd_bias_relu", blasBiasRelu, "im2col+sgemm+loop");
  }
  if (wanted("fwdbwd")) { // the gradients of sum(conv(x, w) * dy) in x and w, forward included
    auto both = jit(value_and_grad([o](Tensor a, Tensor k, Tensor u) { return sum(conv2d(a, k, o) * u); }, argnums<0, 1>),
                    {.threads = 1});
    Array dx2, dw2;
    auto forwardBackward = [&] {
      auto [v, gr] = both(x, w, dy);
      std::tie(dx2, dw2) = gr;
    };
    forwardBackward();
    both.wait_optimized();
    row((conv + "fwd+bwd").c_str(), 1, forwardBackward, [&] { return std::vector<Array>{dx2, dw2}; }, "fwd_bwd",
        [&] {
          blasForward();
          blasBackward();
        },
        "im2col+sgemm");
  }

  auto lenet = [](Tensor im, Tensor c1, Tensor b1, Tensor c2, Tensor b2, Tensor f1, Tensor e1, Tensor f2, Tensor e2, Tensor f3,
                  Tensor e3) {
    Tensor h = max_pool2d(relu(conv2d(im, c1, b1)), {2});
    h = max_pool2d(relu(conv2d(h, c2, b2)), {2});
    h = reshape(h, {h.shape()[0], 400});
    h = relu(matmul(h, f1) + e1);
    h = relu(matmul(h, f2) + e2);
    return matmul(h, f3) + e3;
  };
  const int lcalls = quick ? 5 : 20;
  if (wanted("lenet")) {
    auto lenetForward = jit(lenet, {.threads = 1});
    auto lenetGrad = jit(value_and_grad([lenet](Tensor im, Tensor u, Tensor c1, Tensor b1, Tensor c2, Tensor b2, Tensor f1, Tensor e1,
                                                Tensor f2, Tensor e2, Tensor f3, Tensor e3) {
                           return sum(lenet(im, c1, b1, c2, b2, f1, e1, f2, e2, f3, e3) * u);
                         }, argnums<2, 3, 4, 5, 6, 7, 8, 9, 10, 11>),
                         {.threads = 1});
    Array logits;
    std::vector<Array> grads;
    auto runForward = [&] { logits = lenetForward(images, P[0], P[1], P[2], P[3], P[4], P[5], P[6], P[7], P[8], P[9]); };
    auto runGrad = [&] {
      auto [v, gr] = lenetGrad(images, gl, P[0], P[1], P[2], P[3], P[4], P[5], P[6], P[7], P[8], P[9]);
      grads.clear();
      std::apply([&](auto&... a) { (grads.push_back(a), ...); }, gr);
    };
    runForward();
    runGrad();
    lenetForward.wait_optimized();
    lenetGrad.wait_optimized();
    row("lenet-5 batch 64 f32 forward", lcalls, runForward, [&] { return std::vector<Array>{logits}; }, "lenet_fwd", {}, "");
    row("lenet-5 batch 64 f32 forward+backward", lcalls, runGrad, [&] { return grads; }, "lenet_grad", {}, "");
  }
  if (wanted("blocks")) { // where LeNet's gradient goes: the network cut after its first and second conv blocks
    auto block1 = jit(value_and_grad([](Tensor im, Tensor u, Tensor c1, Tensor b1) {
                        return sum(max_pool2d(relu(conv2d(im, c1, b1)), {2}) * u);
                      }, argnums<2, 3>),
                      {.threads = 1});
    auto block2 = jit(value_and_grad([](Tensor im, Tensor u, Tensor c1, Tensor b1, Tensor c2, Tensor b2) {
                        Tensor h = max_pool2d(relu(conv2d(im, c1, b1)), {2});
                        return sum(max_pool2d(relu(conv2d(h, c2, b2)), {2}) * u);
                      }, argnums<2, 3, 4, 5>),
                      {.threads = 1});
    std::vector<Array> g1, g2;
    auto run1 = [&] {
      auto [v, gr] = block1(images, u1, P[0], P[1]);
      g1 = {std::get<0>(gr), std::get<1>(gr)};
    };
    auto run2 = [&] {
      auto [v, gr] = block2(images, u2, P[0], P[1], P[2], P[3]);
      g2 = {std::get<0>(gr), std::get<1>(gr), std::get<2>(gr), std::get<3>(gr)};
    };
    run1();
    run2();
    block1.wait_optimized();
    block2.wait_optimized();
    row("lenet-5 gradient cut after conv block 1", lcalls, run1, [&] { return g1; }, "lenet_block1", {}, "");
    row("lenet-5 gradient cut after conv block 2", lcalls, run2, [&] { return g2; }, "lenet_block2", {}, "");
  }
  return 0;
}
