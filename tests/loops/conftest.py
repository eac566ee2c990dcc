"""Loop suites: they need the native extension; a missing build fails, never skips."""

from __future__ import annotations

import eddyline._core  # noqa: F401
