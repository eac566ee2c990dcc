"""``codegen.pylist``: the per-record loops' column conversion gives exactly what
``to_pylist`` gives (numpy's ``tolist`` for integer and float columns)."""

from __future__ import annotations

import datetime

import numpy as np
import pyarrow as pa
import pytest

from eddyline._exec.codegen import pylist

COLUMNS = [
    pa.array([0, -1, 2**62, -(2**63)], pa.int64()),
    pa.array([0, 2**64 - 1], pa.uint64()),
    pa.array([-128, 127], pa.int8()),
    pa.array([1, 2, None], pa.int32()),
    pa.array([0.5, float("nan"), -0.0, float("inf")], pa.float64()),
    pa.array([0.1, 3.25], pa.float32()),
    pa.array(np.array([0.5, 1.5], dtype=np.float16), pa.float16()),
    pa.array([1.5, None]),
    pa.array([True, False, None]),
    pa.array(["a", None, "b"]),
    pa.array([datetime.datetime(2026, 1, 1, 12)], pa.timestamp("ms")),
    pa.array([[1, 2], []]),
    pa.array([1, 2, 3, 4], pa.int64()).slice(1, 2),
]


@pytest.mark.parametrize("column", COLUMNS, ids=lambda c: str(c.type))
def test_pylist_is_to_pylist(column: pa.Array) -> None:
    got, want = pylist(column), column.to_pylist()
    assert [type(v) for v in got] == [type(v) for v in want]
    assert [repr(v) for v in got] == [repr(v) for v in want]  # nan and -0.0 included
