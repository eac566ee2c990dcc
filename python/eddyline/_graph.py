"""The logical job graph built by the DSL, and its translation to node specs.

Every DSL call appends one :class:`LogicalNode`. At build time
(:meth:`LogicalGraph.compile`) the nodes that lead to the requested targets
are translated into the node specs ``eddyline._core`` consumes (the typed
dicts of ``eddyline/_specs.py``, one per node kind); consecutive
per-record Python stages with the same parallelism are fused into one
``python`` node there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from ._exec.codegen import Stage
from ._exec.factory import RunnerFactory
from ._exec.records import RecordChainRunner
from ._specs import (
    AssignTimestampsSpec,
    EdgeSpec,
    NodeBase,
    NodeSpec,
    PythonSpec,
    SourceParquetSpec,
)
from .errors import GraphError
from .scope import StreamScope

if TYPE_CHECKING:
    from .sinks import CollectHandle

__all__ = ["LogicalEdge", "LogicalGraph", "LogicalNode", "native"]


def native() -> ModuleType:
    """Imports the native extension, with a clear message if it is missing."""
    try:
        from . import _core
    except ImportError as exc:  # pragma: no cover - depends on the build
        raise ImportError(
            "eddyline's native extension (eddyline._core) is not available; build it with "
            "'maturin develop' or install a wheel"
        ) from exc
    return _core


@dataclass
class LogicalEdge:
    """An input of a logical node: the producing node, the input index, and the
    producer's output port (1 only for the feedback side of a co-loop head and
    for a window's late records)."""

    node: int
    input: int = 0
    port: int = 0
    broadcast: bool = False
    """Every consumer subtask gets every row (``stream.broadcast()``)."""


@dataclass
class LogicalNode:
    """One operator as the user declared it.

    ``kind`` is a binding node kind, or ``"record"`` for a per-record Python
    stage (fused at build time). ``params`` holds the kind's own spec fields
    (read by ``_native_spec``), except for ``python`` nodes
    (``params["make_factory"]`` builds the runner factory from the node's
    final name) and loop heads (``params["feedback_node"]`` is the logical id
    of the loop's feedback, set when the loop closes).
    """

    id: int
    op: str
    kind: str
    inputs: list[LogicalEdge]
    scope: StreamScope
    schema: pa.Schema | None = None
    params: dict[str, Any] = field(default_factory=dict)
    keys: list[str] | None = None
    stage: tuple[str, Callable[..., Any]] | None = None
    parallelism: int | None = None
    name: str | None = None
    uid: str | None = None
    collect: CollectHandle | None = None
    time_column: str | None = None
    """The event-time column of the stream (set by the nearest upstream ``assign_timestamps``)."""
    window_end: str | None = None
    """The column holding the end of the window each row is the result of, on a
    window's output and the streams derived from it: their event time is that end
    minus 1 ms (docs/API.md "Chaining windows")."""
    side_outputs: dict[str, tuple[int, pa.Schema | None]] = field(default_factory=dict)
    """The node's side outputs: output tag name -> (output port, schema if known)."""

    @property
    def display_name(self) -> str:
        """The user's name, or the default ``<op>_<id>``."""
        return self.name if self.name is not None else f"{self.op}_{self.id}"

    @property
    def is_sink(self) -> bool:
        """True for sink nodes."""
        return self.kind.startswith("sink_") or bool(self.params.get("is_sink"))


@dataclass
class _Group:
    members: list[int]


@dataclass
class CompiledGraph:
    """Node specs for the native layer plus the mapping from logical to physical ids."""

    nodes: list[NodeSpec]
    physical: dict[int, int]
    collects: list[tuple[CollectHandle, int]]


