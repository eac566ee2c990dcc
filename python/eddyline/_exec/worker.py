"""Entry point of a worker process (``python -m eddyline._exec.worker``).

The driver hands the worker its address and the job's secret in the
environment; the worker connects, receives the job spec (the node dicts and
config, pickled by ``cloudpickle``), rebuilds the job and runs its share of the
subtasks until the attempt ends.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from typing import Any

_WILDCARDS = ("0.0.0.0", "::", "[::]", "")


def data_addresses(route_host: str, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """Where a worker binds its data port and the address its peers reach it at.

    ``route_host`` is the address of the interface that routes to the driver,
    the default for both. On a host with several interfaces (or behind a NAT)
    the host's environment chooses, as Spark's ``SPARK_LOCAL_IP`` does for
    Spark's own ports: ``EDDYLINE_BIND_HOST`` (else ``SPARK_LOCAL_IP``) is the
    address to bind (``0.0.0.0``: every interface) and ``EDDYLINE_ADVERTISE_HOST``
    the address peers connect to (by default the bound one, or ``route_host``
    when binding every interface). Set them per host (``spark-env.sh``) or for
    every executor (``spark.executorEnv.EDDYLINE_BIND_HOST``).
    """
    env = os.environ if env is None else env
    bind = env.get("EDDYLINE_BIND_HOST") or env.get("SPARK_LOCAL_IP") or route_host
    advertise = env.get("EDDYLINE_ADVERTISE_HOST")
    if not advertise:
        advertise = route_host if bind in _WILDCARDS else bind
    return bind, advertise


def run_worker(
    driver: str,
    secret: str,
    index: int,
    attempt: int | None,
    bind_host: str = "127.0.0.1",
) -> None:
    """Connects to ``driver`` as worker ``index`` and runs until the attempt ends.

    ``bind_host`` is the address of the interface that routes to the driver;
    the host's environment may bind or advertise others (see
    :func:`data_addresses`).
    """
    import cloudpickle

    from .._core import worker_connect
    from . import pool

    # This process is one of several already: per-record operators run in it (pool.py).
    pool.in_worker_process = True

    bind, advertise = data_addresses(bind_host)
    session = worker_connect(driver, secret, index, attempt, bind, advertise)
    try:
        nodes, config = cloudpickle.loads(session.spec)
    except Exception as exc:
        session.fail(
            f"worker {index} cannot load the job: {type(exc).__name__}: {exc} "
            "(are the modules of the job's functions importable by the workers?)"
        )
        return
    session.run(nodes, config)


DRIVER_GONE_EXIT = 70
"""A ProcessRunner worker's exit code when its driver died under it."""


def _exit_with_driver(parent_pid: int, interval_s: float = 0.2) -> threading.Thread:
    """Ends this worker process as soon as its parent process (the driver) is gone.

    A ProcessRunner worker is a child of the driver. A driver killed with
    SIGKILL sends no goodbye: its workers, blocked in backpressure on each
    other or waiting for a barrier, would run on with nobody to report to,
    holding the pipes the driver's own parent reads (Flink's TaskManagers
    likewise stop when they lose their JobManager). The kernel reparents an
    orphan, so a daemon thread polls ``os.getppid()`` and exits the process
    (``os._exit``: no cleanup that could block) when it is no longer
    ``parent_pid``. (A ``ProcessRunner(python=...)`` wrapper that starts the
    interpreter as its child rather than exec'ing it is the parent then: the
    worker ends with the wrapper.)
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval_s)
        os._exit(DRIVER_GONE_EXIT)

    thread = threading.Thread(target=watch, name="eddyline-driver-watch", daemon=True)
    thread.start()
    return thread


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(env: Any = None) -> int:
    env = os.environ if env is None else env
    driver_pid = env.get("EDDYLINE_DRIVER_PID")
    if driver_pid:
        parent = os.getppid()
        if parent != int(driver_pid) and not _process_exists(int(driver_pid)):
            return DRIVER_GONE_EXIT  # the driver died before this worker looked
        _exit_with_driver(parent)
    try:
        attempt = env.get("EDDYLINE_ATTEMPT")
        run_worker(
            env["EDDYLINE_DRIVER"],
            env["EDDYLINE_SECRET"],
            int(env["EDDYLINE_WORKER_INDEX"]),
            int(attempt) if attempt is not None else None,
        )
    except KeyError as exc:
        print(f"eddyline worker: missing environment variable {exc}", file=sys.stderr)
        return 2
    except Exception:
        if env.get("EDDYLINE_WORKER_QUIET") != "1":
            traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
