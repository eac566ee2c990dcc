#!/usr/bin/env python3
"""Checks the layout rules of docs/ARCHITECTURE.md ("Keeping the layers apart").

1. No import cycle between the Rust modules of ``core/src`` (one module a file)
   nor between the modules of the ``eddyline`` Python package. Every import
   counts: at the top, inside a function, and under ``if TYPE_CHECKING:`` (a
   type-only import is still a dependency a reader has to follow).
2. The modules of the ``eddyline`` package import only from their own layer or
   the layers below it (``PYTHON_LAYERS``): foundations, user-function API,
   execution, plan, DSL, connectors, client, entry points. So the DSL builds a
   plan that execution runs, never back; connectors and the client build on
   the DSL; only the entry points (the package's re-exports, ``python -m
   eddyline`` and the kept import paths) import the client. Every module is
   placed in a layer.
3. Today's exceptions to 1 and 2 are listed, edge by edge, in
   ``ALLOWED_PYTHON_EDGES``; an entry whose import is gone is itself a finding,
   so the list only shrinks.
4. No file in ``core/src`` or ``python/eddyline`` over ``MAX_FILE_LINES`` lines,
   not counting a Rust file's ``#[cfg(test)] mod tests``.
5. No function over ``MAX_FN_LINES`` lines in the code (``FN_DIRS``: Rust
   outside its tests, and Python), except those in ``LONG_FUNCTIONS``, each
   held to its length today; an entry that fits the cap (or is gone) is a
   finding, so that list only shrinks too.
6. No "issue N" in code, tests or tomls (``HISTORY_DIRS``, ``*.toml``): a reader
   cannot follow an issue number; code says the reason, or cites docs/DESIGN.md,
   docs/API.md or the seeds (FLIP-147, FLINK-4120, ...) by name.

Usage: ``python tools/check_structure.py [REPO]``; prints each finding and exits
1 if there is any. CI runs it with the lint steps (``.ci/lint``).
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable
from pathlib import Path

MAX_FILE_LINES = 900
MAX_FN_LINES = 100
FN_DIRS = ("core/src", "python/src", "python/eddyline", "tools", "benches/rust", "benches/python")
"""Where the function-length cap holds (Rust tests and the Python tests excluded)."""

LONG_FUNCTIONS: dict[tuple[str, str], int] = {
    # (file, function): its length today; split it along its seams, then drop the entry.
    ("core/src/operator/join/plan.rs", "new"): 136,
    ("core/src/operator/join/mod.rs", "join_batch"): 130,
    ("core/src/checkpoint/channel_rescale.rs", "redistribute"): 123,
    ("core/src/operator/keyed_agg/store.rs", "process"): 119,
    ("benches/python/bench_engine.py", "main"): 116,
}
"""The functions over ``MAX_FN_LINES`` today, each held to its length."""

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


PYTHON_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundations", ("eddyline.errors", "eddyline.config", "eddyline._storage",
                     "eddyline._checks", "eddyline.scope", "eddyline._registry")),
    ("user-function API", ("eddyline.process_functions", "eddyline.broadcast_functions",
                           "eddyline.user_api")),
    ("execution", ("eddyline._exec.*",)),
    ("plan", ("eddyline.expr", "eddyline.aggregates", "eddyline._specs", "eddyline._graph",
              "eddyline._explain", "eddyline._runner", "eddyline._job",
              "eddyline._generators")),
    ("DSL", ("eddyline._stream_core", "eddyline.environment", "eddyline.stream",
             "eddyline.keyed", "eddyline.windows", "eddyline.joins", "eddyline.loops",
             "eddyline.connected", "eddyline.sources", "eddyline.sinks",
             "eddyline.state_reader", "eddyline.sql", "eddyline.over")),
    ("connectors", ("eddyline.connectors.*", "eddyline.testing")),
    ("client", ("eddyline.client.*",)),
    ("entry points", ("eddyline", "eddyline.__main__", "eddyline.cli", "eddyline.kafka",
                      "eddyline.spark", "eddyline.functions")),
)  # fmt: skip
"""The layers of the ``eddyline`` package, lowest first: a module may import its
own layer and those below. A name stands for that module, ``name.*`` for a
package and every module under it; the longest name that covers a module
places it."""

ALLOWED_PYTHON_EDGES: dict[tuple[str, str], str] = {
    # (importer, imported): why it is still there. Each is a layer pointing up
    # or an edge that closes an import cycle; remove the entry with the edge.
}  # fmt: skip
"""Today's exceptions to the layers and to "no cycle", edge by edge."""


