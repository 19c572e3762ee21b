#!/usr/bin/env python3
"""Runs an example and compares its standard output with the expected text.

Words must match exactly; numbers match within a relative tolerance (default
1e-4, or --rtol). Why a tolerance: compiled float sums are reassociated across
vector lanes, so their last digits depend on the host's vector width (4 lanes
with SSE4.2, 8 with AVX2, 16 with AVX-512). An f32 sum of n terms carries a
relative rounding error of about n * 6e-8; the examples sum at most a few
thousand terms, well under 1e-4.

A program that exits with 77 (skipped, e.g. its data set is absent) makes
this script exit with 77 too, for CTest's SKIP_RETURN_CODE.

usage: compare_output.py EXPECTED [--rtol R] -- PROGRAM [ARGS...]
"""
import re
import subprocess
import sys

NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)")


def tokens(text):
    """Splits text into numbers (floats) and the words between them."""
    out, pos = [], 0
    for m in NUMBER.finditer(text):
        if text[pos:m.start()]:
            out.append(text[pos:m.start()])
        out.append(float(m.group()))
        pos = m.end()
    if text[pos:]:
        out.append(text[pos:])
    return out


def main():
    args = sys.argv[1:]
    expected, rtol = args[0], 1e-4
    rest = args[1:]
    if rest[:1] == ["--rtol"]:
        rtol, rest = float(rest[1]), rest[2:]
    assert rest[:1] == ["--"], __doc__
    run = subprocess.run(rest[1:], capture_output=True, text=True)
    if run.returncode == 77:  # the program skipped (its data is absent): so does the test
        print(run.stdout, end="")
        sys.exit(77)
    if run.returncode != 0:
        sys.exit(f"{rest[1]} exited with {run.returncode}\n{run.stderr}")
    want = open(expected).read()
    got_t, want_t = tokens(run.stdout), tokens(want)
    problem = None
    if len(got_t) != len(want_t):
        problem = f"{len(got_t)} tokens, expected {len(want_t)}"
    for i, (g, w) in enumerate(zip(got_t, want_t)):
        if problem:
            break
        if isinstance(g, float) and isinstance(w, float):
            if g != w and not (g != g and w != w) and abs(g - w) > rtol * max(1.0, abs(w)):
                problem = f"number {g!r} where {w!r} was expected (rtol {rtol})"
        elif g != w:
            problem = f"{g!r} where {w!r} was expected"
    if problem:
        sys.exit(f"output of {rest[1]} differs from {expected}: {problem}\n--- got ---\n{run.stdout}--- expected ---\n{want}")
    print(f"example output matches {expected}")


if __name__ == "__main__":
    main()
