"""Every example in the package's docstrings runs as written (``doctest``).

The examples are the first thing a user copies; one that no longer matches what the
code does (a schema's nullability once changed under one) fails here, naming the module.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import eddyline

# `python -m eddyline` runs the CLI when imported as __main__ only; importing it is harmless,
# but it has no examples.
MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(eddyline.__path__, "eddyline.")
    if not m.name.endswith("__main__")
)


def test_the_package_has_examples() -> None:
    runs = sum(
        doctest.testmod(importlib.import_module(name), verbose=False, report=False).attempted
        for name in MODULES
    )
    assert runs >= 50, f"only {runs} docstring examples found in {len(MODULES)} modules"


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed"
