"""Shared fixtures for the integration tests (several packages' tests use these).

Keep each fixture small and documented; add new ones in their own section.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

HARNESS_DIR = Path(__file__).parent / "harness"
# Test modules import integration_support (pytest runs in importlib mode).
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "loop-cli" / "tests"))
import leakguard  # noqa: E402 - shared with loop-cli's tests, found through the line above

# A process a test started that outlives the run fails it (see leakguard.py).
leakguard.register(globals())
FAKE_HARNESS = HARNESS_DIR / "fake_harness.py"


# -- tmux on a private socket (loop-dispatch) ---------------------------------------------
# `tmux_socket`, `tmux_server` and `new_tmux_socket` come from the loop_tmux.testing
# plugin (installed with loop-tmux): a unique `-L` name whose server alone is killed.


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The validated-config cache of every daemon and CLI a test starts lives in a
    temporary folder, never in the ~/.cache of whoever runs the suite."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        yield


@pytest.fixture
def tmux_server_pid(tmux_socket: str):
    """Callable: the pid of the private server (None while no server runs)."""

    def pid() -> int | None:
        done = subprocess.run(
            ["tmux", "-L", tmux_socket, "display-message", "-p", "#{pid}"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        text = done.stdout.strip()
        return int(text) if done.returncode == 0 and text.isdigit() else None

    return pid


# -- the fake harness (loop-dispatch; used by loop-cli and env rotation too) --------------


@pytest.fixture
def fake_harness() -> Path:
    """Path of the executable fake harness (see its docstring for the contract)."""
    assert os.access(FAKE_HARNESS, os.X_OK), f"{FAKE_HARNESS} must be executable"
    return FAKE_HARNESS


@pytest.fixture
def fake_harness_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A conversation directory, exported as FAKE_HARNESS_DIR (inherited by a tmux
    server this test starts, so panes write their conversations there)."""
    directory = tmp_path / "conversations"
    directory.mkdir()
    monkeypatch.setenv("FAKE_HARNESS_DIR", str(directory))
    return directory


# -- a private PostgreSQL cluster (the fleet tests) --------------------------------------


@pytest.fixture(scope="module")
def pg_cluster():
    """A private PostgreSQL cluster for a module's fleet tests (skipped, naming what is
    missing, where psycopg or the server binaries are absent)."""
    pytest.importorskip("psycopg", reason="psycopg is not installed")
    from loop_dispatch.pgcluster import ClusterUnavailable, start_cluster

    try:
        cluster = start_cluster()
    except ClusterUnavailable as exc:
        pytest.skip(f"no private PostgreSQL cluster: {exc}")
    yield cluster
    cluster.stop()


@pytest.fixture
def extra_socket(new_tmux_socket: Callable[[], str]) -> Callable[[], str]:
    """Callable: a new unique private tmux socket name (one per extra host of a fleet
    test); at teardown the server on each (only those) is killed (loop_tmux.testing)."""
    return new_tmux_socket
