"""A real Spark standalone cluster for the cluster suite: a master
and two workers started from the pip pyspark package (one core, 1 GiB each,
their own work dirs), on loopback ports picked free. Each test runs its job in
a subprocess whose SparkSession connects to the master, so the suite does not
clash with the local[2] session of tests/spark. Marked ``cluster``."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.faults import wait_until

pytest.importorskip("pyspark", reason="the cluster tests run a standalone Spark (test extra)")
pytest.importorskip("moto", reason="the cluster tests need moto[server] for S3 (test extra)")

# The S3 server fixtures are shared with the storage suite.

from storage.conftest import S3, s3, s3_endpoint  # noqa: F401


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.cluster)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


@dataclass(frozen=True)
class Cluster:
    master: str
    root: Path

    def executor_pids(self) -> list[int]:
        out = subprocess.run(
            ["pgrep", "-f", "CoarseGrainedExecutorBackend"], capture_output=True, text=True
        )
        return [int(p) for p in out.stdout.split()]

    def python_executor_pids(self) -> list[int]:
        """The executors running Python tasks (pyspark's daemon or workers are their
        children): those of the running job, not an executor of an application that
        ended and is still being torn down, which killing would not touch the job."""
        busy = []
        for pid in self.executor_pids():
            out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
            if out.stdout.split():
                busy.append(pid)
        return busy


def _wait_for(path: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    def reported() -> bool:
        return path.exists() and text in path.read_text(errors="replace")

    with contextlib.suppress(TimeoutError):
        wait_until(
            lambda: reported() or proc.poll() is not None,
            timeout=timeout,
            what=f"the Spark process to report {text!r}",
            interval=0.2,
        )
    if not reported():
        log = path.read_text()[-3000:] if path.exists() else "(no log)"
        raise RuntimeError(f"the Spark process did not report {text!r}:\n{log}")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("cluster")
    home = spark_home()
    env = {
        **os.environ,
        "SPARK_HOME": home,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(root / "logs"),
    }
    spark_class = os.path.join(home, "bin", "spark-class")
    port = _free_port()
    master = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []

    def start(
        name: str, args: list[str], extra: dict[str, str]
    ) -> tuple[Path, subprocess.Popen[bytes]]:
        log = root / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [spark_class, *args], stdout=out, stderr=subprocess.STDOUT, env={**env, **extra}
            )
        procs.append(proc)
        return log, proc

    try:
        log, proc = start(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(_free_port()),
            ],
            {},
        )
        _wait_for(log, "I have been elected leader", proc, 60)
        for i in range(2):
            work = root / f"worker-{i}"
            work.mkdir()
            log, proc = start(
                f"worker-{i}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--webui-port",
                    str(_free_port()),
                    master,
                ],
                {"SPARK_WORKER_DIR": str(work)},
            )
            _wait_for(log, "Successfully registered with master", proc, 60)
        yield Cluster(master, root)
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
