#!/usr/bin/env python3
"""Every public declaration in include/adjit/ has a `///` comment.

A declaration is a line at namespace or public class scope (not inside
namespace detail, function bodies or private sections) that declares a
function, class, struct, enum, alias or variable. It is documented by a `///`
comment on the lines just above it (a run of declarations sharing one comment
counts: overloads), or by a trailing `///<`. Macros, `#` lines and the bodies
of inline functions are not declarations. Prints the undocumented ones and
exits 1 if there are any.
usage: doc_comments.py <include/adjit>
"""
import os
import re
import sys

DECL = re.compile(r'^\s*(template\s*<.*>\s*)?(inline\s+|static\s+|constexpr\s+|explicit\s+|friend\s+|virtual\s+|'
                  r'\[\[nodiscard\]\]\s+)*([A-Za-z_][\w:<>,\s\*&]*?[\s\*&])?~?[A-Za-z_]\w*\s*(\(|<.*>\s*\()|'
                  r'^\s*(class|struct|enum class|enum|using|concept)\s+\w+')


def strip_strings(line):
    return re.sub(r'"(\\.|[^"\\])*"', '""', line)


def declared_name(line):
    """The name a declaration line declares: `foo` in `Tensor foo(...)`, `X` in `struct X`."""
    m = re.match(r'^\s*(?:template\s*<.*?>\s*)?(?:class|struct|enum class|enum|using|concept)\s+(\w+)', line)
    if m:
        return m.group(1)
    m = re.search(r'(operator\s*\S+?|~?\w+)\s*(?:<[^()]*>)?\s*\(', line)
    return m.group(1) if m else line.strip()


def check(path):
    missing = []
    lines = open(path, encoding='utf-8').read().split('\n')
    depth = 0                 # brace depth
    scopes = []               # stack of (kind, public) per open brace
    documented_name = None    # the name the last documented declaration declared
    pending_template = False
    for no, raw in enumerate(lines, 1):
        line = strip_strings(raw.split('//')[0] if '///<' not in raw else raw)
        stripped = raw.strip()
        in_detail = any(k == 'detail' for k, _ in scopes)
        in_body = any(k == 'body' for k, _ in scopes)
        in_private = scopes and scopes[-1][0] == 'class' and not scopes[-1][1]
        at_decl_scope = not in_detail and not in_body and not in_private and \
            (not scopes or scopes[-1][0] in ('namespace', 'class'))
        if scopes and scopes[-1][0] == 'class':
            if re.match(r'^\s*(public|protected)\s*:', raw):
                scopes[-1] = ('class', True)
            elif re.match(r'^\s*private\s*:', raw):
                scopes[-1] = ('class', False)
        if at_decl_scope and stripped and not stripped.startswith(('//', '#', '}', 'public:', 'private:', 'protected:',
                                                                   'namespace', ':', ',')):
            prev = no - 2
            while prev >= 0 and lines[prev].strip() == '':
                prev -= 1
            prev_line = lines[prev].strip() if prev >= 0 else ''
            doc = prev_line.startswith('///') or '///<' in raw or \
                (prev_line.startswith('template') and prev >= 1 and lines[prev - 1].strip().startswith('///'))
            # A statement's continuation (an initializer list, a macro's next
            # line) is not a new declaration.
            starts = prev < 0 or prev_line == '' or prev_line.startswith(('//', '#')) or \
                prev_line.endswith((';', '{', '}', ':')) and not prev_line.endswith('\\')
            in_macro = raw.rstrip().endswith('\\') or (no >= 2 and lines[no - 2].rstrip().endswith('\\'))
            is_decl = starts and not in_macro and bool(DECL.match(line)) and \
                not stripped.startswith(('return', 'static_assert', 'if', 'for', 'throw', 'ADJIT_'))
            if is_decl:
                name = declared_name(line)
                # An overload right after a documented one of the same name shares its comment.
                overload = documented_name is not None and name == documented_name
                if not doc and not overload and not pending_template:
                    missing.append((no, stripped))
                if doc or overload:
                    documented_name = name
                elif not pending_template:
                    documented_name = None
                pending_template = stripped.startswith('template') and not stripped.endswith((';', '}', '{'))
        # Track braces after classifying the line.
        for ch in line:
            if ch == '{':
                before = line[:line.index('{')]
                if re.search(r'\bnamespace\s+detail\b', before):
                    scopes.append(('detail', True))
                elif re.search(r'\bnamespace\b', before):
                    scopes.append(('namespace', True))
                elif re.search(r'\b(class)\s+\w+', before) and ';' not in before:
                    scopes.append(('class', False))
                elif re.search(r'\b(struct)\s+\w+', before) and '(' not in before:
                    scopes.append(('class', True))
                elif re.search(r'\benum\b', before):
                    scopes.append(('enum', True))
                else:
                    scopes.append(('body', True))
                line = line.replace('{', ' ', 1)
            elif ch == '}':
                if scopes:
                    scopes.pop()
    return missing


def main():
    root = sys.argv[1]
    total = 0
    for name in sorted(os.listdir(root)):
        if not name.endswith('.h'):
            continue
        for no, text in check(os.path.join(root, name)):
            print(f'{name}:{no}: undocumented: {text}')
            total += 1
    if total:
        print(f'{total} public declarations have no /// comment')
        return 1
    print('every public declaration is documented')
    return 0


if __name__ == '__main__':
    sys.exit(main())
