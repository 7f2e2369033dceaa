"""`the-loop demo` end to end, as a newcomer runs it (real tmux, real processes)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loop_tmux import Tmux

pytestmark = pytest.mark.tmux

if shutil.which("tmux") is None:  # pragma: no cover
    pytest.skip("tmux is not installed", allow_module_level=True)


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE", "THE_LOOP_CONFIG")}
    env.update(
        HOME=str(tmp_path), XDG_STATE_HOME=str(tmp_path / "s"), XDG_CONFIG_HOME=str(tmp_path / "c")
    )
    return env


def _server_alive(socket: str) -> bool:
    return (
        subprocess.run(
            ["tmux", "-L", socket, "list-sessions"],
            capture_output=True,
            env=_env(Path("/tmp")),
            check=False,
        ).returncode
        == 0
    )


def test_demo_observes_every_step_and_cleans_up(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loop_cli.main", "demo"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("[ok  ]") == 5
    for event in ("session.spawned", "dispatch.delivered", "session.respawned"):
        assert event in done.stdout
    socket = re.search(r"socket (loop-demo-[0-9a-f-]+)", done.stdout).group(1)
    assert not _server_alive(socket)
    workdir = Path(re.search(r"working in (\S+)", done.stdout).group(1))
    assert workdir.name.startswith("the-loop-demo-")
    assert not workdir.exists()


def test_demo_keep_leaves_a_session_to_attach(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loop_cli.main", "demo", "--keep"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=180,
        check=False,
    )
    socket = re.search(r"socket (loop-demo-[0-9a-f-]+)", done.stdout).group(1)
    workdir = re.search(r"rm -rf (\S+)", done.stdout).group(1)
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"tmux -L {socket} attach-session -t =loop-local_demo_1" in done.stdout
        assert _server_alive(socket)
        listing = subprocess.run(
            [
                sys.executable,
                "-m",
                "loop_cli.main",
                "--config",
                f"{workdir}/config.yaml",
                "sessions",
                "list",
            ],
            capture_output=True,
            text=True,
            env=_env(tmp_path),
            timeout=60,
            check=False,
        )
        assert "local:demo#1" in listing.stdout
        assert "live" in listing.stdout
    finally:
        Tmux(socket_name=socket, config_file="/dev/null").kill_server()
        shutil.rmtree(workdir, ignore_errors=True)
