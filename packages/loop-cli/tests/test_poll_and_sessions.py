"""poll --once, poll start, sessions list/start/stop/reset/attach on a private tmux server.

The harness is the bundled demo agent (the embedded default), which records every
message it receives in its conversation file: the tests read that file, not our own
claims, to see that a message arrived.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from loop_cli import heartbeat
from loop_dispatch import WorkItemRef
from loop_dispatch.store import Store

pytestmark = pytest.mark.tmux


def _record(isolated: Path, ref: str):
    store = Store.open(isolated / "state")
    try:
        return store.registry.get(WorkItemRef.parse(ref))
    finally:
        store.close()


def _tmux(socket: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    return subprocess.run(
        ["tmux", "-L", socket, *args], capture_output=True, text=True, env=env, check=False
    )


def test_poll_once_spawns_then_delivers(run_cli, loop_config, isolated, conversation, wait):
    ref = run_cli("item", "open", "Make it green").output.strip()
    first = run_cli("poll", "--once")
    assert first.exit_code == 0, first.output
    # `item open` committed the opening to the inbox itself: the poll finds it known.
    assert "0 new, 1 processed" in first.output
    rec = _record(isolated, ref)
    assert rec is not None
    assert rec.status == "active"
    assert wait(
        lambda: any(
            "Make it green" in str(r.get("text")) for r in conversation(rec.conversation_id)
        )
    )

    run_cli("item", "comment", ref, "second thoughts; see $(rm -rf /) `x`")
    second = run_cli("poll", "--once")
    assert second.exit_code == 0
    got = wait(lambda: [r for r in conversation(rec.conversation_id) if r.get("via") == "paste"])
    assert got
    assert "second thoughts; see $(rm -rf /) `x`" in got[0]["text"]

    idle = run_cli("poll", "--once")
    assert "0 new, 0 processed" in idle.output
    hb = json.loads(run_cli("status", "--format", "json").output)
    assert hb["lastPollCycle"]["result"] == "ok"
    assert hb["services"][0]["state"] == "fresh --once runs"


def test_poll_once_reports_source_errors_exit_1(run_cli, loop_config, monkeypatch):
    from loop_cli import tracker
    from loop_dispatch import PollBatch

    monkeypatch.setattr(
        tracker.LocalSource, "poll", lambda self, cursor: PollBatch([], cursor, errors=["boom"])
    )
    result = run_cli("poll", "--once")
    assert result.exit_code == 1
    assert "source error: boom" in result.output
    assert "Error: poll cycle had 1 source error(s), 0 give-up(s)" in result.output


def test_poll_without_once_or_subcommand_is_usage(run_cli, loop_config):
    assert run_cli("poll").exit_code == 2
    assert run_cli("poll", "--once", "start").exit_code == 2


def test_poll_start_runs_cycles_and_records_a_clean_stop(run_cli, loop_config, isolated):
    ref = run_cli("item", "open", "Daemon").output.strip()
    result = run_cli("poll", "start", "--cycles", "1")
    assert result.exit_code == 0, result.output
    assert "stopped after 1 cycle(s)" in result.output
    store = Store.open(isolated / "state")
    hb = heartbeat.read(store, "poller")
    done = store.inbox.counts()
    store.close()
    assert hb is not None
    assert hb.state == "stopped"
    assert done == {"done": 1}  # the drain delivered the opening before the stop
    assert _record(isolated, ref) is not None
    status = run_cli("status")
    assert status.exit_code == 1
    assert "poller:    NOT RUNNING (stopped)" in status.output


def test_github_tracker_without_token_is_a_config_error(run_cli, write_config, monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    write_config({"tracker": "github", "github": {"repositories": ["o/r"]}})
    result = run_cli("poll", "--once")
    assert result.exit_code == 2
    assert "github.tokenEnv=GITHUB_TOKEN is not set" in result.output


def test_sessions_list_stop_keeps_scrollback(run_cli, loop_config, isolated, tmux_socket, wait):
    ref = run_cli("item", "open", "Listed").output.strip()
    run_cli("poll", "--once")
    rows = json.loads(run_cli("sessions", "list", "--format", "json").output)
    assert [(r["ref"], r["status"], r["presence"]) for r in rows] == [(ref, "active", "live")]
    name = rows[0]["tmuxName"]
    assert wait(
        lambda: "demo-agent" in _tmux(tmux_socket, "capture-pane", "-p", "-t", f"={name}:").stdout
    )
    table = run_cli("sessions", "list")
    assert name in table.output
    assert "live" in table.output

    stopped = run_cli("sessions", "stop", ref)
    assert stopped.exit_code == 0, stopped.output
    assert "stopped" in stopped.output
    rows = json.loads(run_cli("sessions", "list", "--format", "json").output)
    assert (rows[0]["status"], rows[0]["presence"]) == ("closed", "dead")
    # The pane is kept, with what the agent printed.
    assert "demo-agent" in _tmux(tmux_socket, "capture-pane", "-p", "-t", f"={name}:").stdout
    again = run_cli("sessions", "stop", ref)
    assert again.exit_code == 0
    assert "already-closed" in again.output
    missing = run_cli("sessions", "stop", "local:loop#42")
    assert missing.exit_code == 1
    assert "no session registered" in missing.output


def test_sessions_start_spawns_and_is_idempotent(run_cli, loop_config, isolated):
    ref = run_cli("item", "open", "Manual").output.strip()
    started = run_cli("sessions", "start", ref)
    assert started.exit_code == 0, started.output
    assert "processed" in started.output
    assert _record(isolated, ref).status == "active"
    again = run_cli("sessions", "start", ref)
    assert "already-running" in again.output
    unknown = run_cli("sessions", "start", "local:loop#77")
    assert unknown.exit_code == 2


def test_sessions_reset(run_cli, loop_config, isolated, tmux_socket):
    ref = run_cli("item", "open", "Reset me").output.strip()
    run_cli("poll", "--once")
    name = _record(isolated, ref).tmux_name
    assert run_cli("sessions", "reset").exit_code == 2
    assert run_cli("sessions", "reset", ref, "--all").exit_code == 2

    dry = run_cli("sessions", "reset", "--all", "--dry-run")
    assert dry.exit_code == 0
    assert f"would reset {ref} (live)" in dry.output
    assert _tmux(tmux_socket, "has-session", "-t", f"={name}").returncode == 0
    assert _record(isolated, ref) is not None

    done = run_cli("sessions", "reset", ref)
    assert done.exit_code == 0, done.output
    assert "terminated, killed, forgotten" in done.output
    assert _tmux(tmux_socket, "has-session", "-t", f"={name}").returncode != 0
    assert _record(isolated, ref) is None
    # The next event starts afresh.
    run_cli("item", "comment", ref, "hello again")
    assert "1 processed" in run_cli("poll", "--once").output
    assert _record(isolated, ref).status == "active"


def test_sessions_attach_execs_tmux_with_socket_and_exact_name(
    run_cli, loop_config, isolated, tmux_socket, monkeypatch
):
    ref = run_cli("item", "open", "Attach").output.strip()
    calls = []
    not_yet = run_cli("sessions", "attach", ref)
    assert not_yet.exit_code == 1
    run_cli("poll", "--once")
    monkeypatch.setenv("TMUX", "/tmp/someone-else,1,0")
    monkeypatch.setattr(os, "execvpe", lambda f, argv, env: calls.append((f, argv, env)))
    result = run_cli("sessions", "attach", ref)
    assert result.exit_code == 0, result.output
    name = _record(isolated, ref).tmux_name
    assert calls[0][1] == ["tmux", "-L", tmux_socket, "attach-session", "-t", f"={name}"]
    assert "TMUX" not in calls[0][2]


def test_status_counts_and_exit_code(run_cli, write_config, tmux_socket, isolated, monkeypatch):
    (isolated / "work").mkdir()
    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "harness": {"cwd": str(isolated / "work")},
            "services": {"poller": False},
        }
    )
    for title in ("a", "b", "c"):
        run_cli("item", "open", title)
    run_cli("poll", "--once")
    run_cli("sessions", "stop", "local:loop#3")
    # Kill b's tmux session behind the-loop's back: registered but absent.
    name_b = _record(isolated, "local:loop#2").tmux_name
    _tmux(tmux_socket, "kill-session", "-t", f"={name_b}")
    result = run_cli("status", "--format", "json")
    assert result.exit_code == 0, result.output  # no enabled service
    data = json.loads(result.output)
    counts = data["sessions"]
    assert (counts["registered"], counts["live"], counts["absent"], counts["closed"]) == (
        2,
        1,
        1,
        1,
    )
    assert data["ok"] is True
    text = run_cli("status")
    assert (
        "sessions:  2 registered: 1 live, 0 dead, 1 absent, 0 unknown, 0 hibernated (1 closed)"
        in text.output
    )
    assert "poller:    disabled" in text.output

    from loop_tmux import Tmux, TmuxUnavailable

    def silent(self, **kw):
        raise TmuxUnavailable("timed out")

    monkeypatch.setattr(Tmux, "panes", silent)
    data = json.loads(run_cli("status", "--format", "json").output)
    assert data["sessions"]["unknown"] == 2
    assert data["sessions"]["absent"] == 0
    assert data["sessions"]["tmuxError"] == "timed out"


def test_status_exit_code_follows_enabled_services(run_cli, write_config, tmux_socket, isolated):
    write_config({"routing": {"tmuxSocket": tmux_socket}, "services": {"webhook": True}})
    assert run_cli("status").exit_code == 1
    store = Store.open(isolated / "state")
    from datetime import datetime, timezone

    now = datetime.now(timezone.utc)
    heartbeat.beat(store, "poller", stale_after=60, started=now)
    assert run_cli("status").exit_code == 1  # webhook still not running
    heartbeat.beat(store, "webhook", stale_after=60, started=now)
    result = run_cli("status")
    assert result.exit_code == 0, result.output
    assert "webhook:   running" in result.output
    heartbeat.stopped(store, "webhook", started=now)
    store.close()
    assert run_cli("status").exit_code == 1
    assert run_cli("status", "--post").exit_code == 2


def test_close_keeps_harness_when_configured_but_stop_ends_it(
    run_cli, write_config, tmux_socket, isolated
):
    (isolated / "work").mkdir()
    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "harness": {"cwd": str(isolated / "work")},
            "sessions": {"killHarnessOnClose": False},
        }
    )
    closed = run_cli("item", "open", "closed by the tracker").output.strip()
    stopped = run_cli("item", "open", "stopped by the operator").output.strip()
    run_cli("poll", "--once")
    run_cli("item", "close", closed)
    run_cli("poll", "--once")
    rows = {r["ref"]: r for r in json.loads(run_cli("sessions", "list", "--format", "json").output)}
    assert (rows[closed]["status"], rows[closed]["presence"]) == ("closed", "live")
    assert run_cli("sessions", "stop", stopped).exit_code == 0
    rows = {r["ref"]: r for r in json.loads(run_cli("sessions", "list", "--format", "json").output)}
    assert (rows[stopped]["status"], rows[stopped]["presence"]) == ("closed", "dead")


def test_read_only_commands_create_no_state(run_cli, write_config, tmux_socket, isolated):
    """status, sessions list, item list and env doctor read; they never create state."""
    (isolated / "app.env").write_text("TOKEN=x\n")
    write_config({"routing": {"tmuxSocket": tmux_socket}, "env": {"file": "app.env"}})
    state = isolated / "state"
    result = run_cli("status")
    assert result.exit_code == 1  # the poller is enabled and not running
    assert f"state:     {state} (none yet: nothing has run)" in result.output
    data = json.loads(run_cli("status", "--format", "json").output)
    assert data["stateExists"] is False
    assert data["sessions"]["registered"] == 0
    assert run_cli("sessions", "list").output.strip() == "no sessions registered"
    assert run_cli("item", "list").output.startswith("no items")
    assert run_cli("env", "doctor").exit_code == 0
    assert not state.exists()
    assert run_cli("item", "open", "first").exit_code == 0
    assert (state / "state.db").is_file()
    assert json.loads(run_cli("status", "--format", "json").output)["stateExists"] is True
    (isolated / "app.env").unlink()
    gone = run_cli("status")
    assert gone.exit_code == 1  # unchanged by the env file's absence
    assert "env file:  drift not checked: env file" in gone.output
    assert "does not exist" in gone.output


def test_dispatch_waits_at_most_dispatch_timeout_for_the_item_lock(
    run_cli, write_config, tmux_socket, isolated
):
    """routing.dispatchTimeoutSeconds bounds the wait behind another holder of the item's
    lock: the dispatch then fails (exit 1, one line) instead of hanging."""
    from loop_dispatch.lock import item_lock

    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket, "dispatchTimeoutSeconds": 0.3},
            "harness": {"cwd": str(isolated)},
        }
    )
    ref = run_cli("item", "open", "busy").output.strip()
    with item_lock(isolated / "state" / "locks", WorkItemRef.parse(ref), timeout=5):
        result = run_cli("sessions", "start", ref)
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == (
        f"Error: could not start {ref}: work item {ref} is locked by another process"
    )
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_harness_survival_seconds_catches_a_harness_slow_to_die(
    run_cli, write_config, tmux_socket, isolated
):
    """harness.survivalSeconds: a harness that dies 1.2 s after starting (say, a slow
    start that then refuses its arguments) passes the default 1 s window and takes the
    event with it; a 2.5 s window catches it, and the event stays to be retried."""
    (isolated / "work").mkdir(exist_ok=True)
    dies_late = ["sh", "-c", "sleep 1.2; exit 1", "harness", "{prompt}"]
    base = {"routing": {"tmuxSocket": tmux_socket}}
    write_config({**base, "harness": {"cwd": str(isolated / "work"), "argv": dies_late}})
    first = run_cli("item", "open", "one").output.strip()
    assert run_cli("sessions", "start", first).exit_code == 0  # 1 s: counted as started
    write_config(
        {
            **base,
            "harness": {"cwd": str(isolated / "work"), "argv": dies_late, "survivalSeconds": 2.5},
        }
    )
    second = run_cli("item", "open", "two").output.strip()
    caught = run_cli("sessions", "start", second)
    assert caught.exit_code == 1, caught.output
    assert "exited within 2.5s" in caught.output
    assert _record(isolated, second) is None  # undone: the next attempt starts afresh


def test_survival_seconds_reaches_the_dispatcher_and_sessions_restart(
    write_config, tmux_socket, isolated
):
    from loop_cli.config import load_config
    from loop_cli.runtime import Runtime

    env_file = isolated / "agent.env"
    env_file.write_text("API_TOKEN=x\n", encoding="utf-8")
    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "harness": {"cwd": str(isolated), "survivalSeconds": 4},
            "env": {"file": str(env_file)},
        }
    )
    rt = Runtime(load_config(None))
    try:
        assert rt.dispatcher.survival_delay == 4.0
        assert rt.restart_deps().survival_delay == 4.0
    finally:
        rt.close()


def test_second_poll_daemon_on_one_state_dir_is_refused(run_cli, loop_config, isolated):
    """Two pollers would share one heartbeat: the first to stop would mark the other
    "stopped" while it still runs. The second refuses to start (exit 1) and touches nothing."""
    import fcntl

    assert run_cli("poll", "start", "--cycles", "1").exit_code == 0  # creates the state dir
    lock_file = isolated / "state" / "locks" / "_poller.daemon"
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a+") as held:  # what a running `poll start` holds
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        second = run_cli("poll", "start", "--cycles", "1")
    assert second.exit_code == 1, second.output
    assert "Error: a poller daemon is already running on state dir" in second.output
    assert "Traceback" not in second.output
    assert "cycle(s)" not in second.output
    store = Store.open(isolated / "state")
    hb = heartbeat.read(store, "poller")
    store.close()
    assert hb is not None
    assert hb.state == "stopped"  # the first run's record, untouched
    again = run_cli("poll", "start", "--cycles", "1")  # once released, it starts
    assert again.exit_code == 0, again.output


@pytest.mark.parametrize(
    "command",
    [("poll", "--once"), ("poll", "start", "--cycles", "1"), ("sessions", "start", "local:loop#1")],
)
def test_missing_harness_binary_is_refused_before_any_event_is_consumed(
    command, run_cli, write_config, tmux_socket, isolated
):
    """A harness that cannot start dies in its pane at once; the dispatcher would count
    the spawn as processed and the opening event would be used up. Refuse up front."""
    (isolated / "work").mkdir(exist_ok=True)
    missing = "no-such-agent-bin-7f3a"
    base = {"routing": {"tmuxSocket": tmux_socket}, "harness": {"cwd": str(isolated / "work")}}
    write_config({**base, "harness": {**base["harness"], "argv": [missing, "{prompt}"]}})
    ref = run_cli("item", "open", "Never lost").output.strip()
    refused = run_cli(*command)
    assert refused.exit_code == 2, refused.output
    assert refused.output.count("\n") == 1
    assert f"harness.argv[0]: harness binary {missing!r} is not found on PATH" in refused.output
    assert _record(isolated, ref) is None
    write_config(base)  # fixed: the opening event is still there to be handled
    fixed = run_cli("poll", "--once")
    assert "0 new, 1 processed" in fixed.output, fixed.output
    assert _record(isolated, ref) is not None


def test_env_file_gone_mid_run_dispatches_nothing_until_it_returns(
    run_cli, write_config, tmux_socket, isolated
):
    """With env.file set every pane starts under the launcher, which cannot start the
    harness without the file: a spawn then would die at once and use up its event."""
    from loop_cli.config import load_config
    from loop_cli.errors import ConfigError
    from loop_cli.poller import drain_once
    from loop_cli.runtime import Runtime

    (isolated / "work").mkdir(exist_ok=True)
    env_file = isolated / "agent.env"
    env_file.write_text("API_TOKEN=t0ken-value\n", encoding="utf-8")
    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "harness": {"cwd": str(isolated / "work")},
            "env": {"file": str(env_file)},
        }
    )
    ref = run_cli("item", "open", "Keep me").output.strip()
    env_file.rename(isolated / "agent.env.moved")  # deleted while the daemon runs
    refused = run_cli("poll", "--once")
    assert refused.exit_code == 2, refused.output
    assert "env.file:" in refused.output
    assert "does not exist" in refused.output
    rt = Runtime(load_config(None))
    try:
        with pytest.raises(ConfigError, match=r"env\.file"):
            drain_once(rt)
    finally:
        rt.close()
    assert _record(isolated, ref) is None
    (isolated / "agent.env.moved").rename(env_file)
    back = run_cli("poll", "--once")
    assert "0 new, 1 processed" in back.output, back.output
    assert _record(isolated, ref) is not None


def test_reset_ref_clears_a_registry_row_the_store_refuses(run_cli, loop_config, isolated):
    """A hand-edited row naming another session is refused on read; `sessions reset REF`
    is the operator's remedy, so it deletes the row without trusting (or touching) the
    name it holds."""
    import sqlite3

    ref = run_cli("item", "open", "Hand edited").output.strip()
    store = Store.open(isolated / "state")
    store.registry.register(WorkItemRef.parse(ref), harness="generic", conversation_id="c", cwd="/")
    store.close()
    conn = sqlite3.connect(isolated / "state" / "state.db")
    with conn:
        conn.execute("UPDATE sessions SET tmux_name = 'bystander' WHERE work_item = ?", (ref,))
    conn.close()
    listed = run_cli("sessions", "list")  # the row is quarantined, never used
    assert listed.exit_code == 0, listed.output
    assert f"quarantined sessions row '{ref}'" in listed.output
    reset = run_cli("sessions", "reset", ref)
    assert reset.exit_code == 0, reset.output
    assert "forgotten" in reset.output
    conn = sqlite3.connect(isolated / "state" / "state.db")
    left = conn.execute("SELECT count(*) FROM sessions WHERE work_item = ?", (ref,)).fetchone()
    conn.close()
    assert left == (0,)
    assert "no sessions registered" in run_cli("sessions", "list").output


def test_sessions_stop_that_cannot_close_says_so(run_cli, loop_config, isolated, wait):
    """A close the dispatcher refuses (here: the lock dir is a file) is exit 1, one line,
    never reported as "stopped"; the record stays active."""
    import shutil

    ref = run_cli("item", "open", "Unstoppable").output.strip()
    run_cli("poll", "--once")
    locks = isolated / "state" / "locks"
    shutil.rmtree(locks)
    locks.write_text("not a directory\n")
    result = run_cli("sessions", "stop", ref)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"Error: could not stop {ref}: ")
    assert str(locks) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "stopped" not in result.stdout
    rows = json.loads(run_cli("sessions", "list", "--format", "json").output)
    assert rows[0]["status"] == "active"


def test_poll_once_says_what_failed_and_exits_1(run_cli, write_config, tmux_socket):
    """Issue 21 point 3: a spawn that fails for a missing folder is one line with its
    reason and error, and a definite failure is exit 1 (cron mail says so)."""
    # The project's folder is gone (harness.cwd itself missing is refused up front).
    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "harness": {"cwdByProject": {"loop": "/no/such/dir"}},
        }
    )
    ref = run_cli("item", "open", "Folder gone").output.strip()
    result = run_cli("poll", "--once")
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("failed:")]
    assert len(lines) == 1, result.output
    assert f"{ref} opened:local:1: spawn_failed (definite, attempt 1;" in lines[0]
    assert "working directory /no/such/dir does not exist" in lines[0]
    assert "1 to retry" in result.output
    assert "1 event(s) failed definitively" in result.output


def test_poll_once_counts_events_not_tries(run_cli, write_config, tmux_socket, isolated):
    """While one item's harness starts (its survival window), another item's event fails
    fast and, with a short backoff, is tried again in the same run until given up: that
    is ONE event given up, not "2 to retry, 1 gave up"; each try has its own line."""
    (isolated / "work").mkdir(exist_ok=True)
    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "harness": {
                "cwd": str(isolated / "work"),
                "cwdByProject": {"broken": "/no/such/dir"},
                "survivalSeconds": 2,
            },
            "delivery": {"backoffSeconds": 0.01, "maxBackoffSeconds": 0.01, "maxAttempts": 3},
        }
    )
    good = run_cli("item", "open", "Fine").output.strip()
    bad = run_cli("item", "open", "Folder gone", "--project", "broken").output.strip()
    result = run_cli("poll", "--once")
    assert result.exit_code == 1, result.output
    assert "1 processed, 0 to retry" in result.output
    assert "1 gave up" in result.output
    tried = [line for line in result.output.splitlines() if bad in line]
    assert [line.split(":")[0] for line in tried] == ["failed", "failed", "GAVE UP"]
    assert "re-arm with `the-loop inbox retry" in tried[-1]
    assert not [line for line in result.output.splitlines() if good in line]  # succeeded


def test_poll_once_transient_failure_stays_exit_0(run_cli, write_config, tmux_socket, isolated):
    """A transient failure (the item's lock held by another process) is said, but only a
    definite failure or a give-up fails the run: the inbox retries it."""
    from loop_dispatch.lock import item_lock

    (isolated / "work").mkdir(exist_ok=True)
    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket, "dispatchTimeoutSeconds": 0.2},
            "harness": {"cwd": str(isolated / "work")},
        }
    )
    ref = run_cli("item", "open", "later").output.strip()
    with item_lock(isolated / "state" / "locks", WorkItemRef.parse(ref)):
        result = run_cli("poll", "--once")
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("failed:")]
    assert f"{ref} opened:local:1: item_locked (transient;" in line
    assert "1 to retry" in result.output
