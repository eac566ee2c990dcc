"""Integration tests run real jobs: they need the native extension ``eddyline._core``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import eddyline as ed

# These suites need the native extension: a missing build must fail, never skip.
import eddyline._core


@pytest.fixture
def make_env(parallelism: int) -> Callable[..., ed.StreamEnvironment]:
    """Builds environments at the parametrized parallelism (small batches by default)."""

    def make(**kwargs: object) -> ed.StreamEnvironment:
        kwargs.setdefault("batch_size", 7)
        return ed.StreamEnvironment(parallelism, **kwargs)  # type: ignore[arg-type]

    return make
