#!/usr/bin/env python3
"""The guide's code snippets are copies of code that is compiled and run.

In a source file, `// [snippet:NAME]` and `// [/snippet:NAME]` (or `#` for
shell and Python) mark a region; a name may mark several regions of one file,
and the snippet is their parts in order, each dedented, a blank line
between parts. Marker lines of other
snippets inside a region are left out. In markdown,
`<!-- snippet: path/to/file.cpp#NAME -->` on the line before a fenced code
block says the block is that snippet (the path is relative to the repository).

Checks every such block in README.md and docs/**/*.md against its source and
prints each mismatch, exiting 1; prints "snippets match their sources" when
all agree. With --write, rewrites the blocks from the sources instead.
usage: snippets.py [--write] [REPO_ROOT]
"""
import difflib
import os
import re
import sys
import textwrap

MARK = re.compile(r'^\s*(?://|#)\s*\[(/?)snippet:([\w.-]+)\]\s*$')
REF = re.compile(r'^<!--\s*snippet:\s*(\S+?)#([\w.-]+)\s*-->\s*$')
FENCE = re.compile(r'^(```+|~~~+)(.*)$')


def markdown_files(root):
    files = [os.path.join(root, 'README.md')]
    for base, dirs, names in os.walk(os.path.join(root, 'docs')):
        dirs.sort()
        files += [os.path.join(base, n) for n in sorted(names) if n.endswith('.md')]
    return [f for f in files if os.path.isfile(f)]


def regions(path):
    """{name: snippet text} of a source file, or raises ValueError."""
    with open(path, encoding='utf-8') as f:
        lines = f.read().split('\n')
    parts, open_at = {}, {}
    for no, line in enumerate(lines, 1):
        m = MARK.match(line)
        if m:
            closing, name = m.group(1) == '/', m.group(2)
            if closing:
                if name not in open_at:
                    raise ValueError(f'{path}:{no}: [/snippet:{name}] closes no open region')
                del open_at[name]
            else:
                if name in open_at:
                    raise ValueError(f'{path}:{no}: [snippet:{name}] opened again before it was closed')
                open_at[name] = no
                parts.setdefault(name, []).append([])
            continue
        for name in open_at:
            parts[name][-1].append(line)
    if open_at:
        name, no = next(iter(open_at.items()))
        raise ValueError(f'{path}:{no}: [snippet:{name}] is never closed')
    return {name: '\n\n'.join(textwrap.dedent('\n'.join(p)).rstrip('\n') for p in ps) for name, ps in parts.items()}


def blocks(md_lines):
    """(ref line index, path, name, first body line, end fence line) per marked block."""
    out, i = [], 0
    while i < len(md_lines):
        m = REF.match(md_lines[i])
        if not m:
            if '<!-- snippet:' in md_lines[i]:  # indented, or malformed: would be silently unchecked
                out.append((i, md_lines[i].strip(), '', None, None))
            i += 1
            continue
        f = FENCE.match(md_lines[i + 1]) if i + 1 < len(md_lines) else None
        if not f:
            out.append((i, m.group(1), m.group(2), None, None))
            i += 1
            continue
        fence = f.group(1)
        j = i + 2
        while j < len(md_lines) and md_lines[j].rstrip() != fence:
            j += 1
        out.append((i, m.group(1), m.group(2), i + 2, j if j < len(md_lines) else None))
        i = j + 1
    return out


def main(argv):
    write = '--write' in argv
    args = [a for a in argv[1:] if a != '--write']
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), '..', '..'))
    cache, problems, count = {}, [], 0
    for md in markdown_files(root):
        rel_md = os.path.relpath(md, root)
        with open(md, encoding='utf-8') as f:
            lines = f.read().split('\n')
        changed = False
        for ref, path, name, first, end in reversed(blocks(lines)):
            where = f'{rel_md}:{ref + 1}'
            if not name:
                problems.append(f'{where}: a snippet marker must be `<!-- snippet: PATH#NAME -->` at the start '
                                f'of a line, got: {path}')
                continue
            if first is None or end is None:
                problems.append(f'{where}: snippet {path}#{name}: expected a fenced code block on the next line')
                continue
            src = os.path.join(root, path)
            if src not in cache:
                try:
                    cache[src] = regions(src)
                except (OSError, ValueError) as e:
                    cache[src] = e
            if isinstance(cache[src], Exception):
                problems.append(f'{where}: snippet {path}#{name}: {cache[src]}')
                continue
            if name not in cache[src]:
                problems.append(f'{where}: snippet {path}#{name}: no region [snippet:{name}] in {path}')
                continue
            count += 1
            want = cache[src][name].split('\n')
            have = lines[first:end]
            if have == want:
                continue
            if write:
                lines[first:end] = want
                changed = True
            else:
                diff = difflib.unified_diff(have, want, f'{rel_md} (line {first + 1})', f'{path}#{name}', lineterm='')
                problems.append(f'{where}: snippet {path}#{name} differs from its source '
                                f'(run test/docs/snippets.py --write):\n' + '\n'.join(diff))
        if changed:
            with open(md, 'w', encoding='utf-8') as f:
                f.write('\n'.join(lines))
            print(f'rewrote {rel_md}')
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f'snippets match their sources ({count} blocks)')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
