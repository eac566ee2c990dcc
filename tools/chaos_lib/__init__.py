"""The randomized differential tester behind ``tools/chaos.py`` (docs/CHAOS.md).

One module per concern: ``case`` (what a test case is), ``generate`` (a case from
a seed), ``data`` (its input rows and files), ``render`` (the job script that
runs it, also its reproducer), ``reference`` (the expected output, computed with
pandas from the input rows alone), ``execute`` (a run under its fault schedule,
in subprocesses), ``check`` (multiset comparison), ``shrink`` (a smaller failing
case) and ``driver`` (the loop over cases and the JSON summary).
"""

import sys
from pathlib import Path

# The tansu broker helpers the Kafka cases use live with the tests
# (tests/support, not shipped with eddyline).
_TESTS = str(Path(__file__).resolve().parents[2] / "tests")
if _TESTS not in sys.path:
    sys.path.append(_TESTS)
