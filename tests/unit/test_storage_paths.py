"""Paths and URIs: a URI scheme the engine cannot serve is a
``StorageError`` naming it, never a local directory called ``s3:``; ``file://``
URIs are local paths. Object store URIs are served for checkpoints, savepoints,
``restore_from``, ``from_parquet`` and ``ParquetSink`` (tested against an S3
server in tests/storage). Also: a checkpoint dir that is
a file says so (item 10).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import eddyline as ed

URIS = ["s3://bucket/out", "gs://bucket/out", "abfss://c@a.dfs.core.windows.net/out"]
UNSERVED = ["hdfs://namenode/out", "ftp://host/out"]


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # Relative writes (the old bug made 's3:/bucket/out') land in tmp_path.
    monkeypatch.chdir(tmp_path)
    return tmp_path


def assert_no_scheme_dir(root: Path) -> None:
    assert not any(name.endswith(":") for name in os.listdir(root)), os.listdir(root)


@pytest.mark.parametrize("uri", URIS)
def test_storage_object_store_checkpoint_dir_is_kept_as_uri(uri: str, in_tmp: Path) -> None:
    assert ed.CheckpointConfig(uri).dir == uri
    assert_no_scheme_dir(in_tmp)


@pytest.mark.parametrize("uri", UNSERVED)
def test_storage_uri_checkpoint_dir_is_refused(uri: str, in_tmp: Path) -> None:
    scheme = uri.split("://")[0]
    with pytest.raises(ed.StorageError, match=f"URI scheme '{scheme}'") as info:
        ed.CheckpointConfig(uri)
    assert info.value.uri == uri
    assert uri in str(info.value)
    assert_no_scheme_dir(in_tmp)


@pytest.mark.parametrize("uri", URIS)
def test_storage_object_store_sink_is_kept_as_uri(uri: str, in_tmp: Path) -> None:
    assert ed.ParquetSink(uri).dir == uri
    assert_no_scheme_dir(in_tmp)


@pytest.mark.parametrize("uri", UNSERVED)
def test_storage_uri_sink_is_refused(uri: str, in_tmp: Path) -> None:
    with pytest.raises(ed.StorageError, match="ParquetSink"):
        ed.ParquetSink(uri)
    assert_no_scheme_dir(in_tmp)


@pytest.mark.parametrize("uri", UNSERVED)
def test_storage_unserved_source_is_refused(uri: str, in_tmp: Path) -> None:
    env = ed.StreamEnvironment(1)
    with pytest.raises(ed.StorageError, match="from_parquet"):
        env.from_parquet(uri)
    assert_no_scheme_dir(in_tmp)


@pytest.mark.parametrize("uri", UNSERVED)
def test_storage_unserved_restore_from_is_refused(uri: str, in_tmp: Path) -> None:
    env = ed.StreamEnvironment(1)
    env.from_sequence(0, 10).collect()
    with pytest.raises(ed.StorageError, match="restore_from"):
        env.execute("job", restore_from=uri)
    assert_no_scheme_dir(in_tmp)


def test_storage_uri_savepoint_path_is_refused(in_tmp: Path) -> None:
    env = ed.StreamEnvironment(1, checkpoint=ed.CheckpointConfig(str(in_tmp / "chk")))
    env.from_sequence(0, 2**62).collect()
    client = env.execute_async("endless")
    try:
        with pytest.raises(ed.StorageError, match="trigger_savepoint"):
            client.trigger_savepoint("hdfs://namenode/sp")
    finally:
        client.cancel()
        with pytest.raises(ed.JobCancelledError):
            client.wait(timeout=30)
    assert_no_scheme_dir(in_tmp)


def test_storage_file_uris_are_local_paths(in_tmp: Path) -> None:
    out = in_tmp / "out"
    chk = in_tmp / "chk"
    env = ed.StreamEnvironment(1, checkpoint=ed.CheckpointConfig(f"file://{chk}"))
    env.from_sequence(0, 100).sink_to(ed.ParquetSink(f"file://{out}"))
    env.execute("file-uris")
    assert ed.CheckpointConfig(f"file://{chk}").dir == str(chk)
    import pyarrow.dataset as ds

    assert sorted(ds.dataset(out).to_table()["value"].to_pylist()) == list(range(100))
    assert any(name.startswith("chk-") for name in os.listdir(chk))
    env = ed.StreamEnvironment(1)
    assert env.from_parquet(f"file://{out}") is not None
    with pytest.raises(ed.StorageError, match="absolute path"):
        ed.ParquetSink("file://relative/dir")


def test_storage_checkpoint_dir_that_is_a_file_says_so(in_tmp: Path) -> None:
    plain = in_tmp / "plain"
    plain.write_text("x")
    env = ed.StreamEnvironment(1, checkpoint=ed.CheckpointConfig(str(plain)))
    env.from_sequence(0, 10).collect()
    with pytest.raises(ed.CheckpointError, match="is a file, not a directory") as info:
        env.execute("job")
    assert "File exists" not in str(info.value)
