"""The DSL's signatures say what they accept and return, so a type checker
catches a wrong ``how`` or runner and follows chained setters (mypy on a
user's snippet, as in an editor)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip(
    "mypy.api", reason="the public types are checked with mypy (dev extra)"
)

SNIPPET = textwrap.dedent(
    """
    import eddyline as ed

    env = ed.StreamEnvironment()
    left = env.from_collection([{"k": 1}])
    right = env.from_collection([{"k": 1}])
    reveal_type(left.name("a").uid("a").set_parallelism(2))
    reveal_type(left.key_by("k").sum("k").collect().name("out"))
    reveal_type(left.join(right, on="k").sink_to(ed.DiscardSink()).name("s").uid("s"))
    left.join(right, on="k", how="sideways")
    left.window_join(right, on="k", window="5s")
    env.execute("job", runner=42)
    env.execute("job", runner=ed.ProcessRunner(workers=2))
    """
)


def test_setters_return_self_and_wrong_arguments_are_type_errors(tmp_path: Path) -> None:
    path = tmp_path / "snippet.py"
    path.write_text(SNIPPET)
    # Plain output whatever an earlier test left in the environment (colour
    # codes would hide the snippet's path at the start of each line).
    out, _, _ = mypy_api.run(["--no-color-output", "--no-error-summary", str(path)])
    lines = [
        line.split(f"{path.name}:", 1)[1].split(": ", 1)[1]
        for line in out.splitlines()
        if f"{path.name}:" in line
    ]
    assert lines == [
        'note: Revealed type is "eddyline.stream.DataStream"',
        'note: Revealed type is "eddyline.sinks.CollectHandle"',
        'note: Revealed type is "eddyline.stream.DataStreamSink"',
        'error: Argument "how" to "join" of "DataStream" has incompatible type '
        "\"Literal['sideways']\"; expected \"Literal['inner', 'left', 'right', 'outer']\"  "
        "[arg-type]",
        'error: Argument "window" to "window_join" of "DataStream" has incompatible type '
        '"str"; expected "WindowAssigner"  [arg-type]',
        'error: Argument "runner" to "execute" of "StreamEnvironment" has incompatible type '
        '"int"; expected "Runner | None"  [arg-type]',
    ], out
