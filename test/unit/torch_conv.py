#!/usr/bin/python3
"""Expected values of a few fixed convolution and pooling programs by
PyTorch's float64 autograd: an independent reference for test_conv.cpp.

Each case applies one torch.nn.functional op (conv1d, conv2d, conv3d,
conv_transpose2d, max_pool1d/2d/3d, avg_pool1d/2d/3d) to fixed random inputs
and differentiates loss = sum(op(x, w, b) * cotangent) with respect to every
input. The inputs, the result and the gradients are written as C++
initialisers to torch_conv_expected.inc, which the test compares with adjit's
compiled values and gradients.

The ops named max_pool2d, avg_pool2d, conv*d are adjit's torch spellings; max_pool and
avg_pool are adjit's own (PoolOptions, symmetric padding here since PyTorch's is);
"conv SAME" is adjit's conv with padding "SAME" (against padding="same");
reduce_window_max and reduce_window_sum window every axis of x, with
(low, high) padding pairs that need not be equal: PyTorch has no such op, so
the reference pads x by F.pad (-inf for max, 0 for sum) and pools the padded
x as [1, 1, x's axes] (max_pool{1,2,3}d, whose gradient goes to a window's
first maximum as adjit's; the sum by avg_pool{1,2,3}d with divisor_override
1), or, for four axes, sums Tensor.unfold's windows.

Run by hand after changing the cases (Debian's python3-torch; the test itself
needs no Python):
    /usr/bin/python3 test/unit/torch_conv.py > test/unit/torch_conv_expected.inc
"""
import math

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
gen = torch.Generator().manual_seed(52)


def randn(*shape, ties=False):
    x = torch.randn(*shape, generator=gen)
    # values on a coarse grid repeat within a window: max pooling's ties
    return torch.round(x * 2) / 2 if ties else x


def fmt(v):
    return "{" + ", ".join("%.15g" % e for e in v.flatten().tolist()) + "}"


def ints(v):
    return "{" + ", ".join(str(int(e)) for e in v) + "}"


