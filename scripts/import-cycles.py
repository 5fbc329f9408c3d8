#!/usr/bin/env python3
"""Lists import cycles between the crate's top-level modules (src/*.rs and
src/*/), read from `use crate::...` and `crate::...` paths. Modules inside
one folder may use each other; a cycle between two top-level modules (or
two folders) is a tangle in the layout. Exit 1 if there is any.

Usage: scripts/import-cycles.py [--graph]"""
import pathlib
import re
import sys

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


edges: dict[str, set[str]] = {}
for f in SRC.rglob("*.rs"):
    if f.name in ("main.rs", "lib.rs"):
        continue
    # Tests inside a file are not part of the layout.
    text = re.split(r"#\[cfg\(test\)\]", f.read_text())[0]
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

cycles = set()
for a in graph:
    for b in graph[a]:
        if a in graph.get(b, ()):
            cycles.add(tuple(sorted((a, b))))
for a, b in sorted(cycles):
    why_ab = sorted(d for s, ds in edges.items() if s.split("::")[0] == a for d in ds if d.split("::")[0] == b)
    why_ba = sorted(d for s, ds in edges.items() if s.split("::")[0] == b for d in ds if d.split("::")[0] == a)
    print(f"cycle: {a} <-> {b}  ({a} uses {', '.join(why_ab)}; {b} uses {', '.join(why_ba)})")
print(f"{len(cycles)} cycle(s) between top-level modules")
sys.exit(1 if cycles else 0)
