"""The client: what runs, watches and inspects a job from outside the DSL.

* :mod:`eddyline.client.job` — ``JobClient`` and ``JobResult``, the handle of a
  running job and what it returned.
* :mod:`eddyline.client.runners` — ``ProcessRunner``, subtasks in local worker
  processes.
* :mod:`eddyline.client.cli` — the ``eddyline`` command (``python -m eddyline``).
* :mod:`eddyline.client.dashboard` — the web dashboard and ``/metrics``.

The names users need are re-exported at the top of the package
(``ed.JobClient``, ``ed.ProcessRunner``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._registry import register_dashboard


def _serve_dashboard(job: Any, nodes: Sequence[Mapping[str, Any]], port: int, host: str) -> Any:
    """Serves ``job``'s dashboard; the dashboard (and its HTTP server) is
    imported only when a job asks for one."""
    from .dashboard import graph_nodes, serve

    return serve(job, graph_nodes(nodes), port, host)


register_dashboard(_serve_dashboard)
