"""Broadcast state in the generator: a temporal join written as a keyed
broadcast process function (``stage:tjoin:broadcast``).

The versions source is broadcast (``keyed.connect(versions.broadcast())``):
every subtask keeps every key's versions in the broadcast state. A main row
waits in keyed list state for an event-time timer at its own time; when the
watermark passes it, every version at or before that time has come (the
versions source has no late rows, one split without jitter: generate.py), so
the timer joins the row with its key's newest version then, as
``temporal_join`` does, and the reference is the temporal join's
(reference.py). Restores at another parallelism hand every subtask the
broadcast state and each key's rows and timers.

Drawn after every older draw (generate.py).
"""

from __future__ import annotations

import random

from .case import Case

CLASSES = '''

class BroadcastTemporal(ed.KeyedBroadcastProcessFunction):
    """The newest version of a row's key at or before its time, from broadcast state."""

    def __init__(self, how):
        self.how = how

    def process_broadcast_element(self, row, ctx):
        versions = ctx.broadcast_state.get(row["k"]) or []
        ctx.broadcast_state.put(row["k"], versions + [[row["ts"], row["id"], row["v"]]])

    def process_element(self, row, ctx):
        ctx.get_list_state("rows").add([row["id"], row["ts"], row["v"]])
        ctx.timer_service.register_event_time_timer(row["ts"])

    def on_timer(self, timestamp, ctx):
        rows = ctx.get_list_state("rows")
        waiting = rows.get()
        rows.update([r for r in waiting if r[1] > timestamp])
        versions = ctx.broadcast_state.get(ctx.key) or []
        out = []
        for row_id, ts, v in (r for r in waiting if r[1] <= timestamp):
            best = max((x for x in versions if x[0] <= ts), default=None)
            if best is None and self.how == "inner":
                continue
            right = best or [None, None, None]
            out.append({
                "id": row_id, "k": ctx.key, "ts": ts, "v": v,
                "id_right": right[1], "ts_right": right[0], "v_right": right[2],
            })
        return out


TJOIN_SCHEMA = pa.schema(
    [(c, pa.int64()) for c in ("id", "k", "ts", "v", "id_right", "ts_right", "v_right")]
)
'''
"""The job script's function (render.py appends it)."""


def widen(rng: random.Random, case: Case) -> None:
    pick = rng.random()
    if case.stage.kind == "tjoin" and pick < 0.4:
        case.stage.spelling = "broadcast"


def stage_lines(case: Case) -> list[str]:
    st = case.stage
    return [
        f'    out = main.key_by("k").connect({st.right}.broadcast())'
        f'.process(BroadcastTemporal("{st.how}"), schema=TJOIN_SCHEMA)'
        '.name("tjoin").uid("tjoin")'
    ]
