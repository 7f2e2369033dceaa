"""Helpers shared by loop-tmux's tests (importable: conftest puts tests/ on sys.path)."""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path

from loop_tmux import Tmux
from loop_tmux.testing import wait_until


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


def recording_tmux(directory: Path) -> tuple[Path, Path]:
    """A tmux wrapper that logs each invocation's arguments as one record, then runs tmux.

    Returns (wrapper, log): pass the wrapper as ``Tmux(binary=...)`` and read the log
    with :func:`invocations` to count tmux processes or search their argv.
    """
    log = directory / "tmux-invocations"
    wrapper = directory / "tmux-recording"
    # NUL-terminated records: an argument may hold a newline or a CR.
    wrapper.write_text(
        f'#!/bin/sh\nprintf \'%s\\000\' "$*" >> {shlex.quote(str(log))}\nexec tmux "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper, log


def invocations(log: Path) -> list[str]:
    """The tmux invocations a recording wrapper has logged, one string each."""
    return log.read_text().split("\0")[:-1] if log.exists() else []


def environ_of(pid: int) -> dict[str, str]:
    """The environment a process was started with (/proc/<pid>/environ)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(e.split("=", 1) for e in raw.decode().split("\0") if "=" in e)


def running(pid: int) -> bool:
    """Whether pid runs: a zombie counts as exited (whoever reaps it is not this test)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


class Recorder:
    """A session running record_stdin.py, and the bytes it has received."""

    def __init__(self, tmux: Tmux, name: str, path: Path) -> None:
        self.tmux, self.name, self.path = tmux, name, path

    def data(self) -> bytes:
        return self.path.read_bytes() if self.path.exists() else b""

    def wait_bytes(self, count: int, timeout: float = 15.0) -> bytes:
        wait_until(lambda: len(self.data()) >= count, f"{count} bytes in {self.path}", timeout)
        time.sleep(0.1)  # anything beyond what we expect would show up now
        return self.data()
