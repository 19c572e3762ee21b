#!/usr/bin/env python3
"""Every relative link in README.md and docs/**/*.md resolves.

A link `[text](path#anchor)` must name a file or directory that exists,
relative to the markdown file, and its anchor (if any) must be a heading of
the target (GitHub's slugs: lower case, punctuation dropped, spaces to
hyphens). Links to http(s) addresses are not checked. Prints each broken link
and exits 1; prints "every link resolves" otherwise.
usage: links.py [--allow-missing PATH]... [REPO_ROOT]
"""
import os
import re
import sys

LINK = re.compile(r'!?\[[^\]]*\]\(([^)\s]+)\)')
HEADING = re.compile(r'^#{1,6}\s+(.*?)\s*#*\s*$')


def slug(heading):
    s = re.sub(r'[`*]', '', heading).strip().lower()
    s = re.sub(r'[^\w\- ]', '', s)
    return s.replace(' ', '-')


def anchors(path):
    out, fence = set(), False
    with open(path, encoding='utf-8') as f:
        for line in f:
            if line.startswith('```'):
                fence = not fence
            m = None if fence else HEADING.match(line)
            if m:
                out.add(slug(m.group(1)))
    return out


def main(argv):
    args, allowed = [], set()
    it = iter(argv[1:])
    for a in it:
        if a == '--allow-missing':
            allowed.add(os.path.normpath(next(it)))
        else:
            args.append(a)
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), '..', '..'))
    files = [os.path.join(root, 'README.md')]
    for base, dirs, names in os.walk(os.path.join(root, 'docs')):
        files += [os.path.join(base, n) for n in sorted(names) if n.endswith('.md')]
    bad = []
    for md in files:
        fence = False
        with open(md, encoding='utf-8') as f:
            lines = f.read().split('\n')
        for no, line in enumerate(lines, 1):
            if line.startswith('```'):
                fence = not fence
            if fence:
                continue
            for target in LINK.findall(re.sub(r'`[^`]*`', '', line)):
                if re.match(r'[a-z]+:', target):
                    continue
                path, _, anchor = target.partition('#')
                dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
                where = f'{os.path.relpath(md, root)}:{no}'
                if os.path.relpath(dest, root) in allowed:
                    continue
                if not os.path.exists(dest):
                    bad.append(f'{where}: {target}: no such file')
                elif anchor and dest.endswith('.md') and anchor not in anchors(dest):
                    bad.append(f'{where}: {target}: no heading #{anchor} in {os.path.relpath(dest, root)}')
    for b in bad:
        print(b)
    if bad:
        return 1
    print('every link resolves')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
