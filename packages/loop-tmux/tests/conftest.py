"""Fixtures: a Tmux on a private socket (its server killed in teardown), and a fake."""

from __future__ import annotations

import os
import shutil
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

# A process a test started that outlives the run fails it (loop-cli's tests/leakguard.py,
# shared by every suite of the repository).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loop-cli" / "tests"))
import leakguard  # noqa: E402

leakguard.register(globals())
HAVE_TMUX = shutil.which("tmux") is not None


@pytest.fixture(autouse=True)
def _no_outer_tmux(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the tests start must never talk to a tmux they are running inside."""
    monkeypatch.delenv("TMUX", raising=False)
    monkeypatch.delenv("TMUX_PANE", raising=False)


@pytest.fixture
def socket_name() -> Iterator[str]:
    """A private socket name; its server is killed and its socket file removed afterwards."""
    if not HAVE_TMUX:
        pytest.skip("tmux is not installed")
    name = f"loop-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield name
    Tmux(socket_name=name, config_file="/dev/null").kill_server()


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
