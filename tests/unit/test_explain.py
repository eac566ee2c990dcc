"""``DataStream.explain()`` / ``StreamEnvironment.explain()``: the plan as the job runs it.

Each test builds a pipeline and compares the whole text: the chains (one task
each, as core's ``Plan::new`` makes them), the partitioning of every input, the
parallelism, side outputs, event time and schemas. One test runs a job and checks
that the operators the plan puts in one task really share a thread.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

import pyarrow as pa
import pytest

import eddyline as ed

ROWS = [{"k": "a", "v": 1, "ts": 1_000}, {"k": "b", "v": 2, "ts": 2_000}]


def tasks_of(plan: str) -> dict[str, int]:
    """Operator name -> the task that runs it, read from the plan's text."""
    tasks: dict[str, int] = {}
    task = -1
    for line in plan.splitlines():
        if m := re.match(r"task (\d+) \(parallelism \d+\):$", line):
            task = int(m.group(1))
        elif m := re.match(r"  \[\d+\] [a-z_ ]+ '([^']+)'", line):
            tasks[m.group(1)] = task
    return tasks


def test_explain_moves_the_assigner_into_a_source_with_a_second_consumer() -> None:
    # docs/DESIGN.md "Event time per split": the assigner runs chained right after
    # its source, and the source's other reader reads the assigner's output.
    env = ed.StreamEnvironment(parallelism=2)
    source = env.from_collection(ROWS)
    raw = source.select("k", "v").name("raw")
    timed = source.assign_timestamps("ts").name("timed")
    raw.collect().name("raw_out")
    timed.collect().name("timed_out")
    assert env.explain() == "\n".join(
        [
            "eddyline plan: 3 tasks, 5 operators",
            "task 0 (parallelism 2):",
            "  [0] source_arrow 'from_collection_0'  uid 'source_arrow-0' (generated)",
            "      schema: k: string, v: int64, ts: int64",
            "  [1] assign_timestamps 'timed'  uid 'assign_timestamps-1' (generated)",
            "      input: [0] forward",
            "      event time: ts",
            "      schema: k: string, v: int64, ts: int64",
            "task 1 (parallelism 2):",
            "  [2] select 'raw'  uid 'select-2' (generated)",
            "      input: [1] forward",
            "      schema: k: string, v: int64",
            "  [3] sink_collect 'raw_out'  uid 'sink_collect-3' (generated)",
            "      input: [2] forward",
            "task 2 (parallelism 2):",
            "  [4] sink_collect 'timed_out'  uid 'sink_collect-4' (generated)",
            "      input: [1] forward",
        ]
    )
    # One stream's plan holds only what leads to it: here the source is read once,
    # so nothing moves and the select is chained to the source.
    assert tasks_of(raw.explain()) == {"from_collection_0": 0, "raw": 0}


def test_explain_key_by_window_hashes_on_the_key_and_declares_the_late_output() -> None:
    env = ed.StreamEnvironment(parallelism=2)
    late = ed.OutputTag("late")
    sums = (
        env.from_collection(ROWS)
        .assign_timestamps("ts")
        .key_by("k")
        .window(ed.Tumbling("1s"), late_output=late)
        .sum("v")
        .uid("sums")
        .set_parallelism(3)
    )
    sums.side_output(late).collect()
    assert sums.explain() == "\n".join(
        [
            "eddyline plan: 2 tasks, 3 operators",
            "task 0 (parallelism 2):",
            "  [0] source_arrow 'from_collection_0'  uid 'source_arrow-0' (generated)",
            "      schema: k: string, v: int64, ts: int64",
            "  [1] assign_timestamps 'assign_timestamps_1'  uid 'assign_timestamps-1' (generated)",
            "      input: [0] forward",
            "      event time: ts",
            "      schema: k: string, v: int64, ts: int64",
            "task 1 (parallelism 3):",
            "  [2] window 'window_sum_2'  uid 'sums'",
            "      input: [1] hash(k)",
            "      side output 'late': port 1",
            "      event time: window_end - 1 ms",
            "      schema: k: string, window_start: int64, window_end: int64, v: int64",
        ]
    )
    # The environment's plan adds the late records' sink.
    assert env.explain().endswith(
        "task 2 (parallelism 2):\n"
        "  [3] sink_collect 'collect_3'  uid 'sink_collect-3' (generated)\n"
        "      input: [2] rebalance, side output 'late'"
    )


