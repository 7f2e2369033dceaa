"""Issue 25's config keys (harness.idleFile, env.autoRoll), the drift line's idle count,
and the daemon's auto roll: validated, named on refusal, debounced."""

from __future__ import annotations

from pathlib import Path

import pytest

from loop_cli.autoroll import AutoRoll
from loop_cli.config import parse_text
from loop_cli.errors import ConfigError
from loop_cli.rotation.drift import DriftReport, DriftRow, DriftState, drift_line
from loop_cli.runtime import build_adapter


def _errors(text: str, tmp_path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_text(text, tmp_path / "c.yaml")
    return info.value.problems


def test_idle_file_is_for_the_generic_adapter_only(tmp_path) -> None:
    cfg = parse_text("harness: {idleFile: '/run/agents/{session_id}.state'}\n", tmp_path / "c")
    assert cfg.harness.idle_file == "/run/agents/{session_id}.state"
    adapter = build_adapter(cfg.harness)
    assert adapter.idle_path("s1") == Path("/run/agents/s1.state")
    (problem,) = _errors("harness: {adapter: codex, idleFile: /tmp/x}\n", tmp_path)
    assert "idleFile is for the generic adapter" in problem
    (problem,) = _errors("harness: {idleFile: ''}\n", tmp_path)
    assert "harness: idleFile must be a path" in problem


def test_auto_roll_is_off_or_idle_and_needs_an_env_file(tmp_path) -> None:
    assert parse_text("tracker: local\n", tmp_path / "c").env.auto_roll == "off"
    env = tmp_path / "a.env"
    cfg = parse_text(f"env: {{file: {env}, autoRoll: idle}}\n", tmp_path / "c")
    assert cfg.env.auto_roll == "idle"
    (problem,) = _errors("env: {autoRoll: idle}\n", tmp_path)
    assert "autoRoll: idle needs env.file" in problem
    (problem,) = _errors(f"env: {{file: {env}, autoRoll: always}}\n", tmp_path)
    assert "env.autoRoll" in problem


def _report() -> DriftReport:
    rows = tuple(
        DriftRow(f"local:p#{n}", f"loop-local_p_{n}", state, (n,), ())
        for n, state in enumerate([DriftState.STALE, DriftState.STALE, DriftState.CURRENT], 1)
    )
    return DriftReport(rows, (), {"stale": 2, "current": 1, "unreadable": 0, "not-running": 0})


def test_the_drift_line_says_how_many_wait_for_idle() -> None:
    report = _report()
    activity = {"local:p#1": "busy", "local:p#2": "idle", "local:p#3": "busy"}
    plain = drift_line(report, activity)
    assert plain == (
        "sessions: 2 of 3 running with a stale environment - run: the-loop sessions "
        "restart --all (1 not idle now: it waits for their turns to end)"
    )
    auto = drift_line(report, activity, "idle")
    assert auto == (
        "sessions: 2 of 3 running with a stale environment, 1 waiting for idle "
        "(env.autoRoll: idle rolls them)"
    )


class _Cfg:
    def __init__(self, roll: str) -> None:
        self.env = type("Env", (), {"auto_roll": roll, "file": Path("/x.env")})()


class _Rt:
    def __init__(self, roll: str) -> None:
        self.config = _Cfg(roll)


def test_auto_roll_looks_at_most_every_interval_and_one_at_a_time(monkeypatch) -> None:
    looks: list[object] = []
    monkeypatch.setattr("loop_cli.autoroll.roll_stale", lambda rt: looks.append(rt))
    now = [0.0]
    rt = _Rt("idle")
    rolling = AutoRoll(rt, every=10.0, clock=lambda: now[0])  # type: ignore[arg-type]
    assert rolling.maybe()
    rolling.join(5)
    assert not rolling.maybe()  # debounced: 10 s have not passed
    now[0] = 10.5
    assert rolling.maybe()
    rolling.join(5)
    assert looks == [rt, rt]
    assert not AutoRoll(_Rt("off"), clock=lambda: 0.0).maybe()  # type: ignore[arg-type]
