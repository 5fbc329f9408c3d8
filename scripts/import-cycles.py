#!/usr/bin/env python3
"""Lists import cycles between modules at every depth, in each crate of the
workspace (the guard, `src/`, the counting core, `crates/count/src/`, and
request inspection, `crates/inspect/src/`).

A module is a file (or an inline `mod name { ... }`); a use is any
`crate::`, `super::` or `self::` path (use trees expanded), resolved to the
deepest module it names. For every parent module, its children form a
graph: child A uses child B when anything under A uses anything under B.
A cycle of any length in any such graph is a tangle in the layout. Uses
between a module and its own ancestor (a submodule reading its parent's
types, a parent re-exporting a child) are how a module owns its children
and are not edges. `#[cfg(test)]` items and test-only files are left out:
tests are not part of the layout. Exit 1 if there is any cycle.

Usage: scripts/import-cycles.py [--graph]"""
import pathlib
import re
import sys

from rust_source import blank_literals, block_end

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRATES = {
    "guard": ROOT / "src",
    "count": ROOT / "crates" / "count" / "src",
    "inspect": ROOT / "crates" / "inspect" / "src",
}

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
MOD_DECL = re.compile(rf"(?m)^[ \t]*(?:pub(?:\([^)]*\))?\s+)?mod\s+({IDENT})\s*(;|\{{)")
USE = re.compile(r"(?m)^[ \t]*(?:pub(?:\([^)]*\))?\s+)?use\s+")
PATH = re.compile(rf"\b(crate|super|self)((?:::{IDENT})+)")
CFG_TEST = re.compile(r"#\[cfg\(test\)\]\s*$")


def without_tests(text: str) -> str:
    """The source (literals blanked) with its `#[cfg(test)]` items blanked."""
    blank = blank_literals(text)
    out, at = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", blank):
        if m.start() < at:
            continue
        out.append(blank[at : m.start()])
        end = block_end(blank, m.end())
        out.append(re.sub(r"[^\n]", " ", blank[m.start() : end]))
        at = end
    return "".join(out) + blank[at:]


def expand_use(tree: str) -> list[str]:
    """`a::{b, c::{d, e}}` → [`a::b`, `a::c::d`, `a::c::e`] (aliases and
    globs dropped: the module is what matters)."""
    # Aliases first, while `as` is still a word of its own: the module is
    # what the path names, whatever it is called here.
    tree = re.sub(rf"\s+as\s+{IDENT}", "", tree)
    tree = re.sub(r"\s+", "", tree)
    i = tree.find("{")
    if i < 0:
        return [tree.removesuffix("::*")]
    head, depth, parts, start = tree[:i], 0, [], i + 1
    for j in range(i, len(tree)):
        c = tree[j]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                parts.append(tree[start:j])
                break
        elif c == "," and depth == 1:
            parts.append(tree[start:j])
            start = j + 1
    out = []
    for p in parts:
        if not p or p == "*":
            continue
        out += [f"{head}{q}" if q != "self" else head.removesuffix("::") for q in expand_use(p)]
    return out


