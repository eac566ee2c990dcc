"""The one place that checks pyspark is installed (it is an optional extra)."""

from __future__ import annotations

from ...errors import EddylineError

__all__ = ["SparkNotInstalledError", "require_pyspark"]


class SparkNotInstalledError(EddylineError, ImportError):
    """pyspark is needed but not installed: ``pip install "eddyline[spark]"``."""


def require_pyspark(feature: str) -> None:
    """Raises :class:`SparkNotInstalledError` naming ``feature`` when pyspark is missing."""
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise SparkNotInstalledError(
            f"{feature} needs pyspark, which is not installed; install eddyline's Spark "
            'extra with: pip install "eddyline[spark]"'
        ) from exc
