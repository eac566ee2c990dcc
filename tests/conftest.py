"""Shared fixtures for the eddyline test suites."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

# The scripts fault tests run in subprocesses import tests/support as the tests
# do (pytest puts tests/ on sys.path for this process only).
_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.environ.get("PYTHONPATH"), _TESTS) if p
    )


@pytest.fixture(params=[1, 2, 4], ids=lambda p: f"p{p}")
def parallelism(request: pytest.FixtureRequest) -> int:
    """Parallelism of the environment under test: 1, 2 and 4."""
    value: int = request.param
    return value


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """A logged seed for the test's random choices (``EDDYLINE_FAULT_SEED`` pins it)."""
    pinned = os.environ.get("EDDYLINE_FAULT_SEED")
    value = int(pinned) if pinned else random.SystemRandom().randrange(2**32)
    print(f"{request.node.nodeid}: seed {value} (rerun with EDDYLINE_FAULT_SEED={value})")
    return value
