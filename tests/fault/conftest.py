"""Fault-injection tests: jobs with checkpoints, failures and restores, checked exactly.

Every random choice comes from the ``seed`` fixture, which is printed (shown on
failure) and can be pinned with ``EDDYLINE_FAULT_SEED``.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

# These suites need the native extension: a missing build must fail, never skip.
import eddyline._core  # noqa: F401


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """A logged seed for the test's random choices (``EDDYLINE_FAULT_SEED`` pins it)."""
    pinned = os.environ.get("EDDYLINE_FAULT_SEED")
    value = int(pinned) if pinned else random.SystemRandom().randrange(2**32)
    print(f"{request.node.nodeid}: seed {value} (rerun with EDDYLINE_FAULT_SEED={value})")
    return value


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
