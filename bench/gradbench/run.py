#!/usr/bin/env python3
"""Runs adjit's GradBench tool over a directory of GradBench inputs and checks
every output against the suite's reference (bench/gradbench/run.py).

    run.py DATA_DIR TOOL_DIR [--eval NAME] [--small] [--runs N] [--rounds R] [--probe EXE] [--markdown FILE [--section NAME]]

DATA_DIR holds <eval>/<name>.input.json and <eval>/<name>.expected.json (and
optionally manual_timings.tsv: the reference tool's times); TOOL_DIR holds one
executable per eval, called as `TOOL_DIR/EVAL INPUT.json FUNCTION`. `hello`
needs no data: its inputs are made here and checked against x^2 and 2x.

Prints one line per eval, input and function: the first run's time (which
includes adjit's compilation), the median time of the later runs (the tool runs
them on the optimised code: tool.h), the reference's time and the ratio to it,
the derivative/primal ratio, and `valid` or `INVALID: ...`.
With --rounds R (R > 1) every function of an input runs R times in turn with the
others (a process of N evaluations each, the order reversed every other round),
so the machine's slow and fast phases hit them alike: the median is then the
median of the rounds' medians, and the derivative/primal ratio is the median of
the rounds' ratios with its quartiles. The reference's times were recorded
elsewhere, so the ratio to them comes with the phase probe (adjit_phase_probe:
the FMA peak at one thread, read before and after; found beside TOOL_DIR's
build or given by --probe; --probe none reads none): a low reading marks a
slow phase of the machine.
--markdown FILE writes the results as a markdown table under a line naming the
date, the commit, the CPU, the load and the command: between the markers
<!-- run.py: begin NAME --> and <!-- run.py: end NAME --> when FILE has them
(NAME: --section, default `results`; docs/gradbench.md has such sections, and the
text around them is kept), else as the whole file.
Exits 1 if any output is invalid or missing (a missing executable counts),
77 (a skip, for CTest) if DATA_DIR does not exist. The tools run with adjit's
disk cache off (ADJIT_CACHE_DIR empty), so the first run pays the compilation.
"""
import argparse
import datetime
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

# Which function of each eval is the derivative of which (for the ratio).
DERIVATIVES = {
    "hello": ("double", "square"), "lse": ("gradient", "primal"), "llsq": ("gradient", "primal"),
    "ode": ("gradient", "primal"), "det": ("gradient", "primal"), "kmeans": ("dir", "cost"),
    "gmm": ("jacobian", "objective"), "lstm": ("jacobian", "objective"), "ba": ("jacobian", "objective"),
    "ht": ("jacobian", "objective"),
}
HELLO_INPUTS = [("x1.0", 1.0), ("x3.5", 3.5), ("x-2.25", -2.25)]


def mismatch(got, want, path="$"):
    """The first difference by the suite's rule, as text, or None."""
    if isinstance(want, bool) or isinstance(got, bool):
        return None if got == want else f"{path}: got {got!r}, expected {want!r}"
    if isinstance(want, (int, float)):
        if not isinstance(got, (int, float)):
            return f"{path}: got {type(got).__name__}, expected a number"
        if not (math.isfinite(got) and abs(got - want) / max(1.0, abs(got) + abs(want)) <= 1e-4):
            return f"{path}: got {got!r}, expected {want!r}"
        return None
    if isinstance(want, list):
        if not isinstance(got, list):
            return f"{path}: got {type(got).__name__}, expected a list"
        if len(got) != len(want):
            return f"{path}: got {len(got)} elements, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            m = mismatch(g, w, f"{path}[{i}]")
            if m:
                return m
        return None
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"{path}: got {type(got).__name__}, expected an object"
        if set(got) != set(want):
            return f"{path}: got keys {sorted(got)}, expected {sorted(want)}"
        for key in want:
            m = mismatch(got[key], want[key], f"{path}.{key}")
            if m:
                return m
        return None
    return None if got == want else f"{path}: got {got!r}, expected {want!r}"


def size_key(name):
    """Sorts inputs by the numbers in their names (n1000_s10 < n10000_s1)."""
    digits, nums = "", []
    for ch in name + " ":
        if ch.isdigit():
            digits += ch
        elif digits:
            nums.append(int(digits))
            digits = ""
    return (math.prod(nums) if nums else 0, nums, name)


