"""Processing-time timers in the generator: a process function's sums kept
in two steps (``stage:process:ptimers``, ``stage:coprocess:ptimers``).

The keyed ``ProcessFunction`` (and ``CoProcessFunction``) of the ``process``
stage adds each row's amount to a map state ``pending_left`` (``pending_right``)
instead of its window's sum, and registers a processing-time timer ``b`` ms
after the key's first pending row (``current_processing_time() + b``). When
that timer fires, whenever that is, it moves the key's pending amounts into
the sums (``left``/``right``); the event-time timer of a window moves them
too before it emits. So the output is the ``process`` stage's whatever the
processing-time timers did: fired early, late, after a restore (a timer
whose time passed while the job was down fires after the restore, docs/API.md
"Keyed state and timers"), or never (pending ones do not fire at the end of a
bounded input). A timer that fired under another key's state, lost its key's
pending amounts or moved them twice changes a window's sum. Each key counts
its processing-time firings in a value state ``flushes`` (not checked: how
many fire depends on timing; tests/chaos/test_chaos_ptimers.py reads it to
see that they fired).

Drawn after every older draw (generate.py), so earlier seeds keep their cases.
"""

from __future__ import annotations

import random

from .case import Case

CLASSES = '''

class Flushed:
    """Pending amounts moved into the sums by processing-time timers (ptimers.py)."""

    def __init__(self, size, delay):
        super().__init__(size)
        self.delay = delay

    def add(self, row, ctx, state, amount):
        start = row["ts"] - row["ts"] % self.size
        pending = ctx.get_map_state("pending_" + state)
        if not list(pending.keys()):
            now = ctx.timer_service.current_processing_time()
            ctx.timer_service.register_processing_time_timer(now + self.delay)
        pending.put(start, pending.get(start, 0) + amount)
        ctx.get_list_state("times").add(row["ts"])
        ctx.timer_service.register_event_time_timer(start + self.size - 1)

    def flush(self, ctx):
        for state in ("left", "right"):
            pending = ctx.get_map_state("pending_" + state)
            moved = list(pending.items())
            if moved:
                sums = ctx.get_map_state(state)
                for start, amount in moved:
                    sums.put(start, sums.get(start, 0) + amount)
                pending.clear()

    def on_timer(self, timestamp, ctx):
        self.flush(ctx)
        if ctx.time_domain == "processing_time":
            flushes = ctx.get_state("flushes")
            flushes.update((flushes.value() or 0) + 1)
            return []
        return super().on_timer(timestamp, ctx)


class FlushedSums(Flushed, WindowSums):
    """WindowSums with processing-time timers."""


class CoFlushedSums(Flushed, CoWindowSums):
    """CoWindowSums with processing-time timers."""
'''
"""The job script's functions (render.py appends them)."""


def widen(rng: random.Random, case: Case) -> None:
    """Half the process and coprocess stages, with a delay of 0, 5 or 50 ms."""
    st = case.stage
    pick = rng.random()
    if st.kind in ("process", "coprocess") and pick < 0.5:
        st.spelling = "ptimers"
        st.b = rng.choice([0, 5, 50])


def function(case: Case) -> str:
    """The process function's constructor call (render.py)."""
    st = case.stage
    name = "WindowSums" if st.kind == "process" else "CoWindowSums"
    if st.spelling == "ptimers":
        return f"{name.replace('Window', 'Flushed')}({st.size_ms}, {st.b})"
    return f"{name}({st.size_ms})"
