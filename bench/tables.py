#!/usr/bin/env python3
"""Writes the tables of docs/benchmarks.md from the benchmarks' output.

Runs adjit_bench, adjit_bench_avx2 (with ADJIT_CPU=x86-64-v3), adjit_compile_bench, adjit_adbench and (where they were built)
adjit_matmul_bench, adjit_linalg_bench, adjit_decompositions_bench, adjit_conv_bench,
adjit_vmap_bench, adjit_sort_bench and adjit_map_bench from BUILD_DIR, one after the
other, and writes each one's current numbers as markdown tables, in place between
its markers (<!-- tables.py: begin BINARY --> ... end BINARY -->), under a line
naming the date, the commit, the CPU and its core count, the load average, and
the phase probe (adjit_phase_probe: the FMA peak at one thread and on all)
read just before and after the run. Text outside the markers is kept; a section not yet in the
file is appended. Lines a parser does not know are kept verbatim under their
section, so nothing a benchmark prints is lost. History lives in git, not in
this file. Run it on a quiet machine (`nice`, nothing else building).

usage: bench/tables.py BUILD_DIR [--out FILE] [--quick] [--only A,B] [--from DIR]
  --out FILE  where to write (default: docs/benchmarks.md of this repository)
  --only A,B  only these benchmarks (adjit_bench or bench, ...); the other sections stay
  --quick     adjit_bench 7 (rounds, not 21), adjit_compile_bench --quick, adjit_adbench --smallest, adjit_matmul_bench --quick
  --from DIR  read DIR/<binary>.txt instead of running the binaries (output captured
              elsewhere, or samples to test the parsers); BUILD_DIR is then unused
"""
import datetime
import os
import re
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
NUM = r'(-?[\d.]+(?:e[-+]?\d+)?)'


def table(header, rows):
    out = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    out += ['| ' + ' | '.join(str(c) for c in r) + ' |' for r in rows]
    return out


def verbatim(lines):
    return ['```'] + lines + ['```'] if lines else []


class Parser:
    """Matches lines against (name, regex) pairs; collects rows per name and the rest."""

    def __init__(self, patterns):
        self.patterns = [(name, re.compile(rx)) for name, rx in patterns]
        self.rows = {name: [] for name, _ in patterns}
        self.other = []

    def feed(self, text, skip=()):
        for line in text.splitlines():
            if not line.strip() or any(line.startswith(s) for s in skip):
                continue
            for name, rx in self.patterns:
                m = rx.match(line)
                if m:
                    self.rows[name].append(m.groups())
                    break
            else:
                self.other.append(line)
        return self


def ms(x):
    """A time as the benchmark printed it."""
    return f'{x} ms'


def spread(q, lo, hi):
    """A ratio with its quartiles, as adjit_bench printed them."""
    return f'{q}x ({lo}–{hi})'