def cases(data_dir, only):
    """(eval, input name, input object, {function: expected output}) in order."""
    evals = sorted(e for e in os.listdir(data_dir) if os.path.isdir(os.path.join(data_dir, e)))
    if "hello" not in evals:
        evals.insert(0, "hello")
    for ev in evals:
        if only and ev not in only:
            continue
        if ev == "hello":
            inputs = [(name, x, {"square": x * x, "double": 2 * x}) for name, x in HELLO_INPUTS]
        else:
            d = os.path.join(data_dir, ev)
            names = sorted((f[: -len(".input.json")] for f in os.listdir(d) if f.endswith(".input.json")), key=size_key)
            inputs = []
            for name in names:
                with open(os.path.join(d, name + ".input.json")) as f:
                    inp = json.load(f)
                with open(os.path.join(d, name + ".expected.json")) as f:
                    inputs.append((name, inp, json.load(f)))
        if inputs:
            yield ev, inputs


def reference_times(data_dir):
    times = {}
    path = os.path.join(data_dir, "manual_timings.tsv")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                cols = line.rstrip("\n").split("\t")
                if len(cols) == 4 and cols[3].isdigit():
                    times[tuple(cols[:3])] = int(cols[3])
    return times


def run_tool(exe, inp, function, runs, timeout):
    """(output or None, [evaluate ns], error text or None)."""
    if isinstance(inp, dict):
        inp = dict(inp, min_runs=runs, min_seconds=0)
    with tempfile.NamedTemporaryFile("w", suffix=".input.json", delete=False) as f:
        json.dump(inp, f)
        path = f.name
    try:
        env = dict(os.environ, ADJIT_CACHE_DIR="")
        proc = subprocess.run([exe, path, function], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, [], f"timed out after {timeout} s"
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        return None, [], f"exit {proc.returncode}: {proc.stderr.strip()[:300]}"
    lines = proc.stdout.splitlines()
    try:
        output = json.loads(lines[0])
        timings = [json.loads(line) for line in lines[1:]]
    except (IndexError, json.JSONDecodeError) as e:
        return None, [], f"unreadable output ({e})"
    return output, [t["nanoseconds"] for t in timings if t.get("name") == "evaluate"], None


def quartiles(values):
    """(median, lower quartile, upper quartile) by nearest rank."""
    v = sorted(values)
    at = lambda q: v[int(q * (len(v) - 1) + 0.5)]
    return at(0.5), at(0.25), at(0.75)


def find_probe(tool_dir, given):
    """The phase probe's path, or None: --probe, else beside the build TOOL_DIR is in."""
    if given:
        return None if given == "none" else given
    exe = os.path.normpath(os.path.join(tool_dir, "..", "..", "..", "adjit_phase_probe"))
    return exe if os.access(exe, os.X_OK) else None


def read_probe(exe):
    """The probe's line ("phase probe: FMA peak ..."), or a note why there is none."""
    try:
        out = subprocess.run([exe], capture_output=True, text=True, timeout=120).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"phase probe: unavailable ({e})"
    return out.splitlines()[-1] if out else "phase probe: no output"


def fmt(ns):
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns} ns"


def machine():
    """'CPU model (N cores)' from /proc/cpuinfo, or the platform's name."""
    try:
        with open("/proc/cpuinfo") as f:
            models = re.findall(r"^model name\s*:\s*(.*)$", f.read(), re.M)
        return f"{models[0].strip()} ({len(models)} cores)"
    except (OSError, IndexError):
        import platform
        return platform.machine()


