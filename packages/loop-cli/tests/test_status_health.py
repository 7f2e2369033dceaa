"""`status` is ok only while work flows (issue 21, point 1): each health check, in text,
JSON and Slack, with its reason and remedy, and the exit code alone telling a monitor.

The poller's heartbeat is written as a live daemon writes it (this test process's pid,
fresh), so every check but the one under test is ok; the store, inbox rows and tmux
server are real.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from loop_cli import heartbeat
from loop_dispatch.store import Store


def _beat(isolated: Path, detail: dict[str, Any], *, stale_after: float = 300.0) -> None:
    """A running poller's heartbeat, as `poll start` writes it after a cycle."""
    store = Store.open(isolated / "state")
    try:
        now = datetime.now(timezone.utc)
        heartbeat.beat(
            store, "poller", stale_after=stale_after, started=now, detail=detail, host=None
        )
    finally:
        store.close()


def _health(result: Any) -> dict[str, dict[str, str]]:
    data = json.loads(result.output)
    return {c["check"]: c for c in data["health"]}


OK_CYCLE = {"mode": "daemon", "lastCycle": {"at": "now", "result": "ok", "new": 0}}


def test_all_checks_ok_while_work_flows(run_cli, loop_config, isolated):
    run_cli("item", "open", "flows")
    assert run_cli("poll", "--once").exit_code == 0  # delivered: nothing waits
    _beat(isolated, {**OK_CYCLE, "failedCycles": 0})
    result = run_cli("status", "--format", "json")
    assert result.exit_code == 0, result.output
    checks = _health(result)
    assert set(checks) == {"poller", "poll-cycles", "inbox", "store", "tmux", "memory"}
    assert {c["state"] for c in checks.values()} == {"ok"}
    assert json.loads(result.output)["ok"] is True
    assert "health:    ok" in run_cli("status").output


def test_failing_poll_cycles_make_status_not_ok(run_cli, loop_config, isolated):
    run_cli("item", "open", "x")
    assert run_cli("poll", "--once").exit_code == 0
    error = "ConfigError: config.yaml: env.file: /etc/app.env: no such file"
    cycle = {"at": "2026-01-01T00:00:00+00:00", "result": "error", "error": error}
    _beat(isolated, {"mode": "daemon", "lastCycle": cycle, "failedCycles": 3})

    as_json = run_cli("status", "--format", "json")
    assert as_json.exit_code == 1
    assert json.loads(as_json.output)["ok"] is False
    failing = _health(as_json)["poll-cycles"]
    assert failing["state"] == "failing"
    assert "the last 3 poll cycles failed" in failing["reason"]
    assert "env.file" in failing["reason"]
    assert "poll.error" in failing["remedy"]

    text = run_cli("status")
    assert text.exit_code == 1
    assert "health:    NOT OK: 1 of 6 check(s) failing" in text.output
    assert f"last poll: 2026-01-01T00:00:00+00:00 FAILED: {error}" in text.output
    assert "remedy: fix what the error names" in text.output

    slack = run_cli("status", "--format", "slack")
    assert slack.exit_code == 1
    payload = json.loads(slack.output)
    assert payload["blocks"][0]["text"]["text"] == "the-loop: NOT OK: poll-cycles"
    assert "the last 3 poll cycles failed" in json.dumps(payload)


def test_one_failed_cycle_is_not_yet_a_failure(run_cli, loop_config, isolated):
    """A single transient failure must not page anyone: two in a row do."""
    run_cli("item", "open", "x")
    run_cli("poll", "--once")
    cycle = {"at": "now", "result": "error", "error": "StoreError: busy"}
    _beat(isolated, {"mode": "daemon", "lastCycle": cycle, "failedCycles": 1})
    assert run_cli("status").exit_code == 0
    _beat(isolated, {"mode": "daemon", "lastCycle": cycle, "failedCycles": 2})
    assert run_cli("status").exit_code == 1


def test_inbox_without_progress_makes_status_not_ok(run_cli, write_config, isolated, tmux_socket):
    # The harness cannot start (its folder is gone): the opening waits in the inbox.
    # The project's folder is gone (harness.cwd itself missing is refused up front).
    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "harness": {"cwdByProject": {"loop": "/no/such/dir"}},
        }
    )
    ref = run_cli("item", "open", "stuck").output.strip()
    run_cli("poll", "--once")
    _beat(isolated, {**OK_CYCLE, "failedCycles": 0})
    fresh = run_cli("status", "--format", "json")
    assert _health(fresh)["inbox"]["state"] == "ok"  # young: not yet a stall

    store = Store.open(isolated / "state")
    long_ago = (datetime.now(timezone.utc) - timedelta(hours=2)).isoformat()
    with store.transaction() as conn:
        conn.execute("UPDATE inbox SET received_at = ?, armed_at = NULL", (long_ago,))
    store.close()

    result = run_cli("status", "--format", "json")
    assert result.exit_code == 1
    inbox = _health(result)["inbox"]
    assert inbox["state"] == "failing"
    assert f"the oldest ({ref} opened:local:1) for 2h00m" in inbox["reason"]
    assert "spawn_failed: working directory /no/such/dir does not exist" in inbox["reason"]
    assert "the-loop inbox list" in inbox["remedy"]