def bench_section(text, title='Run time against hand-written C++'):
    R = rf'{NUM}x \[{NUM}-{NUM}\]'  # a ratio and its quartiles
    p = Parser([
        ('row', rf'^([BG]\d)\s+1 thread: adjit\s+{NUM} ms\s+baseline\s+{NUM} ms\s+ratio\s+{R}\s+(\d+) threads: '
                rf'adjit\s+{NUM} ms\s+OpenMP\s+{NUM} ms\s+ratio\s+{R}\s+cold compile\s+{NUM} ms\s+probe {NUM} / {NUM} GFLOP/s\s+'
                rf'\((.*)\)$'),
        ('own', rf'^(G\d)\s+vs own forward \(1 thread\):\s+{R}'),
        ('mlp', rf'^(B4|G4)\s+(?:PyTorch 1 thread\s+{NUM} ms\s+adjit/PyTorch\s+{R}\s+\(([^,]*), loss {NUM}\)|'
                rf'PyTorch (.*?))\s+FMA peak {NUM} GFLOP/s: adjit {NUM}%, baseline {NUM}%(?:, PyTorch {NUM}%)? of it'),
        ('b0', rf'^B0\s+adjit\s+{NUM} ns per call.*cold compile\s+{NUM} ms'),
        ('probe', rf'^phase probe: FMA peak {NUM} GFLOP/s \(([^)]*)\)(?:, {NUM} GFLOP/s on (\d+) threads at once)?'
                  rf'(?:; over 200 ms {NUM} / {NUM} GFLOP/s)?'),
        ('jvp', rf'^(F\d|H4)\s+(?:jvp|hvp)\s+{NUM} ms\s+forward\s+{NUM} ms\s+ratio\s+{R} \(target <= {NUM}\)\s+'
                rf'cold\s+{NUM} ms'),
        ('jac', rf'^J\s+jacfwd\s+{NUM} ms\s+jacrev\s+{NUM} ms\s+jacrev/jacfwd\s+{R}.*cold {NUM} / {NUM} ms'),
        ('ode_ckpt', rf'^ODE\s+value\+gradient, checkpoint (\S+?):?\s+adjit\s+{NUM} ms\s+ratio\s+{R}\s+'
                     rf'cold compile\s+{NUM} ms\s+residuals (\d+) bytes'),
        ('ode', rf'^ODE\s+(forward|value\+gradient)\s+adjit\s+{NUM} ms\s+baseline\s+{NUM} ms\s+ratio\s+{R} '
                rf'\(target <= {NUM}x\)\s+cold compile\s+{NUM} ms(?:.*residuals (\d+) bytes)?'),
        ('r1', rf'^R1\s+adjit\s+{NUM} ms \({NUM} GB/s\)\s+baseline\s+{NUM} ms \({NUM} GB/s\)\s+ratio\s+{R}\s+'
               rf'cold compile\s+{NUM} ms\s+\(max rel. diff ([^)]*)\)'),
        ('r2', rf'^R2\s+(.+?)\s+(\d+) samples\s+portable\s+{NUM} ms\s+libm ops\s+{NUM} ms\s+ratio\s+{R}$'),
        ('targets', r'^targets: (.*)$'),
    ]).feed(text, skip=('adjit benchmarks', 'run time against hand-written', 'forward mode at one thread', 'ODE (',
                        'random numbers ('))
    r = p.rows
    probes = [f'{g} GFLOP/s' + (f' ({gn} on {t} threads)' if gn else '') + (f' and over 200 ms {l1} / {ln}' if l1 else '')
              for g, _, gn, t, l1, ln in r['probe']]
    targets = ''.join(f' Targets: {t}.' for (t,) in r['targets'])
    out = [f'## {title}', '',
           '`adjit_bench` times compiled code against hand-written C++ (`bench/baselines.cpp`, compiled with '
           '`-O3 -march=native -ffast-math -fopenmp-simd` and libmvec; `adjit_bench_avx2` with `-march=x86-64-v3`, '
           'run with `ADJIT_CPU=x86-64-v3`) in the same process, like with like: adjit '
           'at one thread (`JitOptions::threads = 1`) against the plain loop at one thread, and adjit at all '
           'threads against the same loops threaded with OpenMP over row ranges. Every side of a comparison runs '
           'in turn, round after round (batches of three calls, the first untimed; a pause after each threaded '
           'batch so no idle pool spins on the other side\'s core): times are medians over the rounds, ratios '
           '(adjit / baseline, lower is better) are the median and in parentheses the quartiles of the rounds\' '
           'ratios. The all-threads columns mean something only when the machine\'s other cores were free (the '
           'phase probe\'s 200 ms reading on all threads near its peak): OpenMP\'s static split waits at its barrier '
           'for a thread the scheduler has set aside for another process, a time slice at a time (the flat 6-16 ms '
           'of loaded runs), where adjit\'s pool lets the calling thread take the work. B4/G4\'s baseline is plain '
           'i-k-j loops, not a BLAS. "Cold compile" is the first call at one '
           'thread: tracing, passes, LLVM and one run. "Probe" is the FMA peak at one thread and on all threads at once '
           '(their sum), read in the same rounds (`bench/fma_probe.cpp`): a low all-threads reading means other '
           'processes held cores; the section\'s phase probes (the peak of short runs, and what a 200 ms run got '
           'beside the machine\'s other processes) read ' + (', '.join(probes) or 'nothing') + '.' + targets, '']
    if r['row'] or r['b0']:
        own = {n: spread(q, lo, hi) for n, q, lo, hi in r['own']}
        rows = []
        for (n, a1, b1, q1, l1, h1, t, an, bn, qn, ln, hn, c, pr, prn, check) in r['row']:
            rows.append((n, ms(a1), ms(b1), spread(q1, l1, h1), ms(an), ms(bn), spread(qn, ln, hn), own.get(n, ''),
                         ms(c), f'{pr} / {prn} GFLOP/s', check))
        threads = r['row'][0][6] if r['row'] else 'all'
        rows += [('B0 (call overhead)', f'{ns} ns/call', '', 'fastest of 7 batches; target ≤ 50 ns', '', '', '', '', ms(c), '', '')
                 for ns, c in r['b0']]
        out += table(['', 'adjit, 1 thread', 'baseline, 1 thread', 'ratio', f'adjit, {threads} threads',
                      f'OpenMP baseline, {threads} threads', 'ratio', 'gradient / own forward (1 thread)',
                      'cold compile', f'probe (1 / {threads} threads)', 'results'], rows) + ['']
    if r['mlp']:
        out += ['The MLP rows (B4: 0.5 · sum((tanh(X W1) W2)²), X 256×512, W1 and W2 512×512, f32; G4: its value and '
                'gradient in W1 and W2) beside PyTorch at one thread (`bench/mlp_torch.py`, a child process that takes '
                'its turn in the same rounds; where PyTorch is not installed the row says so), and every side\'s '
                'speed as a fraction of the one-thread FMA peak read in the same rounds:', '']
        rows = []
        for n, pt, q, lo, hi, version, loss, missing, peak, fa, fb, fp in r['mlp']:
            rows.append((n, ms(pt) if pt else (missing or 'not run'), spread(q, lo, hi) if q else '', version or '',
                         f'{peak} GFLOP/s', f'{fa}%', f'{fb}%', f'{fp}%' if fp else ''))
        out += table(['', 'PyTorch, 1 thread', 'adjit / PyTorch', 'version', 'FMA peak (1 thread)', 'adjit',
                      'hand-written', 'PyTorch'], rows) + ['']
    if r['jvp'] or r['jac']:
        out += ['Forward mode at one thread against adjit\'s own forward at one thread, in turn (F1–F3: the tangent '
                'of B1–B3 along a random direction; H4: a Hessian-vector product of G4\'s loss, forward over reverse); '
                'J: the Jacobian of R^16 → R^1000 by `jacfwd` against `jacrev`, all threads both:', '']
        rows = [(n, ms(a), ms(f), spread(q, lo, hi), f'≤ {t}x', ms(c)) for n, a, f, q, lo, hi, t, c in r['jvp']]
        rows += [('J', ms(a), f'{ms(b)} (jacrev)', f'{spread(q, lo, hi)} faster', '', f'{c1} / {c2} ms')
                 for a, b, q, lo, hi, c1, c2 in r['jac']]
        out += table(['', 'adjit', 'forward', 'ratio', 'target', 'cold compile'], rows) + ['']
    if r['ode'] or r['ode_ckpt']:
        out += ['`examples/ode`: RK4 on a damped, driven pendulum, 1,000 steps of `scan`, in f64, one thread, against '
                'a hand-written RK4 loop and a discrete adjoint that keeps each step\'s state and recomputes the '
                'stages, in turn:', '']
        out += table(['', 'adjit', 'hand-written', 'ratio', 'target', 'cold compile', 'residuals'],
                     [(n, ms(a), ms(b), spread(q, lo, hi), f'≤ {t}x', ms(c), f'{res} bytes' if res else '')
                      for n, a, b, q, lo, hi, t, c, res in r['ode']])
        out += ['']
        if r['ode_ckpt']:
            out += ['Value and gradient with `.checkpoint` policies (see '
                    '[control flow](guide/control-flow.md#checkpointing-a-scan)), each in turn with the hand-written '
                    'adjoint:', '']
            out += table(['policy', 'adjit', 'vs hand-written', 'cold compile', 'residuals'],
                         [(f'`{n}`', ms(a), spread(q, lo, hi), ms(c), f'{res} bytes')
                          for n, a, q, lo, hi, c, res in r['ode_ckpt']])
            out += ['']
    if r['r1']:
        out += ['R1: 10^7 standard normal f32 samples (`random::normal`) at one thread against a hand-written '
                'Threefry and erf⁻¹ loop, in turn:', '']
        out += table(['', 'adjit', 'hand-written', 'ratio', 'cold compile', 'max rel. diff'],
                     [('R1', f'{ms(a)} ({ga} GB/s)', f'{ms(b)} ({gb} GB/s)', spread(q, lo, hi), ms(c), d)
                      for a, ga, b, gb, q, lo, hi, c, d in r['r1']]) + ['']
    if r['r2']:
        out += ['R2: `exponential` and `gumbel` (their logarithm written out in IEEE-rounded ops, the same bits on every '
                'target) at one thread against the same formulas on the `log`/`log1p` ops (libm, libmvec in vector '
                'loops), in turn:', '']
        out += table(['sampler', 'samples', 'portable', 'libm ops', 'ratio'],
                     [(name, n, ms(a), ms(b), spread(q, lo, hi)) for name, n, a, b, q, lo, hi in r['r2']]) + ['']
    if p.other:
        out += ['Other lines of the output:', ''] + verbatim(p.other) + ['']
    return out


