#!/usr/bin/python3
"""Expected values of random programs by PyTorch's float64 autograd: an
independent reference for test_random_programs.cpp.

Each program is a list of steps (kind, operand, operand) over a pool of f64[4]
values, the same step kinds as `step()` in test_random_programs.cpp, written
here again with torch. For each program this computes the value, the gradient
and the Hessian with respect to the 9 input elements, and writes them as C++
initialisers to torch_expected.inc, which the test compares with adjit's
compiled gradient and its Hessian (forward over reverse).

Run by hand after changing the step kinds (Debian's python3-torch; the test
itself needs no Python):
    /usr/bin/python3 test/unit/torch_reference.py > test/unit/torch_expected.inc
"""
import math
import random
import sys

import torch

torch.set_default_dtype(torch.float64)
KINDS = 28
PROGRAMS = 300


class LoopLimit(Exception):
    """The program's bounded while loop would not end: adjit raises there."""


def while_bounded(cond, body, c, limit):
    for _ in range(limit):
        if not cond(c):
            return c
        c = body(c)
    if cond(c):
        raise LoopLimit()
    return c


def step(kind, a, b):
    if kind == 0:
        return a + b
    if kind == 1:
        return a - b * 0.5
    if kind == 2:
        return a * b
    if kind == 3:
        return torch.tanh(a)
    if kind == 4:
        return torch.sin(a) + b
    if kind == 5:
        return torch.cos(a) * b
    if kind == 6:
        return torch.sigmoid(a - b)
    if kind == 7:
        return torch.exp(torch.tanh(a))
    if kind == 8:
        return a / (1.0 + b * b)
    if kind == 9:
        return torch.maximum(a, b)
    if kind == 10:
        return a.sum(0, keepdim=True).expand(4) * 0.25 + b
    if kind == 11:
        return torch.log1p(a * a)
    if kind == 12:
        return torch.sqrt(a * a + 1.0)
    if kind == 13:
        return torch.where(a > b, a, b * b)
    if kind == 14:
        return a.reshape(2, 2).t().reshape(4) * b
    if kind == 15:
        return torch.logsumexp(a.reshape(2, 2), 1, keepdim=True).expand(2, 2).reshape(4) - b
    if kind == 16:
        return a * b if a.sum() > b.sum() else torch.sin(a) - b
    if kind == 17:
        c = a
        for _ in range(3):
            c = torch.tanh(c * 0.9 + b)
        return c
    if kind == 18:
        c, ys = b, []
        for i in range(4):
            ys.append(torch.sin(c))
            c = c * 0.5 + a[i]
        return torch.stack(ys).sum(0) + c
    if kind == 19:
        return while_bounded(lambda c: (c * c).sum() > 0.5, lambda c: c * 0.5 + torch.tanh(b) * 0.01, a * 2.0, 40)
    if kind == 21:
        m = (a * a).reshape(2, 2) @ b.reshape(2, 2).t()
        r = torch.sin(m) if a.sum() > b.sum() else m
        return (r.t() @ a.reshape(2, 2)).reshape(4)
    if kind == 22:
        w = b.reshape(2, 2) * 0.5
        c, ys = a.reshape(2, 2), []
        for _ in range(2):
            ys.append(c)
            c = torch.tanh(c.t() @ w + 0.1)
        return c.reshape(4) + torch.stack(ys).sum(0).reshape(4)
    if kind == 23:
        x = torch.sin(a.reshape(2, 2) * 1.3 + b.reshape(2, 2))
        mx = x.max(0, keepdim=True).values.expand(2, 2)
        mn = x.min(1, keepdim=True).values.expand(2, 2)
        return (mx + mn).reshape(4) + torch.tanh(a + b).max(0, keepdim=True).values.expand(4)
    if kind == 24:
        ys = [torch.pow(a * 1.0 - 0.5, 2.0) + torch.pow(b - 1.0, 3.0) * 0.1 for _ in range(2)]
        return torch.stack(ys).sum(0)
    if kind == 25:
        first, second = a, [b, a * 0.5]
        for _ in range(2):
            first, second = first * 0.5 + second[1], [torch.sin(second[0]) + b * 0.1, first * second[0] * 0.3]
        return first + second[0] - second[1]
    if kind == 26:
        return torch.tanh(a) * b + torch.exp(a * 0.3)
    if kind == 27:
        return while_bounded(lambda c: (c * c).sum() > 0.5, lambda c: c * 0.6 + torch.tanh(b) * 0.01, a * 2.0, 80)
    # kind 20: a counter ends the loop too
    c, k = a * 2.0, 0
    while k < 6 and (c * c).sum() > 0.5:
        c, k = torch.sin(c) * 0.7 + b * 0.01, k + 1
    return c


def program_value(steps, flat):
    x0, x1, s = flat[0:4], flat[4:8], flat[8]
    pool = [x0, x1, s.expand(4)]
    for kind, i, j in steps:
        pool.append(step(kind, pool[i], pool[j]))
    out = pool[-1]
    return (out * out).sum() + pool[3].sum() * 0.1


def random_program(rng):
    steps, pool = [], 3
    for _ in range(2 + rng.randrange(7)):
        steps.append((rng.randrange(KINDS), rng.randrange(pool), rng.randrange(pool)))
        pool += 1
    return steps


def main():
    rng = random.Random(20261127)
    cases = []
    while len(cases) < PROGRAMS:
        steps = random_program(rng)
        inputs = [rng.uniform(-1.5, 1.5) for _ in range(9)]
        flat = torch.tensor(inputs, requires_grad=True)
        try:
            value = program_value(steps, flat)
            (grad,) = torch.autograd.grad(value, flat)
            hess = torch.autograd.functional.hessian(lambda v: program_value(steps, v), flat.detach())
        except LoopLimit:
            continue
        numbers = [value.item()] + grad.tolist() + hess.flatten().tolist()
        if not all(math.isfinite(v) and abs(v) < 1e6 for v in numbers):
            continue
        cases.append((steps, inputs, numbers))
    out = sys.stdout
    out.write("// Generated by test/unit/torch_reference.py with PyTorch %s (float64 autograd); do not edit.\n" % torch.__version__)
    out.write("// {steps {kind, a, b}...}, {inputs x0[4] x1[4] s}, {value, gradient[9], Hessian[81] row-major}\n")
    for steps, inputs, numbers in cases:
        out.write("{{%s},\n {%s},\n {%s}},\n" % (
            ", ".join("{%d, %d, %d}" % st for st in steps),
            ", ".join(repr(v) for v in inputs),
            ", ".join(repr(v) for v in numbers)))


if __name__ == "__main__":
    main()
