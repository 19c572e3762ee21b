#!/usr/bin/python3
"""PyTorch 1.13's batched small factorisations: the baseline of the
small-matrix rows of bench/linalg_bench.cpp, run by hand (PyTorch cannot run
in-process from C++).

The same problems as adjit_linalg_bench's small rows: 1000 × 8×8 and
100 × 32×32 symmetric positive definite matrices (x xᵀ + n I, x[i] =
sin(0.37 i + b)), one right-hand side b[i] = cos(0.1 i), f32 and f64, one
thread. Times torch.linalg.cholesky, torch.cholesky_solve on its factor, the
two together, and the forward and backward pass of
sum(cholesky_solve(B, cholesky(A)) * W) with respect to A and B. Prints the
median time of each (microseconds) in the format adjit_linalg_bench prints its
own small rows, so the two can be read side by side; asserts nothing.

    /usr/bin/python3 bench/linalg_torch_small.py [--quick]
"""
import math
import statistics
import sys
import time

import torch

SIZES = [(1000, 8), (100, 32)]  # (batch, n), as bench/linalg_bench.cpp


def spd(batch, n, dtype):
    i = torch.arange(n * n, dtype=torch.float64)
    x = torch.stack([torch.sin(0.37 * i + b) for b in range(batch)]).reshape(batch, n, n)
    a = x @ x.transpose(-1, -2) + n * torch.eye(n, dtype=torch.float64)
    return a.to(dtype)


def median_us(f, reps, budget):
    f()
    times = []
    total = 0.0
    while len(times) < reps or total < budget:
        t0 = time.perf_counter()
        f()
        dt = time.perf_counter() - t0
        times.append(dt)
        total += dt
    return statistics.median(times) * 1e6


def main(argv):
    quick = '--quick' in argv
    reps, budget = (5, 0.05) if quick else (21, 0.3)
    torch.set_num_threads(1)
    print(f'PyTorch {torch.__version__}, {torch.get_num_threads()} thread; medians, microseconds')
    for dtype, name in ((torch.float64, 'f64'), (torch.float32, 'f32')):
        for batch, n in SIZES:
            A = spd(batch, n, dtype)
            B = torch.cos(0.1 * torch.arange(batch * n, dtype=torch.float64)).reshape(batch, n, 1).to(dtype)
            W = torch.sin(0.3 * torch.arange(batch * n, dtype=torch.float64)).reshape(batch, n, 1).to(dtype)
            L = torch.linalg.cholesky(A)
            Ag = A.clone().requires_grad_(True)
            Bg = B.clone().requires_grad_(True)

            def grad():
                loss = (torch.cholesky_solve(Bg, torch.linalg.cholesky(Ag)) * W).sum()
                return torch.autograd.grad(loss, (Ag, Bg))

            cases = [
                ('cholesky', lambda: torch.linalg.cholesky(A)),
                ('cho_solve', lambda: torch.cholesky_solve(B, L)),
                ('cholesky + cho_solve', lambda: torch.cholesky_solve(B, torch.linalg.cholesky(A))),
                ('grad of sum(cho_solve(cholesky) * w)', grad),
            ]
            for label, f in cases:
                us = median_us(f, reps, budget)
                print(f'{name} {label:<38} {batch:5d} x [{n:2d}, {n:2d}]   torch {us:10.1f} us'
                      f'   ({us * 1e3 / batch:8.1f} ns per matrix)')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
