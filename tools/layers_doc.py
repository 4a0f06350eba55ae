#!/usr/bin/env python3
"""The layer pictures of docs/ARCHITECTURE.md, made from tools/layers.txt.

  layers_doc.py --write [ROOT]   rewrite docs/arch/layers.dot, the table
                                 between the layers markers of
                                 docs/ARCHITECTURE.md and, where graphviz's
                                 `dot` is installed, docs/arch/layers.png
  layers_doc.py --check [ROOT]   exit 1 (one line each) when the .dot file or
                                 the table in ARCHITECTURE.md differs from
                                 what --write would write (the layout test)

The picture draws an arrow from a layer to each layer it uses, leaving out
those implied through another (api uses base through core); the table lists
them all.  Every layer may use include/ (public); the picture draws that as a
dashed arrow from the layers that use nothing else.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_layers import read_table  # noqa: E402

BEGIN = '<!-- layers: made by tools/layers_doc.py --write from tools/layers.txt -->'
END = '<!-- layers: end -->'


def reduced_uses(layers):
    """For each layer, the layers it uses that no other used layer reaches."""
    uses = {l['name']: set(l['uses']) for l in layers}

    def reach(name, seen):
        for u in uses.get(name, ()):
            if u not in seen:
                seen.add(u)
                reach(u, seen)
        return seen

    out = {}
    for name, direct in uses.items():
        implied = set()
        for u in direct:
            implied |= reach(u, set())
        out[name] = sorted(direct - implied)
    return out


def dot_text(layers):
    lines = [
        '// The layers of flagcx, written by tools/layers_doc.py --write from',
        '// tools/layers.txt (do not edit by hand): an arrow reads "uses"; arrows',
        '// implied through another layer are left out; a dashed one goes to the',
        '// public headers from a layer that uses nothing else (all may use them).',
        'digraph layers {',
        '  rankdir=BT;',
        '  node [shape=box, style="rounded,filled", fillcolor="#f4f4f4", '
        'fontname="Helvetica", fontsize=11];',
        '  edge [color="#555555", arrowsize=0.7];',
    ]
    for l in layers:
        door = ' '.join(l['doors']) or 'no door'
        label = '%s  (%s)\\ndoor: %s\\n%s' % (l['name'], ' '.join(f + '/' for f in l['folders']),
                                             door, l['what'])
        color = '#dde8f6' if l['name'] == 'public' else '#f4f4f4'
        lines.append('  "%s" [label="%s", fillcolor="%s"];' % (l['name'], label, color))
    red = reduced_uses(layers)
    for l in layers:
        for u in red[l['name']]:
            lines.append('  "%s" -> "%s";' % (l['name'], u))
        if not red[l['name']] and l['name'] != 'public':
            lines.append('  "%s" -> "public" [style=dashed];' % l['name'])
    lines.append('}')
    return '\n'.join(lines) + '\n'


def table_text(layers):
    rows = ['| layer | folders | door | may use | what |', '|---|---|---|---|---|']
    for l in layers:
        door = ', '.join('`%s`' % d for d in l['doors']) or '—'
        uses = ', '.join(sorted(l['uses'], key=[x['name'] for x in layers].index)) or '—'
        rows.append('| %s | %s | %s | %s | %s |' % (
            l['name'], ', '.join('`%s/`' % f for f in l['folders']), door, uses, l['what']))
    return '\n'.join([BEGIN] + rows + [END])


def arch_with_table(text, table):
    b, e = text.find(BEGIN), text.find(END)
    if b < 0 or e < b:
        return None
    return text[:b] + table + text[e + len(END):]


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ('--write', '--check'):
        print(__doc__.strip())
        return 2
    root = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else
                           os.path.join(os.path.dirname(__file__), '..'))
    layers = read_table(root)
    dot_path = os.path.join(root, 'docs', 'arch', 'layers.dot')
    png_path = os.path.join(root, 'docs', 'arch', 'layers.png')
    arch_path = os.path.join(root, 'docs', 'ARCHITECTURE.md')
    dot = dot_text(layers)
    with open(arch_path) as f:
        arch = f.read()
    new_arch = arch_with_table(arch, table_text(layers))
    if sys.argv[1] == '--write':
        with open(dot_path, 'w') as f:
            f.write(dot)
        if new_arch is not None:
            with open(arch_path, 'w') as f:
                f.write(new_arch)
        if shutil.which('dot'):
            subprocess.run(['dot', '-Tpng', dot_path, '-o', png_path], check=True)
        return 0
    bad = 0
    with open(dot_path) as f:
        if f.read() != dot:
            print('layers: docs/arch/layers.dot differs from tools/layers.txt '
                  '(run tools/layers_doc.py --write)')
            bad = 1
    if new_arch is None:
        print('layers: docs/ARCHITECTURE.md has no layer table between the markers')
        bad = 1
    elif new_arch != arch:
        print("layers: docs/ARCHITECTURE.md's layer table differs from tools/layers.txt "
              '(run tools/layers_doc.py --write)')
        bad = 1
    return bad


if __name__ == '__main__':
    sys.exit(main())