def test_unreadable_store_is_a_failing_check_not_a_crash(run_cli, loop_config, isolated):
    state = isolated / "state"
    state.mkdir()
    (state / "state.db").write_bytes(b"this is not a database" * 100)
    result = run_cli("status", "--format", "json")
    assert result.exit_code == 1
    data = json.loads(result.output)  # status still answers, as JSON
    store = {c["check"]: c for c in data["health"]}["store"]
    assert store["state"] == "failing"
    assert "the state store cannot be read" in store["reason"]
    assert "state directory" in store["remedy"]
    assert data["ok"] is False


def test_tmux_that_does_not_answer_is_a_failing_check(
    run_cli, loop_config, isolated, monkeypatch: pytest.MonkeyPatch
):
    run_cli("item", "open", "x")
    run_cli("poll", "--once")
    _beat(isolated, {**OK_CYCLE, "failedCycles": 0})
    empty = isolated / "no-tmux-here"
    empty.mkdir()
    with monkeypatch.context() as patch:  # PATH back before the fixtures end the server
        patch.setenv("PATH", str(empty))  # tmux cannot be run: it does not answer
        result = run_cli("status", "--format", "json")
    assert result.exit_code == 1
    tmux = _health(result)["tmux"]
    assert tmux["state"] == "failing"
    assert tmux["reason"].startswith("tmux did not answer")
    assert "list-sessions" in tmux["remedy"]


def test_stale_heartbeat_names_the_daemon_and_the_remedy(run_cli, loop_config, isolated):
    run_cli("item", "open", "x")
    run_cli("poll", "--once")
    _beat(isolated, {**OK_CYCLE, "failedCycles": 0}, stale_after=0.01)
    time.sleep(0.05)  # the beat is older than stale_after by the clock, however fast status is
    result = run_cli("status", "--format", "json")
    assert result.exit_code == 1
    poller = _health(result)["poller"]
    assert poller["state"] == "failing"
    assert "heartbeat stale: last beat" in poller["reason"]
    assert f"(pid {os.getpid()})" in poller["reason"]
    assert "restart it" in poller["remedy"]


def test_capacity_line_memory_figures_and_the_memory_warning(
    run_cli, write_config, tmux_socket, isolated
):
    """Issue 25: with `host.maxLive: 1`, a second item waits for a slot; `status` says
    `1/1 live, 1 waiting for a slot` and the live session's memory (its pane's process
    tree, real processes); past `host.memoryWarnShare` the `memory` check warns, which
    leaves `ok` (and the exit code) alone. `sessions list` shows each one's memory."""
    (isolated / "work").mkdir(exist_ok=True)
    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "harness": {"cwd": str(isolated / "work")},
            "host": {"maxLive": 1, "memoryWarnShare": 0.000001},
        }
    )
    run_cli("item", "open", "first")
    run_cli("item", "open", "second")
    assert run_cli("poll", "--once").exit_code == 0  # the wait is transient, not a failure
    _beat(isolated, {**OK_CYCLE, "failedCycles": 0})

    result = run_cli("status", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    capacity = data["capacity"]
    assert (capacity["live"], capacity["maxLive"], capacity["waiting"]) == (1, 1, 1)
    [one] = capacity["memory"]["sessions"]
    assert one["rssBytes"] > 1 << 20  # a real process tree, not a placeholder
    assert capacity["memory"]["totalBytes"] == one["rssBytes"]
    memory = _health(result)["memory"]
    assert memory["state"] == "warning"
    assert "host.memoryWarnShare" in memory["reason"]
    assert data["ok"] is True
    text = run_cli("status").output
    assert "capacity:  1/1 live, 1 waiting for a slot, 0 hibernated" in text
    assert "WARNING:   memory: harnesses hold" in text

    rows = json.loads(run_cli("sessions", "list", "-o", "json").output)
    [live] = [r for r in rows if r["presence"] == "live"]
    assert live["rssBytes"] == one["rssBytes"] or live["rssBytes"] > 1 << 20
    assert "memory: " in run_cli("sessions", "list").output
