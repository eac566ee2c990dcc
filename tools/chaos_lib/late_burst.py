"""Several late rows of one key arriving together before a session window
(``late_rows:session_burst``): each ``late_join`` candidate (late_session.py)
comes with one or two more of its key right after it in its split, a little
later in event time (``Source.late_burst``, data.py), so that they may join,
bridge and merge sessions together, one of them late and the next not.

The outcome follows the key group's watermark at each one's arrival, ``W1 <=
W2 <= ...`` in their arrival order (one split: the order of their ids). For
given watermarks it is exact (docs/API.md "Windows", the rule late_session.py
follows): at each arrival the open sessions with ``end - 1 <= W`` fire and
stay as they are; the row joins every open session it touches, or, touching
none, is late if its own ``[t, t + gap)`` is over, else opens its own. Only
the key's batch sessions within a gap of some candidate can be touched, so
the others stay their batch selves, and the watermarks matter only at those
sessions' and the candidates' last milliseconds: one value per stretch
between them gives every outcome. The run's late output says which
candidates were late; the key's sessions must be an outcome with exactly
those late.

Drawn after every older draw (generate.py), so earlier seeds keep their cases.
"""

from __future__ import annotations

import random

from .case import Case
from .late_session import Row, Session, joins, sessions_of

Outcome = list[Session]


def _touches(session: Session, t: int, gap: int) -> bool:
    start, end, _ = session
    return start < t + gap and t < end


def burst_outcomes(
    others: list[Row], candidates: list[Row], gap: int, one_watermark: bool = False
) -> dict[frozenset[int], list[Outcome]]:
    """Each distinct outcome of the key, by the set of candidates (their
    indices in arrival order) that were late in it. ``one_watermark``: every
    candidate at the first one's watermark (a wrong reference, for the tests:
    the watermark may move between them)."""
    base = sessions_of(others, gap)
    near = [s for s in base if any(_touches_reach(s, t, gap) for t, _ in candidates)]
    far = [s for s in base if s not in near]
    rows = [r for _, _, members in near for r in members]
    marks = sorted({ts + gap - 1 for ts, _ in [*rows, *candidates]})
    stretches = [marks[0] - 1, *marks]
    found: dict[frozenset[int], list[Outcome]] = {}
    seen: dict[tuple[object, ...], int] = {}

    def step(
        i: int, lowest: int, fired: list[Session], open_rows: list[Row], late: frozenset[int]
    ) -> None:
        if i == len(candidates):
            outcome = sorted([*far, *fired, *sessions_of(open_rows, gap)])
            if outcome not in found.setdefault(late, []):
                found[late].append(outcome)
            return
        last = lowest + 1 if one_watermark and i else len(stretches)
        for index in range(lowest, last):
            w = stretches[index]
            current = sessions_of(open_rows, gap)
            now_fired = [*fired, *(s for s in current if s[1] - 1 <= w)]
            rest = [r for s in current if s[1] - 1 > w for r in s[2]]
            t, v = candidates[i]
            touched = any(_touches(s, t, gap) for s in current if s[1] - 1 > w)
            if t + gap - 1 <= w and not touched:
                kept, now_late = rest, late | {i}
            else:
                kept, now_late = [*rest, (t, v)], late
            after = (i + 1, _frozen(now_fired), tuple(sorted(kept)), now_late)
            if seen.get(after, len(stretches)) <= index:
                continue  # reached before at a watermark no later: no new outcome
            seen[after] = index
            step(i + 1, index, now_fired, kept, now_late)

    step(0, 0, [], rows, frozenset())
    return found


def _frozen(sessions: list[Session]) -> tuple[tuple[int, int, tuple[Row, ...]], ...]:
    return tuple(sorted((s, e, tuple(m)) for s, e, m in sessions))


def _touches_reach(session: Session, t: int, gap: int) -> bool:
    """Whether a candidate at ``t`` may touch ``session`` (rows within a gap)."""
    return any(abs(ts - t) < gap for ts, _ in session[2])


def widen(rng: random.Random, case: Case) -> None:
    """Half the session windows whose late candidates share keys (the DSL's
    and ``fagg``'s) get bursts of two or three candidates a key, each after
    the first up to a gap later in event time."""
    if not joins(case) or rng.random() >= 0.5:
        return
    main = case.source(case.main)
    main.late_burst = rng.randint(2, 3)
    main.late_spread_ms = case.stage.gap_ms
