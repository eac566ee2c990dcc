"""S3 storage in the randomized tester (tools/chaos_lib/s3.py): a case's
checkpoints, savepoint, file sinks and Parquet source on moto_server, under a SIGKILL, a
damaged newest checkpoint and a restore at another parallelism; and that a
Parquet object committed twice on the server is caught."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import s3
from chaos_lib.case import Case
from chaos_lib.check import compare
from chaos_lib.execute import _read_outputs
from chaos_lib.generate import generate
from chaos_lib.reference import expected

from .hand import rescaled, run_through, small_case

pytest.importorskip("moto", reason="S3 cases need moto[server] (test extra)")
pytest.importorskip("boto3", reason="S3 cases need moto[server] (test extra)")


def test_the_draw_is_kept_in_the_case() -> None:
    drawn = [generate(seed) for seed in range(400)]
    on_s3 = [c for c in drawn if c.execution.s3]
    assert 20 <= len(on_s3) <= 80
    assert {c.fault.kind for c in on_s3} >= {"sigkill", "corrupt", "cancel", "savepoint"}
    again = Case.from_json(on_s3[0].to_json())
    assert again.execution.s3 and "storage:s3" in again.features()
    # a case written before the draw existed reads as a case on a disk
    old = on_s3[0].to_json().replace(', "s3": true', "")
    assert not Case.from_json(old).execution.s3


def _case(**fault: object) -> Case:
    case = small_case(sinks=["parquet", "delta"], fault=fault, execution={"s3": True})
    # the main source as three Parquet files, read from the bucket
    case.sources = [dataclasses.replace(s, kind="parquet", files=3) for s in case.sources]
    return case


def _nothing_on_disk(workdir: Path) -> None:
    assert not (workdir / "chk").exists()
    assert sorted(p.name for p in (workdir / "out").iterdir()) == []


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_a_case_on_s3_under_a_sigkill_is_exact_and_a_double_commit_is_caught(
    tmp_path: Path,
) -> None:
    case = _case(kind="sigkill", kills=1)
    outputs = run_through(case, tmp_path)
    _nothing_on_disk(tmp_path)
    assert len(outputs["parquet"]) == len(outputs["delta"]) > 0
    want = expected(case, set())
    assert compare(case, outputs, want) == []
    # a committed object copied under a second committed name: the checker says so
    import boto3

    client = boto3.client("s3", endpoint_url=os.environ["CHAOS_S3"])
    bucket = os.environ["CHAOS_S3_BUCKET"]
    keys = [k for k, _ in s3._keys(f"s3://{bucket}", "out/parquet/") if "/part-" in k]
    client.copy_object(
        Bucket=bucket,
        Key=keys[0].replace("/part-", "/part-again-"),
        CopySource={"Bucket": bucket, "Key": keys[0]},
    )
    assert compare(case, _read_outputs(case, tmp_path / "out"), want) != []


@pytest.mark.chaos
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["corrupt", "cancel"])
def test_a_case_on_s3_restores_exactly(kind: str, tmp_path: Path) -> None:
    """A damaged newest checkpoint on the server (a fallback or a refusal,
    never a double commit), and a restore from S3 at another parallelism."""
    case = rescaled(_case(kind=kind))
    run_through(case, tmp_path)
    _nothing_on_disk(tmp_path)


def test_a_case_with_a_spark_source_stays_on_a_local_disk() -> None:
    """Chaos seed 272046980: a from_spark source pins its DataFrame under the
    checkpoint directory, which the local Spark cannot write on S3 (no S3A
    jars): such a case is not drawn on S3; the draw still consumes its
    random number, so the other cases of every seed stay as they were."""
    case = generate(272046980)
    assert any(s.kind == "spark" for s in case.sources) and not case.execution.s3
    for seed in range(2_000):
        drawn = generate(seed)
        assert not (drawn.execution.s3 and any(s.kind == "spark" for s in drawn.sources)), seed
