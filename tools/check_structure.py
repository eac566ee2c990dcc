#!/usr/bin/env python3
"""Checks the layout rules of docs/ARCHITECTURE.md ("Keeping the layers apart").

1. No import cycle between the Rust modules of ``core/src`` (one module a file)
   nor between the modules of the ``eddyline`` Python package (imports inside
   functions count; imports under ``if TYPE_CHECKING:`` do not, they never run).
2. No file in ``core/src`` or ``python/eddyline`` over ``MAX_FILE_LINES`` lines,
   not counting a Rust file's ``#[cfg(test)] mod tests``.
3. No function in ``core/src/runtime`` over ``MAX_RUNTIME_FN_LINES`` lines.
4. No "issue N" in code, tests or tomls (``HISTORY_DIRS``, ``*.toml``): a reader
   cannot follow an issue number; code says the reason, or cites docs/DESIGN.md,
   docs/API.md or the seeds (FLIP-147, FLINK-4120, ...) by name.

Usage: ``python tools/check_structure.py [REPO]``; prints each finding and exits
1 if there is any. CI runs it with the lint steps (``.ci/run``).
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable
from pathlib import Path

MAX_FILE_LINES = 900
MAX_RUNTIME_FN_LINES = 100

_TESTS_MOD = re.compile(
    r"^#\[cfg\(test\)\]\s*\n(?:\s*#\[.*\]\s*\n)*\s*(?:pub\s+)?mod tests\b", re.M
)
_CRATE_PATH = re.compile(r"\b(crate|super)((?:::[A-Za-z_]\w*)+)")
_USE_GROUP = re.compile(r"\buse\s+(crate|super)::\{([^;]*)\};", re.S)
_ISSUE_REF = re.compile(r"\bissues?\s*#?\s*\d+", re.I)
HISTORY_DIRS = (
    "core/src",
    "core/tests",
    "python/src",
    "python/eddyline",
    "tests",
    "benches/python",
    "benches/rust",
    "benches/nexmark",
)
"""Where an issue number in a comment, docstring or string is a finding."""
_HISTORY_SUFFIXES = (".rs", ".py", ".pyi", ".toml")
_FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)")


def _without_tests(text: str) -> str:
    m = _TESTS_MOD.search(text)
    return text[: m.start()] if m else text


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", text)


# ---------------------------------------------------------------- Rust modules


def rust_modules(src: Path) -> dict[tuple[str, ...], Path]:
    """Module path (``("runtime", "task")``) of every ``.rs`` file under src."""
    mods: dict[tuple[str, ...], Path] = {}
    for path in sorted(src.rglob("*.rs")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] in ("mod", "lib"):
            parts.pop()
        mods[tuple(parts)] = path
    return mods


def _deepest(mods: dict[tuple[str, ...], Path], path: list[str]) -> tuple[str, ...] | None:
    while path:
        if tuple(path) in mods:
            return tuple(path)
        path = path[:-1]
    return None


def rust_edges(mods: dict[tuple[str, ...], Path]) -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    """Which module each module names (``use`` or an inline ``crate::`` path).

    A child naming one of its ancestors is not an edge: the ancestor only
    declares it (``mod x;``), which is how Rust nests modules.
    """
    edges: dict[tuple[str, ...], set[tuple[str, ...]]] = {m: set() for m in mods}
    for mod, path in mods.items():
        text = _strip_comments(_without_tests(path.read_text(encoding="utf-8")))
        is_dir_mod = path.name in ("mod.rs", "lib.rs")
        # the module `super` names from this file
        parent = list(mod) if is_dir_mod else list(mod[:-1])
        if is_dir_mod:
            parent = parent[:-1]
        targets: list[list[str]] = []
        for m in _USE_GROUP.finditer(text):
            base = [] if m.group(1) == "crate" else parent
            for item in m.group(2).split(","):
                head = item.strip().split("::")
                if head and head[0] and head[0] != "self":
                    targets.append(base + [h.strip("{} ") for h in head])
        for m in _CRATE_PATH.finditer(text):
            names = m.group(2).strip(":").split("::")
            targets.append((parent if m.group(1) == "super" else []) + names)
        for target in targets:
            hit = _deepest(mods, target)
            if hit is None or hit == mod or mod[: len(hit)] == hit:
                continue
            edges[mod].add(hit)
    return edges


# ---------------------------------------------------------------- Python modules


def python_modules(pkg: Path) -> dict[str, Path]:
    base = pkg.parent
    mods: dict[str, Path] = {}
    for path in sorted(pkg.rglob("*.py")):
        parts = list(path.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _runtime_imports(tree: ast.AST) -> Iterable[ast.Import | ast.ImportFrom]:
    """Every import statement that can run (``if TYPE_CHECKING:`` bodies skipped)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                stack.extend(node.orelse)
                continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def python_edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in _runtime_imports(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                names = [origin] + [f"{origin}.{a.name}" for a in node.names]
            for name in names:
                while name and name not in mods:
                    name = name.rpartition(".")[0]
                # importing a package runs its __init__: an edge, unless it is
                # an ancestor of the importer (already running).
                if name and name != mod and not mod.startswith(name + "."):
                    edges[mod].add(name)
    return edges


# ---------------------------------------------------------------- checks


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def long_functions(path: Path) -> Iterable[tuple[int, str, int]]:
    lines = _without_tests(path.read_text(encoding="utf-8")).split("\n")
    i = 0
    while i < len(lines):
        m = _FN.match(lines[i])
        if not m:
            i += 1
            continue
        depth, opened, j = 0, False, i
        while j < len(lines):
            code = re.sub(r'"(?:\\.|[^"\\])*"|//.*', "", lines[j])
            depth += code.count("{") - code.count("}")
            opened = opened or "{" in code
            if (opened and depth <= 0) or (not opened and code.rstrip().endswith(";")):
                break
            j += 1
        if opened and j - i + 1 > MAX_RUNTIME_FN_LINES:
            yield i + 1, m.group(1), j - i + 1
        i = j + 1


def history_files(repo: Path) -> list[Path]:
    """The files the "issue N" rule reads: code under ``HISTORY_DIRS`` and the
    tomls of the repository root and of its top-level directories."""
    found = set(repo.glob("*.toml")) | set(repo.glob("*/*.toml"))
    for name in HISTORY_DIRS:
        found.update(
            p
            for p in (repo / name).rglob("*")
            if p.suffix in _HISTORY_SUFFIXES and "__pycache__" not in p.parts
        )
    return sorted(p for p in found if p.is_file())


def issue_references(path: Path) -> Iterable[tuple[int, str]]:
    """(line number, text) of every "issue N" reference in path."""
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        m = _ISSUE_REF.search(line)
        if m:
            yield number, m.group(0)


def main(repo: Path) -> int:
    findings: list[str] = []
    src = repo / "core" / "src"
    pkg = repo / "python" / "eddyline"
    for path in sorted(list(src.rglob("*.rs")) + list(pkg.rglob("*.py"))):
        n = _without_tests(path.read_text(encoding="utf-8")).count("\n")
        if n > MAX_FILE_LINES:
            findings.append(f"{path.relative_to(repo)}: {n} lines (at most {MAX_FILE_LINES})")
    for path in sorted((src / "runtime").rglob("*.rs")):
        for line, name, n in long_functions(path):
            where = f"{path.relative_to(repo)}:{line}"
            findings.append(f"{where}: fn {name} has {n} lines (at most {MAX_RUNTIME_FN_LINES})")
    for path in history_files(repo):
        for line, ref in issue_references(path):
            findings.append(
                f"{path.relative_to(repo)}:{line}: {ref!r}: say the reason or cite "
                "docs/DESIGN.md, docs/API.md or a seed, not an issue number"
            )
    rust = rust_modules(src)
    named = {
        "::".join(k) or "crate": {"::".join(t) or "crate" for t in v}
        for k, v in rust_edges(rust).items()
    }
    for comp in cycles(named):
        findings.append("Rust import cycle: " + " <-> ".join(comp))
    for comp in cycles(python_edges(python_modules(pkg))):
        findings.append("Python import cycle: " + " <-> ".join(comp))
    for f in findings:
        print(f)
    print(f"structure: {len(findings)} finding(s)" if findings else "structure: ok")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(
        main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent))
    )
