"""The dashboard's HTTP server: routes to the page, the JSON and ``/metrics``."""

from __future__ import annotations

import importlib
import json
import threading
from collections.abc import Callable, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

from ...errors import DashboardError
from ._model import GraphNode, JobSource, JobView

__all__ = ["DEFAULT_PORT", "Dashboard", "serve"]

DEFAULT_PORT = 8081

_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
}


def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


# The page's graph and chart libraries, served from the installed XStatic
# packages (dependencies of eddyline; nothing is copied into this repository
# and nothing is fetched from the internet): D3 3.5 and dagre-d3 0.4.17,
# whose bundle carries the dagre layout and graphlib and expects D3 3.x.
VENDORED = {"d3": "xstatic.pkg.d3", "dagre_d3": "xstatic.pkg.dagre_d3"}


def _vendor(path: str) -> bytes | None:
    """The file ``/vendor/<package>/<file>`` of a vendored library, if it exists."""
    parts = path.split("/")
    if len(parts) != 4 or parts[1] != "vendor" or parts[2] not in VENDORED:
        return None
    base = Path(importlib.import_module(VENDORED[parts[2]]).BASE_DIR)
    files = {p.name: p for p in base.iterdir() if p.is_file()}  # never a path outside BASE_DIR
    file = files.get(parts[3])
    return file.read_bytes() if file is not None else None


class Dashboard:
    """A running dashboard server; :meth:`close` stops it.

    Attributes:
        url: Its address, ``http://127.0.0.1:<port>/``.
        view: The job model it serves.
    """

    def __init__(self, view: JobView, host: str, port: int) -> None:
        self.view = view
        handler = _handler(view)
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise DashboardError(
                f"the dashboard of job '{view.job.name}' cannot listen on {host}:{port}: "
                f"{exc.strerror or exc}; pass dashboard=0 to pick a free port"
            ) from exc
        self._server.daemon_threads = True
        address = self._server.server_address
        bound_host, bound_port = str(address[0]), int(address[1])
        shown = bound_host if ":" not in bound_host else f"[{bound_host}]"
        self.url = f"http://{shown}:{bound_port}/"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="eddyline-dashboard", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stops serving and frees the port (idempotent)."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def __repr__(self) -> str:
        return f"Dashboard({self.url!r})"


def serve(
    job: JobSource,
    nodes: Sequence[GraphNode],
    port: int = DEFAULT_PORT,
    host: str = "127.0.0.1",
) -> Dashboard:
    """Serves the dashboard of ``job`` (whose graph is ``nodes``) on ``host:port``.

    Raises:
        DashboardError: The address cannot be bound (e.g. the port is taken).
    """
    return Dashboard(JobView(job, nodes), host, port)


def _routes(view: JobView) -> dict[str, Callable[[], Any]]:
    def sample() -> Any:
        return view.sample()

    jid = view.id
    base = f"/api/v1/jobs/{jid}"
    routes: dict[str, Callable[[], Any]] = {
        "/api/v1/jobs": lambda: {
            "jobs": [{"id": jid, "name": view.job.name, "status": sample().status.upper()}]
        },
        base: lambda: view.job_json(sample()),
        f"{base}/vertices": lambda: {"vertices": view.vertices(sample())},
        f"{base}/checkpoints": lambda: view.checkpoints_json(sample()),
        f"{base}/exceptions": lambda: view.exceptions_json(sample()),
        f"{base}/loops": lambda: {"loops": view.loops(sample())},
        f"{base}/metrics": lambda: view.job.metrics(),
        f"{base}/plan": lambda: {"plan": {"jid": jid, "nodes": [n.to_json() for n in view.nodes]}},
    }
    for node in view.nodes:
        routes[f"{base}/vertices/{node.id}"] = _vertex_route(view, node)
    return routes


def _vertex_route(view: JobView, node: GraphNode) -> Callable[[], Any]:
    def route() -> dict[str, Any]:
        return view.vertex(node, _op(view.sample().operators, node.id), subtasks=True)

    return route


def _op(ops: list[dict[str, Any]], index: int) -> dict[str, Any]:
    return ops[index] if index < len(ops) else {}


def _handler(view: JobView) -> type[BaseHTTPRequestHandler]:
    routes = _routes(view)

    class Handler(BaseHTTPRequestHandler):
        server_version = "eddyline-dashboard"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/") or "/"
            try:
                if path in _STATIC:
                    name, kind = _STATIC[path]
                    self._send(HTTPStatus.OK, kind, _static(name))
                elif path.startswith("/vendor/"):
                    body = _vendor(path)
                    if body is None:
                        self._json(HTTPStatus.NOT_FOUND, {"errors": [f"no such file: {path}"]})
                    else:
                        self._send(HTTPStatus.OK, "text/javascript; charset=utf-8", body)
                elif path == "/metrics":
                    from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

                    from ._prometheus import registry_for

                    self._send(
                        HTTPStatus.OK, CONTENT_TYPE_LATEST, generate_latest(registry_for(view))
                    )
                elif path in routes:
                    self._json(HTTPStatus.OK, routes[path]())
                else:
                    self._json(HTTPStatus.NOT_FOUND, {"errors": [f"no such resource: {path}"]})
            except (BrokenPipeError, ConnectionResetError):
                pass
            except Exception as exc:  # the server keeps serving; the client sees why
                self._json(
                    HTTPStatus.INTERNAL_SERVER_ERROR, {"errors": [f"{type(exc).__name__}: {exc}"]}
                )

        def _json(self, status: HTTPStatus, body: Any) -> None:
            self._send(status, "application/json", json.dumps(body).encode())

        def _send(self, status: HTTPStatus, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # no access log on the job's stderr

    return Handler
