"""Fault-injection tests: jobs with checkpoints, failures and restores, checked exactly.

Every random choice comes from the ``seed`` fixture (``tests/conftest.py``),
which is printed (shown on failure) and can be pinned with ``EDDYLINE_FAULT_SEED``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# These suites need the native extension: a missing build must fail, never skip.
import eddyline._core  # noqa: F401


@pytest.fixture
def chk_dir(tmp_path: Path) -> Path:
    """A fresh checkpoint directory (not created: the engine creates it)."""
    return tmp_path / "checkpoints"


@pytest.fixture
def marker_dir(tmp_path: Path) -> Path:
    """A directory for fault markers (``FailOnce``)."""
    path = tmp_path / "markers"
    path.mkdir()
    return path