class Crate:
    def __init__(self, name: str, src: pathlib.Path):
        self.name, self.src = name, src
        self.modules: set[tuple[str, ...]] = {()}
        self.bodies: dict[tuple[str, ...], str] = {}
        root = src / ("lib.rs" if (src / "lib.rs").exists() else "main.rs")
        self.read(root, (), src)

    def read(self, path: pathlib.Path, module: tuple[str, ...], folder: pathlib.Path):
        """Reads a file as `module`; `folder` is where its children live."""
        text = without_tests(path.read_text())
        self.scan(text, module, folder)

    def scan(self, text: str, module: tuple[str, ...], folder: pathlib.Path):
        own, at = [], 0
        for m in MOD_DECL.finditer(text):
            if m.start() < at:
                continue
            child = module + (m.group(1),)
            self.modules.add(child)
            if m.group(2) == ";":
                file = folder / f"{m.group(1)}.rs"
                if not file.exists():
                    file = folder / m.group(1) / "mod.rs"
                # `#[path]` modules (generated tables) have no uses to read.
                if file.exists():
                    self.read(file, child, folder / m.group(1))
                own.append(text[at : m.end()])
                at = m.end()
            else:
                end = block_end(text, m.start())
                own.append(text[at : m.start()])
                self.scan(text[m.end() : end - 1], child, folder / m.group(1))
                at = end
        own.append(text[at:])
        self.bodies[module] = self.bodies.get(module, "") + "".join(own)

    def resolve(self, module: tuple[str, ...], path: str) -> tuple[str, ...] | None:
        """The deepest module a `crate::`/`super::`/`self::` path names."""
        parts = path.split("::")
        at: tuple[str, ...]
        if parts[0] == "crate":
            at, rest = (), parts[1:]
        else:
            at, rest = module, parts
            while rest and rest[0] in ("super", "self"):
                if rest[0] == "super":
                    at = at[:-1]
                rest = rest[1:]
        for p in rest:
            if at + (p,) in self.modules:
                at = at + (p,)
            else:
                break
        return at

    def uses(self) -> dict[tuple[str, ...], set[tuple[str, ...]]]:
        out: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
        for module, body in self.bodies.items():
            paths = []
            for m in USE.finditer(body):
                end = body.find(";", m.end())
                paths += expand_use(body[m.end() : end])
            paths += [m.group(0) for m in PATH.finditer(body)]
            # In 2018+ editions a `use child::…` names a child module.
            for p in paths:
                first = p.split("::")[0]
                if first not in ("crate", "super", "self"):
                    if module + (first,) not in self.modules:
                        continue
                    p = "self::" + p
                dst = self.resolve(module, p)
                if dst is not None and dst != module:
                    out.setdefault(module, set()).add(dst)
        return out


def cycles_of(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def shortest_cycle(graph: dict[str, set[str]], start: str, members: set[str]) -> list[str]:
    seen: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph.get(v, ())):
            if w not in members:
                continue
            if w == start:
                path = [v]
                while seen[path[-1]] is not None:
                    path.append(seen[path[-1]])  # type: ignore[arg-type]
                return list(reversed(path)) + [start]
            if w not in seen:
                seen[w] = v
                queue.append(w)
    return [start]


def name(crate: str, module: tuple[str, ...]) -> str:
    return "::".join((crate,) + module)


total = 0
for crate_name, src in CRATES.items():
    crate = Crate(crate_name, src)
    uses = crate.uses()
    # Per parent: its children, and which child's subtree uses which.
    by_parent: dict[tuple[str, ...], dict[str, set[str]]] = {}
    why: dict[tuple[tuple[str, ...], str, str], set[str]] = {}
    for src_mod, dsts in uses.items():
        for dst in dsts:
            n = 0
            while n < min(len(src_mod), len(dst)) and src_mod[n] == dst[n]:
                n += 1
            if n == len(src_mod) or n == len(dst):
                continue  # one is the other's ancestor
            parent, a, b = src_mod[:n], src_mod[n], dst[n]
            by_parent.setdefault(parent, {}).setdefault(a, set()).add(b)
            why.setdefault((parent, a, b), set()).add(f"{name(crate_name, src_mod)} -> {name(crate_name, dst)}")
    for parent in sorted(by_parent):
        graph = by_parent[parent]
        if "--graph" in sys.argv:
            for a in sorted(graph):
                print(f"{name(crate_name, parent + (a,))} -> {', '.join(sorted(graph[a]))}")
        for component in cycles_of(graph):
            total += 1
            cycle = shortest_cycle(graph, component[0], set(component))
            print(f"cycle in {name(crate_name, parent)}: {' -> '.join(cycle)}")
            for a, b in zip(cycle, cycle[1:]):
                for line in sorted(why[(parent, a, b)]):
                    print(f"    {line}")
            extra = [m for m in component if m not in cycle]
            if extra:
                print(f"  (the tangle also holds: {', '.join(extra)})")
print(f"{total} import cycle(s), at any depth, in {len(CRATES)} crates")
sys.exit(1 if total else 0)
