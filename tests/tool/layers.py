"""The crates' module graph, drawn from their `use` paths: which source file
refers to which (`crate::a::b`, `super::x`, `self::x`, a child module's
name, a name the crate root re-exports), for tests/tool/test_layers.py and
`python3 tests/tool/layers.py` (prints each crate's import circles).

Files that only tests compile (`tests.rs`, `*_tests.rs`, a `#[cfg(test)]`
module at a file's end) are left out, and so are comments: neither is
part of what the code depends on. A file's reference to one of its own
ancestors (`super::*` in a child of a split module) is no edge: the child
is a part of its parent. The crate root (`lib.rs`, `main.rs`) wires the
modules together and is no node; a name it re-exports (`crate::Shared`)
is an edge to the module that defines it."""

from __future__ import annotations

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

TEST_MODULE = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+\w+\s*\{")
PATH = re.compile(r"(?<![\w:])(crate|super|self|[a-z_][a-z0-9_]*)((?:::(?:[A-Za-z_]\w*|\{))+)")
REEXPORT = re.compile(r"^\s*pub(?:\([a-z]+\))?\s+use\s+([^;]+);", re.M)
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)

Module = tuple[str, ...]


def strip(text: str) -> str:
    """The code of a file: no comments, no string contents, no test module."""
    m = TEST_MODULE.search(text)
    if m:
        text = text[: m.start()]
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def module_of(src: pathlib.Path, f: pathlib.Path) -> Module:
    parts = list(f.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def is_test_file(f: pathlib.Path) -> bool:
    return f.name == "tests.rs" or f.stem.endswith("_tests")


def expand(rest: str, text: str, start: int) -> list[list[str]]:
    """The paths a `use` tail names: `::a::b`, or `::a::{b, c::d}` (one
    level of braces is enough for the use lists in this tree)."""
    head = re.findall(r"\w+", rest.split("{")[0])
    if "{" not in rest:
        return [head]
    depth, i, body = 0, text.index("{", start), ""
    for ch in text[i:]:
        depth += ch == "{"
        depth -= ch == "}"
        body += ch
        if depth == 0:
            break
    out = []
    for part in re.split(r",(?![^{]*\})", body[1:-1]):
        names = re.findall(r"\w+", part.split("{")[0].split(" as ")[0])
        if names and names != ["self"]:
            out.append(head + names)
        elif names == ["self"] or not names:
            out.append(head)
    return out


class Crate:
    def __init__(self, name: str):
        self.name = name
        self.src = ROOT / "crates" / name / "src"
        files = [f for f in sorted(self.src.rglob("*.rs")) if not is_test_file(f)]
        self.files = {module_of(self.src, f): f for f in files}
        self.code = {m: strip(f.read_text(encoding="utf-8")) for m, f in self.files.items()}
        self.roots = {m for m in self.files if m == ()}
        self.reexports = self._reexports()
        self.edges = {m: self._refs(m) for m in self.files if m != ()}

    def _reexports(self) -> dict[str, Module]:
        """Names the crate root re-exports, and the module each comes from."""
        out: dict[str, Module] = {}
        for text in (self.code[m] for m in self.roots):
            for m in REEXPORT.finditer(text):
                body = m.group(1).replace("crate::", "")
                for path in expand("::" + body, "::" + body, 0):
                    mod = self.longest(path)
                    if mod:
                        out[path[-1]] = mod
        return out

    def longest(self, path: list[str]) -> Module | None:
        for n in range(len(path), 0, -1):
            if tuple(path[:n]) in self.files:
                return tuple(path[:n])
        return None

    def _refs(self, m: Module) -> set[Module]:
        text = self.code[m]
        f = self.files[m]
        parent = m[:-1]
        children = set(MOD_DECL.findall(text))
        # Modules brought in by name (`use crate::meta;`, `use super::sched::{self, X}`):
        # a path that starts with one (`meta::get::parse`) is in it.
        aliases: dict[str, list[str]] = {}
        for use in re.finditer(r"\buse\s+(crate|super)((?:::(?:\w+|\{))+)", text):
            for path in expand(use.group(2), text, use.start()):
                base = [] if use.group(1) == "crate" else list(parent)
                full = base + path
                if tuple(full) in self.files and full:
                    aliases[full[-1]] = full
        refs: set[Module] = set()
        for hit in PATH.finditer(text):
            first, rest = hit.group(1), hit.group(2)
            for path in expand(rest, text, hit.start()):
                if first in aliases and first not in children:
                    base = aliases[first][:-1]
                    path = [first] + path
                elif first == "crate":
                    base: list[str] = []
                elif first == "super":
                    base = list(parent)
                    while path and path[0] == "super":
                        base, path = base[:-1], path[1:]
                elif first == "self" or first in children:
                    base = list(m) + ([first] if first in children else [])
                else:
                    continue
                full = base + path
                target = self.longest(full)
                if target is None and full and full[0] in self.reexports and not base:
                    target = self.reexports[full[0]]
                elif target is None and len(full) >= 1 and not base and full[0] in self.reexports:
                    target = self.reexports[full[0]]
                if target is None or target == ():
                    if not base and full and full[0] in self.reexports:
                        target = self.reexports[full[0]]
                    else:
                        continue
                if target == m or m[: len(target)] == target:
                    continue
                refs.add(target)
        del f
        return refs

    def circles(self) -> list[list[Module]]:
        """Strongly connected sets of more than one module (Tarjan)."""
        index: dict[Module, int] = {}
        low: dict[Module, int] = {}
        stack: list[Module] = []
        on: set[Module] = set()
        out: list[list[Module]] = []
        counter = [0]
        sys.setrecursionlimit(10_000)

        def visit(v: Module) -> None:
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on.add(v)
            for w in self.edges.get(v, ()):
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))

        for v in self.edges:
            if v not in index:
                visit(v)
        return out


def name(m: Module) -> str:
    return "::".join(m)


def crates() -> list[str]:
    return sorted(p.parent.name for p in ROOT.glob("crates/*/src"))


if __name__ == "__main__":
    for c in crates():
        crate = Crate(c)
        for circle in crate.circles():
            print(f"{c}: {len(circle)}: {' '.join(name(m) for m in circle)}")
            inside = set(circle)
            for m in circle:
                print(f"    {name(m)} -> {' '.join(sorted(name(t) for t in crate.edges[m] if t in inside))}")
