"""Helpers shared by loop-tmux's tests (importable: conftest puts tests/ on sys.path)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from loop_tmux import Tmux


def wait_for(predicate: Callable[[], object], timeout: float = 10.0, what: str = "") -> object:
    """Poll ``predicate`` until truthy; fail the test with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what or predicate}")
        time.sleep(0.02)


def tmux_out(tmux: Tmux, *args: str) -> str:
    """Run a raw tmux command on the test's private server and return stdout."""
    done = subprocess.run(
        ["tmux", "-L", tmux.socket_name or "", *args],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    return done.stdout


class Recorder:
    """A session running record_stdin.py, and the bytes it has received."""

    def __init__(self, tmux: Tmux, name: str, path: Path) -> None:
        self.tmux, self.name, self.path = tmux, name, path

    def data(self) -> bytes:
        return self.path.read_bytes() if self.path.exists() else b""

    def wait_bytes(self, count: int, timeout: float = 15.0) -> bytes:
        wait_for(lambda: len(self.data()) >= count, timeout, f"{count} bytes in {self.path}")
        time.sleep(0.1)  # anything beyond what we expect would show up now
        return self.data()
