#!/usr/bin/env python3
"""Converts ADBench's LSTM inputs and its Manual module's reference outputs
into GradBench's lstm layout, since GradBench's own lstm inputs come from a
text corpus that is not distributed with the data here:

    adbench_lstm.py OUTDIR [--adbench DIR] [--only NAME]

writes OUTDIR/lstm/<name>.input.json (main_params [2l][4b], extra_params
[3][b], state [2l][b], sequence [c][b]) and OUTDIR/lstm/<name>.expected.json
({"objective": loss, "jacobian": gradient, main_params row-major then
extra_params}) for each ADBench file lstm_l<l>_c<c>.txt (or only NAME).
DIR defaults to ../shared/bench-data/adbench beside the repository. Exits 77
when the ADBench data is absent (CTest's skip code)."""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "..", "..", "shared", "bench-data", "adbench")


def numbers(path):
    with open(path) as f:
        return [float(t) for t in f.read().split()]


def rows(values, count, width):
    return [values[r * width:(r + 1) * width] for r in range(count)]


def convert(data, reference, name, outdir):
    v = numbers(os.path.join(data, name + ".txt"))
    layers, chars, bits = int(v[0]), int(v[1]), int(v[2])
    at = 3
    parts = {}
    for key, count, width in (("main_params", 2 * layers, 4 * bits), ("extra_params", 3, bits),
                              ("state", 2 * layers, bits), ("sequence", chars, bits)):
        parts[key] = rows(v[at:at + count * width], count, width)
        at += count * width
    if at != len(v):
        sys.exit("%s: expected %d numbers for l=%d c=%d b=%d, found %d" % (name, at, layers, chars, bits, len(v)))
    loss = numbers(os.path.join(reference, name + "_F_Manual.txt"))
    gradient = numbers(os.path.join(reference, name + "_J_Manual.txt"))
    if len(loss) != 1 or len(gradient) != 8 * layers * bits + 3 * bits:
        sys.exit("%s: the reference has %d loss and %d gradient values, expected 1 and %d"
                 % (name, len(loss), len(gradient), 8 * layers * bits + 3 * bits))
    with open(os.path.join(outdir, name + ".input.json"), "w") as f:
        json.dump(parts, f)
    with open(os.path.join(outdir, name + ".expected.json"), "w") as f:
        json.dump({"objective": loss[0], "jacobian": gradient}, f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir")
    parser.add_argument("--adbench", default=DEFAULT)
    parser.add_argument("--only")
    args = parser.parse_args()
    data = os.path.join(args.adbench, "adbench", "data", "lstm")
    reference = os.path.join(args.adbench, "adbench-reference", "data", "lstm")
    if not os.path.isdir(data) or not os.path.isdir(reference):
        print("skipped: ADBench's LSTM data not found at %s" % os.path.normpath(data))
        return 77
    names = sorted(f[:-4] for f in os.listdir(data) if f.startswith("lstm_") and f.endswith(".txt"))
    if args.only:
        names = [n for n in names if n == args.only]
        if not names:
            sys.exit("no ADBench LSTM input named %s in %s" % (args.only, data))
    outdir = os.path.join(args.outdir, "lstm")
    os.makedirs(outdir, exist_ok=True)
    for name in names:
        convert(data, reference, name, outdir)
        print("wrote %s" % os.path.join(outdir, name + ".{input,expected}.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
