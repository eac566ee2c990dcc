"""``eddyline.functions``: re-exports the user-function base classes.

They live in :mod:`eddyline.process_functions`; this name is kept for the
Spark-style function library (``import eddyline.functions as F``), and
until then ``from eddyline.functions import ProcessFunction`` keeps working.
"""

from __future__ import annotations

from .process_functions import *  # noqa: F403  (the public names, listed once, there)
from .process_functions import __all__ as __all__