def adbench_section(text):
    p = Parser([('row', rf'^(.+?)\s+(ok |BAD) \(([^)]*)\)\s+compile\s+{NUM} s\s+objective\s+{NUM} ms \(Manual\s+{NUM},'
                        rf'\s+{NUM}x\)\s+derivative\s+{NUM} ms \(Manual\s+{NUM},\s+{NUM}x\)\s+d/o\s+{NUM} \[{NUM}-{NUM}\]'),
                ('problem', r'^(GMM|BA|LSTM) \((.*)$')])
    p.feed(text, skip=("ADBench with adjit", "times are medians", "g++ -O3, recorded", "  "))
    out = ['## ADBench', '',
           '`adjit_adbench` runs ADBench\'s objectives (GMM, BA, LSTM; the data set\'s README defines them) '
           'written with adjit in f64, checks every value against ADBench\'s hand-written module (Manual) with '
           'ADBench\'s criterion (|x − y| / max(1, |x| + |y|) ≤ 1e-8), and times them against Manual\'s timings '
           'recorded on the same machine kind (one core, g++ -O3; read them beside the section\'s phase probe). '
           'adjit\'s objective and derivative take turns, round after round, in one process: times are the '
           'medians of the rounds, and `d/o`, adjit\'s derivative time over its objective time, is the median '
           'and in parentheses the quartiles of the rounds\' ratios. `compile` is the first calls (tracing, '
           'compiling, one run of each). The code is `bench/adbench.cpp`.', '']
    if p.rows['row']:
        out += table(['input', 'check', 'compile', 'objective', 'Manual', 'ratio', 'derivative', 'Manual', 'ratio', 'd/o'],
                     [(n.strip(), ok.strip(), f'{c} s', ms(o), ms(om), f'{oq}x', ms(d), ms(dm),
                       f'{dq}x', f'{do} ({lo}–{hi})') for n, ok, _, c, o, om, oq, d, dm, dq, do, lo, hi in p.rows['row']])
        out += ['']
    if p.other:
        out += ['Other lines of the output:', ''] + verbatim(p.other) + ['']
    return out


