"""Entry point of a per-record Python worker (``python -m eddyline._exec.record_worker``).

Started by :class:`eddyline._exec.pool.WorkerPool`: reads frames on stdin,
answers on stdout (the user's ``print`` goes to stderr), runs the in-process
runner of its operator on every batch it gets, and exits when its stdin
closes, when told to, or (Linux) when its parent dies.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import traceback
from typing import IO, Any


def _die_with_parent() -> None:
    """Asks the kernel for SIGKILL when the parent exits (``PR_SET_PDEATHSIG``)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux; stdin EOF still ends us
        pass


def _error_payload(exc: BaseException) -> bytes:
    from ..errors import JobFailedError

    try:
        return pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        fallback = JobFailedError(
            f"a per-record worker failed: {type(exc).__name__}: {exc}", user_traceback=text
        )
        return pickle.dumps(fallback, protocol=pickle.HIGHEST_PROTOCOL)


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """Runs the frame loop until the end of ``inp`` or an EXIT frame."""
    import cloudpickle
    import pyarrow as pa

    from . import pool as P

    frame = P.read_frame(inp)
    if frame is None or frame[0] != P.INIT:
        return
    try:
        path, blob = pickle.loads(frame[1])
        for entry in path:
            if entry not in sys.path:
                sys.path.append(entry)
        cls, args = cloudpickle.loads(blob)
        runner: Any = cls(*args)
    except Exception as exc:
        P.write_frame(out, P.ERR, f"cannot load the operator: {type(exc).__name__}: {exc}".encode())
        return
    P.write_frame(out, P.READY, b"")
    while True:
        frame = P.read_frame(inp)
        if frame is None or frame[0] == P.EXIT:
            # The operator ended: its close (a process function's ``close``) runs here too.
            with contextlib.suppress(Exception):
                runner.close()
            return
        kind, payload = frame
        try:
            if kind == P.BATCH:
                answer: Any = _process(runner, P.decode_batches(payload)[0], pa)
            elif kind == P.STATE:
                runner.restore(pickle.loads(payload))
                answer = b""
            elif kind == P.WATERMARK:  # a keyed process function's (process_pool.py)
                runner.on_watermark(int(bytes(payload)))
                answer = b""
            elif kind == P.SNAPSHOT:
                answer = pickle.dumps(runner.snapshot(0), protocol=pickle.HIGHEST_PROTOCOL)
            else:
                raise ValueError(f"unknown frame kind {kind}")
        except BaseException as exc:
            P.write_frame(out, P.ERR, _error_payload(exc))
            continue
        P.write_frame(out, P.OK, answer)


def _process(runner: Any, batch: Any, pa: Any) -> Any:
    from . import pool as P

    key_groups = None
    index = batch.schema.get_field_index(P.KEY_GROUPS)
    if index >= 0:
        key_groups = batch.column(index)
        batch = batch.remove_column(index)
    result = runner.process(0, batch, key_groups)
    if result is None:
        return b""
    batches = result if isinstance(result, list) else [result]
    if getattr(runner, "first_rows", None) is not None and batches:
        first = pa.array(runner.first_rows, type=pa.int64())
        batches = [batches[0].append_column(P.FIRST_ROW, first)]
    return P.encode_batches(batches)


def main() -> int:
    _die_with_parent()
    if os.getppid() == 1:  # the parent is already gone
        return 0
    with (
        os.fdopen(os.dup(0), "rb", buffering=0) as inp,
        os.fdopen(os.dup(1), "wb", buffering=0) as out,
    ):
        os.dup2(2, 1)  # the user's print() must not write into the frames
        sys.stdout = sys.stderr
        serve(inp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