CASES = [
    # name, op, x shape, w shape (or kernel size), bias?, options
    ("conv2d groups stride dilation", "conv2d", (2, 4, 7, 6), (6, 2, 3, 3), True,
     dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)),
    ("conv2d same-size 3x3", "conv2d", (1, 3, 5, 5), (4, 3, 3, 3), False, dict(stride=(1, 1), padding=(1, 1))),
    ("conv2d im2col-sized", "conv2d", (1, 8, 10, 10), (32, 8, 3, 3), True, dict(stride=(1, 1), padding=(1, 1))),
    ("conv2d 1x1", "conv2d", (1, 16, 8, 8), (40, 16, 1, 1), False, dict()),
    ("max_pool2d ties padding", "max_pool2d", (2, 3, 6, 7), (3, 2), False, dict(stride=(2, 2), padding=(1, 1))),
    ("avg_pool2d count_include_pad", "avg_pool2d", (2, 3, 6, 7), (3, 3), False,
     dict(stride=(2, 1), padding=(1, 1), count_include_pad=True)),
    ("avg_pool2d exclude pad", "avg_pool2d", (2, 3, 6, 7), (3, 2), False,
     dict(stride=(1, 2), padding=(1, 1), count_include_pad=False)),
    ("conv_transpose2d groups output_padding", "conv_transpose2d", (2, 4, 4, 5), (4, 3, 3, 2), True,
     dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2, dilation=(1, 2))),
    ("conv1d groups stride dilation", "conv1d", (2, 4, 11), (6, 2, 3), True,
     dict(stride=(2,), padding=(2,), dilation=(2,), groups=2)),
    ("conv1d padding", "conv1d", (1, 3, 8), (5, 3, 4), False, dict(stride=(1,), padding=(1,))),
    ("conv3d groups stride dilation", "conv3d", (1, 4, 5, 6, 5), (4, 2, 2, 3, 2), True,
     dict(stride=(2, 1, 2), padding=(1, 1, 0), dilation=(1, 2, 1), groups=2)),
    ("conv3d same-size 3x3x3", "conv3d", (2, 2, 4, 4, 4), (3, 2, 3, 3, 3), False,
     dict(stride=(1, 1, 1), padding=(1, 1, 1))),
    # adjit's conv with "SAME" padding (XLA's: the odd element of the padding at the end) against PyTorch's
    # padding="same" (stride 1), which splits it so too
    ("conv SAME 1-d even kernel", "conv SAME", (2, 3, 9), (4, 3, 4), False, dict()),
    ("conv SAME 2-d dilation groups", "conv SAME", (1, 4, 6, 7), (6, 2, 4, 3), False,
     dict(dilation=(1, 2), groups=2)),
    ("max_pool 1-d ties stride padding", "max_pool", (2, 3, 11), (3,), False, dict(stride=(2,), padding=(1,))),
    ("max_pool 1-d ties overlapping", "max_pool", (1, 2, 9), (4,), False, dict(stride=(1,), padding=(2,))),
    ("max_pool 2-d ties", "max_pool", (1, 2, 5, 7), (2, 3), False, dict(stride=(1, 2), padding=(1, 1))),
    # NaN wins its window and gets its cotangent, in both (one NaN per window: of several, PyTorch's CPU kernel
    # picks the last, adjit the first, as its ties; docs/guide/convolution.md)
    ("max_pool 1-d NaN", "max_pool", (1, 2, 10), (3,), False, dict(stride=(3,), padding=(1,), nan_at=(1, 6, 14))),
    ("avg_pool 1-d count_include_pad", "avg_pool", (2, 3, 10), (4,), False,
     dict(stride=(3,), padding=(2,), count_include_pad=True)),
    ("avg_pool 1-d exclude pad", "avg_pool", (2, 3, 10), (3,), False,
     dict(stride=(2,), padding=(1,), count_include_pad=False)),
    ("avg_pool 2-d exclude pad", "avg_pool", (1, 2, 6, 5), (3, 2), False,
     dict(stride=(2, 1), padding=(1, 1), count_include_pad=False)),
    # reduce_window: padding is (low, high) per axis of x
    ("reduce_window_max 3-d ties uneven padding", "reduce_window_max", (5, 6, 7), (2, 3, 2), False,
     dict(stride=(1, 2, 2), padding=(1, 0, 0, 2, 1, 1))),
    ("reduce_window_max 1-d ties", "reduce_window_max", (9,), (3,), False, dict(stride=(2,), padding=(0, 1))),
    ("reduce_window_sum 2-d uneven padding", "reduce_window_sum", (6, 7), (3, 2), False,
     dict(stride=(2, 1), padding=(2, 1, 0, 1))),
    ("reduce_window_sum 4-d", "reduce_window_sum", (2, 3, 4, 5), (2, 2, 3, 2), False,
     dict(stride=(1, 1, 2, 2), padding=(0, 1, 1, 0, 1, 1, 0, 0))),
]


def reduce_window(op, x, window, stride, pairs):
    # F.pad takes (low, high) pairs from the last axis back
    flat = [p for i in reversed(range(x.dim())) for p in pairs[2 * i:2 * i + 2]]
    xp = F.pad(x, flat, value=-math.inf if op == "reduce_window_max" else 0.0)
    if x.dim() > 3:
        for d in range(x.dim()):
            xp = xp.unfold(d, window[d], stride[d])
        return xp.sum(dim=tuple(range(x.dim(), 2 * x.dim())))
    xp = xp[None, None]
    if op == "reduce_window_max":
        pool = [F.max_pool1d, F.max_pool2d, F.max_pool3d][x.dim() - 1]
        return pool(xp, window, stride=stride)[0, 0]
    pool = [F.avg_pool1d, F.avg_pool2d, F.avg_pool3d][x.dim() - 1]
    if x.dim() == 1:  # avg_pool1d has no divisor_override
        return pool(xp, window, stride=stride)[0, 0] * window[0]
    return pool(xp, window, stride=stride, divisor_override=1)[0, 0]