def test_explain_join_hashes_each_input_on_its_own_keys() -> None:
    env = ed.StreamEnvironment(parallelism=2)
    orders = env.from_collection([{"user": "a", "amount": 3}]).name("orders")
    users = env.from_collection([{"id": "a", "city": "x"}]).name("users").set_parallelism(1)
    joined = orders.join(users, left_on="user", right_on="id").name("enrich")
    joined.collect().name("out")
    assert env.explain() == "\n".join(
        [
            "eddyline plan: 3 tasks, 4 operators",
            "task 0 (parallelism 2):",
            "  [0] source_arrow 'orders'  uid 'source_arrow-0' (generated)",
            "      schema: user: string, amount: int64",
            "task 1 (parallelism 1):",
            "  [1] source_arrow 'users'  uid 'source_arrow-1' (generated)",
            "      schema: id: string, city: string",
            "task 2 (parallelism 2):",
            "  [2] join 'enrich'  uid 'join-2' (generated)",
            "      input 0: [0] hash(user)",
            "      input 1: [1] hash(id)",
            "      schema: user: string, amount: int64, city: string",
            "  [3] sink_collect 'out'  uid 'sink_collect-3' (generated)",
            "      input: [2] forward",
        ]
    )


def test_explain_shows_a_run_of_python_maps_fused_into_one_operator() -> None:
    env = ed.StreamEnvironment(parallelism=2)
    out = (
        env.from_sequence(0, 10)
        .map(lambda r: {"value": r["value"] + 1})
        .name("inc")
        .filter(lambda r: r["value"] % 2 == 0)
        .name("even")
        .map(lambda r: r, schema=pa.schema([("value", pa.int64())]))
        .name("same")
    )
    rebalanced = out.map_batches(lambda b: b).name("wide").set_parallelism(3)
    rebalanced.collect().name("out")
    assert env.explain() == "\n".join(
        [
            "eddyline plan: 3 tasks, 4 operators",
            "task 0 (parallelism 2):",
            "  [0] source_sequence 'from_sequence_0'  uid 'source_sequence-0' (generated)",
            "      schema: value: int64",
            "  [1] python 'inc+even+same'  uid 'python-1' (generated)",
            "      fused: map 'inc', filter 'even', map 'same'",
            "      input: [0] forward",
            "      schema: value: int64",
            "task 1 (parallelism 3):",
            "  [2] python map_batches 'wide'  uid 'python-2' (generated)",
            "      input: [1] rebalance",
            "      schema: known at run time",
            "task 2 (parallelism 2):",
            "  [3] sink_collect 'out'  uid 'sink_collect-3' (generated)",
            "      input: [2] rebalance",
        ]
    )


