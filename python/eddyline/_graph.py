"""The logical job graph built by the DSL, and its translation to node specs.

Every DSL call appends one :class:`LogicalNode`. At build time
(:meth:`LogicalGraph.compile`) the nodes that lead to the requested targets
are compiled into the node specs ``eddyline._core`` consumes: each node's
operator spec (``eddyline/_specs.py``, built by the DSL method and held here
unchanged) inside a :class:`~eddyline._specs.NodeSpec` with its id, name,
parallelism and inputs; consecutive per-record Python stages with the same
parallelism are fused into one ``python`` node there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

import pyarrow as pa

from ._registry import Stage, record_chain_factory
from ._specs import (
    AssignTimestampsSpec,
    EdgeSpec,
    FilterSpec,
    JoinSpec,
    LoopHeadSpec,
    NodeSpec,
    OperatorSpec,
    Partition,
    PythonPlanSpec,
    PythonSpec,
    RecordStageSpec,
    SelectSpec,
    SourceArrowSpec,
    SourceParquetSpec,
    SourceSequenceSpec,
)
from .errors import GraphError
from .scope import StreamScope

_log = logging.getLogger(__name__)

PASSES_SOURCE_PROGRESS = frozenset({"filter", "select", "with_columns", "explode", "record"})
"""Kinds of the operators that pass a source's progress on to an ``assign_timestamps``
chained behind them (with the Python ``map_batches``; docs/DESIGN.md "Event time per split")."""

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


@dataclass(frozen=True)
class LogicalNode:
    """One operator as the user declared it; frozen: the graph holds the
    current version of each node, a stream or sink handle holds its id, and
    a change (``name``, ``uid``, a schema checked, a loop closed) replaces
    the node in the graph (:meth:`LogicalGraph.update`).

    ``spec`` is the operator's spec as the DSL method built it: a native
    kind's is what the binding reads; a per-record Python stage
    (:class:`~eddyline._specs.RecordStageSpec`) is fused at build time and
    other Python code (:class:`~eddyline._specs.PythonPlanSpec`) gets its
    runner factory from the node's final name; a loop head's
    ``feedback_from`` is the logical id of the loop's feedback, set when the
    loop closes.

    ``side_outputs`` of a process function is the one dict its runner
    factory reads: ``stream.side_output(tag)`` adds its tags to that dict in
    place until the job is compiled (a replaced node keeps the same dict).
    """

    id: int
    op: str
    spec: OperatorSpec
    inputs: list[LogicalEdge]
    scope: StreamScope
    schema: pa.Schema | None = None
    keys: list[str] | None = None
    parallelism: int | None = None
    name: str | None = None
    uid: str | None = None
    time_column: str | None = None
    """The event-time column of the stream (set by the nearest upstream ``assign_timestamps``)."""
    window_end: str | None = None
    """The column holding the end of the window each row is the result of, on a
    window's output and the streams derived from it: their event time is that end
    minus 1 ms (docs/API.md "Chaining windows")."""
    side_outputs: dict[str, tuple[int, pa.Schema | None]] = field(default_factory=dict)
    """The node's side outputs: output tag name -> (output port, schema if known)."""
    serial: int = 0
    """Never reused within a graph, unlike ``id`` (the nodes of a loop whose
    function failed are removed and their ids given to the next nodes): a
    handle holds both and :meth:`LogicalGraph.node` checks they still match."""
    state_node: int | None = None
    """On a stateless node that presents the results of the stateful node before it
    (the projection ``group_by(F.window(...)).agg(...)`` puts after its window
    aggregate, to build the ``window`` struct): that node's id. ``uid()`` on this
    node's stream names that node, whose state it is (restores, ``read_state``)."""

    @property
    def kind(self) -> str:
        """The operator's kind (``"record"`` for a per-record Python stage)."""
        return self.spec.kind

    @property
    def display_name(self) -> str:
        """The user's name, or the default ``<op>_<id>``."""
        return self.name if self.name is not None else f"{self.op}_{self.id}"

    @property
    def is_sink(self) -> bool:
        """True for sink nodes."""
        return self.kind.startswith("sink_") or (
            isinstance(self.spec, PythonPlanSpec) and self.spec.is_sink
        )

    @property
    def input_keys(self) -> list[list[str]] | None:
        """A two-input keyed operator's key columns, per input (each input is
        hashed on its own)."""
        if isinstance(self.spec, JoinSpec):
            return [self.spec.left_keys, self.spec.right_keys]
        if isinstance(self.spec, PythonPlanSpec):
            return self.spec.input_keys
        return None


@dataclass
class _Group:
    members: list[int]


@dataclass
class CompiledGraph:
    """Node specs for the native layer plus the mapping from logical to physical ids."""

    nodes: list[NodeSpec]
    physical: dict[int, int]
    collects: list[tuple[int, int]]
    """The collect sinks compiled: (logical id, physical id) each."""


