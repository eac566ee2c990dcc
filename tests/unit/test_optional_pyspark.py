"""pyspark is an optional extra: eddyline imports and runs without it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import sys

    class HidePyspark:
        def find_spec(self, name, path=None, target=None):
            if name == "pyspark" or name.startswith("pyspark."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, HidePyspark())

    import eddyline as ed
    import eddyline.spark
    from eddyline.spark import SparkNotInstalledError, SparkTableSink

    env = ed.StreamEnvironment()
    out = env.from_collection([1, 2, 3]).collect()
    env.execute()
    assert out.to_pylist() == [{"value": 1}, {"value": 2}, {"value": 3}]
    try:
        SparkTableSink(None, "t")
    except SparkNotInstalledError as exc:
        assert isinstance(exc, ed.EddylineError) and isinstance(exc, ImportError)
        assert 'pip install "eddyline[spark]"' in str(exc), exc
    else:
        raise AssertionError("SparkTableSink without pyspark did not raise")
    try:
        env.from_spark(object())
    except SparkNotInstalledError as exc:
        assert "from_spark" in str(exc), exc
    else:
        raise AssertionError("from_spark without pyspark did not raise")
    assert "pyspark" not in sys.modules
    print("ok")
    """
)


def test_import_eddyline_works_without_pyspark() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("ok")
