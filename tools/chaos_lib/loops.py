"""The bounded loop's other settings in the generator: its feedback spilled
to disk, the adaptive priority, and the two-input body of
``iterate_with_feedback``.

A loop op (``v + a`` fed back until ``v >= b``, render.py's ``LoopUntil``) may
get a ``variant`` (feature ``op:loop:<variant>``):

- ``spill``: ``feedback_memory="1KiB"``, so nearly all feedback is spilled to
  disk as Arrow IPC and read back, across checkpoints and restores;
- ``adaptive``: ``priority="adaptive"``: the loop input and the feedback take
  turns while the feedback is under its memory budget;
- ``co``: ``iterate_with_feedback``: the body gets the loop input and the
  feedback apart (a two-input ``map_batches`` that passes both through), with
  ``feedback_schema`` the stream's.

The loop computes the same rows whichever it is, so the reference is the
loop's (reference.py). Drawn after every older draw (generate.py).
"""

from __future__ import annotations

import random

from .case import Case, Op

VARIANTS = ("spill", "adaptive", "co")

CLASSES = '''

class Same:
    """A batch passed through (a two-input body's input or its feedback)."""

    def __call__(self, batch):
        return batch


class CoLoopUntil:
    """LoopUntil over iterate_with_feedback: the input and the feedback merged."""

    def __init__(self, a, b, tag):
        self.inner = LoopUntil(a, b, tag)
        self.tag = tag

    def __call__(self, connected):
        merged = connected.map_batches(Same(), Same(), schema=SCHEMA)
        return self.inner(merged.name(self.tag + "_merge").uid(self.tag + "_merge"))
'''
"""The job script's classes of the ``co`` variant (render.py appends them)."""


def widen(rng: random.Random, case: Case) -> None:
    for op in case.ops:
        pick = rng.random()
        if op.kind == "loop" and pick < 0.45:
            op.variant = rng.choice(VARIANTS)


def call(i: int, op: Op) -> str:
    """The loop's call on ``main`` (render.py's ``_op_line``)."""
    body = f'LoopUntil({op.a}, {op.b}, "op{i}")'
    if op.variant == "spill":
        return f'iterate({body}, feedback_memory="1KiB")'
    if op.variant == "adaptive":
        return f'iterate({body}, priority="adaptive")'
    if op.variant == "co":
        return f"iterate_with_feedback(Co{body}, feedback_schema=SCHEMA)"
    return f"iterate({body})"
