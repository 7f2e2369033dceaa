"""A daemon's restart never ends the agents: the shipped systemd units, the daemon's
process group, and SIGHUP (a config reload, never a stop).

Real processes and real signals: `poll start` runs in a process group (and session) of
its own, as a service manager starts it, with the bundled demo agent on a private tmux
server. The units in docs/systemd/ are checked by systemd's own `systemd-analyze
verify`, with ExecStart pointed at this venv's `the-loop` (verify checks the binary).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from loop_rig import Loop, cycled, the_loop

from loop_tmux.testing import wait_for

ROOT = Path(__file__).resolve().parents[1]
UNITS = sorted((ROOT / "docs" / "systemd").glob("*.service"))


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return not stat[stat.rfind(")") + 2 :].startswith("Z")


def _end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


@pytest.fixture
def loop(tmp_path: Path, tmux_socket: str) -> Loop:
    return Loop(tmp_path, tmux_socket)  # tmux_socket ends our private server


@pytest.mark.tmux
def test_ending_the_daemons_whole_process_group_leaves_the_agents_running(
    loop: Loop, tmp_path: Path, tmux_server_pid
) -> None:
    loop.run("item", "open", "Keep me")
    daemon = loop.daemon(tmp_path / "poller.out")
    try:
        assert wait_for(lambda: loop.sessions() and loop.sessions()[0]["presence"] == "live")
        (row,) = loop.sessions()
        (agent,) = row["pids"]
        server = tmux_server_pid()
        assert server is not None
        assert _alive(agent)
        # What a service manager does to the daemon's process group on stop.
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait(timeout=30)
        assert os.getpgid(server) != daemon.pid
        assert _alive(server), "the tmux server died with the daemon's process group"
        assert _alive(agent), "the agent died with the daemon's process group"
        # And the next daemon finds the same agent, untouched.
        restarted = loop.daemon(tmp_path / "poller-2.out")
        try:
            assert wait_for(lambda: cycled((tmp_path / "poller-2.out").read_text()))
            (again,) = loop.sessions()
            assert (again["presence"], again["pids"]) == ("live", [agent])
        finally:
            _end(restarted)
    finally:
        _end(daemon)


@pytest.mark.tmux
def test_sighup_does_not_stop_the_poller(loop: Loop, tmp_path: Path) -> None:
    out = tmp_path / "poller.out"
    daemon = loop.daemon(out)
    try:
        assert wait_for(lambda: cycled(out.read_text()))
        before = loop.poller_heartbeat()
        daemon.send_signal(signal.SIGHUP)
        assert wait_for(lambda: "SIGHUP received: re-reading" in out.read_text()), out.read_text()
        # Still cycling, and its heartbeat moves on.
        assert wait_for(lambda: loop.poller_heartbeat() != before, timeout=15)
        assert daemon.poll() is None, out.read_text()
    finally:
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(timeout=30)
    assert code == 0, out.read_text()
    assert "stopped after" in out.read_text()


@pytest.mark.tmux
def test_sighup_does_not_stop_the_webhook_receiver(loop: Loop, tmp_path: Path) -> None:
    out = tmp_path / "webhook.out"
    with open(out, "wb") as sink:
        receiver = subprocess.Popen(
            [sys.executable, "-m", "loop_cli.main", "gh-webhook", "start", "--port", "0"],
            env={**loop.env, "THE_LOOP_WEBHOOK_SECRET": "s3cret-for-the-test"},
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        assert wait_for(lambda: "listening on" in out.read_text()), out.read_text()
        # SIGHUP re-reads the config at once (issue 27): a new actor is taken live.
        config = yaml.safe_load(loop.config.read_text())
        loop.config.write_text(yaml.safe_dump({**config, "authorizedActors": ["carol"]}))
        receiver.send_signal(signal.SIGHUP)
        assert wait_for(lambda: "SIGHUP received: re-reading" in out.read_text()), out.read_text()
        assert wait_for(lambda: "config.reloaded" in out.read_text()), out.read_text()
        assert "authorizedActors" in out.read_text()
        assert "carol" not in out.read_text()  # key paths, never values
        assert receiver.poll() is None, out.read_text()
    finally:
        receiver.send_signal(signal.SIGTERM)
        code = receiver.wait(timeout=30)
    assert code == 0, out.read_text()
    assert "gh-webhook stopped" in out.read_text()


# -- the shipped unit files -----------------------------------------------------------


def _unit_settings(path: Path) -> dict[str, str]:
    settings: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return settings


def test_the_units_ship_and_keep_the_agents_on_stop_and_restart() -> None:
    names = sorted(p.name for p in UNITS)
    assert names == ["the-loop-poller.service", "the-loop-webhook.service"]
    guide = (ROOT / "docs" / "operator-guide.md").read_text()
    for path in UNITS:
        settings = _unit_settings(path)
        # control-group (the default) would end the tmux server and every agent with it.
        assert settings.get("KillMode") == "process", path.name
        assert settings.get("KillSignal") == "SIGTERM", path.name
        assert settings["ExecStart"].startswith("%h/.local/bin/the-loop "), path.name
        assert f"docs/systemd/{path.name}" in guide, f"operator-guide.md does not name {path.name}"


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_systemd_analyze_verifies_the_unit(unit: Path, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd; .ci/run adds it)")
    # verify checks that ExecStart's program exists: point it at this venv's the-loop.
    text = unit.read_text().replace("%h/.local/bin/the-loop", the_loop())
    copy = tmp_path / unit.name
    copy.write_text(text)
    done = subprocess.run(
        [analyze, "verify", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "SYSTEMD_LOG_COLOR": "0"},
    )
    assert done.returncode == 0, done.stderr
    # Unknown keys and unparsable values are only warnings to systemd: none allowed.
    complaints = [line for line in done.stderr.splitlines() if unit.name in line]
    assert complaints == [], done.stderr
