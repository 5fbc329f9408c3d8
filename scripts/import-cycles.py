#!/usr/bin/env python3
"""Lists import cycles between the crate's top-level modules (src/*.rs and
src/*/), read from `use crate::...` and `crate::...` paths. Modules inside
one folder may use each other; a cycle of any length between top-level
modules (or folders) is a tangle in the layout. Exit 1 if there is any.

Usage: scripts/import-cycles.py [--graph]"""
import pathlib
import re
import sys

from rust_source import blank_literals, block_end

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"


def top(path: pathlib.Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".rs")


def module_of(path: pathlib.Path) -> str:
    """The module a file belongs to at the second level (count::cache), so
    cycles inside a folder can be told from cycles across folders."""
    rel = path.relative_to(SRC).with_suffix("")
    parts = [p for p in rel.parts if p != "mod"]
    return "::".join(parts[:2]) if parts else "lib"


def without_tests(text: str) -> str:
    """The file without its `#[cfg(test)]` items: tests are not part of the
    layout, and code after a test module still is."""
    blank = blank_literals(text)
    out, at = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", blank):
        if m.start() < at:
            continue
        out.append(text[at : m.start()])
        at = block_end(blank, m.end())
    return "".join(out) + text[at:]


edges: dict[str, set[str]] = {}
for f in SRC.rglob("*.rs"):
    if f.name in ("main.rs", "lib.rs"):
        continue
    text = without_tests(f.read_text())
    src = module_of(f)
    for m in re.finditer(r"crate::([a-z_]+)(?:::([a-z_]+))?", text):
        a, b = m.group(1), m.group(2)
        dst = a if not b or not (SRC / a).is_dir() or not ((SRC / a / f"{b}.rs").exists() or (SRC / a / b).is_dir()) else f"{a}::{b}"
        if dst.split("::")[0] == src.split("::")[0] and "::" in src and "::" in dst:
            continue  # inside one folder
        if dst == src or dst.split("::")[0] == src:
            continue
        edges.setdefault(src, set()).add(dst)

# Collapse to the top level for cycles across folders.
graph: dict[str, set[str]] = {}
for s, ds in edges.items():
    for d in ds:
        a, b = s.split("::")[0], d.split("::")[0]
        if a != b:
            graph.setdefault(a, set()).add(b)

if "--graph" in sys.argv:
    for s in sorted(graph):
        print(f"{s} -> {', '.join(sorted(graph[s]))}")

# Every cycle, of any length: the strongly connected components (Tarjan),
# each printed with one cycle through it and the uses that close it.
index: dict[str, int] = {}
low: dict[str, int] = {}
stack: list[str] = []
on_stack: set[str] = set()
components: list[list[str]] = []


def connect(v: str) -> None:
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph.get(v, ())):
        if w not in index:
            connect(w)
            low[v] = min(low[v], low[w])
        elif w in on_stack:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        component = []
        while True:
            w = stack.pop()
            on_stack.discard(w)
            component.append(w)
            if w == v:
                break
        if len(component) > 1:
            components.append(sorted(component))


for v in sorted(graph):
    if v not in index:
        connect(v)


def path_back(start: str, members: set[str]) -> list[str]:
    """A shortest cycle through `start` inside one component (BFS)."""
    seen = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph.get(v, ())):
            if w not in members:
                continue
            if w == start:
                path = [v]
                while seen[path[-1]] is not None:
                    path.append(seen[path[-1]])
                return list(reversed(path)) + [start]
            if w not in seen:
                seen[w] = v
                queue.append(w)
    return [start]


def uses(a: str, b: str) -> str:
    return ", ".join(sorted(d for s, ds in edges.items() if s.split("::")[0] == a for d in ds if d.split("::")[0] == b))


for component in components:
    cycle = path_back(component[0], set(component))
    hops = "; ".join(f"{a} uses {uses(a, b)}" for a, b in zip(cycle, cycle[1:]))
    print(f"cycle: {' -> '.join(cycle)}  ({hops})")
    if len(component) > len(cycle) - 1:
        print(f"  (the tangle also holds: {', '.join(m for m in component if m not in cycle)})")
print(f"{len(components)} cycle(s) between top-level modules")
sys.exit(1 if components else 0)
