"""Runners: where a job's subtasks run.

The default (``runner=None``) runs every subtask on a thread of this process.
:class:`ProcessRunner` runs them in local worker processes, so per-record
Python functions scale past one interpreter's GIL; ``eddyline.spark.SparkRunner``
runs the same workers as Spark barrier tasks. Either way this process keeps
the checkpoint coordinator, and a worker that dies makes the job restart every
worker from the latest completed checkpoint.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

from ..config import parse_duration

__all__ = ["ProcessRunner"]


def _worker_env(driver: str, secret: str, index: int, attempt: int) -> dict[str, str]:
    env = dict(os.environ)
    env["EDDYLINE_DRIVER"] = driver
    env["EDDYLINE_SECRET"] = secret
    env["EDDYLINE_WORKER_INDEX"] = str(index)
    env["EDDYLINE_ATTEMPT"] = str(attempt)
    # The worker exits when this process dies (worker.py: _exit_with_driver).
    env["EDDYLINE_DRIVER_PID"] = str(os.getpid())
    # Workers import the modules the driver's functions live in.
    path = [p for p in sys.path if p]
    if env.get("PYTHONPATH"):
        path.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path))
    return env


class ProcessRunner:
    """Runs a job in ``workers`` local worker processes.

    Subtask ``i`` of every operator runs in worker ``i % workers``; forward
    edges stay inside a process, repartitioning edges cross processes as Arrow
    IPC over loopback TCP with credit-based flow control, every connection
    authenticated by a per-job secret. Give operators a parallelism of at least
    ``workers`` (e.g. ``env.set_parallelism(workers)``) so every worker has
    work.

    Args:
        workers: Number of worker processes (at least 1).
        python: The interpreter for the workers (default: this one).
        start_timeout: How long the workers of an attempt may take to connect
            (``"120s"`` by default).

    Example:
        >>> import eddyline as ed
        >>> runner = ed.ProcessRunner(workers=2)
        >>> runner.workers
        2
    """

    def __init__(
        self,
        workers: int = 2,
        *,
        python: str | None = None,
        start_timeout: str | float = "120s",
    ) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an int >= 1, got {workers!r}")
        self.workers = workers
        self.python = python or sys.executable
        self.start_timeout_s = parse_duration(start_timeout, what="start_timeout")
        self._launcher: _ProcessLauncher | None = None

    def __repr__(self) -> str:
        return f"ProcessRunner(workers={self.workers})"

    def worker_pids(self) -> list[int]:
        """The process ids of the current attempt's live workers."""
        launcher = self._launcher
        return launcher.pids() if launcher is not None else []

    # ---- used by execute_async ----------------------------------------------

    def _start(self, core: Any, nodes: list[Any], config: dict[str, Any], spec: bytes) -> Any:
        self._launcher = _ProcessLauncher(self.python)
        return core.start_job(
            nodes,
            config,
            launcher=self._launcher,
            workers=self.workers,
            spec=spec,
            bind="127.0.0.1:0",
            start_timeout_s=self.start_timeout_s,
        )


class _ProcessLauncher:
    """Starts worker processes for the native driver (see ``Launcher``)."""

    def __init__(self, python: str) -> None:
        self._python = python
        self._procs: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()

    def pids(self) -> list[int]:
        with self._lock:
            return [p.pid for p in self._procs if p.poll() is None]

    def launch(self, attempt: int, workers: int, driver: str, secret: str) -> None:
        self.stop()
        procs = []
        for index in range(workers):
            procs.append(
                subprocess.Popen(
                    [self._python, "-m", "eddyline._exec.worker"],
                    env=_worker_env(driver, secret, index, attempt),
                    stdin=subprocess.DEVNULL,
                )
            )
        with self._lock:
            self._procs = procs

    def check(self) -> None:
        with self._lock:
            procs = list(self._procs)
        for index, p in enumerate(procs):
            code = p.poll()
            if code is not None:
                raise RuntimeError(
                    f"worker process {index} (pid {p.pid}) exited with code {code} before it "
                    "connected to the driver; its stderr above says why"
                )

    def stop(self) -> None:
        with self._lock:
            procs, self._procs = self._procs, []
        for p in procs:
            try:
                p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
