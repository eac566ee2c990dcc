"""``ed.read_state`` of a join (docs/read_state.md): the rows each side keeps,
with whether they matched, equal what the job itself emitted."""

from __future__ import annotations

import random
from pathlib import Path

import eddyline as ed

from .conftest import LEFT_SCHEMA, RIGHT_SCHEMA, as_right, events


def test_read_state_of_an_unbounded_join_shows_every_kept_row_and_its_match(
    tmp_path: Path,
) -> None:
    rng = random.Random(3)
    left = events(rng, 200, 30, 0)
    right = as_right(events(rng, 150, 60, 10_000))
    env = ed.StreamEnvironment(2, checkpoint=ed.CheckpointConfig(str(tmp_path / "chk")))
    ls = env.from_collection(left, schema=LEFT_SCHEMA)
    rs = env.from_collection(right, schema=RIGHT_SCHEMA)
    out = ls.join(rs, left_on="k", right_on="rk").uid("join").collect()
    result = env.execute("join-state")
    pairs = out.to_pylist()
    assert pairs, "the data must pair up"

    table = ed.read_state(result.checkpoints[-1].path, "join")
    assert table.column_names == ["k", "side", "left", "right", "time_ms", "matched"]
    rows = table.to_pylist()
    kept_left = {r["left"]["id"]: r for r in rows if r["side"] == "left"}
    kept_right = {r["right"]["rid"]: r for r in rows if r["side"] == "right"}
    # Without a time bound every row is kept, once, with its key.
    assert sorted(kept_left) == sorted(r["id"] for r in left)
    assert sorted(kept_right) == sorted(r["rid"] for r in right)
    assert all(r["k"] == r["left"]["k"] and r["right"] is None for r in kept_left.values())
    assert all(r["k"] == r["right"]["rk"] and r["left"] is None for r in kept_right.values())
    # matched is exactly "appears in the job's output".
    assert {i for i, r in kept_left.items() if r["matched"]} == {p["id"] for p in pairs}
    assert {i for i, r in kept_right.items() if r["matched"]} == {p["rid"] for p in pairs}
    only_left = ed.read_state(result.checkpoints[-1].path, "join", state="left")
    assert "right" not in only_left.column_names and only_left.num_rows == len(rows)
