"""An engine defect the tester found (docs/CHAOS.md, "Regression cases"): ``md5``
(``F.md5`` and SQL's) gave Arrow's ``string_view`` where every other string function
gives ``string`` and Spark's ``md5`` a string, so ``SparkTableSink`` refused the stream
at build time ("string_view has no Spark equivalent": run seed 1899242585, case seed
863539701, a SQL ``UNION ALL`` selecting ``md5(CAST(k AS STRING))`` before a Spark
table). ``md5`` now gives a string."""

from __future__ import annotations

import pyarrow as pa

import eddyline as ed
import eddyline.functions as F


def test_md5_is_a_string_as_in_spark() -> None:
    env = ed.StreamEnvironment()
    stream = env.from_arrow(pa.table({"k": pa.array([3, 4], pa.int64())}))
    assert (
        stream.select(F.md5(F.col("k").cast("string")).alias("c")).schema.field("c").type
        == pa.string()
    )
    stream.create_temporary_view("t")
    assert (
        env.sql("SELECT md5(CAST(k AS STRING)) AS c FROM t").schema.field("c").type == pa.string()
    )
