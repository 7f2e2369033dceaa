"""Fixtures: a Tmux on a private socket (its server killed in teardown), and a fake."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from loop_tmux_testlib import Recorder, tmux_out, wait_for

from loop_tmux import Tmux
from loop_tmux.fake import FakeState, install_fake_tmux

PROGRAMS = Path(__file__).parent / "programs"
HAVE_TMUX = shutil.which("tmux") is not None


@pytest.fixture(autouse=True)
def _no_outer_tmux(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the tests start must never talk to a tmux they are running inside."""
    monkeypatch.delenv("TMUX", raising=False)
    monkeypatch.delenv("TMUX_PANE", raising=False)


def _kill_server(socket: str) -> None:
    """Kill this test's own server, then remove the socket file tmux 3.3a leaves behind."""
    subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, timeout=10)
    path = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / socket
    gone = subprocess.run(["tmux", "-L", socket, "list-sessions"], capture_output=True, timeout=10)
    if gone.returncode != 0:
        path.unlink(missing_ok=True)


@pytest.fixture
def socket_name() -> Iterator[str]:
    if not HAVE_TMUX:
        pytest.skip("tmux is not installed")
    name = f"loop-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield name
    _kill_server(name)


@pytest.fixture
def tmux(socket_name: str) -> Tmux:
    return Tmux(socket_name=socket_name, config_file="/dev/null", probe_timeout=2.0, timeout=10.0)


@pytest.fixture
def recorder(tmux: Tmux, tmp_path: Path) -> Callable[[str], Recorder]:
    def start(name: str) -> Recorder:
        path = tmp_path / f"{name}.bin"
        argv = [sys.executable, str(PROGRAMS / "record_stdin.py"), str(path)]
        assert tmux.spawn(name, argv, str(tmp_path)).ok
        wait_for(
            lambda: "READY" in tmux_out(tmux, "capture-pane", "-p", "-t", f"={name}:"),
            what=f"{name} ready",
        )
        return Recorder(tmux, name, path)

    return start


@pytest.fixture
def fake(tmp_path: Path) -> tuple[Tmux, FakeState]:
    """A Tmux talking to the modelled fake, and the fake's state."""
    state_path = tmp_path / "fake-state.json"
    shim = install_fake_tmux(tmp_path / "bin", state_path)
    client = Tmux(binary=str(shim), socket_name="fake", probe_timeout=1.5, timeout=5.0)
    return client, FakeState(state_path)
