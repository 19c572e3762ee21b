#!/usr/bin/python3
"""PyTorch's side of bench/conv_bench.cpp: the same convolutions and the same
LeNet-5, one thread (PyTorch 1.13's CPU convolution runs oneDNN), run by hand
(PyTorch cannot run in-process from C++). Prints the median and best time of each case;
adjit_conv_bench prints adjit's for the same cases, so run the two back to
back and divide. Asserts nothing.

Cases (f32):
- ResNet 3x3: x [32, 64, 56, 56], w [64, 64, 3, 3], stride 1, padding 1:
  conv forward; conv + bias + relu forward; the gradients of
  sum(conv(x, w) * g) in x and w (forward and backward).
- LeNet-5, batch 64, 32x32 input: conv 1->6 5x5, relu, max_pool 2,
  conv 6->16 5x5, relu, max_pool 2, fc 400->120 relu, 120->84 relu, 84->10;
  forward, and the gradients of sum(logits * g) in all ten parameters.

    /usr/bin/python3 bench/conv_torch.py [--quick]
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F


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


def main(argv):
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
    main(sys.argv)
