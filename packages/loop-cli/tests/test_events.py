"""`the-loop events`: filters, formats, --since parsing."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from loop_cli.errors import UsageError
from loop_cli.events_query import parse_since
from loop_dispatch.eventlog import EventLog


@pytest.fixture
def log(write_config, isolated):
    write_config()
    log = EventLog(isolated / "state" / "events.jsonl")
    log.emit("session.spawned", source="t", work_item="local:loop#1", delivery_id="d1")
    log.emit("dispatch.delivered", source="t", work_item="local:loop#1", delivery_id="d2")
    log.emit(
        "dispatch.failed",
        level="warning",
        source="t",
        work_item="local:loop#2",
        delivery_id="d3",
        detail={"reason": "tmux_unavailable"},
    )
    return log


def _types(output: str) -> list[str]:
    return [json.loads(line)["type"] for line in output.splitlines()]


def test_filters(run_cli, log) -> None:
    assert _types(run_cli("events", "--format", "jsonl").output) == [
        "session.spawned",
        "dispatch.delivered",
        "dispatch.failed",
    ]
    assert _types(run_cli("events", "--format", "jsonl", "--type", "dispatch.*").output) == [
        "dispatch.delivered",
        "dispatch.failed",
    ]
    assert _types(run_cli("events", "--format", "jsonl", "--work-item", "local:loop#2").output) == [
        "dispatch.failed"
    ]
    assert _types(run_cli("events", "--format", "jsonl", "--delivery-id", "d2").output) == [
        "dispatch.delivered"
    ]
    assert _types(run_cli("events", "--format", "jsonl", "--level", "warning").output) == [
        "dispatch.failed"
    ]
    assert _types(run_cli("events", "--format", "jsonl", "--limit", "1").output) == [
        "dispatch.failed"
    ]
    assert _types(run_cli("events", "--format", "jsonl", "--since", "15m").output) == [
        "session.spawned",
        "dispatch.delivered",
        "dispatch.failed",
    ]
    future = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    assert run_cli("events", "--format", "jsonl", "--since", future).output == ""


def test_formats(run_cli, log) -> None:
    data = json.loads(run_cli("events", "--format", "json").output)
    assert [r["deliveryId"] for r in data] == ["d1", "d2", "d3"]
    table = run_cli("events").output.splitlines()
    assert table[0].split()[:3] == ["TIME", "LEVEL", "TYPE"]
    assert "tmux_unavailable" in table[3]


def test_bad_arguments_exit_2(run_cli, log) -> None:
    bad_since = run_cli("events", "--since", "yesterday-ish")
    assert bad_since.exit_code == 2
    assert "--since 'yesterday-ish'" in bad_since.output
    assert run_cli("events", "--work-item", "nope").exit_code == 2
    assert run_cli("events", "--follow", "--format", "json").exit_code == 2
    assert run_cli("events", "--level", "loud").exit_code == 2


def test_parse_since() -> None:
    now = datetime(2026, 1, 2, 12, 0, tzinfo=timezone.utc)
    assert parse_since("15m", now) == now - timedelta(minutes=15)
    assert parse_since("2h", now) == now - timedelta(hours=2)
    assert parse_since("1d", now) == now - timedelta(days=1)
    assert parse_since("2026-01-01T00:00:00", now) == datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert parse_since("2026-01-01T00:00:00Z", now) == datetime(2026, 1, 1, tzinfo=timezone.utc)
    with pytest.raises(UsageError):
        parse_since("15 parsecs", now)


def test_follow_prints_new_events(write_config, isolated, log) -> None:
    import os
    import queue
    import subprocess
    import sys
    import threading

    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loop_cli.main",
            "events",
            "--follow",
            "--format",
            "jsonl",
            "--type",
            "session.*",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    try:
        first = lines.get(timeout=15)  # the existing matching record
        assert json.loads(first)["deliveryId"] == "d1"
        # The existing records and the new ones come from one generator, with no gap:
        # the first new matching record is the next line (the filter drops dispatch.*).
        log.emit("dispatch.delivered", source="t", delivery_id="ignored")
        log.emit("session.closed", source="t", work_item="local:loop#1", delivery_id="new")
        got = json.loads(lines.get(timeout=15))
        assert got["type"] == "session.closed"
        assert got["deliveryId"] == "new"
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def test_unusable_state_store_is_one_line_exit_1(run_cli, write_config, isolated) -> None:
    write_config()
    (isolated / "state").mkdir()
    (isolated / "state" / "state.db").write_bytes(b"this is not sqlite" * 100)
    result = run_cli("item", "list")
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: state store {isolated / 'state' / 'state.db'}")
    assert len(result.output.strip().splitlines()) == 1


def test_event_log_path_that_is_a_directory_is_a_config_error(
    run_cli, write_config, isolated
) -> None:
    write_config({"eventLog": {"path": str(isolated)}})
    result = run_cli("events")
    assert result.exit_code == 2
    assert result.output == f"Error: event log {isolated} is not a file (key eventLog.path)\n"


def test_daemons_refuse_an_event_log_that_is_a_directory(run_cli, write_config, isolated) -> None:
    """The log never raises on write, so without this check every event would vanish."""
    write_config({"eventLog": {"path": str(isolated)}})
    assert run_cli("item", "open", "x").exit_code == 0  # the tracker needs no log
    result = run_cli("poll", "--once")
    assert result.exit_code == 2
    assert f"Error: event log {isolated} is not a file (key eventLog.path)" in result.output
