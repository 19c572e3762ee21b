"""The PyTorch side of bench/torch_peer.h, shared by the *_torch.py peers:
one-thread set-up, raw f32 inputs, and the request loop of --serve."""
import sys
import time

import torch


def one_thread():
    """PyTorch on one thread, intra- and inter-op (the latter can be set only once)."""
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass


def load_f32(folder, name, *shape):
    """DIR/NAME.f32 (raw little-endian f32, row-major) as a tensor of `shape`."""
    with open(f'{folder}/{name}.f32', 'rb') as f:
        data = bytearray(f.read())
    return torch.frombuffer(data, dtype=torch.float32).reshape(shape).clone()


def serve(cases, checksum, no_grad=()):
    """Prints "ready torch VERSION", then answers each request line "CASE CALLS"
    on stdin with one line: checksum(the last call's result), then each call's
    time in ms. Cases named in `no_grad` run under torch.no_grad()."""
    print(f'ready torch {torch.__version__}', flush=True)
    for line in sys.stdin:
        what, count = line.split()
        times, result = [], None
        for _ in range(int(count)):
            t0 = time.perf_counter()
            if what in no_grad:
                with torch.no_grad():
                    result = cases[what]()
            else:
                result = cases[what]()
            times.append((time.perf_counter() - t0) * 1e3)
        print(f'{checksum(result):.17g} ' + ' '.join(f'{t:.6f}' for t in times), flush=True)
    return 0