def commit():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        return subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def write_markdown(path, rows, probes, args):
    """The results table under its measurement line, in place between the markers of `path` if it has them."""
    command = "run.py" + "".join(f" --eval {e}" for e in args.eval or []) + (" --small" if args.small else "") + \
        f" --runs {args.runs} --rounds {args.rounds}"
    lines = [f"*Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC at commit `{commit()}` on "
             f"{machine()} by `{command}`, one thread, load average {os.getloadavg()[0]:.1f} at the end"
             + (f"; phase probe before: {probes[0].removeprefix('phase probe: ')}; after: {probes[1].removeprefix('phase probe: ')}"
                if len(probes) == 2 else "") + ".*", "",
             "| eval | input | function | first run | median | reference | ratio | derivative/primal | result |",
             "|---|---|---|--:|--:|--:|--:|--:|---|"]
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        dp = "-" if r["dp"] is None else f"{r['dp'][0]:.2f}" + (
            f" ({r['dp'][1]:.2f}–{r['dp'][2]:.2f})" if args.rounds > 1 else "")
        lines.append(f"| {r['eval']} | {r['input']} | {r['function']} | {fmt(r['first'])} | {fmt(r['median'])} | "
                     f"{fmt(r['reference'])} | {ratio} | {dp} | {r['result']} |")
    begin, end = f"<!-- run.py: begin {args.section} -->", f"<!-- run.py: end {args.section} -->"
    text = "\n".join(lines) + "\n"
    try:
        with open(path) as f:
            old = f.read()
    except OSError:
        old = ""
    if begin in old and end in old:
        text = old[:old.index(begin) + len(begin)] + "\n" + text + old[old.index(end):]
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir")
    ap.add_argument("tool_dir")
    ap.add_argument("--eval", action="append", help="only this eval (repeatable)")
    ap.add_argument("--small", action="store_true", help="only the smallest input of each eval")
    ap.add_argument("--runs", type=int, default=10, help="evaluations per input and function (default 10)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs of each function, in turn with the input's other functions (default 1)")
    ap.add_argument("--probe", help="the phase probe executable (default: adjit_phase_probe of TOOL_DIR's build; none: no probe)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per tool run")
    ap.add_argument("--markdown", help="also write the results as a markdown table to this file")
    ap.add_argument("--section", default="results", help="--markdown's section in FILE (default results)")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if not os.path.isdir(args.data_dir):
        print(f"skipped: GradBench data not found at {os.path.abspath(args.data_dir)}; it ships in ../shared/bench-data")
        return 77
    refs = reference_times(args.data_dir)
    probe = find_probe(args.tool_dir, args.probe)
    probes = [read_probe(probe)] if probe else []
    if probes:
        print("before: " + probes[0], flush=True)
    rows, failures = [], 0
    header = f"{'eval':8} {'input':34} {'function':9} {'first':>9} {'median':>9} {'reference':>9} {'ratio':>6} {'d/p':>5}  result"
    print(header, flush=True)
    for ev, inputs in cases(args.data_dir, args.eval):
        if args.small:
            inputs = inputs[:1]
        exe = os.path.join(args.tool_dir, ev)
        for name, inp, expected in inputs:
            functions = list(expected)
            times, errors = {f: [] for f in functions}, {f: None for f in functions}
            for r in range(args.rounds):
                for function in (functions if r % 2 == 0 else functions[::-1]):
                    if errors[function]:
                        continue
                    if not os.access(exe, os.X_OK):
                        output, t, error = None, [], f"missing executable {exe}"
                    else:
                        output, t, error = run_tool(exe, inp, function, args.runs, args.timeout)
                    if error is None and not t:
                        error = "no evaluate timings"
                    if error is None:
                        m = mismatch(output, expected[function])
                        error = None if m is None else m
                    if error is None:
                        times[function].append(t)
                    else:
                        errors[function] = error
            deriv, primal = DERIVATIVES.get(ev, (None, None))
            for function in functions:
                result = "valid" if errors[function] is None else "INVALID: " + errors[function]
                failures += result != "valid"
                runs = times[function]
                first = runs[0][0] if runs else None
                later = [t[1:] or t for t in runs]  # without the cold first run, when there are others
                median = statistics.median(statistics.median(t) for t in later) if runs else None
                ref = refs.get((ev, name, function))
                ratio = median / ref if median and ref else None
                dp = None
                if function == deriv and runs and len(times.get(primal, [])) == len(runs):
                    dp = quartiles([statistics.median(d[1:] or d) / statistics.median(p[1:] or p)
                                    for d, p in zip(runs, times[primal])])
                row = dict(eval=ev, input=name, function=function, first=first, median=median, reference=ref,
                           ratio=ratio, dp=dp, result=result)
                rows.append(row)
                dp_text = "-" if dp is None else f"{dp[0]:.2f}" + (f" [{dp[1]:.2f}-{dp[2]:.2f}]" if args.rounds > 1 else "")
                print(f"{ev:8} {name:34} {function:9} {fmt(first):>9} {fmt(median):>9} {fmt(ref):>9} "
                      f"{'-' if ratio is None else f'{ratio:.2f}':>6} {dp_text:>5}  {result}", flush=True)
    if probe:
        probes.append(read_probe(probe))
        print("after: " + probes[1], flush=True)
    if args.markdown:
        write_markdown(args.markdown, rows, probes, args)
    print(f"{len(rows) - failures} of {len(rows)} outputs valid", flush=True)
    return 1 if failures or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