def compile_section(text):
    p = Parser([('row', rf'^(.+?)\s+(\d+) ops\s+trace\s+{NUM}\s+passes\s+{NUM}\s+llvm\s+{NUM}\s+total\s+{NUM} ms(.*)$')])
    p.feed(text, skip=('compile time of the first call',))
    out = ['## Compile time', '',
           '`adjit_compile_bench` times the first call of each program: tracing, adjit\'s passes and LLVM '
           '(planning, lowering, optimisation, code generation). It includes chains of up to 100,000 '
           'elementwise ops and their gradients, unrolled recurrences and LSTM cells, ADBench\'s GMM objective '
           'in einsum and matmul form, BA\'s full Jacobian, and a disk-cache hit in a fresh process. LLVM\'s '
           'work is split across all cores for large modules. First calls run tier 1 (JitOptions::tiers: LLVM\'s '
           'fast code generator on the optimised IR); the tiers lines at the end compare each program\'s first '
           'call with tiers off and on, the time until the optimised tier is live, and both tiers\' run times.', '']
    if p.rows['row']:
        out += table(['program', 'ops', 'trace', 'passes', 'llvm', 'total', ''],
                     [(n.strip(), o, ms(t), ms(ps), ms(l), ms(tot), extra.strip()) for n, o, t, ps, l, tot, extra in p.rows['row']])
        out += ['']
    if p.other:
        out += ['Other lines of the output:', ''] + verbatim(p.other) + ['']
    return out


