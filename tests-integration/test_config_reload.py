"""Issue 27 point 5: a running `poll start` takes a changed config without a restart.

A real daemon process polls the fake GitHub on loopback and delivers into the fake
harness on a private tmux server. The test edits the config file under it: a login
added to `authorizedActors` is heard at that person's next comment; a restart-only key
is refused with the old value kept; a broken file leaves the daemon running on the old
config and saying so (event, log line, `status`). SIGHUP makes a reload happen at once
rather than at the next cycle.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from integration_support import harness_texts
from loop_rig import the_loop

from loop_tmux.testing import finished_records, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "loop-cli" / "tests"))
from fakegithub import FakeGitHub

HERE = Path(__file__).resolve().parent
FAKE_HARNESS = HERE / "harness" / "fake_harness.py"
REPO = "octo/app"
TOKEN = "ghp_reloadTOKEN_do_not_print"

pytestmark = pytest.mark.tmux


class Deployment:
    """A config file, its environment, and `poll start` run as a real process."""

    def __init__(self, tmp: Path, config: dict[str, Any], env: dict[str, str]) -> None:
        self.tmp = tmp
        self.path = tmp / "config.yaml"
        self.config = config
        self.write(config)
        self.env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        self.env.update(THE_LOOP_CONFIG=str(self.path), HOME=str(tmp), **env)
        self.log = tmp / "daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def write(self, config: dict[str, Any] | str) -> None:
        """Replace the file whole (as an editor's save does: write, then rename)."""
        text = config if isinstance(config, str) else yaml.safe_dump(config)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.path)

    def start(self) -> None:
        with open(self.log, "wb") as sink:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "loop_cli.main", "poll", "start", "--log-level", "debug"],
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "loop_cli.main", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def events(self, kind: str) -> list[dict[str, Any]]:
        path = self.tmp / "state" / "events.jsonl"
        out = []
        for record in finished_records(path):
            if record["type"] == kind:
                out.append(record)
        return out

    def poller(self) -> dict[str, Any]:
        done = self.cli("status", "-o", "json")
        data = json.loads(done.stdout)
        return next(s for s in data["services"] if s["name"] == "poller")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def github_config(tmp: Path, fake: FakeGitHub, socket: str, interval: float) -> dict[str, Any]:
    (tmp / "work").mkdir(exist_ok=True)
    return {
        "stateDir": str(tmp / "state"),
        "tracker": "github",
        "github": {
            "repositories": [REPO],
            "tokenEnv": "RELOAD_GH_TOKEN",
            "apiUrl": fake.api_url,
            "reactions": False,
        },
        "authorizedActors": ["alice"],
        "harness": {
            "adapter": "claude-code",
            "binary": str(FAKE_HARNESS),
            "cwd": str(tmp / "work"),
            "passEnv": ["FAKE_HARNESS_DIR"],
            "stateDir": str(tmp / "claude"),
        },
        "routing": {"tmuxSocket": socket},
        "polling": {"intervalSeconds": interval},
    }


@pytest.fixture
def deployment(tmp_path: Path, tmux_socket: str) -> Iterator[tuple[Deployment, FakeGitHub]]:
    with FakeGitHub(token=TOKEN, login="loop-bot") as fake:
        fake.now = datetime.now(timezone.utc).replace(microsecond=0)
        fake.repo(REPO)
        convo = tmp_path / "conversations"
        convo.mkdir()
        config = github_config(tmp_path, fake, tmux_socket, 0.3)
        env = {"RELOAD_GH_TOKEN": TOKEN, "FAKE_HARNESS_DIR": str(convo)}
        d = Deployment(tmp_path, config, env)
        try:
            yield d, fake
        finally:
            d.stop()


def texts(d: Deployment) -> list[str]:
    return harness_texts(d.tmp / "conversations")


def heard(d: Deployment, needle: str) -> Callable[[], bool]:
    return lambda: any(needle in t for t in texts(d))


