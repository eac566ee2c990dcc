"""The web dashboard of a running job: a page, ``/api/v1`` JSON and ``/metrics``.

``env.execute(..., dashboard=True | port)`` and ``execute_async`` start one
on the driver (127.0.0.1, port 8081 by default, ``0`` picks a free one); its
address is printed and in ``client.dashboard_url``. The server (the standard
library's ``ThreadingHTTPServer`` on a daemon thread) reads the job's own
metrics; it stops when ``client.wait()`` returns.

Routes (names follow Flink's REST API where they fit):

- ``/`` the page (graph, operators, subtasks, loops, checkpoints, restarts); its
  graph is laid out by dagre and drawn with dagre-d3, its chart with D3, both
  served under ``/vendor/`` from the installed XStatic packages
- ``/api/v1/jobs``, ``/api/v1/jobs/<jid>``, ``/api/v1/jobs/<jid>/vertices``,
  ``/api/v1/jobs/<jid>/vertices/<vid>``, ``/api/v1/jobs/<jid>/checkpoints``,
  ``/api/v1/jobs/<jid>/exceptions``, ``/api/v1/jobs/<jid>/loops``,
  ``/api/v1/jobs/<jid>/metrics``
- ``/metrics`` Prometheus text
"""

from __future__ import annotations

from ._model import GraphNode, JobView, graph_nodes
from ._server import DEFAULT_PORT, Dashboard, serve

__all__ = ["DEFAULT_PORT", "Dashboard", "GraphNode", "JobView", "graph_nodes", "serve"]