class LogicalGraph:
    """The nodes of one environment, in creation order."""

    def __init__(
        self,
        default_parallelism: Callable[[], int],
        batch_size: Callable[[], int] = lambda: 8192,
    ) -> None:
        self.nodes: list[LogicalNode] = []
        self._serials = 0
        self._removed: dict[int, str] = {}
        """Serial -> display name of the nodes :meth:`discard_from` removed."""
        self._default_parallelism = default_parallelism
        self._batch_size = batch_size

    def add(
        self,
        op: str,
        spec: OperatorSpec,
        inputs: Iterable[LogicalEdge],
        *,
        scope: StreamScope,
        schema: pa.Schema | None = None,
        keys: list[str] | None = None,
        time_column: str | None = None,
        window_end: str | None = None,
    ) -> LogicalNode:
        """Appends a node and returns it."""
        node = LogicalNode(
            id=len(self.nodes),
            op=op,
            spec=spec,
            inputs=list(inputs),
            scope=scope,
            schema=schema,
            keys=keys,
            time_column=time_column,
            window_end=window_end,
            serial=self._serials,
        )
        self._serials += 1
        self.nodes.append(node)
        return node

    def node(self, node_id: int, serial: int) -> LogicalNode:
        """The current version of the node a handle names.

        Raises:
            GraphError: If the node was removed with a loop whose function
                failed (another node may have its id now).
        """
        if node_id < len(self.nodes) and self.nodes[node_id].serial == serial:
            return self.nodes[node_id]
        name = self._removed.get(serial, f"node {node_id}")
        raise GraphError(
            f"operator '{name}' was built inside a loop whose loop function failed, so "
            f"it was removed from the plan; build it again on a stream outside that loop",
            operator=name,
        )

    @property
    def next_id(self) -> int:
        """The id the next node added gets (default names are ``<op>_<id>``)."""
        return len(self.nodes)

    def update(self, node_id: int, **changes: Any) -> LogicalNode:
        """Replaces node ``node_id`` by a copy with ``changes``; returns the copy."""
        node = replace(self.nodes[node_id], **changes)
        self.nodes[node_id] = node
        return node

    def update_spec(self, node_id: int, **changes: Any) -> LogicalNode:
        """Replaces fields of node ``node_id``'s spec (a source's inputs pinned
        before a run, a loop's feedback); returns the new node."""
        spec = replace(self.nodes[node_id].spec, **changes)  # type: ignore[type-var]
        return self.update(node_id, spec=spec)

    def close_loop(self, head: LogicalNode, feedback: LogicalNode) -> None:
        """Wires ``feedback`` back to the loop ``head`` (its loop function returned)."""
        self.update_spec(head.id, feedback_from=feedback.id)

    def discard_from(self, node: LogicalNode) -> None:
        """Removes ``node`` and every node added after it (a loop whose function failed)."""
        for gone in self.nodes[node.id :]:
            self._removed[gone.serial] = gone.display_name
        del self.nodes[node.id :]

    def discard_last(self, node: LogicalNode) -> None:
        """Removes ``node`` if it is the last one (after a failed build-time check)."""
        if self.nodes and self.nodes[-1].id == node.id:
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
            feedback = node.spec.feedback_from if isinstance(node.spec, LoopHeadSpec) else None
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
        self._warn_unchained_assigners(needed, view)
        consumers: dict[int, int] = dict.fromkeys(needed, 0)
        for nid in needed:
            node = view[nid]
            for edge in node.inputs:
                consumers[edge.node] += 1
            if isinstance(node.spec, LoopHeadSpec):
                feedback = node.spec.feedback_from
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
            if isinstance(view[nid].spec, SourceParquetSpec)
            and view[nid].spec.columns is None  # type: ignore[union-attr]
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
        collects: list[tuple[int, int]] = []
        for index, group in enumerate(groups):
            members = [view[m] for m in group.members]
            first = members[0]
            name = "+".join(member.display_name for member in members)
            parallelism = self.parallelism_of(members[-1])
            op = self._spec(name, members, group_of)
            if isinstance(op, PythonSpec) and hasattr(op.factory, "input_rows"):
                op.factory.input_rows = input_rows[first.id]
            if first.id in pushdown and isinstance(op, SourceParquetSpec):
                op = replace(op, columns=pushdown[first.id])
            declares = isinstance(first.spec, PythonPlanSpec) and first.spec.declares_side_outputs
            out.append(
                NodeSpec(
                    id=index,
                    name=name,
                    uid=_group_uid(members, name, uids),
                    parallelism=parallelism,
                    inputs=self._edges(first, parallelism, group_of),
                    scope=first.scope._loop_path(),
                    op=op,
                    # A window's late records, on port 1.
                    late_output=bool(first.side_outputs) and not declares,
                    # A process function's side outputs: one port each.
                    side_outputs=(
                        sorted(first.side_outputs.values(), key=lambda e: e[0]) if declares else []
                    ),
                )
            )
            if first.kind == "sink_collect":
                collects.append((first.id, index))
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

    def _warn_unchained_assigners(self, needed: list[int], view: dict[int, LogicalNode]) -> None:
        """Logs a warning for each ``assign_timestamps`` that reads a source through
        operators that would pass the source's progress on, but not in the source's
        task (a branch, another parallelism or scope on the way): it keeps one
        watermark per subtask, not per split (docs/DESIGN.md "Event time per split").
        A warning, not an error: such a job is valid (Flink's stream-level assigner)
        and exact where a subtask reads one split."""
        readers: dict[int, int] = dict.fromkeys(needed, 0)
        for nid in needed:
            for edge in view[nid].inputs:
                readers[edge.node] += 1
        for nid in needed:
            if view[nid].kind != "assign_timestamps":
                continue
            path = [view[nid]]
            while len(path[-1].inputs) == 1:
                edge = path[-1].inputs[0]
                if edge.port != 0 or edge.broadcast:
                    break
                path.append(view[edge.node])
                if not (path[-1].kind in PASSES_SOURCE_PROGRESS or path[-1].op == "map_batches"):
                    break
            source = path[-1]
            if source.inputs or source.kind == "record" or len(path) < 2:
                continue
            reason = self._chain_break(path, readers)
            if reason is not None:
                _log.warning(
                    "operator '%s' (assign_timestamps) does not run in the task of source "
                    "'%s' (%s): it keeps one watermark per subtask, not per split, so a "
                    "subtask's rows may be late by its other splits' progress; assign "
                    "timestamps right after the source, or behind operators in its task "
                    '(docs/DESIGN.md "Event time per split")',
                    path[0].display_name,
                    source.display_name,
                    reason,
                )

    def _chain_break(self, path: list[LogicalNode], readers: dict[int, int]) -> str | None:
        """Why ``path`` (an assigner, the operators above it, its source) is not one
        chain of the source's task, or ``None`` when it is."""
        source = path[-1]
        between = path[1:-1]
        for node in between + ([source] if between else []):
            if readers[node.id] > 1:
                return f"'{node.display_name}' is read by another operator too"
        parallelism = self.parallelism_of(source)
        for node in path[:-1]:
            if self.parallelism_of(node) != parallelism:
                return (
                    f"'{node.display_name}' runs at parallelism {self.parallelism_of(node)}, "
                    f"the source at {parallelism}"
                )
            if node.scope != source.scope:
                return f"'{node.display_name}' is in another loop scope"
        return None

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
            spec = node.spec
            if isinstance(spec, SourceArrowSpec):
                known = sum(batch.num_rows for batch in spec.batches)
            elif isinstance(spec, SourceSequenceSpec):
                known = spec.end - spec.start
            elif isinstance(spec, SourceParquetSpec):
                known = spec.num_rows
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
        input_keys = node.input_keys
        for edge in node.inputs:
            producer = self.nodes[edge.node]
            partition: Partition
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
            edges.append(EdgeSpec(group_of[edge.node], partition, keys, edge.input, edge.port))
        return edges

    def _spec(
        self, name: str, members: list[LogicalNode], group_of: dict[int, int]
    ) -> OperatorSpec:
        """The operator spec of one group: fused record stages, or a single node's
        spec (a Python node's with its runner factory, a loop head's with the
        physical id of its feedback)."""
        first, last = members[0], members[-1]
        spec = first.spec
        if isinstance(spec, RecordStageSpec):
            stages: list[Stage] = []
            for member in members:
                assert isinstance(member.spec, RecordStageSpec)
                stages.append((member.spec.stage, member.spec.fn, member.display_name))
            factory = record_chain_factory(name, stages, last.schema, self._batch_size())
            return PythonSpec(factory, last.schema, keys=None, is_sink=False)
        if isinstance(spec, PythonPlanSpec):
            return PythonSpec(
                spec.make_factory(name),
                spec.output_schema,
                keys=list(first.keys) if first.keys else None,
                is_sink=spec.is_sink,
                input_keys=[list(k) for k in spec.input_keys] if spec.input_keys else None,
            )
        if isinstance(spec, LoopHeadSpec):
            feedback = spec.feedback_from
            return replace(
                spec, feedback_from=group_of.get(feedback) if feedback is not None else None
            )
        return spec

    def _columns_read(self, nid: int, readers: dict[int, list[int]]) -> list[str] | None:
        """The columns of ``nid``'s output that its readers use, in its schema's order,
        when every path from it is filters and timestamp assigners (which read
        their time column and pass every column on) ending in a ``select`` (each
        naming the columns its expressions read); ``None`` when some reader may
        use any column (another operator, a sink, a loop) or nothing is known."""
        schema = self.nodes[nid].schema
        if schema is None or not readers[nid]:
            return None
        used: set[str] = set()
        for reader in readers[nid]:
            node = self.nodes[reader]
            if node.side_outputs:
                return None
            if isinstance(node.spec, FilterSpec | AssignTimestampsSpec):
                below = self._columns_read(reader, readers)
                if below is None:
                    return None
                used.update(below)
            elif not isinstance(node.spec, SelectSpec):
                return None
            if isinstance(node.spec, AssignTimestampsSpec):
                used.add(node.spec.column)
            else:
                used.update(node.spec.reads)
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
