#!/usr/bin/env python3
"""docs/guide/ops.md lists exactly the ops of Ops.def, with their arity.

The op list is the one `lib/*/Ops.def` (its rows are
`ADJIT_OP(Enum, "mnemonic", arity, traits)`, arity -1 for variadic). The
reference's rows are markdown table rows whose first cell is a mnemonic in
backquotes and whose second is its arity (a number, or "variadic").

Prints the ops Ops.def has and the reference lacks, the ops the reference
lists and Ops.def does not have, and arities that disagree, and exits 1 if
there are any; prints "op reference matches Ops.def" when they agree.
usage: op_reference.py [REPO_ROOT]
"""
import glob
import os
import re
import sys

OP = re.compile(r'^\s*ADJIT_OP\(\s*\w+\s*,\s*"([^"]+)"\s*,\s*(-?\d+)\s*,')
ROW = re.compile(r'^\|\s*`([a-z0-9_]+)`\s*\|\s*([^|]*?)\s*\|')


def ops_def(root):
    paths = sorted(glob.glob(os.path.join(root, 'lib', '*', 'Ops.def')))
    if not paths:
        sys.exit(f'op_reference: no lib/*/Ops.def under {root}')
    ops = {}
    for path in paths:
        with open(path, encoding='utf-8') as f:
            for line in f:
                m = OP.match(line)
                if m:
                    ops[m.group(1)] = int(m.group(2))
    return paths, ops


def reference(path):
    ops, dup = {}, []
    with open(path, encoding='utf-8') as f:
        for line in f:
            m = ROW.match(line)
            if not m:
                continue
            name, arity = m.group(1), m.group(2)
            if name in ops:
                dup.append(name)
            ops[name] = -1 if arity == 'variadic' else int(arity) if re.fullmatch(r'\d+', arity) else arity
    return ops, dup


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), '..', '..'))
    defs, ops = ops_def(root)
    ref_path = os.path.join(root, 'docs', 'guide', 'ops.md')
    ref, dup = reference(ref_path)
    where = ', '.join(os.path.relpath(p, root) for p in defs)
    problems = []
    missing = sorted(set(ops) - set(ref))
    extra = sorted(set(ref) - set(ops))
    if missing:
        problems.append(f'docs/guide/ops.md lacks ops of {where}: {", ".join(missing)}')
    if extra:
        problems.append(f'docs/guide/ops.md lists ops that {where} does not have: {", ".join(extra)}')
    if dup:
        problems.append(f'docs/guide/ops.md lists these ops twice: {", ".join(sorted(set(dup)))}')
    for name in sorted(set(ops) & set(ref)):
        if ref[name] != ops[name]:
            want = 'variadic' if ops[name] == -1 else str(ops[name])
            problems.append(f'docs/guide/ops.md: {name} has arity {ref[name]}, but {where} says {want}')
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f'op reference matches Ops.def ({len(ops)} ops)')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
