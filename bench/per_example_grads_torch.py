#!/usr/bin/python3
"""PyTorch's per-example gradients of the MLP of bench/vmap_bench.cpp: the
baseline (c) of its per-example gradient section, run by hand (PyTorch cannot
run in-process from C++; Debian's python3-torch 1.13 ships functorch).

The same problem as adjit_vmap_bench: a 784-256-10 tanh MLP, softmax
cross-entropy, batch 256, f32, one thread; the gradients of every example
with respect to all four parameters by functorch.vmap(functorch.grad(loss)),
and for reference a Python loop of torch.autograd.grad calls. Prints median
times of interleaved runs; asserts nothing.

    /usr/bin/python3 bench/per_example_grads_torch.py [--quick]
"""
import statistics
import sys
import time

import torch
from functorch import grad, vmap

B, IN, HIDDEN, OUT = 256, 784, 256, 10


def loss(params, x, y):
    w1, b1, w2, b2 = params
    h = torch.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    return torch.logsumexp(logits, 0) - (logits * y).sum()


def main(argv):
    reps = 5 if '--quick' in argv else 21
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(53)

    def uniform(*shape, lo, hi):
        return torch.rand(*shape, generator=gen) * (hi - lo) + lo

    params = (uniform(IN, HIDDEN, lo=-0.05, hi=0.05), uniform(HIDDEN, lo=-0.1, hi=0.1),
              uniform(HIDDEN, OUT, lo=-0.1, hi=0.1), uniform(OUT, lo=-0.1, hi=0.1))
    xs = uniform(B, IN, lo=0.0, hi=1.0)
    ys = torch.zeros(B, OUT)
    ys[torch.arange(B), (torch.arange(B) * 7) % OUT] = 1.0

    per_example = vmap(grad(loss), in_dims=(None, 0, 0))

    def run_vmap():
        return per_example(params, xs, ys)

    leaves = [p.clone().requires_grad_(True) for p in params]

    def run_loop():
        out = []
        for b in range(B):
            out.append(torch.autograd.grad(loss(leaves, xs[b], ys[b]), leaves))
        return out

    # The two agree (example 3).
    got, want = run_vmap(), run_loop()
    diff = max(float((g[3] - w).abs().max()) for g, w in zip(got, want[3]))
    tv, tl = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        run_vmap()
        tv.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        run_loop()
        tl.append((time.perf_counter() - t0) * 1e3)
    v, lp = statistics.median(tv), statistics.median(tl)
    print(f'per-example gradients: 784-256-10 tanh MLP, batch {B}, f32, PyTorch {torch.__version__}, '
          f'{torch.get_num_threads()} thread')
    print(f'PEG  functorch vmap(grad) {v:8.3f} ms   loop of {B} autograd.grad calls {lp:8.3f} ms   '
          f'(max abs. diff {diff:.1e})')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
