"""The logical job graph built by the DSL, and its translation to binding node dicts.

Every DSL call appends one :class:`LogicalNode`. At build time
(:meth:`LogicalGraph.compile`) the nodes that lead to the requested targets
are translated into the node dicts ``eddyline._core`` consumes; consecutive
per-record Python stages with the same parallelism are fused into one
``python`` node there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ._exec.codegen import Stage
from ._exec.factory import RunnerFactory
from ._exec.records import RecordChainRunner
from .errors import GraphError
from .scope import StreamScope

if TYPE_CHECKING:
    from .sinks import CollectHandle

__all__ = ["LogicalEdge", "LogicalGraph", "LogicalNode", "native"]

NodeDict = dict[str, Any]


def native() -> Any:
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


@dataclass
class LogicalNode:
    """One operator as the user declared it.

    ``kind`` is a binding node kind, or ``"record"`` for a per-record Python
    stage (fused at build time). For ``python`` nodes ``params["make_factory"]``
    builds the runner factory from the node's final name.
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
    """Binding node dicts plus the mapping from logical to physical ids."""

    nodes: list[NodeDict]
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
        """Translates the nodes leading to ``targets`` into binding node dicts.

        With ``complete`` (a graph about to run) every loop must be closed.

        Raises:
            GraphError: If two operators share a uid, or a loop has no feedback.
        """
        needed = self._ancestors(targets)
        consumers: dict[int, int] = dict.fromkeys(needed, 0)
        for nid in needed:
            node = self.nodes[nid]
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

        groups: list[_Group] = []
        group_of: dict[int, int] = {}
        for nid in needed:
            node = self.nodes[nid]
            if node.kind == "record":
                upstream = self.nodes[node.inputs[0].node]
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

        uids: dict[str, str] = {}
        out: list[NodeDict] = []
        collects: list[tuple[CollectHandle, int]] = []
        for index, group in enumerate(groups):
            members = [self.nodes[m] for m in group.members]
            first, last = members[0], members[-1]
            parallelism = self.parallelism_of(last)
            inputs = []
            for edge in first.inputs:
                producer = self.nodes[edge.node]
                if first.keys:
                    partition, keys = "hash", list(first.keys)
                elif self.parallelism_of(producer) == parallelism:
                    partition, keys = "forward", []
                else:
                    partition, keys = "rebalance", []
                inputs.append(
                    {
                        "node": group_of[edge.node],
                        "partition": partition,
                        "keys": keys,
                        "input": edge.input,
                        "port": edge.port,
                    }
                )
            name = "+".join(member.display_name for member in members)
            member_uids = [member.uid for member in members]
            uid = None
            if any(u is not None for u in member_uids):
                uid = "+".join(
                    u if u is not None else m.display_name
                    for u, m in zip(member_uids, members, strict=True)
                )
                if uid in uids:
                    raise GraphError(
                        f"operators '{uids[uid]}' and '{name}' have the same uid {uid!r}; "
                        "uids must be unique within a job",
                        operator=name,
                    )
                uids[uid] = name
            common: NodeDict = {
                "id": index,
                "kind": first.kind,
                "name": name,
                "uid": uid,
                "parallelism": parallelism,
                "inputs": inputs,
                "scope": first.scope._loop_path(),
            }
            if first.kind == "record":
                stages: list[Stage] = []
                for member in members:
                    assert member.stage is not None
                    kind, fn = member.stage
                    stages.append((kind, fn, member.display_name))  # type: ignore[arg-type]
                common["kind"] = "python"
                common["factory"] = RunnerFactory(
                    RecordChainRunner, name, stages, last.schema, self._batch_size()
                )
                common["output_schema"] = last.schema
                common["num_inputs"] = 1
                common["keys"] = None
            elif first.kind == "python":
                make_factory = first.params["make_factory"]
                common["factory"] = make_factory(name)
                common["output_schema"] = first.params.get("output_schema")
                common["num_inputs"] = first.params.get("num_inputs", 1)
                common["keys"] = list(first.keys) if first.keys else None
            elif first.kind == "loop_head":
                feedback = first.params.get("feedback_node")
                common["loop"] = first.scope.loop_id
                common["feedback_from"] = group_of.get(feedback) if feedback is not None else None
                common["feedback_memory"] = first.params["feedback_memory"]
                common["priority"] = first.params["priority"]
                common["co"] = first.params["co"]
                common["spill_dir"] = first.params.get("spill_dir")
                common["feedback_schema"] = first.params.get("feedback_schema")
            else:
                common.update(first.params)
                if first.kind == "keyed_agg":
                    common["keys"] = list(first.keys or [])
            if first.side_outputs:
                # Only windows have a side output: their late records, on port 1.
                common["late_output"] = True
            if first.collect is not None:
                collects.append((first.collect, index))
            out.append(common)
        return CompiledGraph(
            nodes=out,
            physical={nid: group_of[nid] for nid in needed},
            collects=collects,
        )

    def output_schema(self, node: LogicalNode, max_parallelism: int) -> pa.Schema | None:
        """Builds the graph up to ``node`` in the native layer and returns its schema.

        Raises whatever the native graph validation raises (``GraphError``,
        ``SchemaError``, ``ScopeError``), naming the operator.
        """
        compiled = self.compile([node.id])
        schemas = native().build_graph(compiled.nodes, max_parallelism)
        schema: pa.Schema | None = schemas[compiled.physical[node.id]]
        return schema