def matmul_section(text):
    return ['## Matrix products', '',
            '`adjit_matmul_bench` prints adjit\'s matrix products next to OpenBLAS, one thread each (ratio = '
            'adjit speed / OpenBLAS speed), then adjit on all cores; `--layers` times products with fused '
            'epilogues and prologues against OpenBLAS plus a separate pass.', ''] + verbatim(text.splitlines()) + ['']


def printed_section(title, intro):
    """A section that keeps a benchmark's own table as it printed it."""
    def section(text):
        return [f'## {title}', '', intro, ''] + verbatim(text.splitlines()) + ['']
    return section


BENCHES = [  # binary, arguments, --quick arguments, section
    ('adjit_bench', [], ['7'], bench_section),
    ('adjit_bench_avx2', [], ['7'], lambda text: bench_section(
        text, 'Run time against hand-written C++, AVX2 (x86-64-v3) on both sides')),
    ('adjit_compile_bench', [], ['--quick'], compile_section),
    ('adjit_adbench', [], ['--smallest'], adbench_section),
    ('adjit_matmul_bench', [], ['--quick'], matmul_section),
    ('adjit_linalg_bench', [], ['--quick'], printed_section(
        'Factorisations and solves',
        '`adjit_linalg_bench`: `linalg::cholesky`, `cho_solve` and `solve` against OpenBLAS\'s LAPACK '
        '(`potrf`, `potrs`, `dgesv`), one thread each, runs interleaved; the first call\'s time includes '
        'tracing and compiling. PyTorch 1.13\'s `torch.linalg.cholesky` and `torch.cholesky_solve` on the '
        'same batches are `bench/linalg_torch_small.py`, run by hand (one thread); on this machine on '
        '2026-11-27 (load ~20, medians of 3 runs) they took, for cholesky + cho_solve, 434 us (f64) and '
        '428 us (f32) for 1000 x [8, 8], 275 us and 235 us for 100 x [32, 32], and 20-28 ms for the '
        'f64 gradient at 100 x [32, 32].')),
    ('adjit_decompositions_bench', [], ['--quick'], printed_section(
        'Decompositions',
        '`adjit_decompositions_bench`: `linalg::eigh` and `linalg::svd` against OpenBLAS\'s LAPACK '
        '(`dsyevd`, `dgesdd`), f64, one thread each, runs interleaved.')),
    ('adjit_conv_bench', [], ['--quick'], printed_section(
        'Convolution',
        '`adjit_conv_bench`: a ResNet-style 3x3 convolution (forward, both gradients and each alone) and LeNet-5 '
        '(forward, gradient, the gradient cut after each conv block) against PyTorch 1.13 (oneDNN; '
        '`bench/conv_torch.py --serve` in a child process taking turns) and im2col plus OpenBLAS `sgemm`, '
        'one thread each, every side in turn in the same rounds, medians.')),
    ('adjit_vmap_bench', [], ['--quick'], printed_section(
        'Batching',
        '`adjit_vmap_bench`: per-example gradients of a 784-256-10 tanh MLP (softmax cross-entropy, batch 256, '
        'f32) by `vmap(grad(loss))` against a loop of 256 compiled `grad` calls and against the same gradients '
        'batched by hand with adjit ops; `jacfwd`, `jacrev` and `hessian` batched over the basis against the '
        '`scan` of one JVP or VJP per basis vector (forced for the comparison). One thread each, runs '
        'interleaved, medians. PyTorch\'s `functorch.vmap(functorch.grad(loss))` on the same problem is '
        '`bench/per_example_grads_torch.py`, run by hand.')),
    ('adjit_sort_bench', [], [], printed_section(
        'Sorting',
        '`adjit_sort_bench`: `sort` of f32 against `std::sort` and `top_k` against `std::partial_sort`, one thread, '
        'runs interleaved; then `sort` with its i64 positions against `torch.sort` (default and stable) and `top_k` '
        'against `torch.topk`, PyTorch 1.13 on one thread in a child process (`bench/sort_torch.py --serve`) taking '
        'turns with adjit round after round (medians of the rounds; ratios adjit / PyTorch, median [quartiles]); '
        'the scan ring buffer against a C++ loop.')),
    ('adjit_map_bench', [], ['--quick'], printed_section(
        'map over a run-time count',
        '`adjit_map_bench`: `map` of an RK4 step of a 12-state rigid body over N instances: time per instance '
        'against a loop of `jit` calls on the slices, the first call\'s time with its compilation (in '
        'parentheses, the compile events\' own times; one program serves every N), and the speedup of all '
        'threads over one.')),
]


