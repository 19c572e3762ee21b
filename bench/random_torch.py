#!/usr/bin/python3
"""PyTorch's baseline of bench/bench.cpp's R1: 10^7 standard normal f32
samples on one thread with torch.randn (PyTorch's CPU generator: mt19937,
normals by a Box-Muller transform), run by hand (PyTorch cannot run
in-process from C++). Prints the median time of the runs and the sample
rate in GB/s of f32 output, as R1 does; asserts nothing. Compare with

    build/adjit_bench 21 random      # R1: adjit and the hand-written Threefry loop

run right before or after on the same machine (report the load).

    /usr/bin/python3 bench/random_torch.py [--quick]
"""
import statistics
import sys
import time

import torch

N = 10_000_000


def main(argv):
    reps = 5 if '--quick' in argv else 21
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    out = torch.empty(N, dtype=torch.float32)
    torch.randn(N, generator=gen, out=out)  # warm-up (allocation, first-touch)
    times, times_alloc = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.randn(N, generator=gen, out=out)  # into a preallocated buffer
        t1 = time.perf_counter()
        x = torch.randn(N, generator=gen)  # a fresh tensor, as adjit's jit call returns one
        t2 = time.perf_counter()
        times.append((t1 - t0) * 1e3)
        times_alloc.append((t2 - t1) * 1e3)
        del x
    for label, ts in (("into a buffer", times), ("new tensor", times_alloc)):
        ms = statistics.median(ts)
        print(f"R1   torch.randn {label:14s} {ms:9.3f} ms ({4e-6 * N / ms:.2f} GB/s)   median of {reps}, torch {torch.__version__}, "
              f"{torch.get_num_threads()} thread")


if __name__ == '__main__':
    main(sys.argv[1:])
