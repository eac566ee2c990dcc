"""Entry point of a worker process (``python -m eddyline._exec.worker``).

The driver hands the worker its address and the job's secret in the
environment; the worker connects, receives the job spec (the node dicts and
config, pickled by ``cloudpickle``), rebuilds the job and runs its share of the
subtasks until the attempt ends.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any


def run_worker(
    driver: str,
    secret: str,
    index: int,
    attempt: int | None,
    bind_host: str = "127.0.0.1",
) -> None:
    """Connects to ``driver`` as worker ``index`` and runs until the attempt ends."""
    import cloudpickle

    from .._core import worker_connect

    session = worker_connect(driver, secret, index, attempt, bind_host)
    try:
        nodes, config = cloudpickle.loads(session.spec)
    except Exception as exc:
        session.fail(
            f"worker {index} cannot load the job: {type(exc).__name__}: {exc} "
            "(are the modules of the job's functions importable by the workers?)"
        )
        return
    session.run(nodes, config)


def main(env: Any = None) -> int:
    env = os.environ if env is None else env
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
