"""The ``>>>`` examples of docs/API.md run as written (``doctest``), output included.

docs/API.md shows some behaviour as a session (the text ``explain()`` returns); a
change of that text fails here until the page shows the new one.
"""

from __future__ import annotations

import doctest
from pathlib import Path

API = Path(__file__).resolve().parents[2] / "docs" / "API.md"


def test_api_page_examples_run() -> None:
    result = doctest.testfile(str(API), module_relative=False, verbose=False)
    assert result.attempted >= 7, f"only {result.attempted} examples found in {API}"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {API} failed"
