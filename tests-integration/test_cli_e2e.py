"""the-loop as an operator runs it: real processes, a real tmux server (private socket),
the bundled demo agent as harness, a real SQLite state file.

Every check reads what really happened: the agent's own conversation file, tmux's own
answers (`has-session`, `capture-pane`), the process's exit status.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from loop_tmux.testing import wait_for

pytestmark = pytest.mark.tmux

if shutil.which("tmux") is None:  # pragma: no cover - tmux is a documented requirement
    pytest.skip("tmux is not installed", allow_module_level=True)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    env.update(extra)
    return env


class Loop:
    """A config on a private tmux socket, and helpers to run `the-loop` against it."""

    def __init__(self, root: Path, socket: str) -> None:
        self.root = root
        self.socket = socket
        self.agent_dir = root / "agent"
        (root / "work").mkdir(parents=True)
        self.config = root / "config.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "stateDir": str(root / "state"),
                    "harness": {"cwd": str(root / "work")},
                    "routing": {"tmuxSocket": self.socket},
                    "polling": {"intervalSeconds": 0.3},
                }
            )
        )
        self.env = _clean_env(
            THE_LOOP_CONFIG=str(self.config),
            THE_LOOP_DEMO_AGENT_DIR=str(self.agent_dir),
            HOME=str(root),
            XDG_STATE_HOME=str(root / "xdg-state"),
            XDG_CONFIG_HOME=str(root / "xdg-config"),
        )

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, "-m", "loop_cli.main", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"the-loop {args} -> {done.returncode}\n{done.stdout}{done.stderr}"
            )
        return done

    def tmux(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            env=_clean_env(),
            timeout=30,
            check=False,
        )

    def sessions(self) -> list[dict[str, Any]]:
        return json.loads(self.run("sessions", "list", "--format", "json").stdout)

    def conversation(self, cid: str) -> list[dict[str, Any]]:
        path = self.agent_dir / f"{cid}.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def loop(tmp_path: Path, tmux_socket: str) -> Loop:
    return Loop(tmp_path, tmux_socket)  # tmux_socket ends our private server and its file


def test_poll_once_spawns_then_delivers(loop: Loop) -> None:
    ref = loop.run("item", "open", "Integration: make it green").stdout.strip()
    assert ref == "local:loop#1"
    out = loop.run("poll", "--once").stdout
    assert "0 new, 1 processed" in out  # `item open` already committed it to the inbox
    (row,) = loop.sessions()
    assert (row["ref"], row["status"], row["presence"]) == (ref, "active", "live")
    cid = row["conversationId"]
    assert wait_for(lambda: [r for r in loop.conversation(cid) if r.get("via") == "prompt"])

    loop.run("item", "comment", ref, "a comment with 'quotes', $(subshell) and\nnewlines")
    loop.run("poll", "--once")
    pasted = wait_for(lambda: [r for r in loop.conversation(cid) if r.get("via") == "paste"])
    assert pasted, loop.conversation(cid)
    assert "a comment with 'quotes', $(subshell) and\nnewlines" in pasted[0]["text"]
    starts = [r for r in loop.conversation(cid) if r.get("event") == "start"]
    assert len(starts) == 1  # delivered into the same process, not a respawn
    types = [json.loads(x)["type"] for x in loop.run("events", "--format", "jsonl").stdout.split()]
    assert "session.spawned" in types
    assert "dispatch.delivered" in types


def test_status_counts_live_and_dead_from_one_read(loop: Loop) -> None:
    for title in ("one", "two", "three"):
        loop.run("item", "open", title)
    loop.run("poll", "--once")
    rows = {r["ref"]: r for r in loop.sessions()}
    assert len(rows) == 3
    # Kill the agent of #2 (pane kept by remain-on-exit: dead), and the tmux session of #3.
    pid = int(
        loop.tmux(
            "list-panes", "-t", f"={rows['local:loop#2']['tmuxName']}:", "-F", "#{pane_pid}"
        ).stdout.split()[0]
    )
    os.kill(pid, signal.SIGKILL)
    loop.tmux("kill-session", "-t", f"={rows['local:loop#3']['tmuxName']}")
    assert wait_for(lambda: {r["presence"] for r in loop.sessions()} == {"live", "dead", "absent"})

    done = loop.run("status", "--format", "json", check=False)
    data = json.loads(done.stdout)
    s = data["sessions"]
    assert (s["registered"], s["live"], s["dead"], s["absent"], s["unknown"]) == (3, 1, 1, 1, 0)
    assert done.returncode == 0  # `poll --once` just ran: its heartbeat is fresh
    assert data["services"][0]["state"] == "fresh --once runs"


def test_poll_start_daemon_delivers_and_stops_cleanly_on_sigterm(loop: Loop) -> None:
    ref = loop.run("item", "open", "Daemon").stdout.strip()
    daemon = subprocess.Popen(
        [sys.executable, "-m", "loop_cli.main", "poll", "start"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=loop.env,
    )
    try:
        assert wait_for(lambda: loop.sessions() and loop.sessions()[0]["presence"] == "live")
        status = loop.run("status", check=False)
        assert status.returncode == 0, status.stdout
        assert f"poller:    running pid {daemon.pid}" in status.stdout
        cid = loop.sessions()[0]["conversationId"]
        loop.run("item", "comment", ref, "while the daemon runs")
        assert wait_for(
            lambda: any(
                "while the daemon runs" in str(r.get("text")) for r in loop.conversation(cid)
            )
        )
    finally:
        daemon.send_signal(signal.SIGTERM)
        _out, err = daemon.communicate(timeout=30)
    assert daemon.returncode == 0, err
    assert "stopped after" in err  # the daemon's log is on stderr
    assert "Traceback" not in err
    after = loop.run("status", check=False)
    assert after.returncode == 1
    assert "NOT RUNNING (stopped)" in after.stdout


def test_sessions_stop_keeps_scrollback_and_reset_forgets(loop: Loop) -> None:
    ref = loop.run("item", "open", "Stop me").stdout.strip()
    loop.run("poll", "--once")
    (row,) = loop.sessions()
    name = row["tmuxName"]
    assert wait_for(
        lambda: "waiting for messages" in loop.tmux("capture-pane", "-p", "-t", f"={name}:").stdout
    )
    loop.run("sessions", "stop", ref)
    (row,) = loop.sessions()
    assert (row["status"], row["presence"]) == ("closed", "dead")
    screen = loop.tmux("capture-pane", "-p", "-t", f"={name}:").stdout
    assert "waiting for messages" in screen  # the harness is gone, its output is not

    loop.run("sessions", "reset", ref)
    assert loop.tmux("has-session", "-t", f"={name}").returncode != 0
    assert loop.sessions() == []


def test_expected_failures_are_one_line_errors(loop: Loop) -> None:
    bad = loop.run("sessions", "stop", "not-a-ref", check=False)
    assert bad.returncode == 2
    assert bad.stderr.startswith("Error: invalid work item ref")
    assert len(bad.stderr.strip().splitlines()) == 1
    loop.config.write_text("routing:\n  tmuxSocket: [oops\n")
    broken = loop.run("status", check=False)
    assert broken.returncode == 2
    assert broken.stderr.startswith(f"Error: {loop.config}:")
    assert "Traceback" not in broken.stderr


def _one_line_error(done: subprocess.CompletedProcess, code: int, *fragments: str) -> None:
    assert done.returncode == code, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert all(line.startswith("Error: ") for line in lines), done.stderr
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in done.stderr, done.stderr


def test_every_kind_of_bad_input_is_named_on_one_line(loop: Loop) -> None:
    """Through the installed entry point: each bad input gets `Error: ...` naming what and
    where, exit 2 for usage/config and 1 for operational problems, and no traceback."""
    good = loop.config.read_text()
    loop.config.write_text(good + "pollng: {intervalSeconds: 1}\n")
    _one_line_error(loop.run("status", check=False), 2, f"{loop.config}: pollng: unknown key")
    loop.config.write_text(good.replace("intervalSeconds: 0.3", "intervalSeconds: soon"))
    _one_line_error(
        loop.run("status", check=False), 2, "polling.intervalSeconds: must be a number (got 'soon')"
    )
    loop.config.write_text(good)
    _one_line_error(loop.run("events", "--since", "last tuesday", check=False), 2, "--since")
    _one_line_error(loop.run("sessions", "start", "github:nope#x", check=False), 2, "nope#x")
    _one_line_error(loop.run("sessions", "restart", "--all", check=False), 2, "env.file")
    loop.config.write_text(good + f"env: {{file: {loop.root / 'gone.env'}}}\n")
    _one_line_error(
        loop.run("sessions", "restart", "--all", check=False), 2, "gone.env", "does not exist"
    )
    _one_line_error(loop.run("env", "doctor", check=False), 2, "gone.env")
    loop.config.write_text(good)
    state = loop.root / "state"
    assert not state.exists()  # the read-only commands above created nothing
    state.mkdir(mode=0o700)  # as the-loop makes it (a looser one is tightened, with a warning)
    (state / "state.db").write_bytes(b"not a database at all, hand-edited\n" * 40)
    (state / "state.db").chmod(0o600)  # private, as the-loop keeps it
    # status still answers: the unreadable store is its failing `store` health check.
    damaged = loop.run("status", check=False)
    assert damaged.returncode == 1
    assert "Traceback" not in damaged.stderr
    (line,) = [x for x in damaged.stdout.splitlines() if x.startswith("  store: ")]
    assert "state.db" in line
    assert "not a usable SQLite" in line
    _one_line_error(loop.run("item", "open", "x", check=False), 1, "state.db")