def test_a_login_added_live_is_heard_and_a_broken_file_keeps_the_old_config(deployment) -> None:
    d, fake = deployment
    d.start()  # its first cycle baselines the repository: only later activity counts
    assert wait_for(lambda: " poll.cycle " in d.log.read_text(), timeout=60), d.log.read_text()
    fake.open_issue(REPO, title="Tune the cache", body="It misses.")
    fake.label(REPO, 1, "the-loop")
    assert wait_for(heard(d, "Tune the cache"), timeout=60), d.log.read_text()
    pid = d.proc.pid if d.proc else 0

    # bob is not authorized yet: his comment is not a prompt.
    fake.comment(REPO, 1, "bob says: before the reload", user="bob")
    fake.comment(REPO, 1, "alice says: first marker", user="alice")
    assert wait_for(heard(d, "first marker"), timeout=60)
    assert not wait_for(heard(d, "before the reload"), timeout=1)

    # Add bob: no restart; his next comment reaches the agent.
    d.config["authorizedActors"] = ["alice", "bob"]
    d.write(d.config)
    assert wait_for(lambda: d.events("config.reloaded"), timeout=30), d.log.read_text()
    (reloaded,) = d.events("config.reloaded")
    assert reloaded["detail"]["changed"] == ["authorizedActors"]
    assert "bob" not in json.dumps(reloaded)  # key paths only, never values
    fake.comment(REPO, 1, "bob says: after the reload", user="bob")
    assert wait_for(heard(d, "after the reload"), timeout=60), d.log.read_text()
    assert d.running()
    assert d.proc is not None
    assert d.proc.pid == pid

    # A restart-only key: refused for this process, the old socket stays in force.
    refused = dict(d.config, routing={"tmuxSocket": "elsewhere"})
    d.write(refused)
    assert wait_for(lambda: d.events("config.reload_refused"), timeout=30)
    (refusal,) = d.events("config.reload_refused")
    assert refusal["detail"]["keys"] == ["routing.tmuxSocket"]
    fake.comment(REPO, 1, "bob says: on the old socket", user="bob")
    assert wait_for(heard(d, "on the old socket"), timeout=60)
    poller = d.poller()
    assert poller["config"]["refused"] == ["routing.tmuxSocket"]

    # Break the file: the daemon keeps running on the old config and says so.
    d.write(yaml.safe_dump(d.config) + "polling:\n  intervalSeconds: fast\n")
    assert wait_for(lambda: d.events("config.reload_failed"), timeout=30)
    (failure,) = d.events("config.reload_failed")
    check = d.cli("config", "check")
    assert check.returncode == 2
    assert failure["detail"]["error"] in check.stderr  # the line `config check` prints
    assert wait_for(lambda: "config.reload_failed" in d.log.read_text(), timeout=10)
    poller = d.poller()
    assert poller["running"]
    assert poller["config"]["differs"] is True
    assert failure["detail"]["error"] == poller["config"]["error"]
    status = d.cli("status")
    text = status.stdout
    assert f"is refused: {failure['detail']['error']}" in text, text
    assert "INVALID" in text, text
    assert status.returncode == 2  # the config refusal, after the state it could show
    assert status.stderr == f"Error: {failure['detail']['error']}\n"
    # The installed entry point runs a plain `status` without click: the same answer.
    plain = subprocess.run(
        [the_loop(), "status"], env=d.env, capture_output=True, text=True, timeout=60
    )
    assert (plain.returncode, plain.stderr) == (2, status.stderr)
    assert "INVALID" in plain.stdout, plain.stdout
    fake.comment(REPO, 1, "bob says: still heard", user="bob")  # bob, from the old config
    assert wait_for(heard(d, "still heard"), timeout=60)
    assert d.running()
    assert d.proc is not None
    assert d.proc.pid == pid
    assert TOKEN not in d.log.read_text()


