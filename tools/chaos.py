"""The randomized differential tester: random pipelines under random faults and
rescales, checked exactly against a batch reference (docs/CHAOS.md).

    python tools/chaos.py --cases N [--seed S] [--minutes M]

Its last line is one JSON object (``cases``, ``mismatches``, ``seed``,
``seconds``, the mix of features and faults); it exits 1 on a mismatch.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_lib.driver import main

if __name__ == "__main__":
    sys.exit(main())
