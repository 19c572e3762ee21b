#!/usr/bin/python3
"""PyTorch's one-thread time for adjit_bench's MLP rows (B4 forward, G4 value
and gradient): 0.5 * sum((tanh(X @ W1) @ W2)^2) in f32, X [256, 512],
W1 [512, 512], W2 [512, 512], the gradient with respect to W1 and W2.

adjit_bench starts this script as a child process (PyTorch cannot run inside a
C++ process without libtorch) and takes turns with it: it writes the inputs
to files, then sends one request per round and times its own calls in
between, so both sides' times come from the same seconds. Standalone, it
prints the medians and quartiles of its own runs on random data.

    /usr/bin/python3 bench/mlp_torch.py [--quick]
    /usr/bin/python3 bench/mlp_torch.py --serve DIR M K N

--serve reads DIR/x.f32, DIR/w1.f32 and DIR/w2.f32 (raw little-endian f32,
row-major), prints one line "ready torch VERSION" (or "unavailable: REASON"
and exits), then answers each request line "fwd CALLS" or "grad CALLS" with
one line: the loss of the last call, then the time of each call in ms.
"""
import statistics
import sys
import time


def main(argv):
    try:
        import numpy
        import torch
    except ImportError as e:  # the caller prints the reason in its row
        print(f'unavailable: {e}', flush=True)
        return 0
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass

    def load(path, shape):
        return torch.from_numpy(numpy.fromfile(path, dtype=numpy.float32).reshape(shape))

    if len(argv) > 1 and argv[1] == '--serve':
        folder, m, k, n = argv[2], int(argv[3]), int(argv[4]), int(argv[5])
        x, w1, w2 = load(f'{folder}/x.f32', (m, k)), load(f'{folder}/w1.f32', (k, n)), load(f'{folder}/w2.f32', (n, n))
    else:
        m, k, n = 256, 512, 512
        gen = torch.Generator().manual_seed(0)
        x = torch.rand(m, k, generator=gen) * 2 - 1
        w1 = (torch.rand(k, n, generator=gen) * 2 - 1) * 0.05
        w2 = (torch.rand(n, n, generator=gen) * 2 - 1) * 0.05
    w1.requires_grad_(True)
    w2.requires_grad_(True)

    def forward():
        with torch.no_grad():
            o = torch.tanh(x @ w1) @ w2
            return 0.5 * (o * o).sum()

    def value_and_grad():
        o = torch.tanh(x @ w1) @ w2
        loss = 0.5 * (o * o).sum()
        torch.autograd.grad(loss, [w1, w2])
        return loss.detach()

    calls = {'fwd': forward, 'grad': value_and_grad}

    def timed(fn, count):
        times, value = [], 0.0
        for _ in range(count):
            t0 = time.perf_counter()
            value = fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return float(value), times

    if len(argv) > 1 and argv[1] == '--serve':
        print(f'ready torch {torch.__version__}', flush=True)
        for line in sys.stdin:
            what, count = line.split()
            value, times = timed(calls[what], int(count))
            print(f'{value:.9g} ' + ' '.join(f'{t:.6f}' for t in times), flush=True)
        return 0

    reps = 5 if '--quick' in argv else 21
    print(f'PyTorch {torch.__version__}, one thread, MLP {m}x{k}x{n} f32, medians [quartiles] of {reps} batches of 3 calls')
    for what, fn in calls.items():
        per_batch = []
        for _ in range(reps):
            _, times = timed(fn, 3)
            per_batch.append(statistics.mean(times[1:]))
        q = statistics.quantiles(per_batch, n=4)
        print(f'{what:5s} {statistics.median(per_batch):8.3f} ms [{q[0]:.3f}-{q[2]:.3f}]')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
