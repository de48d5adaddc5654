#!/usr/bin/env python3
"""Fails when modules of one crate depend on each other in a cycle.

A newcomer should be able to read a crate bottom-up: every `use crate::…`, `super::…` or
`self::…` path between sibling modules (at any depth) must point one way. Paths are read from
the source text (comments and `#[cfg(test)]` modules left out), which is enough for this code
base's style of imports; run it as `tests/lint/module_cycles.py host/*/`.
"""

import os
import re
import sys


def module_path(src, file):
    parts = os.path.relpath(file, src)[: -len(".rs")].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def split_top(body):
    items, depth, cur = [], 0, ""
    for ch in body:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            items.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [i for i in [*items, cur.strip()] if i]


def expand(prefix, body):
    out = []
    for item in split_top(body):
        nested = re.match(r"([\w:]*?)::\{(.*)\}$", item, re.S)
        if nested:
            out += expand(prefix + "::" + nested.group(1), nested.group(2))
        else:
            out.append(prefix + "::" + item.split(" as ")[0].strip())
    return out


def code_of(file):
    lines = [line for line in open(file, encoding="utf-8") if not line.strip().startswith("//")]
    text = "".join(lines)
    return re.split(r"#\[cfg\(test\)\]\s*mod tests\b", text)[0]


def referenced_paths(text):
    paths = []
    for m in re.finditer(r"\b(crate|super|self)((?:::\w+)*)::\{([^;]*?)\};", text, re.S):
        paths += expand(m.group(1) + m.group(2), m.group(3))
    for m in re.finditer(r"\b(crate|super|self)((?:::\w+)+)", text):
        paths.append(m.group(1) + m.group(2))
    return paths


def crate_cycles(crate):
    src = os.path.join(crate, "src")
    files = {}
    for root, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(root, name)
                files[module_path(src, path)] = path
    modules = set(files)
    edges = {}
    for module, file in files.items():
        for path in referenced_paths(code_of(file)):
            parts = [p for p in path.split("::") if p]
            if parts[0] == "crate":
                target = parts[1:]
            else:
                target = list(module)
                while parts and parts[0] in ("super", "self"):
                    if parts[0] == "super":
                        target = target[:-1]
                    parts = parts[1:]
                target += parts
            while target and tuple(target) not in modules:
                target = target[:-1]
            target = tuple(target)
            common = 0
            while common < min(len(module), len(target)) and module[common] == target[common]:
                common += 1
            if common in (len(module), len(target)):
                continue  # a module and its own ancestor or descendant
            parent = module[:common]
            edge = (module[: common + 1], target[: common + 1])
            edges.setdefault(parent, {}).setdefault(edge[0], set()).add(edge[1])
    cycles = []
    for graph in edges.values():
        cycles += strongly_connected(graph)
    return cycles, edges


def strongly_connected(graph):
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]
    nodes = set(graph) | {w for ws in graph.values() for w in ws}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append((sorted(component), graph))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def main(crates):
    failed = False
    for crate in crates:
        cycles, _ = crate_cycles(crate.rstrip("/"))
        for component, graph in cycles:
            failed = True
            names = ["::".join(c) for c in component]
            print(f"{crate}: modules depend on each other in a cycle: {', '.join(names)}")
            for c in component:
                deps = sorted("::".join(d) for d in graph.get(c, ()) if d in component)
                print(f"    {'::'.join(c)} uses {', '.join(deps)}")
    if failed:
        print("make one of each pair depend on the other only (move what both need below both)")
        sys.exit(1)
    print(f"no module cycles in {len(crates)} crates")


if __name__ == "__main__":
    main(sys.argv[1:])
