"""What ``env.execute(runner=...)`` accepts: the :class:`Runner` protocol.

The DSL starts a job through it without knowing the runners, which live
above it (``ed.ProcessRunner`` in the client, ``eddyline.spark.SparkRunner``
in the connectors); any object with a matching ``_start`` is one.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ._core import JobHandle
    from ._specs import NodeSpec

__all__ = ["Runner"]


class Runner(Protocol):
    """Starts a job's subtasks somewhere other than this process's threads."""

    def _start(
        self, core: ModuleType, nodes: list[NodeSpec], config: dict[str, Any], spec: bytes
    ) -> JobHandle:
        """Starts the job (``core.start_job`` with a launcher of workers) and
        returns its handle; ``spec`` is the job as the workers rebuild it."""
        ...
