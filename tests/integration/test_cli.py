"""The command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from eddyline.client.cli import main


def test_demo_prints_check_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--rows", "50000", "--parallelism", "2"]) == 0
    out = capsys.readouterr().out
    assert "check: ok" in out
    assert "distinct keys: 1000" in out
    assert "top 5 keys by sum" in out


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--parallelism", "0"], "argument --parallelism: must be an integer >= 1, got '0'"),
        (["--parallelism", "two"], "argument --parallelism: must be an integer >= 1, got 'two'"),
        (["--rows", "-5"], "argument --rows: must be an integer >= 0, got '-5'"),
        (["--seed", "-1"], "argument --seed: must be an integer >= 0, got '-1'"),
    ],
)
def test_demo_bad_argument_is_a_usage_error(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: eddyline demo"), err
    assert err.rstrip().endswith(f"eddyline demo: error: {said}"), err
    assert "Traceback" not in err


def test_demo_with_no_rows_checks_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--rows", "0", "--parallelism", "2"]) == 0
    out = capsys.readouterr().out
    assert "distinct keys: 0" in out
    assert "check: ok" in out


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    import eddyline as ed

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"eddyline {ed.__version__}\n"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("module", ["eddyline", "eddyline.cli"])
def test_demo_default_size_via_python_m(module: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", module, "demo"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "check: ok" in proc.stdout
    assert proc.stderr == ""


def test_run_executes_script_as_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "job.py"
    script.write_text(
        "import sys\n"
        "import eddyline as ed\n"
        "if __name__ == '__main__':\n"
        "    env = ed.StreamEnvironment()\n"
        "    out = env.from_sequence(0, int(sys.argv[1])).collect()\n"
        "    env.execute('script')\n"
        "    print('rows', len(out.to_pylist()))\n"
    )
    assert main(["run", str(script), "12"]) == 0
    assert "rows 12" in capsys.readouterr().out


def test_run_missing_script_fails(tmp_path: Path) -> None:
    assert main(["run", str(tmp_path / "missing.py")]) == 2


def test_checkpoints_on_empty_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoints", str(tmp_path)]) == 0
    assert f"no checkpoints found in {tmp_path}" in capsys.readouterr().out