def test_sighup_reloads_at_once_between_long_cycles(tmp_path: Path, tmux_socket: str) -> None:
    config = {
        "stateDir": str(tmp_path / "state"),
        "harness": {"cwd": str(tmp_path)},
        "routing": {"tmuxSocket": tmux_socket},
        "polling": {"intervalSeconds": 3600},
    }
    d = Deployment(tmp_path, config, {})
    d.start()
    try:
        # The first beat may come before the daemon's config digest is recorded.
        assert wait_for(lambda: d.poller()["running"] and d.poller()["config"], timeout=60), (
            d.log.read_text()
        )
        before = d.poller()["config"]["digest"]
        d.config["delivery"] = {"maxAttempts": 7}
        d.write(d.config)
        time.sleep(1)  # an hour-long cycle: nothing re-reads the file without the signal
        assert not d.events("config.reloaded")
        assert d.poller()["config"]["differs"] is True
        assert d.proc is not None
        d.proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: d.events("config.reloaded"), timeout=20), d.log.read_text()
        assert d.events("config.reloaded")[0]["detail"]["changed"] == ["delivery.maxAttempts"]
        assert wait_for(lambda: d.poller()["config"]["digest"] != before, timeout=20)
        assert d.poller()["config"]["differs"] is False
        assert "SIGHUP received: re-reading the configuration" in d.log.read_text()
        assert d.running()
    finally:
        d.stop()


def conversations(folder: Path) -> list[dict[str, Any]]:
    """The demo agent's records in one conversations folder."""
    out: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.jsonl")):
        out += finished_records(path)
    return out


def said(folder: Path, needle: str) -> Callable[[], bool]:
    return lambda: any(
        needle in str(r.get("text") or r.get("prompt")) for r in conversations(folder)
    )


def test_a_project_picks_its_harness_and_a_live_change_waits_for_the_next_session(
    tmp_path: Path, tmux_socket: str
) -> None:
    """Issue 27 point 7: `projects.loop.harness: alt` starts the item under the `alt`
    harness (the demo agent writing elsewhere); switching the project back to the
    default harness in the running daemon's config never touches the live session:
    its next comment reaches the same process, and only a new item starts under the
    default harness."""
    main, alt = tmp_path / "main-agent", tmp_path / "alt-agent"
    (tmp_path / "work").mkdir()
    config: dict[str, Any] = {
        "stateDir": str(tmp_path / "state"),
        "harness": {"cwd": str(tmp_path / "work"), "extraArgs": ["--conversations", str(main)]},
        "harnesses": {"alt": {"extraArgs": ["--conversations", str(alt)]}},
        "projects": {"loop": {"harness": "alt"}},
        "routing": {"tmuxSocket": tmux_socket},
        "polling": {"intervalSeconds": 0.3},
    }
    d = Deployment(tmp_path, config, {})
    d.start()
    try:
        first = d.cli("item", "open", "first under alt").stdout.strip()
        assert wait_for(said(alt, "first under alt"), timeout=60), d.log.read_text()
        (row,) = json.loads(d.cli("sessions", "list", "-o", "json").stdout)
        assert row["harnessName"] == "alt"
        pids = row["pids"]
        assert pids

        d.config["projects"] = {"loop": {"harness": "default"}}
        d.write(d.config)
        assert wait_for(lambda: d.events("config.reloaded"), timeout=30), d.log.read_text()
        assert d.events("config.reloaded")[0]["detail"]["changed"] == ["projects.loop.harness"]
        d.cli("item", "comment", first, "still the alt session")
        assert wait_for(said(alt, "still the alt session"), timeout=60), d.log.read_text()
        (row,) = json.loads(d.cli("sessions", "list", "-o", "json").stdout)
        assert (row["harnessName"], row["pids"], row["presence"]) == ("alt", pids, "live")

        d.cli("item", "open", "second under default")
        assert wait_for(said(main, "second under default"), timeout=60), d.log.read_text()
        rows = {r["ref"]: r for r in json.loads(d.cli("sessions", "list", "-o", "json").stdout)}
        assert rows["local:loop#2"]["harnessName"] == "default"
        assert rows[first]["pids"] == pids  # never killed by the change
        assert not any("second" in str(r.get("prompt")) for r in conversations(alt))
        assert not any("first" in str(r.get("prompt")) for r in conversations(main))
    finally:
        d.stop()