def run(op, x, w, b, o):
    if op in ("conv1d", "conv2d", "conv3d"):
        conv = {"conv1d": F.conv1d, "conv2d": F.conv2d, "conv3d": F.conv3d}[op]
        return conv(x, w, b, stride=o.get("stride", 1), padding=o.get("padding", 0),
                    dilation=o.get("dilation", 1), groups=o.get("groups", 1))
    if op == "conv SAME":
        conv = [F.conv1d, F.conv2d, F.conv3d][x.dim() - 3]
        return conv(x, w, padding="same", dilation=o.get("dilation", 1), groups=o.get("groups", 1))
    if op.startswith("reduce_window"):
        return reduce_window(op, x, w, o["stride"], o["padding"])
    if op in ("max_pool", "avg_pool"):
        op += "%dd" % len(w)
    if op == "max_pool1d":
        return F.max_pool1d(x, w, stride=o["stride"], padding=o["padding"])
    if op == "avg_pool1d":
        return F.avg_pool1d(x, w, stride=o["stride"], padding=o["padding"], count_include_pad=o["count_include_pad"])
    if op == "conv_transpose2d":
        return F.conv_transpose2d(x, w, b, stride=o["stride"], padding=o["padding"],
                                  output_padding=o["output_padding"], groups=o["groups"], dilation=o["dilation"])
    if op == "max_pool2d":
        return F.max_pool2d(x, w, stride=o["stride"], padding=o["padding"])
    return F.avg_pool2d(x, w, stride=o["stride"], padding=o["padding"], count_include_pad=o["count_include_pad"])


def per_axis(o, key, dflt, nd):
    v = o.get(key, dflt)
    return v if isinstance(v, tuple) else (v,) * nd


print("// Generated by test/unit/torch_conv.py with PyTorch %s (float64 autograd); do not edit." % torch.__version__)
print("// {name, op, x shape, x, w shape (kernel size for pooling), w, bias, stride, padding, dilation, groups,")
print("//  output_padding, count_include_pad, cotangent, y shape, y, dx, dw, db}")
for name, op, xs, ws, bias, o in CASES:
    pool = "pool" in op or op.startswith("reduce_window")
    nd = len(ws) if pool else len(xs) - 2
    x = randn(*xs, ties=op.startswith("max_pool") or op == "reduce_window_max")
    x.view(-1)[list(o.get("nan_at", ()))] = math.nan
    x.requires_grad_()
    w = None if pool else randn(*ws).requires_grad_()
    b = None
    if bias:
        outc = ws[1] * o["groups"] if op == "conv_transpose2d" else ws[0]
        b = randn(outc).requires_grad_()
    y = run(op, x, ws if pool else w, b, o)
    ct = randn(*y.shape)
    (y * ct).sum().backward()
    print("{%s, %s," % ('"' + name + '"', '"' + op + '"'))
    print(" %s, %s," % (ints(xs), fmt(x.detach())))
    print(" %s, %s," % (ints(ws), "{}" if pool else fmt(w.detach())))
    print(" %s," % ("{}" if b is None else fmt(b.detach())))
    print(" %s, %s, %s, %d, %s, %s," % (
        ints(per_axis(o, "stride", 1, nd) if "stride" in o or not pool else ws), ints(per_axis(o, "padding", 0, nd)),
        ints(per_axis(o, "dilation", 1, nd)), o.get("groups", 1), ints(per_axis(o, "output_padding", 0, nd)),
        "true" if o.get("count_include_pad", True) else "false"))
    print(" %s," % fmt(ct))
    print(" %s, %s," % (ints(y.shape), fmt(y.detach())))
    print(" %s, %s, %s}," % (fmt(x.grad), "{}" if pool else fmt(w.grad), "{}" if b is None else fmt(b.grad)))
