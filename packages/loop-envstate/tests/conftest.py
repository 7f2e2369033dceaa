"""Fixtures: children that are always reaped, a minimal environment for CLI runs.

The helpers live in envstate_support.py (a uniquely named module, importable because
this directory is put on sys.path: pytest runs in importlib mode).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# A process a test started that outlives the run fails it (loop-cli's tests/leakguard.py,
# shared by every suite of the repository).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loop-cli" / "tests"))
import leakguard

leakguard.register(globals())

DEADLINE = 15.0


@pytest.fixture
def children() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start child processes; every one is killed and reaped at teardown."""
    started: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        kwargs.setdefault("stdout", subprocess.DEVNULL)
        kwargs.setdefault("stderr", subprocess.DEVNULL)
        proc = subprocess.Popen(argv, **kwargs)  # type: ignore[call-overload]
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=DEADLINE)


@pytest.fixture
def clean_env() -> dict[str, str]:
    """A minimal inherited environment for CLI children (PATH to find programs)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "SYSTEMROOT", "LANG", "LC_ALL"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env
