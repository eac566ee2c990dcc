"""A ProcessRunner's workers end when their driver is SIGKILLed.

The driver of a ProcessRunner job runs no subtask; its workers do. Killed
with SIGKILL mid-run, the driver says nothing to them: before the workers
watched for it (``eddyline._exec.worker._exit_with_driver``) they ran on,
blocked in backpressure on each other, for minutes, and held the stdout and
stderr pipes they inherited, so whoever ran the driver and read its output
(``subprocess.run(capture_output=True)``, a shell pipeline, a CI step) waited
with them. Found by tests/fault/test_unaligned_rescale.py timing out.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from support.faults import wait_until

SCRIPT = textwrap.dedent(
    """
    import os
    import signal
    import sys
    import time

    import eddyline as ed
    from support.faults import SleepPerBatch, wait_until

    out, chk = sys.argv[1:3]
    env = ed.StreamEnvironment(
        2, batch_size=10, checkpoint=ed.CheckpointConfig(chk, interval="50ms")
    )
    # Slow and keyed: rows cross between the workers, and the job is far from
    # done when the driver dies.
    keyed = env.from_sequence(0, 100_000).key_by("value").reduce(lambda x, y: x)
    keyed.map_batches(SleepPerBatch(0.01)).sink_to(ed.ParquetSink(out))
    client = env.execute_async("driver-death", runner=ed.ProcessRunner(workers=2))
    # the workers run and ack checkpoints
    wait_until(lambda: client.checkpoints, timeout=60, what="a completed checkpoint")
    children = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            children += f.read().split()
    print(f"driver {client.status} {len(client.checkpoints)}", *children, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.timeout(120)
def test_process_runner_workers_exit_when_the_driver_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out, chk = tmp_path / "out", tmp_path / "chk"
    # capture_output: returns only once every process holding the pipes is gone.
    proc = subprocess.run(
        [sys.executable, str(script), str(out), str(chk)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, (proc.stdout, proc.stderr)
    words = proc.stdout.split()
    assert words[:2] == ["driver", "running"] and int(words[2]) > 0, proc.stdout
    workers = [int(w) for w in words[3:]]
    assert len(workers) == 2, proc.stdout
    wait_until(
        lambda: not any(map(_alive, workers)),
        timeout=10,
        what="the workers to exit after their driver was killed (they outlived it)",
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_driver_watch_exits_a_process_whose_parent_is_gone() -> None:
    # The watch alone: a forked child watches its parent (the "driver"),
    # which exits at once; the child must not sleep its 30 s. It holds the
    # stdout pipe, so subprocess.run returns only when it exited.
    code = textwrap.dedent(
        """
        import os, time
        from eddyline._exec.worker import _exit_with_driver
        parent = os.getpid()
        pid = os.fork()
        if pid:
            print(pid, flush=True)
            os._exit(0)
        _exit_with_driver(parent, interval_s=0.02)
        time.sleep(30)  # the orphan idles: the watcher must end it (the thing under test)
        os._exit(0)
        """
    )
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    assert time.monotonic() - t0 < 15, "the orphan held the pipe"
    child = int(proc.stdout.split()[0])
    wait_until(lambda: not _alive(child), timeout=10, what="the orphan to end (it kept running)")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a shell wrapper")
@pytest.mark.timeout(120)
def test_workers_started_by_a_wrapper_that_does_not_exec_run_the_job(tmp_path: Path) -> None:
    # ProcessRunner(python=...) may be a wrapper that runs the interpreter as its
    # child: the workers' parent is then the wrapper, not the driver, and they
    # must run the job (watching the wrapper), not exit at once.
    import eddyline as ed

    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f'#!/bin/sh\n"{sys.executable}" "$@"\nexit $?\n')
    wrapper.chmod(0o755)
    env = ed.StreamEnvironment(2)
    out = env.from_sequence(0, 2_000).key_by("value").reduce(lambda x, y: x).collect()
    env.execute("wrapped", runner=ed.ProcessRunner(workers=2, python=str(wrapper)))
    assert sorted(out.to_arrow()["value"].to_pylist()) == list(range(2_000))
