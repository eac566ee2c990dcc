"""``eddyline.spark``: the import path docs/API.md gives for the Spark connectors.

They live in :mod:`eddyline.connectors.spark`; this module re-exports its
public names (``from eddyline.spark import SparkRunner, SparkTableSink``).
"""

from __future__ import annotations

from .connectors.spark import *  # noqa: F403  (the public names, listed once, there)
from .connectors.spark import __all__ as __all__
