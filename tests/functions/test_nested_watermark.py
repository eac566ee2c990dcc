"""``stream.with_watermark(col, delay)``, Spark's spelling of
``assign_timestamps(col, max_out_of_orderness=delay)``: the same windows,
fired and dropped alike."""

from __future__ import annotations

from typing import Any

import eddyline as ed


def _watermarked(spelling: str) -> list[dict[str, Any]]:
    rows = [{"k": i % 2, "t": (i * 700) % 9000 + i * 10, "v": i} for i in range(60)]
    # One subtask: at two, which rows are late depends on how the two
    # source subtasks' batches and watermarks interleave at the window.
    env = ed.StreamEnvironment(1, batch_size=7)
    source = env.from_collection(rows)
    timed = (
        source.with_watermark("t", "2 seconds")
        if spelling == "spark"
        else source.assign_timestamps("t", max_out_of_orderness="2s")
    )
    late = ed.OutputTag("late")
    windows = timed.key_by("k").window(ed.Tumbling("1s"), late_output=late).sum("v")
    out, dropped = windows.collect(), windows.side_output(late).collect()
    env.execute()
    key = lambda r: tuple(sorted(r.items()))  # noqa: E731
    return sorted(out.to_pylist(), key=key) + sorted(dropped.to_pylist(), key=key)


def test_with_watermark_equals_assign_timestamps() -> None:
    spark_spelling = _watermarked("spark")
    assert spark_spelling == _watermarked("flink")
    assert spark_spelling
