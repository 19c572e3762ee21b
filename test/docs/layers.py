#!/usr/bin/env python3
"""Every folder of lib/ includes only headers of its own layer and the layers below it.

usage: layers.py <lib> <layer>...   (the layers lowest first, as CMakeLists.txt's ADJIT_LAYERS)

Prints each layer with the layers it includes, then every include that runs
upward or names a folder that is no layer, and exits 1 if there is one. The
build enforces the same order (each layer's include path holds only the layers
below it); this test says it in one table, and catches a folder of lib/ that
CMakeLists.txt does not list.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([a-z_]+)/[^"]+"')


def main():
    lib, layers = sys.argv[1], sys.argv[2:]
    rank = {layer: i for i, layer in enumerate(layers)}
    bad = []
    folders = sorted(d for d in os.listdir(lib) if os.path.isdir(os.path.join(lib, d)))
    for d in folders:
        if d not in rank:
            bad.append(f'lib/{d}/ is not a layer: add it to ADJIT_LAYERS in CMakeLists.txt')
    for layer in layers:
        uses = set()
        folder = os.path.join(lib, layer)
        if not os.path.isdir(folder):
            bad.append(f'layer {layer} has no folder lib/{layer}/')
            continue
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            with open(path, encoding='utf-8') as f:
                for no, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = m.group(1)
                    if target not in rank:
                        bad.append(f'lib/{layer}/{name}:{no}: includes "{target}/...", which is no layer')
                    elif rank[target] > rank[layer]:
                        bad.append(f'lib/{layer}/{name}:{no}: {layer} includes {target}, a layer above it')
                    elif target != layer:
                        uses.add(target)
        print(f'{layer:>10} uses {", ".join(sorted(uses, key=rank.get)) or "-"}')
    for b in bad:
        print(b)
    if bad:
        sys.exit(1)
    print('every include runs down the layers: ' + ' < '.join(layers))


if __name__ == '__main__':
    main()
