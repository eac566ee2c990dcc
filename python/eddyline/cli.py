"""``eddyline.cli``: the entry point of installs made before the client moved.

The command line lives in :mod:`eddyline.client.cli` (the ``eddyline``
console script and ``python -m eddyline`` run it); this module re-exports
:func:`main`.
"""

from __future__ import annotations

from .client.cli import main

__all__ = ["main"]

if __name__ == "__main__":  # ``python -m eddyline.cli``, as before the move
    import sys

    sys.exit(main())