class LogicalGraph:
    """The nodes of one environment, in creation order."""

    def __init__(
        self,
        default_parallelism: Callable[[], int],
        batch_size: Callable[[], int] = lambda: 8192,
    ) -> None:
        self.nodes: list[LogicalNode] = []
        self._default_parallelism = default_parallelism
        self._batch_size = batch_size

    def add(
        self,
        op: str,
        kind: str,
        inputs: Iterable[LogicalEdge],
        *,
        scope: StreamScope,
        schema: pa.Schema | None = None,
        params: dict[str, Any] | None = None,
        keys: list[str] | None = None,
        stage: tuple[str, Callable[..., Any]] | None = None,
        time_column: str | None = None,
        window_end: str | None = None,
    ) -> LogicalNode:
        """Appends a node and returns it."""
        node = LogicalNode(
            id=len(self.nodes),
            op=op,
            kind=kind,
            inputs=list(inputs),
            scope=scope,
            schema=schema,
            params=params or {},
            keys=keys,
            stage=stage,
            time_column=time_column,
            window_end=window_end,
        )
        self.nodes.append(node)
        return node

    def discard_last(self, node: LogicalNode) -> None:
        """Removes ``node`` if it is the last one (after a failed build-time check)."""
        if self.nodes and self.nodes[-1] is node:
            self.nodes.pop()

    def parallelism_of(self, node: LogicalNode) -> int:
        """The node's parallelism, defaulting to the environment's."""
        return node.parallelism if node.parallelism is not None else self._default_parallelism()

    def sinks(self) -> list[int]:
        """Ids of all sink nodes."""
        return [node.id for node in self.nodes if node.is_sink]

    def _ancestors(self, targets: Iterable[int]) -> list[int]:
        seen: set[int] = set()
        stack = list(targets)
        while stack:
            nid = stack.pop()
            if nid in seen:
                continue
            seen.add(nid)
            node = self.nodes[nid]
            stack.extend(edge.node for edge in node.inputs)
            feedback = node.params.get("feedback_node") if node.kind == "loop_head" else None
            if feedback is not None:
                stack.append(feedback)
        return sorted(seen)

    def compile(self, targets: Iterable[int], *, complete: bool = False) -> CompiledGraph:
        """Translates the nodes leading to ``targets`` into node specs.

        With ``complete`` (a graph about to run) every loop must be closed.

        Raises:
            GraphError: If two operators share a uid, or a loop has no feedback.
        """
        needed, view = self._event_time_at_sources(self._ancestors(targets))
        consumers: dict[int, int] = dict.fromkeys(needed, 0)
        for nid in needed:
            node = view[nid]
            for edge in node.inputs:
                consumers[edge.node] += 1
            if node.kind == "loop_head":
                feedback = node.params.get("feedback_node")
                if feedback is not None:
                    # The feedback edge is a consumer too: never fuse past it.
                    consumers[feedback] += 1
                elif complete:
                    raise GraphError(
                        f"loop '{node.display_name}' is still being built (its loop function "
                        "has not returned); a job cannot run from inside a loop function",
                        operator=node.display_name,
                    )

        readers: dict[int, list[int]] = {nid: [] for nid in needed}
        for nid in needed:
            for edge in view[nid].inputs:
                readers[edge.node].append(nid)
        pushdown = {
            nid: columns
            for nid in needed
            if view[nid].kind == "source_parquet"
            and "columns" not in view[nid].params
            and (columns := self._columns_read(nid, readers)) is not None
        }

        groups: list[_Group] = []
        group_of: dict[int, int] = {}
        for nid in needed:
            node = view[nid]
            if node.kind == "record":
                upstream = view[node.inputs[0].node]
                if (
                    upstream.kind == "record"
                    and consumers[upstream.id] == 1
                    and self.parallelism_of(upstream) == self.parallelism_of(node)
                    and upstream.scope == node.scope
                ):
                    index = group_of[upstream.id]
                    groups[index].members.append(nid)
                    group_of[nid] = index
                    continue
            group_of[nid] = len(groups)
            groups.append(_Group([nid]))

        input_rows = self._input_rows(needed, view)
        uids: dict[str, str] = {}
        out: list[NodeSpec] = []
        collects: list[tuple[CollectHandle, int]] = []
        for index, group in enumerate(groups):
            members = [view[m] for m in group.members]
            first = members[0]
            name = "+".join(member.display_name for member in members)
            parallelism = self.parallelism_of(members[-1])
            base: NodeBase = {
                "id": index,
                "name": name,
                "uid": _group_uid(members, name, uids),
                "parallelism": parallelism,
                "inputs": self._edges(first, parallelism, group_of),
                "scope": first.scope._loop_path(),
            }
            if first.side_outputs and first.params.get("declares_side_outputs"):
                # A process function's side outputs: one port each.
                base["side_outputs"] = sorted(first.side_outputs.values(), key=lambda e: e[0])
            elif first.side_outputs:
                # A window's late records, on port 1.
                base["late_output"] = True
            spec = self._spec(base, members, group_of)
            if spec["kind"] == "python" and isinstance(spec["factory"], RunnerFactory):
                spec["factory"].input_rows = input_rows[first.id]
            if first.id in pushdown and spec["kind"] == "source_parquet":
                spec["columns"] = pushdown[first.id]
            out.append(spec)
            if first.collect is not None:
                collects.append((first.collect, index))
        return CompiledGraph(
            nodes=out,
            physical={nid: group_of[nid] for nid in needed},
            collects=collects,
        )

    def _event_time_at_sources(self, needed: list[int]) -> tuple[list[int], dict[int, LogicalNode]]:
        """Keeps per-split event time whatever else reads a source (docs/DESIGN.md
        "Event time per split").

        ``assign_timestamps`` keeps one watermark per split only when it runs in
        the source's task, chained right after it, which a source with other
        consumers does not allow. So the assignment moves into the source for
        every consumer, as a watermark strategy given to a Flink source does: the
        other readers of the source read the assigner's output instead (the same
        batches, unchanged, plus watermarks), and the assigner comes right after
        its source in the build order. Returns the build order of ``needed`` and
        the nodes as built (copies with their inputs rewired where they changed;
        the logical graph itself is left as the user built it).

        Raises:
            GraphError: If a source is read by more than one ``assign_timestamps``
                (each would need the source's splits to itself).
        """
        view = {nid: self.nodes[nid] for nid in needed}
        readers: dict[int, list[int]] = {nid: [] for nid in needed}
        for nid in needed:
            for edge in self.nodes[nid].inputs:
                readers[edge.node].append(nid)
        promoted: dict[int, int] = {}
        for nid in needed:
            source = self.nodes[nid]
            if source.inputs or source.kind == "record" or not readers[nid]:
                continue
            assigners = sorted(
                {r for r in readers[nid] if self._assigns_at_source(self.nodes[r], source)}
            )
            if len(assigners) > 1:
                names = ", ".join(f"'{self.nodes[a].display_name}'" for a in assigners)
                raise GraphError(
                    f"source '{source.display_name}' is read by {len(assigners)} "
                    f"assign_timestamps ({names}); one watermark per split needs a single "
                    "assignment right after the source: call assign_timestamps once and "
                    "branch the stream it returns",
                    operator=self.nodes[assigners[1]].display_name,
                )
            if assigners and len(set(readers[nid])) > 1:
                promoted[nid] = assigners[0]
        if not promoted:
            return needed, view
        for source_id, assigner in promoted.items():
            for reader in set(readers[source_id]) - {assigner}:
                node = self.nodes[reader]
                view[reader] = replace(
                    node,
                    inputs=[
                        replace(edge, node=assigner) if edge.node == source_id else edge
                        for edge in node.inputs
                    ],
                )
        moved = set(promoted.values())
        order: list[int] = []
        for nid in needed:
            if nid in moved:
                continue
            order.append(nid)
            if nid in promoted:
                order.append(promoted[nid])
        return order, view

    def _assigns_at_source(self, node: LogicalNode, source: LogicalNode) -> bool:
        """Whether ``node`` is an ``assign_timestamps`` that runs chained right
        after ``source`` (same parallelism and scope, reading it on port 0)."""
        return (
            node.kind == "assign_timestamps"
            and len(node.inputs) == 1
            and node.inputs[0].port == 0
            and not node.inputs[0].broadcast
            and node.scope == source.scope
            and self.parallelism_of(node) == self.parallelism_of(source)
        )

    def _input_rows(self, needed: list[int], view: dict[int, LogicalNode]) -> dict[int, int | None]:
        """Per node: the rows the bounded sources upstream of it read in all, ``None``
        when one of them is of unknown size (unbounded, a user's ``Source``, an
        object store's Parquet files) or the node is in or after a loop (its
        feedback is unknown). A hint for starting worker processes
        (:attr:`~eddyline._exec.base.Runner.input_rows`)."""
        rows: dict[int, int | None] = {}
        for nid in needed:  # in build order: a node's inputs come before it
            node = view[nid]
            known: int | None
            if node.kind == "source_arrow":
                known = sum(batch.num_rows for batch in node.params["batches"])
            elif node.kind == "source_sequence":
                known = node.params["end"] - node.params["start"]
            elif node.kind == "source_parquet":
                known = node.params.get("num_rows")
            elif not node.inputs or node.kind == "loop_head" or node.scope.loop_id is not None:
                known = None
            else:
                ins = [rows.get(edge.node) for edge in node.inputs]
                known = None if None in ins else sum(n for n in ins if n is not None)
            rows[nid] = known
        return rows

    def _edges(
        self, node: LogicalNode, parallelism: int, group_of: dict[int, int]
    ) -> list[EdgeSpec]:
        """The inputs of the group ``node`` starts: hash-partitioned on its keys,
        forwarded at the same parallelism, rebalanced otherwise."""
        edges: list[EdgeSpec] = []
        # A two-input keyed operator (a join) hashes each input on its own keys.
        input_keys: list[list[str]] | None = node.params.get("input_keys")
        for edge in node.inputs:
            producer = self.nodes[edge.node]
            partition: Literal["forward", "rebalance", "broadcast", "hash"]
            if edge.broadcast:
                partition, keys = "broadcast", []
            elif input_keys is not None:
                partition, keys = "hash", list(input_keys[edge.input])
            elif node.keys:
                partition, keys = "hash", list(node.keys)
            elif self.parallelism_of(producer) == parallelism:
                partition, keys = "forward", []
            else:
                partition, keys = "rebalance", []
            edges.append(
                {
                    "node": group_of[edge.node],
                    "partition": partition,
                    "keys": keys,
                    "input": edge.input,
                    "port": edge.port,
                }
            )
        return edges

    def _spec(
        self, base: NodeBase, members: list[LogicalNode], group_of: dict[int, int]
    ) -> NodeSpec:
        """The spec of one group: fused record stages, or a single node."""
        first, last = members[0], members[-1]
        if first.kind == "record":
            stages: list[Stage] = []
            for member in members:
                assert member.stage is not None
                kind, fn = member.stage
                stages.append((kind, fn, member.display_name))  # type: ignore[arg-type]
            factory = RunnerFactory(
                RecordChainRunner, base["name"], stages, last.schema, self._batch_size()
            )
            return {
                **base,
                "kind": "python",
                "factory": factory,
                "output_schema": last.schema,
                "keys": None,
                "is_sink": False,
            }
        params = first.params
        if first.kind == "python":
            spec: PythonSpec = {
                **base,
                "kind": "python",
                "factory": params["make_factory"](base["name"]),
                "output_schema": params.get("output_schema"),
                "keys": list(first.keys) if first.keys else None,
                "is_sink": first.is_sink,
            }
            if "input_keys" in params:
                spec["input_keys"] = [list(k) for k in params["input_keys"]]
            return spec
        if first.kind == "loop_head":
            assert first.scope.loop_id is not None  # a loop head is in its loop's scope
            feedback = params.get("feedback_node")
            return {
                **base,
                "kind": "loop_head",
                "loop": first.scope.loop_id,
                "feedback_from": group_of.get(feedback) if feedback is not None else None,
                "feedback_memory": params["feedback_memory"],
                "priority": params["priority"],
                "co": params["co"],
                "spill_dir": params.get("spill_dir"),
                "feedback_schema": params.get("feedback_schema"),
            }
        return _native_spec(base, first)

    def _columns_read(self, nid: int, readers: dict[int, list[int]]) -> list[str] | None:
        """The columns of ``nid``'s output that its readers use, in its schema's order,
        when every path from it is filters ending in a ``select`` (each naming
        the columns its expressions read); ``None`` when some reader may use any
        column (another operator, a sink, a loop) or nothing is known."""
        schema = self.nodes[nid].schema
        if schema is None or not readers[nid]:
            return None
        used: set[str] = set()
        for reader in readers[nid]:
            node = self.nodes[reader]
            if "reads" not in node.params or node.collect is not None or node.side_outputs:
                return None
            if node.kind == "filter":
                below = self._columns_read(reader, readers)
                if below is None:
                    return None
                used.update(below)
            elif node.kind != "select":
                return None
            used.update(node.params["reads"])
        if used.isdisjoint(schema.names):
            return None
        return [name for name in schema.names if name in used]

    def output_schema(self, node: LogicalNode, max_parallelism: int) -> pa.Schema | None:
        """Builds the graph up to ``node`` in the native layer and returns its schema.

        Raises whatever the native graph validation raises (``GraphError``,
        ``SchemaError``, ``ScopeError``), naming the operator.
        """
        compiled = self.compile([node.id])
        schemas = native().build_graph(compiled.nodes, max_parallelism)
        schema: pa.Schema | None = schemas[compiled.physical[node.id]]
        return schema


