"""Every Python example of the README runs as written.

Each ```python block is written to a script and run by this interpreter in a
fresh directory, as a user would run it. The examples that read ``events/``
(the README says what it holds) are given a small directory of Parquet files.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.kafka_broker import new_topic, tansu_broker

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks() -> list[tuple[str, str]]:
    text = README.read_text()
    blocks = []
    for m in BLOCK.finditer(text):
        heading = re.findall(r"^## (.+)$", text[: m.start()], re.MULTILINE)
        section = heading[-1] if heading else "top"
        ident = re.sub(r"[^a-z0-9]+", "-", section.lower()).strip("-")
        blocks.append((f"{ident}-{len(blocks)}", m.group(1)))
    return blocks


def _write_events(directory: Path) -> None:
    """Four files of (user, amount, ts); each file's timestamps cover the same hour."""
    directory.mkdir()
    for f in range(4):
        n = 500
        table = pa.table(
            {
                "user": pa.array([(i * 7 + f) % 11 for i in range(n)], pa.int64()),
                "amount": pa.array([i + f for i in range(n)], pa.int64()),
                "ts": pa.array([1_700_000_000_000 + i * 7_000 for i in range(n)], pa.int64()),
            }
        )
        pq.write_table(table, directory / f"part-{f}.parquet")


def _needs_spark(code: str) -> bool:
    return "pyspark" in code or "eddyline.spark" in code


BLOCKS = _blocks()


def test_readme_has_examples() -> None:
    assert len(BLOCKS) >= 5, [name for name, _ in BLOCKS]


@pytest.mark.parametrize(
    ("name", "code"),
    [
        pytest.param(n, c, id=n, marks=[pytest.mark.spark] if _needs_spark(c) else [])
        for n, c in BLOCKS
    ],
)
def test_readme_example_runs_as_written(name: str, code: str, tmp_path: Path) -> None:
    if _needs_spark(code):
        pytest.importorskip("pyspark", reason="this README example runs on Spark")
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            pytest.skip("Spark needs Java")
    if "events/" in code:
        _write_events(tmp_path / "events")
    script = tmp_path / f"{name}.py"
    script.write_text(code)
    env = dict(os.environ)
    env.pop("PYSPARK_PYTHON", None)  # the README example sets it itself
    with contextlib.ExitStack() as stack:
        if "KAFKA_BROKERS" in code:
            # A local Kafka-API broker (tansu, built by .ci/run) with the README's topic.
            broker = stack.enter_context(tansu_broker(tmp_path / "tansu.log"))
            new_topic(broker, 3, "orders")
            env["KAFKA_BROKERS"] = broker
        proc = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert proc.returncode == 0, (
        f"README example {name} failed:\n{code}\n--- stdout\n{proc.stdout[-3000:]}"
        f"\n--- stderr\n{proc.stderr[-6000:]}"
    )
    if "ParquetSink(" in code:
        written = [p for p in tmp_path.rglob("*.parquet") if "events" not in p.parts]
        assert written, f"README example {name} wrote no Parquet output"
