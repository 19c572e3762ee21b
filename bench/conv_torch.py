#!/usr/bin/python3
"""PyTorch's side of bench/conv_bench.cpp: the same convolutions and the same
LeNet-5, one thread (PyTorch 1.13's CPU convolution runs oneDNN). By hand it
prints the median and best time of each case on inputs of its own; with
--serve (bench/torch_peer.h) adjit_conv_bench runs it as a child process
taking turns with adjit on the same inputs, and prints the ratios. Asserts
nothing.

Cases (f32):
- ResNet 3x3: x [32, 64, 56, 56], w [64, 64, 3, 3], stride 1, padding 1:
  conv forward; conv + bias + relu forward; the gradients of
  sum(conv(x, w) * g) in x and w (forward and backward).
- LeNet-5, batch 64, 32x32 input: conv 1->6 5x5, relu, max_pool 2,
  conv 6->16 5x5, relu, max_pool 2, fc 400->120 relu, 120->84 relu, 84->10;
  forward, and the gradients of sum(logits * g) in all ten parameters.

    /usr/bin/python3 bench/conv_torch.py [--quick]
    /usr/bin/python3 bench/conv_torch.py --serve DIR N

--serve reads the inputs (raw little-endian f32, row-major) from DIR: x, w,
b, g of the ResNet conv at batch N, the LeNet's ten parameters p0..p9, its
images, its output cotangent gl and the cut blocks' u1 and u2; prints "ready
torch VERSION" (or "unavailable: REASON" and exits), then answers each
request line "CASE CALLS" with one line: a checksum of the last call's
results (the sum of their squares, float64), then each call's time in ms.
Cases: fwd, fwd_bias_relu, dx, dw, bwd (both gradients from dy), fwd_bwd
(autograd through the forward), lenet_fwd, lenet_grad, lenet_block1,
lenet_block2 (the gradient cut after the first or second conv block).
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import torch_serve


def timed(fn, reps):
    """'median M ms (best B)' over reps runs; adjit_conv_bench prints best times."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return f'median {statistics.median(times) * 1e3:8.3f} ms (best {min(times) * 1e3:8.3f})'


def lenet(params, x):
    c1, b1, c2, b2, f1, e1, f2, e2, f3, e3 = params
    h = F.max_pool2d(F.relu(F.conv2d(x, c1, b1)), 2)
    h = F.max_pool2d(F.relu(F.conv2d(h, c2, b2)), 2)
    h = h.reshape(h.shape[0], 400)
    h = F.relu(h @ f1 + e1)
    h = F.relu(h @ f2 + e2)
    return h @ f3 + e3


def checksum(results):
    return float(sum((r.double() ** 2).sum() for r in results))


def serve(folder, n):
    torch_serve.one_thread()

    def load(name, *shape):
        return torch_serve.load_f32(folder, name, *shape)

    x, w, b, g = load('x', n, 64, 56, 56), load('w', 64, 64, 3, 3), load('b', 64), load('g', n, 64, 56, 56)
    shapes = [(6, 1, 5, 5), (6,), (16, 6, 5, 5), (16,), (400, 120), (120,), (120, 84), (84,), (84, 10), (10,)]
    params = [load(f'p{i}', *s) for i, s in enumerate(shapes)]
    images, gl = load('images', 64, 1, 32, 32), load('gl', 64, 10)
    u1, u2 = load('u1', 64, 6, 14, 14), load('u2', 64, 16, 5, 5)

    def conv_backward(mask):
        # aten's convolution backward: the gradients PyTorch's autograd computes, alone
        return [r for r in torch.ops.aten.convolution_backward(g, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask)
                if r is not None]

    def autograd(fn, inputs):
        leaves = [t.clone().requires_grad_() for t in inputs]
        return torch.autograd.grad(fn(*leaves), leaves)

    def block(depth, u):
        def loss(c1, b1, c2=None, b2=None):
            h = F.max_pool2d(F.relu(F.conv2d(images, c1, b1)), 2)
            if depth == 2:
                h = F.max_pool2d(F.relu(F.conv2d(h, c2, b2)), 2)
            return (h * u).sum()
        return lambda: autograd(loss, params[:2 * depth])

    cases = {
        'fwd': lambda: [F.conv2d(x, w, padding=1)],
        'fwd_bias_relu': lambda: [F.relu(F.conv2d(x, w, b, padding=1))],
        'dx': lambda: conv_backward([True, False, False]),
        'dw': lambda: conv_backward([False, True, False]),
        'bwd': lambda: conv_backward([True, True, False]),
        'fwd_bwd': lambda: autograd(lambda xr, wr: (F.conv2d(xr, wr, padding=1) * g).sum(), [x, w]),
        'lenet_fwd': lambda: [lenet(params, images)],
        'lenet_grad': lambda: autograd(lambda *ps: (lenet(ps, images) * gl).sum(), params),
        'lenet_block1': block(1, u1),
        'lenet_block2': block(2, u2),
    }
    return torch_serve.serve(cases, checksum, no_grad={'fwd', 'fwd_bias_relu', 'dx', 'dw', 'bwd', 'lenet_fwd'})


def main(argv):
    if len(argv) > 1 and argv[1] == '--serve':
        return serve(argv[2], int(argv[3]))
    quick = '--quick' in argv
    reps = 3 if quick else 11
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(52)

    def uniform(*shape, scale=1.0):
        return (torch.rand(*shape, generator=gen) * 2 - 1) * scale

    n = 4 if quick else 32
    x = uniform(n, 64, 56, 56)
    w = uniform(64, 64, 3, 3, scale=0.05)
    b = uniform(64, scale=0.1)
    g = uniform(n, 64, 56, 56)

    def forward():
        with torch.no_grad():
            F.conv2d(x, w, padding=1)

    def forward_bias_relu():
        with torch.no_grad():
            F.relu(F.conv2d(x, w, b, padding=1))

    def backward():
        xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
        torch.autograd.grad((F.conv2d(xr, wr, padding=1) * g).sum(), (xr, wr))

    for name, fn in (('forward', forward), ('forward+bias+relu', forward_bias_relu), ('forward+backward', backward)):
        print(f'torch conv 3x3 {n}x64x56x56 -> 64 f32 {name:18s} {timed(fn, reps)}')

    batch = 64
    params = [uniform(6, 1, 5, 5, scale=0.2), uniform(6, scale=0.1), uniform(16, 6, 5, 5, scale=0.08),
              uniform(16, scale=0.1), uniform(400, 120, scale=0.05), uniform(120, scale=0.1),
              uniform(120, 84, scale=0.09), uniform(84, scale=0.1), uniform(84, 10, scale=0.1), uniform(10, scale=0.1)]
    images = uniform(batch, 1, 32, 32)
    gl = uniform(batch, 10)

    def lenet_forward():
        with torch.no_grad():
            lenet(params, images)

    def lenet_backward():
        ps = [p.clone().requires_grad_() for p in params]
        torch.autograd.grad((lenet(ps, images) * gl).sum(), ps)

    lreps = 21 if quick else 201
    print(f'torch lenet-5 batch {batch} f32 forward            {timed(lenet_forward, lreps)}')
    print(f'torch lenet-5 batch {batch} f32 forward+backward   {timed(lenet_backward, lreps)}')


if __name__ == '__main__':
    sys.exit(main(sys.argv))
