"""Fixtures: a Tmux on a private socket (its server killed in teardown), and a fake.

The private server and the fake come from the loop_tmux.testing plugin; these are the
names this suite has always used for them."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from loop_tmux_testlib import Recorder, tmux_out

from loop_tmux import Tmux
from loop_tmux.fake import FakeState
from loop_tmux.testing import wait_until

PROGRAMS = Path(__file__).parent / "programs"

# A process a test started that outlives the run fails it (loop-cli's tests/leakguard.py,
# shared by every suite of the repository).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loop-cli" / "tests"))
import leakguard  # noqa: E402

leakguard.register(globals())


@pytest.fixture(autouse=True)
def _no_outer_tmux(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the tests start must never talk to a tmux they are running inside."""
    monkeypatch.delenv("TMUX", raising=False)
    monkeypatch.delenv("TMUX_PANE", raising=False)


@pytest.fixture
def socket_name(tmux_socket: str) -> str:
    """The private socket of loop_tmux.testing's `tmux_socket` (its server is killed and
    its socket file removed afterwards)."""
    return tmux_socket


@pytest.fixture
def tmux(socket_name: str) -> Tmux:
    return Tmux(socket_name=socket_name, config_file="/dev/null", probe_timeout=2.0, timeout=10.0)


@pytest.fixture
def recorder(tmux: Tmux, tmp_path: Path) -> Callable[[str], Recorder]:
    def start(name: str) -> Recorder:
        path = tmp_path / f"{name}.bin"
        argv = [sys.executable, str(PROGRAMS / "record_stdin.py"), str(path)]
        assert tmux.spawn(name, argv, str(tmp_path)).ok
        wait_until(
            lambda: "READY" in tmux_out(tmux, "capture-pane", "-p", "-t", f"={name}:"),
            what=f"{name} ready",
        )
        return Recorder(tmux, name, path)

    return start


@pytest.fixture
def fake(tmux_fake: tuple[Tmux, FakeState]) -> tuple[Tmux, FakeState]:
    """A Tmux talking to the modelled fake, and the fake's state (loop_tmux.testing)."""
    return tmux_fake
