#!/usr/bin/python3
"""PyTorch 1.13's torch.linalg on the large problems of bench/linalg_bench.cpp:
the baseline run by hand next to adjit's (PyTorch cannot run in-process
from C++).

f64, one thread (torch.set_num_threads(1)), the same matrices as the C++
benchmark: cholesky of x xᵀ + n I, solve of a sin-filled matrix plus 2 I
with one right-hand side, eigh of a symmetric sin-filled matrix; forward,
and the gradient (torch.autograd) of sum(cholesky(a) * W),
sum(solve(a, b) * c) and sum(w * cw) + sum(v * v * W). Prints the best
time of a few runs; asserts nothing.

    /usr/bin/python3 bench/linalg_torch.py [--quick | --no-2048]
"""
import math
import sys
import time

import torch


def spd(n):
    x = torch.sin(0.37 * torch.arange(n * n, dtype=torch.float64)).reshape(n, n)
    return x @ x.T + n * torch.eye(n, dtype=torch.float64)


def symmetric(n, phase):
    i = torch.arange(n, dtype=torch.float64).reshape(n, 1)
    j = torch.arange(n, dtype=torch.float64).reshape(1, n)
    lo = torch.sin(0.37 * (i * n + j) + phase)  # element (i, j) for j <= i
    return torch.tril(lo) + torch.tril(lo, -1).T


def best(reps, fn):
    fn()
    t = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def row(what, n, seconds):
    print(f"{what:34s} [{n:4d}²]  torch {seconds * 1e3:10.2f} ms", flush=True)


def main(argv):
    torch.set_num_threads(1)
    quick = '--quick' in argv
    sizes = [512] if quick or '--no-2048' in argv else [512, 2048]
    for n in sizes:
        reps = 2 if n > 512 else (3 if quick else 7)
        a = spd(n)
        w = symmetric(n, 0.5)
        row("cholesky forward", n, best(reps, lambda: torch.linalg.cholesky(a)))

        def chol_grad():
            x = a.clone().requires_grad_()
            (torch.linalg.cholesky(x) * w).sum().backward()
        row("cholesky gradient", n, best(reps, chol_grad))

        g = torch.sin(0.37 * torch.arange(n * n, dtype=torch.float64)).reshape(n, n) + 2 * torch.eye(n, dtype=torch.float64)
        b = torch.cos(0.1 * torch.arange(n, dtype=torch.float64))
        c = torch.sin(0.3 * torch.arange(n, dtype=torch.float64))
        row("solve forward (lu + 2 solves)", n, best(reps, lambda: torch.linalg.solve(g, b)))

        def solve_grad():
            x = g.clone().requires_grad_()
            (torch.linalg.solve(x, b) * c).sum().backward()
        row("solve gradient", n, best(reps, solve_grad))

        s = symmetric(n, 0.0)
        cw = torch.cos(0.2 * torch.arange(n, dtype=torch.float64))
        ereps = 1 if n > 512 else reps
        row("eigh forward (values, vectors)", n, best(ereps, lambda: torch.linalg.eigh(s)))

        def eigh_grad():
            x = s.clone().requires_grad_()
            e, v = torch.linalg.eigh(x)
            ((e * cw).sum() + (v * v * w).sum()).backward()
        row("eigh gradient", n, best(ereps, eigh_grad))


if __name__ == '__main__':
    main(sys.argv[1:])