# Environment per benchmark: adjit_bench_avx2's baselines are built for x86-64-v3, so adjit targets it too.
BENCH_ENV = {'adjit_bench_avx2': {'ADJIT_CPU': 'x86-64-v3'}}


def cpu_model():
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return 'unknown CPU'


def begin_marker(binary):
    return f'<!-- tables.py: begin {binary} -->'


def end_marker(binary):
    return f'<!-- tables.py: end {binary} -->'


HEAD = ['# Benchmarks', '',
        'Each section below is one benchmark\'s current table, with the date, commit and machine it was measured on. '
        '`python3 bench/tables.py BUILD_DIR` (a Release build with `-DADJIT_BUILD_BENCH=ON`, the default) runs the '
        'benchmarks one after the other and rewrites each section in place, between its `tables.py` markers; '
        '`--only adjit_bench,adjit_adbench` reruns just those. Older numbers are in git\'s history of this file.', '',
        'Method: one benchmark process at a time; medians of repeated calls; where two variants are compared '
        '(adjit against a baseline, one thread against all) their runs take turns in one process, so that the '
        'machine\'s slow and fast phases (minutes long on the development VMs) hit both alike, and the table gives '
        'the ratios, where the benchmark prints it with their spread. Absolute times come with a phase probe: '
        'the FMA peak at one thread and on all at once (`adjit_phase_probe`, `bench/fma_probe.cpp`), as the median of '
        'short runs (a low reading marks a slow phase of the machine) and as one 200 ms run (a low reading: other '
        'processes held the cores), read just before and after the benchmark ran, and by `adjit_bench` inside its '
        'own rounds. The disk '
        'cache is off (`ADJIT_CACHE_DIR=`), so first calls compile.', '']


def probe(build):
    """The phase probe's reading now ("109.8 GFLOP/s"), or None where it is not built."""
    exe = os.path.join(build, 'adjit_phase_probe')
    if not os.path.exists(exe):
        return None
    m = re.search(rf'FMA peak {NUM} GFLOP/s \(one thread, ([^)]*)\), {NUM} GFLOP/s on (\d+) threads at once; '
                  rf'over 200 ms {NUM} / {NUM} GFLOP/s', subprocess.run([exe], capture_output=True, text=True).stdout)
    return (f'{m.group(1)} / {m.group(3)} GFLOP/s peak, {m.group(5)} / {m.group(6)} over 200 ms', m.group(2)) if m else None


def with_meta(lines, meta):
    """The section's lines with `meta` (a paragraph) after its title."""
    return lines[:2] + [meta, ''] + lines[2:]


def splice(old, sections):
    """`old` (the file's text) with each (binary, lines) section put between its markers, or appended."""
    text = old
    for binary, lines in sections:
        block = '\n'.join([begin_marker(binary)] + lines + [end_marker(binary)])
        i, j = text.find(begin_marker(binary)), text.find(end_marker(binary))
        if i >= 0 and j > i:
            text = text[:i] + block + text[j + len(end_marker(binary)):]
        else:
            text = text.rstrip('\n') + '\n\n' + block + '\n'
    return text


