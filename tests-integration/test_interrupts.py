"""Ctrl-C and SIGTERM leave a record (issue 21, point 11), with real processes, a real
tmux server on a private socket and real signals: `sessions reset --all` finishes the
session under way and stops; `poll --once` lets the attempt under way settle and
leaves the rest in the inbox. Each prints its partial summary, writes a
`command.interrupted` record and exits 130 (SIGINT) / 143 (SIGTERM).
(`sessions restart --all` is in test_rotation_e2e.py.)"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from loop_dispatch import WorkItemRef
from loop_dispatch.lock import lock_path
from loop_tmux.testing import wait_for

pytestmark = [
    pytest.mark.tmux,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs a tmux binary"),
]

# An agent that ignores SIGTERM: ending it takes the whole terminate grace (5 s).
STUBBORN = ["/bin/sh", "-c", "trap '' TERM; while :; do sleep 1; done", "{prompt}"]


def the_loop() -> list[str]:
    script = Path(sys.executable).parent / "the-loop"
    return [str(script)] if script.exists() else [sys.executable, "-m", "loop_cli.main"]


class Loop:
    def __init__(self, root: Path, socket: str, **harness: object) -> None:
        self.root, self.socket = root, socket
        (root / "work").mkdir()
        self.config = root / "config.json"
        self.config.write_text(
            json.dumps(
                {
                    "stateDir": str(root / "state"),
                    "routing": {"tmuxSocket": socket},
                    "services": {"poller": False},
                    "delivery": {"concurrency": 1},
                    "harness": {
                        "adapter": "generic",
                        "argv": STUBBORN,
                        "cwd": str(root / "work"),
                        **harness,
                    },
                }
            )
        )
        self.env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        self.env["THE_LOOP_CONFIG"] = str(self.config)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*the_loop(), *args], env=self.env, capture_output=True, text=True, timeout=90
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*the_loop(), *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def has_session(self, name: str) -> bool:
        done = subprocess.run(
            ["tmux", "-L", self.socket, "has-session", "-t", f"={name}"],
            env=self.env,
            capture_output=True,
            check=False,
        )
        return done.returncode == 0

    def events(self, type_: str) -> list[dict]:
        path = self.root / "state" / "events.jsonl"
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        return [e for e in lines if e["type"] == type_]

    def locked(self, ref: str) -> bool:
        """Whether another process holds the item's lock now."""
        path = lock_path(self.root / "state" / "locks", WorkItemRef.parse(ref))
        if not path.exists():
            return False
        with open(path, "a+") as probe:
            try:
                fcntl.flock(probe.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(probe.fileno(), fcntl.LOCK_UN)
            return False


def _finish(proc: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigint_during_reset_all_finishes_one_session_and_stops(
    tmp_path: Path, tmux_socket: str
) -> None:
    loop = Loop(tmp_path, tmux_socket)
    refs = [loop.run("item", "open", f"t{n}").stdout.strip() for n in range(3)]
    for ref in refs:
        assert loop.run("sessions", "start", ref).returncode == 0
    names = [WorkItemRef.parse(ref).tmux_name() for ref in refs]
    assert all(loop.has_session(n) for n in names)

    proc = loop.start("sessions", "reset", "--all")
    # The reset holds the first item's lock while it waits out its agent's grace.
    assert wait_for(lambda: loop.locked(refs[0]), timeout=30), "the reset never began"
    proc.send_signal(signal.SIGINT)
    out, err = _finish(proc)

    assert proc.returncode == 130, (out, err)
    assert "Aborted!" not in err
    assert "Traceback" not in err
    assert f"reset {refs[0]}: terminated, killed, forgotten" in out
    assert f"interrupted by SIGINT: reset 1 of 3; not reset: {refs[1]}, {refs[2]}" in err
    assert not loop.has_session(names[0])
    assert loop.has_session(names[1])
    assert loop.has_session(names[2])
    (record,) = loop.events("command.interrupted")
    assert record["detail"] == {
        "command": "sessions reset",
        "signal": "SIGINT",
        "counts": {"reset": 1, "not_reset": 2},
    }


def test_sigterm_during_poll_once_settles_the_attempt_under_way(
    tmp_path: Path, tmux_socket: str
) -> None:
    loop = Loop(tmp_path, tmux_socket, survivalSeconds=1.5)
    refs = [loop.run("item", "open", f"t{n}").stdout.strip() for n in range(3)]
    first = WorkItemRef.parse(refs[0]).tmux_name()

    proc = loop.start("poll", "--once")
    # One attempt at a time (concurrency 1): the first agent's survival window is on.
    assert wait_for(lambda: loop.has_session(first), timeout=30), "no spawn happened"
    proc.send_signal(signal.SIGTERM)
    out, err = _finish(proc)

    assert proc.returncode == 143, (out, err)
    assert "Traceback" not in err
    assert "0 new, 1 processed, 0 to retry" in out, out
    assert "interrupted by SIGTERM" in err
    pending = json.loads(loop.run("inbox", "list", "--format", "json").stdout)
    assert sorted(row["workItem"] for row in pending) == sorted(refs[1:])
    (record,) = loop.events("command.interrupted")
    assert record["detail"]["command"] == "poll --once"
    assert record["detail"]["signal"] == "SIGTERM"
    assert record["detail"]["counts"]["processed"] == 1
    status = json.loads(loop.run("status", "--format", "json").stdout)
    assert status["lastPollCycle"]["interrupted"] == "SIGTERM"
