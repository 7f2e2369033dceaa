"""Test helpers for suites that drive loop-tmux: a private tmux server, polling, the fake.

A pytest plugin (entry point ``pytest11: loop_tmux = loop_tmux.testing``): any suite in
an environment where loop-tmux is installed gets the fixtures by name, with no conftest
import. ``import loop_tmux`` never imports this module (nor pytest); pytest loads it.

Fixtures:

- ``new_tmux_socket``: a callable giving a fresh unique ``tmux -L`` socket name; at
  teardown the server on each name it gave (only those) is killed and its socket file
  removed. It never skips, so a config that merely names a socket needs no tmux.
- ``tmux_socket``: one such name, for a test that needs tmux (skipped where tmux is not
  installed); TMUX/TMUX_PANE are removed, so nothing the test starts reaches the tmux
  it runs under.
- ``tmux_server``: a :class:`~loop_tmux.Tmux` client on ``tmux_socket``.
- ``tmux_fake``: a client on the modelled fake (:mod:`loop_tmux.fake`) and its state.

Functions (import them): :func:`wait_for` returns the last value at its deadline (for
``assert wait_for(...), log`` and for a tally after a bounded wait); :func:`wait_until`
fails the test naming what never happened; :func:`fake_client` builds a fake with a
suite's own client options; :func:`finished_records` reads a JSON-lines file another
process is still appending to.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from .client import Tmux
from .fake import FakeState, install_fake_tmux

__all__ = [
    "fake_client",
    "new_tmux_socket",
    "tmux_fake",
    "tmux_server",
    "tmux_socket",
    "wait_for",
    "wait_until",
]

T = TypeVar("T")

DEADLINE = 20.0
"""Default wait: generous, as tests share a loaded machine; only a failure waits it out."""
INTERVAL = 0.05
KILL_TIMEOUT = 15.0
"""How long teardown waits for a private server to exit (a stopped one is left alone)."""


def wait_for(
    predicate: Callable[[], T], timeout: float = DEADLINE, interval: float = INTERVAL
) -> T:
    """Poll `predicate` until it returns something truthy or `timeout` passes; return its
    last value either way, so the caller's own assertion (and message) decides."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def wait_until(
    predicate: Callable[[], T],
    what: str = "",
    timeout: float = DEADLINE,
    interval: float = INTERVAL,
) -> T:
    """Poll `predicate` until truthy and return that value; fail the test, naming `what`,
    when `timeout` passes first."""
    value = wait_for(predicate, timeout, interval)
    if not value:
        pytest.fail(f"timed out after {timeout:g}s waiting for {what or predicate}")
    return value


def finished_records(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of `path`'s finished lines: those up to its last newline. A live
    writer's append can be read half done (a reader may see part of one write), so the
    piece after the last newline is left for the next poll; a missing file is empty."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    finished = data[: data.rfind(b"\n") + 1].splitlines()
    records = (json.loads(line) for line in finished if line.strip())
    return [record for record in records if isinstance(record, dict)]


def _unique_socket() -> str:
    return f"loop-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _kill_private(name: str) -> None:
    """End the server on this private socket, and only it (kill_server never signals a
    server it did not find on that socket, and removes only that socket file)."""
    Tmux(socket_name=name, config_file="/dev/null").kill_server(timeout=KILL_TIMEOUT)


@pytest.fixture
def new_tmux_socket() -> Iterator[Callable[[], str]]:
    """Callable: a new unique private socket name; each one's server is killed at teardown."""
    names: list[str] = []

    def new() -> str:
        names.append(_unique_socket())
        return names[-1]

    yield new
    if shutil.which("tmux") is not None:
        for name in names:
            _kill_private(name)


@pytest.fixture
def tmux_socket(new_tmux_socket: Callable[[], str], monkeypatch: pytest.MonkeyPatch) -> str:
    """A unique private socket name (its server killed at teardown); skipped without tmux."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    monkeypatch.delenv("TMUX", raising=False)
    monkeypatch.delenv("TMUX_PANE", raising=False)
    return new_tmux_socket()


@pytest.fixture
def tmux_server(tmux_socket: str) -> Tmux:
    """A client on the test's private server (started by its first session)."""
    return Tmux(socket_name=tmux_socket, config_file="/dev/null", timeout=10.0, probe_timeout=3.0)


def fake_client(directory: Path, **client: Any) -> tuple[Tmux, FakeState]:
    """A client whose tmux is the modelled fake, and the fake's state, to inject faults
    and read what it was told. The shim is `directory/bin/tmux`, the state
    `directory/fake-state.json`; `client` options go to :class:`~loop_tmux.Tmux` (each
    fake call starts a Python process, ~80 ms)."""
    state_path = directory / "fake-state.json"
    shim = install_fake_tmux(directory / "bin", state_path)
    client.setdefault("probe_timeout", 1.5)
    client.setdefault("timeout", 5.0)
    return Tmux(binary=str(shim), socket_name="fake", **client), FakeState(state_path)


@pytest.fixture
def tmux_fake(tmp_path: Path) -> tuple[Tmux, FakeState]:
    """A client on the modelled fake, and the fake's state."""
    return fake_client(tmp_path)
