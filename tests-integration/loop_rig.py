"""A the-loop deployment for one test: a config on a private tmux socket, the bundled
demo agent as harness, and helpers to run `the-loop` and its daemons against it (real
processes; conftest.py puts this folder on sys.path)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml


def the_loop() -> str:
    script = Path(sys.executable).parent / "the-loop"
    return str(script) if script.exists() else shutil.which("the-loop") or "the-loop"


class Loop:
    """A config on a private tmux socket; the demo agent as harness; a tiny interval."""

    def __init__(self, root: Path, socket: str) -> None:
        (root / "work").mkdir(parents=True)
        self.root = root
        self.socket = socket
        self.config = root / "config.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "stateDir": str(root / "state"),
                    "harness": {"cwd": str(root / "work")},
                    "routing": {"tmuxSocket": socket},
                    "polling": {"intervalSeconds": 0.3},
                }
            )
        )
        self.env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        self.env.update(
            THE_LOOP_CONFIG=str(self.config),
            THE_LOOP_DEMO_AGENT_DIR=str(root / "agent"),
            HOME=str(root),
            XDG_STATE_HOME=str(root / "xdg-state"),
            XDG_CONFIG_HOME=str(root / "xdg-config"),
            PYTHONUNBUFFERED="1",
        )

    def run(
        self, *args: str, codes: tuple[int, ...] = (0, 1), input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`the-loop ARGS...` (`input` on its stdin); an exit code outside `codes` fails
        the test."""
        done = subprocess.run(
            [sys.executable, "-m", "loop_cli.main", *args],
            input=input,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
            check=False,
        )
        assert done.returncode in codes, f"the-loop {args}: {done.stdout}{done.stderr}"
        return done

    def daemon(self, out: Path) -> subprocess.Popen[bytes]:
        """`poll start` in a new session: its own process group, as systemd starts it."""
        with open(out, "wb") as sink:
            return subprocess.Popen(
                # debug: an idle cycle is logged too, so a test sees the daemon cycling
                [sys.executable, "-m", "loop_cli.main", "poll", "start", "--log-level", "debug"],
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def sessions(self) -> list[dict[str, Any]]:
        return json.loads(self.run("sessions", "list", "--format", "json").stdout)

    def poller_heartbeat(self) -> str | None:
        data = json.loads(self.run("status", "--format", "json").stdout)
        for service in data["services"]:
            if service.get("name") == "poller":
                return service.get("lastBeat")
        return None

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=30,
            check=False,
        )

    def conversation(self, cid: str) -> list[dict[str, Any]]:
        """The demo agent's records of conversation `cid` (empty while none exists)."""
        path = self.root / "agent" / f"{cid}.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cycled(log: str) -> bool:
    """Whether a `poll start` log shows a completed cycle (an idle one at debug)."""
    return " poll.cycle " in log or "poll cycle at" in log
