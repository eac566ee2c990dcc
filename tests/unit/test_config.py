"""Durations, checkpoint configuration and restart strategies."""

from __future__ import annotations

import re

import pytest

import eddyline as ed
from eddyline.config import parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (0, 0.0),
        (2, 2.0),
        (0.5, 0.5),
        ("250ms", 0.25),
        ("1s", 1.0),
        ("1.5s", 1.5),
        ("2min", 120.0),
        ("1h", 3600.0),
        ("10", 10.0),
        (" 3 ms ", 0.003),
        ("500us", 0.0005),
    ],
)
def test_parse_duration_accepts_numbers_and_units(text: float | str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "bad", ["", "soon", "1 fortnight", "-1s", "1e3s", "ms", -1, True, None, []]
)
def test_parse_duration_rejects_bad_input_with_value_error(bad: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5 sec", 5.0),
        ("10 seconds", 10.0),
        ("1 second", 1.0),
        ("100 millis", 0.1),
        ("20 milliseconds", 0.02),
        ("1m", 60.0),
        ("1 minute", 60.0),
        ("3 minutes", 180.0),
        ("2 mins", 120.0),
        ("1 hour", 3600.0),
        ("2hours", 7200.0),
        ("1d", 86400.0),
        ("1 day", 86400.0),
        ("1.5 days", 129600.0),
        ("1 MINUTE", 60.0),
    ],
)
def test_parse_duration_accepts_flink_and_spark_units(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_parse_duration_error_names_the_accepted_units() -> None:
    with pytest.raises(ValueError) as info:
        parse_duration("1 fortnight", what="window size")
    message = str(info.value)
    assert message.startswith("invalid window size '1 fortnight'")
    for unit in ("ms", "sec", "seconds", "min", "minute", "minutes", "h", "hours", "d", "days"):
        assert re.search(rf"[ /]{unit}[,/]|[ /]{unit}$", message), (unit, message)


def test_windows_accept_durations_in_minutes_and_days() -> None:
    assert repr(ed.Tumbling("1 minute")) == "Tumbling(size_ms=60000)"
    assert repr(ed.Sliding("1d", "1h")) == "Sliding(size_ms=86400000, slide_ms=3600000)"


def test_parse_duration_rejects_infinity() -> None:
    with pytest.raises(ValueError, match="finite"):
        parse_duration(float("inf"))


def test_checkpoint_config_defaults() -> None:
    cfg = ed.CheckpointConfig("/tmp/chk")
    assert (
        cfg.dir,
        cfg.interval,
        cfg.mode,
        cfg.unaligned,
        cfg.retained,
        cfg.recovery,
        cfg.timeout,
    ) == ("/tmp/chk", 1.0, "exactly_once", False, 3, "latest", 600.0)
    assert cfg._to_dict() == {
        "dir": "/tmp/chk",
        "interval": 1.0,
        "mode": "exactly_once",
        "unaligned": False,
        "incremental": False,
        "aligned_timeout": None,
        "retained": 3,
        "recovery": "latest",
        "timeout": 600.0,
    }
    assert not cfg.incremental


def test_checkpoint_config_incremental_is_a_bool_passed_through() -> None:
    cfg = ed.CheckpointConfig("/tmp/chk", incremental=True)
    assert cfg.incremental and cfg._to_dict()["incremental"] is True
    assert "incremental=True" in repr(cfg)
    assert cfg != ed.CheckpointConfig("/tmp/chk")
    with pytest.raises(ValueError, match="incremental must be a bool"):
        ed.CheckpointConfig("/tmp/chk", incremental=1)  # type: ignore[arg-type]


def test_checkpoint_config_accepts_pathlike_and_durations(tmp_path: object) -> None:
    cfg = ed.CheckpointConfig(
        tmp_path,  # type: ignore[arg-type]
        interval="250ms",
        mode="exactly_once",
        retained=1,
        recovery="recompute",
        timeout="1.5s",
    )
    assert cfg.interval == 0.25
    assert cfg.timeout == 1.5
    assert cfg.dir == str(tmp_path)
    assert cfg.recovery == "recompute"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"interval": 0}, "interval must be positive"),
        ({"recovery": "recompute", "mode": "at_least_once"}, "needs mode='exactly_once'"),
        ({"interval": "fast"}, "invalid checkpoint interval"),
        ({"mode": "twice"}, "mode"),
        ({"retained": 0}, "retained"),
        ({"retained": True}, "retained"),
        ({"recovery": "never"}, "recovery"),
        ({"unaligned": "yes"}, "unaligned"),
        ({"unaligned": True, "mode": "at_least_once"}, "unaligned"),
        ({"timeout": 0}, "timeout must be positive"),
        ({"timeout": "later"}, "invalid checkpoint timeout"),
    ],
)
def test_checkpoint_config_rejects_bad_values(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ed.CheckpointConfig("/tmp/chk", **kwargs)  # type: ignore[arg-type]


def test_checkpoint_config_unaligned_accepted_but_not_with_recompute() -> None:
    cfg = ed.CheckpointConfig("/tmp/chk", unaligned=True)
    assert cfg.unaligned and cfg._to_dict()["unaligned"] is True
    # Recompute mode needs aligned barriers (FLINK-4120 replays cut the input where they did).
    with pytest.raises(ValueError, match="aligned barriers"):
        ed.CheckpointConfig("/tmp/chk", unaligned=True, recovery="recompute")


def test_checkpoint_config_aligned_timeout_needs_unaligned() -> None:
    cfg = ed.CheckpointConfig("/tmp/chk", unaligned=True, aligned_timeout="100ms")
    assert cfg.aligned_timeout == 0.1 and cfg._to_dict()["aligned_timeout"] == 0.1
    assert "aligned_timeout=0.1" in repr(cfg)
    with pytest.raises(ValueError, match="needs unaligned=True"):
        ed.CheckpointConfig("/tmp/chk", aligned_timeout="100ms")
    with pytest.raises(ValueError, match="aligned_timeout"):
        ed.CheckpointConfig("/tmp/chk", unaligned=True, aligned_timeout="soon")


def test_checkpoint_config_timeout_in_repr_and_equality() -> None:
    cfg = ed.CheckpointConfig("/tmp/chk", timeout="2min")
    assert "timeout=120.0" in repr(cfg)
    assert cfg == ed.CheckpointConfig("/tmp/chk", timeout=120)
    assert cfg != ed.CheckpointConfig("/tmp/chk")
    assert hash(cfg) == hash(ed.CheckpointConfig("/tmp/chk", timeout=120))


def test_checkpoint_config_is_immutable() -> None:
    cfg = ed.CheckpointConfig("/tmp/chk")
    with pytest.raises(AttributeError):
        cfg.retained = 5  # type: ignore[misc]


def test_restart_strategy_fixed_delay_and_none() -> None:
    assert ed.RestartStrategy.fixed_delay()._to_dict() == {"attempts": 3, "delay_s": 0.1}
    assert ed.RestartStrategy.fixed_delay(attempts=5, delay="2s")._to_dict() == {
        "attempts": 5,
        "delay_s": 2.0,
    }
    assert ed.RestartStrategy.none()._to_dict() == {"attempts": 0, "delay_s": 0.0}
    assert ed.RestartStrategy.none() == ed.RestartStrategy.fixed_delay(0, 0)


@pytest.mark.parametrize("attempts", [-1, 1.5, True])
def test_restart_strategy_rejects_bad_attempts(attempts: object) -> None:
    with pytest.raises(ValueError, match="attempts"):
        ed.RestartStrategy.fixed_delay(attempts=attempts)  # type: ignore[arg-type]


def test_restart_strategy_rejects_bad_delay() -> None:
    with pytest.raises(ValueError, match="restart delay"):
        ed.RestartStrategy.fixed_delay(delay="later")
