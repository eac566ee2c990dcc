"""A smaller failing case: fewer rows, then fewer operators, then fewer
sources in the union, sinks, expressions of a function, aggregate or SQL
stage, and ``assign_timestamps`` for ``with_watermark``, keeping each step
that still fails. Each try is a full
run, so the number of tries is capped."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .case import Case


def _smaller(case: Case) -> list[Case]:
    out = []
    if any(s.rows > 40 for s in case.sources):
        out.append(
            dataclasses.replace(
                case,
                sources=[dataclasses.replace(s, rows=max(20, s.rows // 2)) for s in case.sources],
            )
        )
    for i in range(len(case.ops)):
        out.append(dataclasses.replace(case, ops=case.ops[:i] + case.ops[i + 1 :]))
    if case.union:
        keep = {case.main, case.stage.right}
        out.append(
            dataclasses.replace(case, union=[], sources=[s for s in case.sources if s.name in keep])
        )
    if len(case.sinks) > 1:
        out += [dataclasses.replace(case, sinks=[s]) for s in case.sinks]
    exprs = case.stage.exprs
    for i in range(len(exprs) if len(exprs) > 1 else 0):
        # one expression, aggregate, filter or WHERE fewer (functions, agg, SQL)
        stage = dataclasses.replace(case.stage, exprs=exprs[:i] + exprs[i + 1 :])
        out.append(dataclasses.replace(case, stage=stage))
    if any(s.watermark for s in case.sources):
        plain = [dataclasses.replace(s, watermark=False) for s in case.sources]
        out.append(dataclasses.replace(case, sources=plain))
    return out


def shrink(case: Case, fails: Callable[[Case], bool], *, tries: int = 8) -> Case:
    """The smallest case found (within ``tries`` runs) for which ``fails`` holds."""
    best, left = case, tries
    progress = True
    while progress and left > 0:
        progress = False
        for candidate in _smaller(best):
            if left <= 0:
                break
            left -= 1
            if fails(candidate):
                best, progress = candidate, True
                break
    return best
