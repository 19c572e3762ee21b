#!/usr/bin/python3
"""PyTorch's side of bench/sort_bench.cpp: torch.sort and torch.topk on the
same f32 inputs, one thread. With --serve (bench/torch_peer.h) adjit_sort_bench
runs it as a child process taking turns with adjit, and prints the ratios;
by hand it prints the median and best time of each case on inputs of its own.
Asserts nothing.

    /usr/bin/python3 bench/sort_torch.py [N]
    /usr/bin/python3 bench/sort_torch.py --serve DIR N ROWS COLS

--serve reads x.f32 (N floats) and xb.f32 (ROWS x COLS floats; raw
little-endian, row-major) from DIR; prints "ready torch VERSION" (or
"unavailable: REASON" and exits), then answers each request line "CASE CALLS"
with one line: a checksum of the last call's values (sum over rows of
sum_i (i + 1) * v_i in float64, which depends on their order), then each
call's time in ms. Cases: sort, sort_stable (torch.sort along the last axis of
x, default and stable=True: values and int64 indices), rows, rows_stable (the
same on xb), topk10, topk1000 (torch.topk of x, sorted, values and indices).
"""
import statistics
import sys
import time

try:
    import torch
    import torch_serve
except ImportError as e:
    print(f'unavailable: {e}', flush=True)
    sys.exit(0)


def checksum(values):
    v = values.double().reshape(-1, values.shape[-1])
    weights = torch.arange(1, v.shape[1] + 1, dtype=torch.float64)
    return float((v * weights).sum())


def cases_of(x, xb):
    return {
        'sort': lambda: torch.sort(x),
        'sort_stable': lambda: torch.sort(x, stable=True),
        'rows': lambda: torch.sort(xb, dim=-1),
        'rows_stable': lambda: torch.sort(xb, dim=-1, stable=True),
        'topk10': lambda: torch.topk(x, 10),
        'topk1000': lambda: torch.topk(x, 1000),
    }


def serve(folder, n, rows, cols):
    torch_serve.one_thread()

    cases = cases_of(torch_serve.load_f32(folder, 'x', n), torch_serve.load_f32(folder, 'xb', rows, cols))
    return torch_serve.serve(cases, lambda result: checksum(result[0]))


def main(argv):
    if len(argv) > 1 and argv[1] == '--serve':
        return serve(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
    torch_serve.one_thread()
    n = int(argv[1]) if len(argv) > 1 else 1000000
    gen = torch.Generator().manual_seed(52)
    cases = cases_of(torch.randn(n, generator=gen), torch.randn(10000, 100, generator=gen))
    for name, fn in cases.items():
        fn()
        times = []
        for _ in range(7):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        print(f'torch {name:12s} median {statistics.median(times) * 1e3:8.3f} ms (best {min(times) * 1e3:8.3f})')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
