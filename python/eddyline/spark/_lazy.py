"""The one place that checks pyspark is installed (it is an optional extra)."""

from __future__ import annotations

import importlib.util

from ..errors import EddylineError

__all__ = ["SparkNotInstalledError", "require_pyspark"]


class SparkNotInstalledError(EddylineError, ImportError):
    """pyspark is needed but not installed: ``pip install "eddyline[spark]"``."""


def require_pyspark(feature: str) -> None:
    """Raises :class:`SparkNotInstalledError` naming ``feature`` when pyspark is missing."""
    if importlib.util.find_spec("pyspark") is None:
        raise SparkNotInstalledError(
            f"{feature} needs pyspark, which is not installed; install eddyline's Spark "
            'extra with: pip install "eddyline[spark]"'
        )
