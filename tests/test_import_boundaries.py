"""Package boundaries: no import in src/acx reaches another package's private (`_`) module except
through a seam listed in docs/architecture.md, every listed seam is used, and the import graph
between packages has no cycle."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


@functools.cache
def _imports(name: str) -> list[tuple[str, int, bool]]:
    """``(target module, line, under TYPE_CHECKING)`` for every acx import, function-level too."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for n in ast.walk(node))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno, id(node) in typing_only) for a in node.names if a.name.startswith("acx")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
                for _ in range(node.level - 1):
                    package = package.rsplit(".", 1)[0]
                base = f"{package}.{base}" if base else package
            if base.split(".")[0] != "acx":
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.append((full if full in MODULES else base, node.lineno, id(node) in typing_only))
    return out


def _package(module: str) -> str:
    """The top-level package a module belongs to: ``acx.compiler._planner`` → ``acx.compiler``."""
    return ".".join(module.split(".")[:2])


def _private_owner(module: str) -> str | None:
    """``acx.compiler`` for ``acx.compiler._shapes``; None for a public module."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def _seams() -> set[tuple[str, str]]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Package boundaries and internal seams", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(acx[\w.]*)` \| `(acx[\w.]*)` \|", section, re.M))


def _crossings() -> dict[tuple[str, str], str]:
    found: dict[tuple[str, str], str] = {}
    for name in sorted(MODULES):
        for target, line, _ in _imports(name):
            owner = _private_owner(target)
            if owner is None or _package(name) == _package(owner):
                continue
            found.setdefault((_package(name), target), f"{MODULES[name].relative_to(ROOT)}:{line}")
    return found


def test_private_modules_are_reached_only_through_documented_seams() -> None:
    seams = _seams()
    assert len(seams) > 10, "the seams table in docs/architecture.md was not found"
    undocumented = {k: v for k, v in _crossings().items() if k not in seams}
    assert not undocumented, (
        "imports of another package's private module that docs/architecture.md does not list "
        f"(use the package's public API, or document the seam): {undocumented}"
    )


def test_every_documented_seam_is_used() -> None:
    stale = _seams() - set(_crossings())
    assert not stale, f"seams listed in docs/architecture.md that no import uses any more: {sorted(stale)}"


def test_no_import_cycle_between_packages() -> None:
    graph: dict[str, set[str]] = {}
    for name in MODULES:
        source = _package(name)
        if source == "acx":  # the root façade (lazy acx.compile / acx.run) is not a node
            continue
        for target, _, typing_only in _imports(name):
            dest = _package(target)
            if not typing_only and dest not in (source, "acx"):
                graph.setdefault(source, set()).add(dest)
    cycles = _cycles(graph)
    assert not cycles, f"import cycles between packages: {cycles}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one package (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
