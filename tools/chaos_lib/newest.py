"""The ``fn`` stage's templates drawn after every older draw (generate.py),
by name: Spark's ``floor(a / b)`` of integers (floordiv.py), ``nanvl``
(nanvl.py)."""

from __future__ import annotations

from . import floordiv, nanvl
from .fnlib import Template

TEMPLATES: dict[str, Template] = {
    floordiv.NAME: floordiv.TEMPLATE,
    nanvl.NAME: nanvl.TEMPLATE,
}
