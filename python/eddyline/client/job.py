"""Running jobs: :class:`JobClient` (a submitted job) and :class:`JobResult`.

They are defined below the DSL (``eddyline._job``), which returns them from
``env.execute()`` and ``env.execute_async()``; this is their place in the
client, where they have always been imported from.
"""

from __future__ import annotations

from .._job import (
    CheckpointStats,
    JobClient,
    JobResult,
    OperatorCheckpointStats,
    progress_line,
)

__all__ = ["CheckpointStats", "JobClient", "JobResult", "OperatorCheckpointStats", "progress_line"]
