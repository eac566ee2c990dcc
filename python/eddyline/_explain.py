"""The text of ``DataStream.explain()`` and ``StreamEnvironment.explain()``.

The plan printed is the one a fresh run executes: the node specs
:meth:`~eddyline._graph.LogicalGraph.compile` builds (per-record Python stages
fused, ``assign_timestamps`` moved right after its source, docs/DESIGN.md
"Event time per split") and the chains the core makes of them
(``Plan::new`` in ``core/src/runtime/plan.rs``, reached through
``eddyline._core.plan_graph``: the chaining rule lives in one place). A
restore that holds channel state may keep a node out of its chain
(docs/DESIGN.md "Unaligned checkpoints"); the plan shows the fresh run's
chains.

One task per chain, in the order the tasks are built; under it, one entry
per node::

    [id] kind 'name'  uid 'uid'
        input: [id] partitioning        one line per input
        in loop 'head'                  the loop it is in (innermost first)
        side output 'tag': port n       the ports other streams read
        event time: column              where known before running
        schema: name: type, ...         where known before running
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from ._graph import LogicalGraph, LogicalNode, native
from ._specs import EdgeSpec, LoopHeadSpec, NodeSpec

__all__ = ["PlanText", "explain"]


class PlanText(str):
    """A plan as text; shown as the plan itself (not a quoted string) in a
    REPL or notebook, so ``stream.explain()`` reads as Spark's ``df.explain()``
    prints."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def explain(
    graph: LogicalGraph, targets: Iterable[int], max_parallelism: int, *, complete: bool
) -> PlanText:
    """The plan of the nodes leading to ``targets``, as text; with ``complete``
    (a whole job) every loop must be closed.

    Raises:
        GraphError: If a loop is still being built, or the graph is invalid.
        SchemaError: If a node's input does not fit it.
        ScopeError: If streams of different loop scopes meet.
    """
    compiled = graph.compile(targets, complete=complete)
    chains, uids, schemas = native().plan_graph(compiled.nodes, max_parallelism)
    members: dict[int, list[LogicalNode]] = {}
    for logical, physical in sorted(compiled.physical.items()):
        members.setdefault(physical, []).append(graph.nodes[logical])
    specs = compiled.nodes
    lines = [
        f"eddyline plan: {len(chains)} task{'s' if len(chains) != 1 else ''}, "
        f"{len(specs)} operator{'s' if len(specs) != 1 else ''}"
    ]
    for index, chain in enumerate(chains):
        head = specs[chain[0]]
        lines.append(f"task {index} (parallelism {head.parallelism}):")
        for nid in chain:
            lines.extend(
                "  " + line for line in _node_lines(specs, nid, uids[nid], schemas[nid], members)
            )
    return PlanText("\n".join(lines))


def _node_lines(
    specs: list[NodeSpec],
    nid: int,
    uid: str,
    schema: pa.Schema | None,
    members: dict[int, list[LogicalNode]],
) -> list[str]:
    """The entry of one node: its title line and its indented details."""
    spec = specs[nid]
    group = members[nid]
    kind: str = spec.kind
    if kind == "python" and len(group) == 1 and group[0].op != kind:
        kind = f"python {group[0].op}"
    generated = "" if spec.uid is not None else " (generated)"
    lines = [f"[{nid}] {kind} '{spec.name}'  uid '{uid}'{generated}"]
    details: list[str] = []
    if len(group) > 1:
        stages = ", ".join(f"{m.op} '{m.display_name}'" for m in group)
        details.append(f"fused: {stages}")
    if spec.scope:
        # Loops by their heads' names: loop ids are numbered per process, not per job.
        heads = {s.op.loop: s.name for s in specs if isinstance(s.op, LoopHeadSpec)}
        loops = " in ".join(f"'{heads[loop]}'" for loop in reversed(spec.scope))
        details.append(f"in loop {loops}")
    if isinstance(spec.op, LoopHeadSpec):
        feedback = spec.op.feedback_from
        details.append(f"feedback: from [{feedback}]" if feedback is not None else "feedback: -")
    numbered = any(edge.input for edge in spec.inputs)
    for edge in spec.inputs:
        label = f"input {edge.input}" if numbered else "input"
        details.append(f"{label}: {_edge_text(specs, edge, members)}")
    for tag, (port, _) in sorted(group[0].side_outputs.items(), key=lambda e: e[1][0]):
        details.append(f"side output '{tag}': port {port}")
    last = group[-1]
    # A window's results carry event time (window_end - 1 ms); its late records,
    # read on a side port, do not hold that column.
    reads_side_port = bool(group[0].inputs) and all(edge.port for edge in group[0].inputs)
    if last.is_sink:
        pass
    elif last.time_column is not None:
        details.append(f"event time: {last.time_column}")
    elif last.window_end is not None and not reads_side_port:
        details.append(f"event time: {last.window_end} - 1 ms")
    if schema is not None:
        columns = ", ".join(f"{field.name}: {field.type}" for field in schema)
        details.append(f"schema: {columns}")
    elif not last.is_sink:
        details.append("schema: known at run time")
    return lines + ["    " + line for line in details]


def _edge_text(specs: list[NodeSpec], edge: EdgeSpec, members: dict[int, list[LogicalNode]]) -> str:
    """``[id] partitioning``, with the producer's port when it is not the main output."""
    partition: str = edge.partition
    if partition == "hash":
        partition = f"hash({', '.join(edge.keys)})"
    text = f"[{edge.node}] {partition}"
    port = edge.port
    if port:
        producer = members[edge.node][0]
        tags = [tag for tag, (p, _) in producer.side_outputs.items() if p == port]
        if tags:
            text += f", side output '{tags[0]}'"
        elif specs[edge.node].kind == "loop_head":
            text += ", feedback"
        else:
            text += f", port {port}"
    return text
