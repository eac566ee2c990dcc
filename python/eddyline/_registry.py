"""Where the plan finds its runners: a registry below the DSL and the plan.

The plan (``_graph``) fuses per-record Python stages into one node at
compile time and needs a runner factory for the fused chain; the execution
layer (``_exec``) knows how to make one. The plan asks this module, which
the execution layer fills when it is imported (``_exec/records.py``), so
the layers point one way: DSL -> plan -> execution, never back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import pyarrow as pa

__all__ = [
    "Stage",
    "connector",
    "dashboard_server",
    "record_chain_factory",
    "register_connector",
    "register_dashboard",
    "register_record_chain",
]

Stage: TypeAlias = tuple[Literal["map", "flat_map", "filter"], Callable[..., Any], str]
"""One per-record stage of a fused chain: its kind, the user's function, its name."""

RecordChainMaker: TypeAlias = Callable[[str, list[Stage], pa.Schema | None, int], Any]
"""``(name, stages, output schema, batch size) -> runner factory``."""

_record_chain: list[RecordChainMaker] = []


def register_record_chain(make: RecordChainMaker) -> None:
    """Registers how fused per-record stages become a runner factory (the
    execution layer's, called once when it is imported)."""
    _record_chain[:] = [make]


def record_chain_factory(
    name: str, stages: list[Stage], schema: pa.Schema | None, batch_size: int
) -> Any:
    """The runner factory of the fused per-record stages ``stages``.

    Raises:
        RuntimeError: If no execution layer registered one (``eddyline._exec``
            was not imported).
    """
    if not _record_chain:
        raise RuntimeError("eddyline's execution layer is not loaded (import eddyline)")
    return _record_chain[0](name, stages, schema, batch_size)


_connectors: dict[str, Callable[..., Any]] = {}


def register_connector(name: str, build: Callable[..., Any]) -> None:
    """Registers a connector's entry the DSL calls by name (``"kafka"``: the
    ``KafkaSource`` class, ``"spark"``: ``from_spark(env, df)``); each
    connector module registers itself when imported, and ``import eddyline``
    imports them all, so the DSL never imports the connectors above it
    (docs/ARCHITECTURE.md, "Keeping the layers apart")."""
    _connectors[name] = build


def connector(name: str) -> Callable[..., Any]:
    """The entry connector ``name`` registered.

    Raises:
        RuntimeError: If no connector of that name was imported.
    """
    try:
        return _connectors[name]
    except KeyError:
        raise RuntimeError(f"eddyline's {name} connector is not loaded (import eddyline)") from None


DashboardServer: TypeAlias = Callable[[Any, Sequence[Mapping[str, Any]], int, str], Any]
"""``(job client, node summaries, port, host) -> a running dashboard`` (with
``url`` and ``close()``)."""

_dashboard: list[DashboardServer] = []


def register_dashboard(serve: DashboardServer) -> None:
    """Registers how a job's dashboard is served (the client's, registered
    when ``eddyline.client`` is imported), so the job handle below the DSL
    (``_job``) starts one without importing the client above it."""
    _dashboard[:] = [serve]


def dashboard_server() -> DashboardServer:
    """How a job's dashboard is served.

    Raises:
        RuntimeError: If the client did not register one (``eddyline.client``
            was not imported).
    """
    if not _dashboard:
        raise RuntimeError("eddyline's dashboard is not loaded (import eddyline)")
    return _dashboard[0]
