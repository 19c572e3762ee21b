#!/usr/bin/env python3
"""Converts ADBench's hand-tracking inputs and its Manual module's reference
outputs into GradBench's ht layout. The GradBench data here holds only the
"complicated" variant; ADBench's small inputs give the "simple" one too:

    adbench_ht.py OUTDIR [--adbench DIR] [--variant simple|complicated] [--only NAME]

writes OUTDIR/ht/adbench_<variant>_<name>.input.json (theta, us, and data:
the model from ADBench's model/ files, correspondences and points) and
OUTDIR/ht/adbench_<variant>_<name>.expected.json ({"objective": residuals,
"jacobian": rows}, the Jacobian where ADBench's reference has one) for each
<variant>_small/<name>.txt (or only NAME; both variants by default). DIR
defaults to ../shared/bench-data/adbench beside the repository. Exits 77 when
the ADBench data is absent (CTest's skip code)."""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "..", "..", "shared", "bench-data", "adbench")


def numbers(path):
    with open(path) as f:
        return [float(t) for t in f.read().split()]


def model(directory):
    """GradBench's model object from ADBench's bones.txt, vertices.txt and
    triangles.txt (fields separated by ':')."""
    names, parents, relatives, inverses = [], [], [], []
    with open(os.path.join(directory, "bones.txt")) as f:
        for line in f:
            fields = line.strip().split(":")
            if len(fields) != 34:
                sys.exit("bones.txt: expected 34 fields (name, parent, two 4x4 matrices), got %d" % len(fields))
            names.append(fields[0])
            parents.append(int(fields[1]))
            values = [float(v) for v in fields[2:]]
            relatives.append([values[r * 4:r * 4 + 4] for r in range(4)])
            inverses.append([values[16 + r * 4:16 + r * 4 + 4] for r in range(4)])
    bones = len(names)
    positions, weights = [], []
    with open(os.path.join(directory, "vertices.txt")) as f:
        for line in f:
            fields = line.strip().split(":")
            positions.append([float(v) for v in fields[0:3]] + [1.0])
            row = [0.0] * bones
            count = int(fields[8])
            for k in range(count):
                row[int(fields[9 + 2 * k])] = float(fields[10 + 2 * k])
            weights.append(row)
    with open(os.path.join(directory, "triangles.txt")) as f:
        triangles = [[int(v) for v in line.strip().split(":")] for line in f if line.strip()]
    return {"bone_count": bones, "bone_names": names, "parents": parents, "base_relatives": relatives,
            "inverse_base_absolutes": inverses, "base_positions": positions, "weights": weights,
            "triangles": triangles, "is_mirrored": False}


def convert(data, reference, variant, name, hand, outdir):
    v = numbers(os.path.join(data, name + ".txt"))
    n, thetas = int(v[0]), int(v[1])
    at = 2
    correspondences, points, us = [], [], []
    for _ in range(n):
        correspondences.append(int(v[at]))
        points.append(v[at + 1:at + 4])
        at += 4
    if variant == "complicated":
        for _ in range(n):
            us.append(v[at:at + 2])
            at += 2
    theta = v[at:at + thetas]
    at += thetas
    if at != len(v) or len(theta) != thetas:
        sys.exit("%s: expected %d numbers for n=%d, found %d" % (name, at, n, len(v)))
    expected = {"objective": numbers(os.path.join(reference, name + "_F_Manual.txt"))}
    cols = thetas + (2 if variant == "complicated" else 0)
    if len(expected["objective"]) != 3 * n:
        sys.exit("%s: the reference has %d residuals, expected %d" % (name, len(expected["objective"]), 3 * n))
    jacobian = os.path.join(reference, name + "_J_Manual.txt")
    if os.path.exists(jacobian):
        with open(jacobian) as f:
            rows = [[float(t) for t in line.split()] for line in f if line.strip()]
        if len(rows) != 3 * n or any(len(r) != cols for r in rows):
            sys.exit("%s: the reference Jacobian is not %d rows of %d" % (name, 3 * n, cols))
        expected["jacobian"] = rows
    base = os.path.join(outdir, "adbench_%s_%s" % (variant, name))
    with open(base + ".input.json", "w") as f:
        json.dump({"theta": theta, "us": us, "data": {"model": hand, "correspondences": correspondences,
                                                      "points": points}}, f)
    with open(base + ".expected.json", "w") as f:
        json.dump(expected, f)
    return base


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir")
    parser.add_argument("--adbench", default=DEFAULT)
    parser.add_argument("--variant", choices=["simple", "complicated"], action="append")
    parser.add_argument("--only")
    args = parser.parse_args()
    root = os.path.join(args.adbench, "adbench", "data", "hand")
    reference = os.path.join(args.adbench, "adbench-reference", "data", "hand")
    if not os.path.isdir(root) or not os.path.isdir(reference):
        print("skipped: ADBench's hand data not found at %s" % os.path.normpath(root))
        return 77
    outdir = os.path.join(args.outdir, "ht")
    os.makedirs(outdir, exist_ok=True)
    for variant in args.variant or ["simple", "complicated"]:
        data = os.path.join(root, variant + "_small")
        hand = model(os.path.join(data, "model"))
        names = sorted(f[:-4] for f in os.listdir(data) if f.startswith("hand") and f.endswith(".txt"))
        if args.only:
            names = [n for n in names if n == args.only]
            if not names:
                sys.exit("no ADBench hand input named %s in %s" % (args.only, data))
        for name in names:
            base = convert(data, os.path.join(reference, variant + "_small"), variant, name, hand, outdir)
            print("wrote %s" % (base + ".{input,expected}.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