def _group_uid(members: list[LogicalNode], name: str, uids: dict[str, str]) -> str | None:
    """The uid of a group (its members' uids or names joined), None when no member
    has one; records it in ``uids`` (uid -> group name).

    Raises:
        GraphError: If another group has the same uid.
    """
    member_uids = [member.uid for member in members]
    if all(u is None for u in member_uids):
        return None
    uid = "+".join(
        u if u is not None else m.display_name for u, m in zip(member_uids, members, strict=True)
    )
    if uid in uids:
        raise GraphError(
            f"operators '{uids[uid]}' and '{name}' have the same uid {uid!r}; "
            "uids must be unique within a job",
            operator=name,
        )
    uids[uid] = name
    return uid


def _native_spec(base: NodeBase, node: LogicalNode) -> NodeSpec:
    """The spec of a native operator, source or sink from the node's DSL params."""
    p = node.params
    match node.kind:
        case "source_arrow":
            return {**base, "kind": "source_arrow", "schema": p["schema"], "batches": p["batches"]}
        case "source_sequence":
            return {**base, "kind": "source_sequence", "start": p["start"], "end": p["end"]}
        case "source_parquet":
            parquet: SourceParquetSpec = {
                **base,
                "kind": "source_parquet",
                "paths": p["paths"],
                "storage_options": dict(p.get("storage_options") or {}),
            }
            if "columns" in p:
                parquet["columns"] = list(p["columns"])
            return parquet
        case "source_python":
            return {
                **base,
                "kind": "source_python",
                "schema": p["schema"],
                "make_reader": p["make_reader"],
                "union_offsets": p.get("union_offsets", False),
            }
        case "filter":
            return {**base, "kind": "filter", "expr": p["expr"]}
        case "with_columns" | "select":
            return {**base, "kind": node.kind, "columns": p["columns"]}
        case "assign_timestamps":
            spec: AssignTimestampsSpec = {
                **base,
                "kind": "assign_timestamps",
                "column": p["column"],
                "max_out_of_orderness_ms": p["max_out_of_orderness_ms"],
            }
            if "idle_timeout_ms" in p:
                spec["idle_timeout_ms"] = p["idle_timeout_ms"]
            return spec
        case "keyed_agg":
            keys = list(node.keys or [])
            return {
                **base,
                "kind": "keyed_agg",
                "keys": keys,
                "agg": p["agg"],
                "column": p["column"],
            }
        case "window":
            return {
                **base,
                "kind": "window",
                "keys": p["keys"],
                "time_column": p["time_column"],
                "assigner": p["assigner"],
                "agg": p["agg"],
                "column": p["column"],
            }
        case "session_window":
            return {
                **base,
                "kind": "session_window",
                "keys": p["keys"],
                "time_column": p["time_column"],
                "gap_ms": p["gap_ms"],
                "agg": p["agg"],
                "column": p["column"],
            }
        case "join":
            return {
                **base,
                "kind": "join",
                "left_keys": p["input_keys"][0],
                "right_keys": p["input_keys"][1],
                "how": p["how"],
                "within": p["within"],
                "state_ttl_ms": p["state_ttl_ms"],
                "time_columns": p["time_columns"],
                "temporal": bool(p.get("temporal")),
                "window_ms": p.get("window_ms"),
                "window_slide_ms": p.get("window_slide_ms"),
                "session_gap_ms": p.get("session_gap_ms"),
            }
        case "loop_exit" | "union":
            return {**base, "kind": node.kind}
        case "sink_collect":
            return {**base, "kind": "sink_collect"}
        case "sink_discard":
            return {**base, "kind": "sink_discard"}
        case "sink_parquet":
            return {
                **base,
                "kind": "sink_parquet",
                "dir": p["dir"],
                "storage_options": dict(p.get("storage_options") or {}),
            }
    raise GraphError(f"unknown node kind '{node.kind}'", operator=base["name"])
