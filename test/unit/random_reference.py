#!/usr/bin/env python3
"""Expected values of test_random.cpp's normal test, computed independently of adjit.

JAX's algorithm (jax_threefry_partitionable=True) in plain Python: Threefry-2x32
with 20 rounds, element i of a sample from counter (0, i) with its two words
xor'ed, uniform from the top 23 bits, normal = sqrt(2) erf_inv(u) with u
uniform in (nextafter(-1, 0), 1) and erf_inv by Newton's method in double.
Also prints the values of JAX's earlier, non-partitionable scheme, which match
those printed by JAX in Deep Learning with Python, 3rd ed., section 3.5.3
([-0.1470326, 0.5524756, 1.648498] for normal(key(123), (3,))): a check of
the uniform-to-normal steps against JAX itself.
usage: random_reference.py
"""
import math
import struct

MASK = 0xFFFFFFFF


def threefry(k0, k1, x0, x1):
    ks = [k0, k1, k0 ^ k1 ^ 0x1BD11BDA]
    x0, x1 = (x0 + k0) & MASK, (x1 + k1) & MASK
    for i in range(5):
        for r in ([13, 15, 26, 6], [17, 29, 16, 24])[i % 2]:
            x0 = (x0 + x1) & MASK
            x1 = (((x1 << r) | (x1 >> (32 - r))) & MASK) ^ x0
        x0 = (x0 + ks[(i + 1) % 3]) & MASK
        x1 = (x1 + ks[(i + 2) % 3] + i + 1) & MASK
    return x0, x1


def f32(v):
    return struct.unpack('f', struct.pack('f', v))[0]


def uniform01(bits):
    return struct.unpack('f', struct.pack('I', (bits >> 9) | 0x3F800000))[0] - 1.0


def erf_inv(x):
    y = 0.0
    for _ in range(100):
        y -= (math.erf(y) - x) / (2 / math.sqrt(math.pi) * math.exp(-y * y))
    return y


def normal(bits):
    lo = f32(-1 + 2.0**-24)  # nextafter(-1, 0) in f32; the span 1 - lo rounds to 2 in f32
    u = max(lo, f32(f32(uniform01(bits) * 2.0) + lo))
    return math.sqrt(2) * erf_inv(u)


def partitionable(key, n):
    return [normal(threefry(*key, 0, i)[0] ^ threefry(*key, 0, i)[1]) for i in range(n)]


def bits32(key, n):
    return [threefry(*key, 0, i)[0] ^ threefry(*key, 0, i)[1] for i in range(n)]


def randint(key, n, minval, maxval):
    """JAX's _randint for int32, with XLA's unsigned remainder (a % 0 = a)."""
    lo32, hi32 = -2**31, 2**31 - 1
    out_of_range = maxval > hi32
    lo, hi = min(max(minval, lo32), hi32), min(max(maxval, lo32), hi32)
    rem = lambda a, b: a if b == 0 else a % b
    span = (hi - lo) & MASK
    if hi <= lo:
        span = 1
    if out_of_range and hi > lo:
        span = (span + 1) & MASK
    mult = rem(2**16, span)
    mult = rem((mult * mult) & MASK, span)
    k1, k2 = threefry(*key, 0, 0), threefry(*key, 0, 1)
    out = []
    for h, l in zip(bits32(k1, n), bits32(k2, n)):
        off = rem(((rem(h, span) * mult) & MASK) + rem(l, span) & MASK, span)
        v = (lo + off) & MASK
        out.append(v - 2**32 if v >= 2**31 else v)
    return out


if __name__ == '__main__':
    print('uniform(key(0))', uniform01(threefry(0, 0, 0, 0)[0] ^ threefry(0, 0, 0, 0)[1]))
    print('normal(key(123), (3,))', partitionable((0, 123), 3))
    print('normal(split(key(123), 1)[0], (3,))', partitionable(threefry(0, 123, 0, 0), 3))
    a, b = threefry(0, 123, 0, 2), threefry(0, 123, 1, 0)  # counters [0, 1, 2] padded to [0, 1 | 2, 0]
    print('non-partitionable normal(key(123), (3,))', [normal(w) for w in (a[0], b[0], a[1])])
    print('randint(key(0), (6,), -3, 7)', randint((0, 0), 6, -3, 7))
    print('randint(key(1), (4,), -2**40, 2**40)', randint((0, 1), 4, -2**40, 2**40))
    print('randint(key(2), (4,), 0, 1000003)', randint((0, 2), 4, 0, 1000003))
