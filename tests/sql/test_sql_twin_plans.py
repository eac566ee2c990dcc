"""The Nexmark queries in SQL (benches/nexmark/sql/, as ``run.py --frontend sql``
builds them) plan as their hand-written DSL twins (benches/nexmark/queries.py),
compared as ``explain()`` text, operators and schemas included (docs/DESIGN.md
"SQL": a query and its DSL twin build the same graph)."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import eddyline as ed

BENCH = Path(__file__).resolve().parents[2] / "benches" / "nexmark"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import generator as gen  # noqa: E402
import queries  # noqa: E402
import run as harness  # noqa: E402


@pytest.fixture(scope="module")
def bid_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The bids of a few generated events as a Parquet file, as the harness reads them."""
    path = tmp_path_factory.mktemp("nexmark") / "bid.parquet"
    pq.write_table(gen.generate(2_000, seed=3)["bid"], path)
    return str(path)


def plans(query: str, bid_path: str) -> tuple[str, str]:
    """The plans of ``query`` in SQL (as ``run.py --frontend sql`` builds it) and of
    its DSL twin (``--frontend dsl``), each over the bids' file."""
    paths = {"bid": bid_path}
    sql = harness.build_sql(query, ed.StreamEnvironment(parallelism=2), paths)
    dsl = queries.build(query, ed.StreamEnvironment(parallelism=2), paths)
    return sql.explain(), dsl.explain()


@pytest.mark.parametrize("query", ["q0", "q1"])
def test_nexmark_sql_plan_is_the_dsl_twins(bid_path: str, query: str) -> None:
    sql, dsl = plans(query, bid_path)
    assert sql == dsl
