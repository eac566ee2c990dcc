"""Shared fixtures for the eddyline test suites."""

from __future__ import annotations

import pytest


@pytest.fixture(params=[1, 2, 4], ids=lambda p: f"p{p}")
def parallelism(request: pytest.FixtureRequest) -> int:
    """Parallelism of the environment under test: 1, 2 and 4."""
    value: int = request.param
    return value
