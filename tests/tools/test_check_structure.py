"""tools/check_structure.py finds what it is meant to find (a checker that
cannot fail would let the layout rot unseen)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_structure", ROOT / "tools/check_structure.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_structure"] = module
    spec.loader.exec_module(module)
    return module


cs = _checker()


@pytest.fixture(autouse=True)
def _one_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The made-up repositories below have one layer and no exceptions."""
    monkeypatch.setattr(cs, "PYTHON_LAYERS", (("all", ("eddyline.*",)),))
    monkeypatch.setattr(cs, "ALLOWED_PYTHON_EDGES", {})
    monkeypatch.setattr(cs, "LONG_FUNCTIONS", {})


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _repo(tmp_path: Path, rust: dict[str, str], py: dict[str, str]) -> Path:
    _write(tmp_path / "core/src", {"lib.rs": "pub mod a;\n", **rust})
    _write(tmp_path / "python/eddyline", {"__init__.py": "", **py})
    (tmp_path / "core/src/runtime").mkdir(exist_ok=True)
    return tmp_path


def test_rust_cycle_through_use_group_and_inline_path(tmp_path: Path) -> None:
    repo = _repo(
        tmp_path,
        {
            "a/mod.rs": "pub mod x;\npub mod y;\n",
            "a/x.rs": "use crate::{a::y::Y, error};\npub struct X;\n",
            "a/y.rs": "pub struct Y;\nfn f() -> crate::a::x::X { todo!() }\n",
        },
        {},
    )
    edges = cs.rust_edges(cs.rust_modules(repo / "core/src"))
    assert ("a", "y") in edges[("a", "x")]
    assert ("a", "x") in edges[("a", "y")]
    assert cs.main(repo) == 1


def test_rust_child_naming_its_parent_is_not_a_cycle(tmp_path: Path) -> None:
    repo = _repo(
        tmp_path,
        {
            "a/mod.rs": "mod x;\npub use x::X;\npub struct Shared;\n",
            "a/x.rs": "use super::Shared;\npub struct X(Shared);\n",
        },
        {},
    )
    assert cs.main(repo) == 0


def test_rust_test_module_and_comments_do_not_count(tmp_path: Path) -> None:
    repo = _repo(
        tmp_path,
        {
            "a/mod.rs": "pub mod x;\npub mod y;\n",
            "a/x.rs": "use crate::a::y;\n",
            "a/y.rs": "// see crate::a::x::X\n#[cfg(test)]\nmod tests {\n    use crate::a::x;\n}\n",
        },
        {},
    )
    assert cs.main(repo) == 0


@pytest.mark.parametrize(
    "b",
    [
        "def f():\n    from .a import thing\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import thing\n",
    ],
    ids=["function-level", "type-only"],
)
def test_python_import_cycle_found_also_through_deferred_imports(tmp_path: Path, b: str) -> None:
    repo = _repo(tmp_path, {}, {"a.py": "from . import b\n", "b.py": b})
    assert cs.cycles(cs.python_edges(cs.python_modules(repo / "python/eddyline")))
    assert cs.main(repo) == 1


def test_python_importing_a_submodule_runs_its_package(tmp_path: Path) -> None:
    repo = _repo(
        tmp_path,
        {},
        {"a.py": "from .pkg.x import X\n", "pkg/__init__.py": "from .. import a\n", "pkg/x.py": ""},
    )
    imports = cs.python_imports(cs.python_modules(repo / "python/eddyline"))
    assert imports["eddyline.a"] == {"eddyline.pkg": "module", "eddyline.pkg.x": "module"}
    assert cs.main(repo) == 1


LAYERS = (("low", ("eddyline.low",)), ("high", ("eddyline", "eddyline.high")))


@pytest.mark.parametrize(
    "low, found",
    [
        ("", False),
        ("from .high import thing\n", True),
        ("def f():\n    from . import high\n", True),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .high import H\n", True),
    ],
    ids=["down-only", "module-level", "function-level", "type-only"],
)
def test_python_layer_importing_a_higher_one(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    low: str,
    found: bool,
) -> None:
    monkeypatch.setattr(cs, "PYTHON_LAYERS", LAYERS)
    repo = _repo(tmp_path, {}, {"low.py": low, "high.py": "from . import low\n"})
    assert (cs.main(repo) == 1) is found
    if found:
        assert "eddyline.low (low) imports eddyline.high (high" in capsys.readouterr().out


