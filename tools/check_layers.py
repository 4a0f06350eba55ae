#!/usr/bin/env python3
"""The layering and function-length rules, checked on a source tree.

  check_layers.py [ROOT]

Layers come from ROOT/tools/layers.txt (its opening comment states the
rules).  Every #include "..." of a file in a layer's folders is resolved the
way the build resolves it (the file's folder, then include/, src/ and the
root); an include that lands in another layer must be that layer's door, and
that layer must be among the includer's `uses`.  Unresolved names (system or
generated headers) are not ours and pass.

Functions: no function body outside tests/ (src/, net/, adapters/,
plugins/, include/, tools/, examples/) may span more than 120 lines.  Bodies
are found by brace depth after comments, strings and preprocessor lines are
blanked: a `{` whose text since the last `;`, `{` or `}` ends in a parameter
list opens a function, unless it is the body of a namespace, class, struct,
union or enum.

Prints one line per violation ("layering:", "door:", "function:") and exits 1
when there is one.
"""
import os
import re
import sys

SOURCE_EXT = ('.h', '.hpp', '.c', '.cc', '.cpp', '.cu')
INCLUDE_ROOTS = ('include', 'src', '.')
FUNCTION_DIRS = ('src', 'net', 'adapters', 'plugins', 'include', 'tools', 'examples')
MAX_FUNCTION_LINES = 120
SKIP_DIRS = {'.git', 'build', 'subprojects', '__pycache__'}


def read_table(root):
    layers = []
    with open(os.path.join(root, 'tools', 'layers.txt')) as f:
        for line in f:
            if line.startswith('#') or not line.strip():
                continue
            name, folders, door, uses, what = line.split(None, 4)
            layers.append({
                'name': name,
                'folders': folders.split(','),
                'doors': [] if door == '-' else door.split(','),
                'uses': set() if uses == '-' else set(uses.split(',')),
                'what': what.strip(),
            })
    return layers


def source_files(root, top):
    for base, dirs, files in os.walk(os.path.join(root, top)):
        # Tests (tests/, plugins/*/tests/) may include any layer's insides.
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and d != 'tests')
        for f in sorted(files):
            if f.endswith(SOURCE_EXT):
                yield os.path.relpath(os.path.join(base, f), root)


def layer_of(path, layers):
    best, blen = None, -1
    for layer in layers:
        for folder in layer['folders']:
            if (path == folder or path.startswith(folder + '/')) and len(folder) > blen:
                best, blen = layer, len(folder)
    return best


def resolve(root, path, name):
    for d in [os.path.dirname(path)] + [r for r in INCLUDE_ROOTS]:
        cand = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def door_paths(root, layer):
    out = set()
    for d in layer['doors']:
        p = resolve(root, '', d)
        if p:
            out.add(p)
    return out


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def check_includes(root, layers):
    bad = []
    doors = {l['name']: door_paths(root, l) for l in layers}
    for layer in layers:
        for folder in layer['folders']:
            if not os.path.isdir(os.path.join(root, folder)):
                continue
            for path in source_files(root, folder):
                if layer_of(path, layers) is not layer:
                    continue
                with open(os.path.join(root, path), errors='replace') as f:
                    lines = f.read().split('\n')
                for n, text in enumerate(lines, 1):
                    m = INCLUDE.match(text)
                    if not m:
                        continue
                    target = resolve(root, path, m.group(1))
                    if target is None:
                        continue
                    other = layer_of(target, layers)
                    if other is None or other is layer or other['name'] == 'public':
                        continue
                    if other['name'] not in layer['uses']:
                        bad.append('layering: %s:%d: %s may not use %s (includes "%s")' %
                                   (path, n, layer['name'], other['name'], m.group(1)))
                    elif target not in doors[other['name']]:
                        door = ' or '.join(other['doors']) or 'nothing (it has no door)'
                        bad.append('door: %s:%d: includes "%s", inside %s; include %s' %
                                   (path, n, m.group(1), other['name'], door))
    return bad


def blank_noise(text):
    """Comments, string and character literals and preprocessor lines become
    spaces (newlines kept), so that only code braces remain."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == '#':
            # A preprocessor line, with its continuations.
            while i < n and text[i] != '\n':
                if text[i] == '\\' and i + 1 < n and text[i + 1] == '\n':
                    out.append(' \n')
                    i += 2
                    continue
                out.append(' ')
                i += 1
            continue
        if c == '\n':
            out.append(c)
            line_start = True
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith('//', i):
            while i < n and text[i] != '\n':
                out.append(' ')
                i += 1
            continue
        if text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
            continue
        m = re.match(r'R"([^(\s]{0,16})\(', text[i:i + 20])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            end = ')' + m.group(1) + '"'
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
            continue
        if c in '"\'':
            if c == "'" and i > 0 and text[i - 1].isalnum():
                out.append(c)  # a digit separator: 1'000'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            out.append(' ' * (min(j, n - 1) + 1 - i))
            i = j + 1
            continue
        out.append(c)
        i += 1
    return ''.join(out)


SCOPE = re.compile(r'\b(namespace|class|struct|union|enum)\b|\bextern\s*$')
SIGNATURE_END = re.compile(
    r'\)\s*(const|noexcept|override|final|mutable|volatile|&|&&|\s|->\s*[\w:<>,\s*&]+)*$')


def functions(text):
    """(name, first line, last line) of every outermost function body."""
    code = blank_noise(text)
    found = []
    stack = []  # 'scope', 'func' or 'other' per open brace
    head_start = 0
    func_start = None
    for i, c in enumerate(code):
        if c not in '{};':
            continue
        if c == ';':
            head_start = i + 1
            continue
        if c == '}':
            if stack:
                kind = stack.pop()
                if kind == 'func' and 'func' not in stack:
                    name, line = func_start
                    found.append((name, line, code.count('\n', 0, i) + 1))
            head_start = i + 1
            continue
        head = code[head_start:i]
        if 'func' in stack:
            stack.append('other')
        elif SCOPE.search(head.split('(')[0]) and not re.search(r'\)\s*$', head):
            stack.append('scope')
        elif SIGNATURE_END.search(head.strip()) or re.search(r'\)\s*:\s*[\s\S]*\)\s*$', head):
            pre = head.split('(')[0]
            names = re.findall(r'[~\w:]*\w|operator\s*\S+', pre)
            name = names[-1] if names else '?'
            # The line of the name, not of blank lines before it.
            first = head_start + len(head) - len(head.lstrip())
            func_start = (name, code.count('\n', 0, first) + 1)
            stack.append('func')
        else:
            stack.append('other')
        head_start = i + 1
    return found


def check_functions(root):
    bad = []
    for top in FUNCTION_DIRS:
        if not os.path.isdir(os.path.join(root, top)):
            continue
        for p in source_files(root, top):
            with open(os.path.join(root, p), errors='replace') as f:
                text = f.read()
            for name, first, last in functions(text):
                n = last - first + 1
                if n <= MAX_FUNCTION_LINES:
                    continue
                bad.append('function: %s:%d: %s is %d lines (at most %d)' % (
                    p, first, name, n, MAX_FUNCTION_LINES))
    return bad


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..')
    root = os.path.abspath(root)
    bad = check_includes(root, read_table(root))
    fbad = check_functions(root)
    for line in bad + fbad:
        print(line)
    return 1 if bad or fbad else 0


if __name__ == '__main__':
    sys.exit(main())