def _imports(tree: ast.AST) -> Iterable[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement and where it runs: ``"module"`` (at import time),
    ``"function"`` (when the function is called) or ``"type-only"`` (under
    ``if TYPE_CHECKING:``, never at run time: a dependency all the same)."""
    stack: list[tuple[ast.AST, str]] = [(tree, "module")]
    while stack:
        node, kind = stack.pop()
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                stack.extend((n, "type-only") for n in node.body)
                stack.extend((n, kind) for n in node.orelse)
                continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, kind
        if kind == "module" and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            kind = "function"
        stack.extend((n, kind) for n in ast.iter_child_nodes(node))


def python_imports(mods: dict[str, Path]) -> dict[str, dict[str, str]]:
    """Which modules each module imports, and how (see :func:`_imports`; an
    import both at module level and elsewhere counts as the former).

    Importing ``a.b.c`` runs ``a`` and ``a.b`` first: edges to those packages
    too, unless one is an ancestor of the importer (already running).
    """
    rank = {"module": 0, "function": 1, "type-only": 2}
    edges: dict[str, dict[str, str]] = {m: {} for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, kind in _imports(tree):
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
                parts = name.split(".")
                for i in range(1, len(parts) + 1):
                    target = ".".join(parts[:i])
                    if target not in mods or target == mod or mod.startswith(target + "."):
                        continue
                    old = edges[mod].get(target)
                    if old is None or rank[kind] < rank[old]:
                        edges[mod][target] = kind
    return edges


def python_edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Which modules each module imports, type-only imports included."""
    return {m: set(targets) for m, targets in python_imports(mods).items()}


def python_layer(mod: str) -> int | None:
    """The index in ``PYTHON_LAYERS`` of the layer that holds mod."""
    best: tuple[int, int] | None = None
    for index, (_, names) in enumerate(PYTHON_LAYERS):
        for name in names:
            package = name.removesuffix(".*")
            covers = mod == package or (name.endswith(".*") and mod.startswith(package + "."))
            if covers and (best is None or len(package) > best[0]):
                best = (len(package), index)
    return None if best is None else best[1]


def python_layer_findings(
    imports: dict[str, dict[str, str]], allowed: Iterable[tuple[str, str]]
) -> list[str]:
    """Modules in no layer, imports that point to a higher layer and are not
    in ``allowed``, import cycles left when the allowed edges are taken out,
    and allowed edges the code no longer has."""
    allowed = set(allowed)
    findings: list[str] = []
    for mod in sorted(imports):
        if python_layer(mod) is None:
            findings.append(f"{mod}: in no layer of PYTHON_LAYERS (tools/check_structure.py)")
    for mod, targets in sorted(imports.items()):
        low = python_layer(mod)
        for target, kind in sorted(targets.items()):
            high = python_layer(target)
            if low is None or high is None or high <= low or (mod, target) in allowed:
                continue
            findings.append(
                f"{mod} ({PYTHON_LAYERS[low][0]}) imports {target} ({PYTHON_LAYERS[high][0]}, "
                f"{kind} import): a layer may import only its own and those below "
                "(docs/ARCHITECTURE.md)"
            )
    for mod, target in sorted(allowed):
        if target not in imports.get(mod, {}):
            findings.append(
                f"{mod} no longer imports {target}: remove the entry from "
                "ALLOWED_PYTHON_EDGES (tools/check_structure.py)"
            )
    kept = {m: {t for t in targets if (m, t) not in allowed} for m, targets in imports.items()}
    for comp in cycles(kept):
        findings.append("Python import cycle: " + " <-> ".join(comp))
    return findings


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


def rust_functions(path: Path) -> Iterable[tuple[int, str, int]]:
    """(line, name, lines) of every ``fn`` with a body in path, its tests excluded."""
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
        if opened:
            yield i + 1, m.group(1), j - i + 1
        i = j + 1


def python_functions(path: Path) -> Iterable[tuple[int, str, int]]:
    """(line, name, lines) of every function and method in path, from its
    ``def`` to its last line (docstring included, decorators not)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno:
            yield node.lineno, node.name, node.end_lineno - node.lineno + 1


def function_findings(repo: Path, allowed: dict[tuple[str, str], int]) -> list[str]:
    """Functions over ``MAX_FN_LINES`` not in ``allowed``, allowed ones grown
    past their length there, and entries of ``allowed`` that fit the cap now."""
    findings: list[str] = []
    longest: dict[tuple[str, str], int] = {}
    for name in FN_DIRS:
        for path in sorted((repo / name).rglob("*")):
            if path.suffix not in (".rs", ".py") or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(repo).as_posix()
            found = rust_functions(path) if path.suffix == ".rs" else python_functions(path)
            for line, fn, n in found:
                key = (rel, fn)
                longest[key] = max(longest.get(key, 0), n)
                limit = max(allowed.get(key, 0), MAX_FN_LINES)
                if n > limit:
                    findings.append(
                        f"{rel}:{line}: fn {fn} has {n} lines (at most {limit}): "
                        "split it where it divides"
                    )
    for key in sorted(allowed):
        if longest.get(key, 0) <= MAX_FN_LINES:
            findings.append(
                f"{key[0]}: fn {key[1]} fits {MAX_FN_LINES} lines now: remove it from "
                "LONG_FUNCTIONS (tools/check_structure.py)"
            )
    return findings


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
    findings.extend(function_findings(repo, LONG_FUNCTIONS))
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
    imports = python_imports(python_modules(pkg))
    findings.extend(python_layer_findings(imports, ALLOWED_PYTHON_EDGES))
    for f in findings:
        print(f)
    print(f"structure: {len(findings)} finding(s)" if findings else "structure: ok")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(
        main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent))
    )
