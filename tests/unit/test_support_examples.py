"""The ``>>>`` examples of the tests' own helpers (``tests/support``) run as written.

``tests/docs/test_docstrings.py`` runs those of the package; the fault helpers
moved out of ``eddyline.testing`` keep their examples checked here.
"""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["support.faults", "support.loops"])
def test_support_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed"