def main(argv):
    args, out_path, quick, source, only = [], os.path.join(REPO, 'docs', 'benchmarks.md'), False, None, None
    it = iter(argv[1:])
    for a in it:
        if a == '--out':
            out_path = next(it)
        elif a == '--quick':
            quick = True
        elif a == '--from':
            source = next(it)
        elif a == '--only':
            only = {n if n.startswith('adjit_') else 'adjit_' + n for n in next(it).split(',')}
        elif a in ('-h', '--help'):
            print(__doc__)
            return 0
        else:
            args.append(a)
    if not args and not source:
        print(__doc__)
        return 2
    if only is not None and only - {b for b, *_ in BENCHES}:
        print(f'tables.py: unknown benchmarks {", ".join(sorted(only - {b for b, *_ in BENCHES}))}', file=sys.stderr)
        return 2
    build = os.path.abspath(args[0]) if args else None
    commit = subprocess.run(['git', '-C', REPO, 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()
    # Changes to tracked files other than this output (a section written by an earlier run) make the commit "with local changes".
    dirty = subprocess.run(['git', '-C', REPO, 'status', '--porcelain', '--untracked-files=no', '--', '.',
                            ':!' + os.path.relpath(os.path.abspath(out_path), REPO)], capture_output=True,
                           text=True).stdout.strip()
    commit = (commit or 'unknown') + (' with local changes' if dirty else '')
    machine = f'{cpu_model()} ({os.cpu_count()} cores)'
    sections = []
    for binary, plain, quick_args, section in BENCHES:
        if only is not None and binary not in only:
            continue
        cmd_args = quick_args if quick else plain
        when = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
        before = after = None
        load = os.getloadavg()[0]
        if source:
            path = os.path.join(source, binary + '.txt')
            if not os.path.exists(path):
                continue
            with open(path, encoding='utf-8') as f:
                text = f.read()
            how = f'`{binary}` (output captured in `{path}`)'
            when = datetime.datetime.fromtimestamp(os.path.getmtime(path), datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
            load = None
        else:
            exe = os.path.join(build, binary)
            if not os.path.exists(exe):
                print(f'tables.py: {exe} is not built; its section is left as it was', file=sys.stderr)
                continue
            print(f'tables.py: running {binary} {" ".join(cmd_args)}', file=sys.stderr)
            before = probe(build)
            # The disk cache off (ADJIT_CACHE_DIR empty): a "cold compile" must
            # compile, not load what an earlier run of the benchmark left.
            env = dict(os.environ, ADJIT_CACHE_DIR='', **BENCH_ENV.get(binary, {}))
            r = subprocess.run([exe] + cmd_args, capture_output=True, text=True, cwd=build, env=env)
            after = probe(build)
            text = r.stdout
            if r.returncode not in (0, 77):
                text += f'\n(exit status {r.returncode})\n' + r.stderr
            how = '`' + ' '.join([f'{k}={v}' for k, v in BENCH_ENV.get(binary, {}).items()] + [binary] + cmd_args) + '`'
        meta = f'*Measured {when} at commit `{commit}` on {machine} by {how}'
        if load is not None:
            meta += f', load average {load:.1f} at the start'
        if before and after:
            meta += (f'; phase probe (FMA, {before[1]}, at one thread / on all {os.cpu_count()}: the peak of short runs, '
                     f'and what one 200 ms run got beside the other load) {before[0]} before, {after[0]} after')
        sections.append((binary, with_meta(section(text), meta + '.*')))
    if not sections:
        print('tables.py: nothing ran; nothing written', file=sys.stderr)
        return 1
    old = ''
    if os.path.exists(out_path):
        with open(out_path, encoding='utf-8') as f:
            old = f.read()
    if '<!-- tables.py: begin ' not in old:  # no markers yet: a new file
        if only is not None and old:
            print(f'tables.py: {out_path} has no tables.py markers; run without --only once to rewrite it',
                  file=sys.stderr)
            return 1
        old = '\n'.join(HEAD) + '\n'
    with open(out_path, 'w', encoding='utf-8') as f:
        f.write(splice(old, sections).rstrip('\n') + '\n')
    print(f'tables.py: wrote {out_path}', file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