def test_python_allowed_edges_pass_and_go_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cs, "PYTHON_LAYERS", LAYERS)
    monkeypatch.setattr(cs, "ALLOWED_PYTHON_EDGES", {("eddyline.low", "eddyline.high"): "why"})
    cyclic = {"low.py": "def f():\n    from . import high\n", "high.py": "from . import low\n"}
    assert cs.main(_repo(tmp_path, {}, cyclic)) == 0
    other = tmp_path / "other"
    assert cs.main(_repo(other, {}, {"low.py": "", "high.py": "from . import low\n"})) == 1
    assert "eddyline.low no longer imports eddyline.high" in capsys.readouterr().out


def test_python_module_in_no_layer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cs, "PYTHON_LAYERS", LAYERS)
    assert cs.main(_repo(tmp_path, {}, {"low.py": "", "stray.py": ""})) == 1
    assert "eddyline.stray: in no layer" in capsys.readouterr().out


def _rust_fn(lines: int) -> str:
    return "fn long() {\n" + "    let _ = 1;\n" * (lines - 2) + "}\n"


def _py_fn(lines: int) -> str:
    return "def long():\n" + "    x = 1\n" * (lines - 1)


@pytest.mark.parametrize("lines, found", [(100, False), (101, True)])
@pytest.mark.parametrize(
    "name, make",
    [
        ("core/src/runtime/mod.rs", _rust_fn),
        ("core/src/a/x.rs", _rust_fn),
        ("python/src/job.rs", _rust_fn),
        ("python/eddyline/m.py", _py_fn),
        ("tools/t.py", _py_fn),
    ],
)
def test_long_function(tmp_path: Path, name: str, make: Any, lines: int, found: bool) -> None:
    repo = _repo(tmp_path, {}, {})
    _write(repo, {name: make(lines)})
    assert (cs.main(repo) == 1) is found


@pytest.mark.parametrize("lines, found", [(120, False), (121, True), (100, True)])
def test_long_function_allowed_at_its_length_until_it_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: int, found: bool
) -> None:
    monkeypatch.setattr(cs, "LONG_FUNCTIONS", {("core/src/a/x.rs", "long"): 120})
    repo = _repo(tmp_path, {"a/x.rs": _rust_fn(lines)}, {})
    assert (cs.main(repo) == 1) is found


def test_long_file_counts_code_not_tests(tmp_path: Path) -> None:
    code = "".join(f"pub const C{i}: u8 = 0;\n" for i in range(cs.MAX_FILE_LINES - 5))
    tests = "#[cfg(test)]\nmod tests {\n" + "    // x\n" * 200 + "}\n"
    assert cs.main(_repo(tmp_path, {"a/mod.rs": code + tests}, {})) == 0
    other = tmp_path / "other"
    assert cs.main(_repo(other, {"a/mod.rs": code + "// more\n" * 10}, {})) == 1


# The references below are built from N so that this file holds none itself.
N = 17


ISSUE_REFS = [
    ("core/src/a/x.rs", f"/// Kept as is (issue {N}).\npub struct X;\n"),
    ("core/tests/t.rs", f"//! Ids are never reused (Issue #{N}).\n"),
    ("python/src/job.rs", f"// see issues {N} and 18\n"),
    ("python/eddyline/m.py", f'"""Cheap state (issue {N}: a dict per state)."""\n'),
    ("tests/unit/test_x.py", f"def test_x() -> None:\n    # issue{N}\n    pass\n"),
    ("Cargo.toml", f'# O_DIRECT for state files (issue {N})\nlibc = "0.2"\n'),
    ("python/Cargo.toml", f"# issue {N}\n"),
]


@pytest.mark.parametrize("name, text", ISSUE_REFS, ids=[name for name, _ in ISSUE_REFS])
def test_issue_number_in_code_or_toml_is_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str
) -> None:
    repo = _repo(tmp_path, {}, {})
    assert cs.main(repo) == 0
    _write(repo, {name: text})
    assert cs.main(repo) == 1
    line = 1 + next(i for i, s in enumerate(text.split("\n")) if str(N) in s)
    assert f"{name}:{line}: " in capsys.readouterr().out


def test_issue_words_without_a_number_and_dated_logs_are_not_found(tmp_path: Path) -> None:
    repo = _repo(
        tmp_path,
        {"a/x.rs": "// A known issue: the tissue 3 layers deep.\n"},
        {"m.py": '"""Open issues are tracked elsewhere."""\n'},
    )
    _write(
        repo,
        {
            "benches/RESULTS.md": f"## W3 (issue {N})\n",
            "docs/DESIGN.md": f"Incremental checkpoints (issue {N}).\n",
            "python/eddyline/__pycache__/m.py": f"# issue {N}\n",
        },
    )
    assert cs.main(repo) == 0


def test_repository_layout_is_checked_in_ci() -> None:
    lint = (ROOT / ".ci/lint").read_text()
    assert "tools/check_structure.py" in lint