def countdown(stream: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
    dec = stream.with_columns(value=ed.col("value") - 1).name("dec")
    return dec.filter(ed.col("value") > 0).name("again"), dec.filter(ed.col("value") <= 0).name(
        "done"
    )


def test_explain_loop_shows_its_scope_the_feedback_and_the_chain_break_at_the_tail() -> None:
    env = ed.StreamEnvironment(parallelism=2)
    env.from_sequence(0, 10).iterate(countdown).collect().name("out")
    assert env.explain() == "\n".join(
        [
            "eddyline plan: 5 tasks, 7 operators",
            "task 0 (parallelism 2):",
            "  [0] source_sequence 'from_sequence_0'  uid 'source_sequence-0' (generated)",
            "      schema: value: int64",
            "task 1 (parallelism 2):",
            "  [1] loop_head 'iterate_1'  uid 'loop_head-1' (generated)",
            "      in loop 'iterate_1'",
            "      feedback: from [3]",
            "      input: [0] forward",
            "      schema: value: int64",
            "  [2] with_columns 'dec'  uid 'with_columns-2' (generated)",
            "      in loop 'iterate_1'",
            "      input: [1] forward",
            "      schema: value: int64",
            "task 2 (parallelism 2):",
            "  [3] filter 'again'  uid 'filter-3' (generated)",
            "      in loop 'iterate_1'",
            "      input: [2] forward",
            "      schema: value: int64",
            "task 3 (parallelism 2):",
            "  [4] filter 'done'  uid 'filter-4' (generated)",
            "      in loop 'iterate_1'",
            "      input: [2] forward",
            "      schema: value: int64",
            "task 4 (parallelism 2):",
            "  [5] loop_exit 'loop_output_5'  uid 'loop_exit-5' (generated)",
            "      input: [4] forward",
            "      schema: value: int64",
            "  [6] sink_collect 'out'  uid 'sink_collect-6' (generated)",
            "      input: [5] forward",
        ]
    )


def test_explain_broadcast_input_and_process_side_outputs() -> None:
    class Route(ed.BroadcastProcessFunction):
        def process_element(self, row, ctx):  # type: ignore[no-untyped-def]
            yield row

        def process_broadcast_element(self, row, ctx):  # type: ignore[no-untyped-def]
            ctx.broadcast_state.put(row["r"], True)

    class Odd(ed.ProcessFunction):
        def process_element(self, row, ctx):  # type: ignore[no-untyped-def]
            ctx.output(ed.OutputTag("odd"), row)
            yield row

    env = ed.StreamEnvironment(parallelism=2)
    rules = env.from_collection([{"r": 1}]).name("rules").set_parallelism(1)
    routed = env.from_collection(ROWS).connect(rules.broadcast()).process(Route()).name("route")
    odd = routed.key_by("k").process(Odd()).name("odd_rows")
    odd.side_output(ed.OutputTag("odd")).collect().name("odd_out")
    plan = odd.side_output(ed.OutputTag("odd")).explain()
    assert "  [2] python broadcast_process 'route'  uid 'python-2' (generated)\n" in plan
    assert "      input 0: [1] forward\n      input 1: [0] broadcast\n" in plan
    assert (
        "  [3] python process 'odd_rows'  uid 'python-3' (generated)\n"
        "      input: [2] hash(k)\n"
        "      side output 'odd': port 1\n"
    ) in plan
    assert tasks_of(env.explain()) == {
        "rules": 0,
        "from_collection_1": 1,
        "route": 2,
        "odd_rows": 3,
        "odd_out": 4,
    }
    assert env.explain().endswith(
        "  [4] sink_collect 'odd_out'  uid 'sink_collect-4' (generated)\n"
        "      input: [3] forward, side output 'odd'"
    )


def test_explained_chains_are_the_threads_the_job_runs() -> None:
    seen: dict[str, set[int]] = {}
    lock = threading.Lock()

    def record(name: str) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
        def fn(batch: pa.RecordBatch) -> pa.RecordBatch:
            with lock:
                seen.setdefault(name, set()).add(threading.get_ident())
            return batch

        return fn

    env = ed.StreamEnvironment(parallelism=1, batch_size=10)
    schema = pa.schema([pa.field("value", pa.int64(), nullable=False)])
    first = env.from_sequence(0, 100).map_batches(record("a"), schema=schema).name("a")
    second = first.map_batches(record("b"), schema=schema).name("b")
    third = second.map_batches(record("c"), schema=schema).name("c").set_parallelism(2)
    third.collect().name("out")
    tasks = tasks_of(env.explain())
    assert tasks == {"from_sequence_0": 0, "a": 0, "b": 0, "c": 1, "out": 2}
    env.execute("threads")
    # Chained operators share their task's thread; another task runs elsewhere.
    assert len(seen["a"]) == 1 and seen["a"] == seen["b"]
    assert len(seen["c"]) == 2 and seen["c"].isdisjoint(seen["a"])


def test_explain_shows_the_users_uid_and_displays_as_text() -> None:
    env = ed.StreamEnvironment()
    stream = env.from_sequence(0, 3).uid("numbers")
    plan = stream.explain()
    assert isinstance(plan, str)
    assert (
        repr(plan)
        == str(plan)
        == (
            "eddyline plan: 1 task, 1 operator\n"
            "task 0 (parallelism 1):\n"
            "  [0] source_sequence 'from_sequence_0'  uid 'numbers'\n"
            "      schema: value: int64"
        )
    )


def test_explain_without_a_sink_is_a_graph_error() -> None:
    env = ed.StreamEnvironment()
    env.from_sequence(0, 3)
    with pytest.raises(ed.GraphError, match="no sink to explain"):
        env.explain()


def test_explain_of_the_job_inside_a_loop_function_names_the_open_loop() -> None:
    env = ed.StreamEnvironment()
    env.from_sequence(0, 3).collect()

    def body(stream: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        stream.collect()  # a sink inside the loop: the job now reads the open loop
        with pytest.raises(ed.GraphError, match="loop 'iterate_3' is still being built") as info:
            env.explain()
        assert info.value.operator == "iterate_3"
        return countdown(stream)

    env.from_sequence(0, 3).iterate(body).collect()


def test_explain_inside_a_loop_function_shows_the_loop_so_far() -> None:
    env = ed.StreamEnvironment()
    plans: list[str] = []

    def body(stream: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        plans.append(stream.explain())
        return countdown(stream)

    env.from_sequence(0, 3).iterate(body).collect()
    assert plans == [
        "eddyline plan: 2 tasks, 2 operators\n"
        "task 0 (parallelism 1):\n"
        "  [0] source_sequence 'from_sequence_0'  uid 'source_sequence-0' (generated)\n"
        "      schema: value: int64\n"
        "task 1 (parallelism 1):\n"
        "  [1] loop_head 'iterate_1'  uid 'loop_head-1' (generated)\n"
        "      in loop 'iterate_1'\n"
        "      feedback: -\n"
        "      input: [0] forward\n"
        "      schema: value: int64"
    ]


def test_explain_reaches_no_storage() -> None:
    # An object store nobody listens on: execute would probe it before starting
    # (a StorageError); explain only plans.
    env = ed.StreamEnvironment(
        storage_options={
            "aws_endpoint_url": "http://127.0.0.1:9",
            "aws_access_key_id": "x",
            "aws_secret_access_key": "x",
            "aws_region": "us-east-1",
            "aws_allow_http": "true",
        }
    )
    env.from_sequence(0, 3).sink_to(ed.ParquetSink("s3://nowhere/out")).name("files")
    assert env.explain().endswith(
        "  [1] sink_parquet 'files'  uid 'sink_parquet-1' (generated)\n      input: [0] forward"
    )
    with pytest.raises(ed.StorageError, match="ParquetSink 'files'"):
        env.execute("probes")  # the probe explain skipped
