"""Helpers for the loop-envstate tests: run the CLI for real, wait on processes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from loop_tmux.testing import wait_until

CLI = [sys.executable, "-m", "loop_envstate"]
Children = Callable[..., "subprocess.Popen[bytes]"]
"""The `children` fixture: start a process that is killed and reaped at teardown."""
DEADLINE = 15.0  # generous: the box is a loaded 2-core machine
needs_proc = pytest.mark.skipif(
    not Path("/proc/self/environ").exists(), reason="needs a mounted /proc"
)


def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The real CLI in a child interpreter, output captured."""
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def cmdline(pid: int) -> list[bytes]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.split(b"\0")[:-1]


def wait_for_exec(pid: int, program: bytes) -> None:
    """Wait until pid has exec'd into program (argv[0] ends with it)."""

    def done() -> bool:
        argv = cmdline(pid)
        return bool(argv) and argv[0].rsplit(b"/", 1)[-1] == program

    wait_until(done, f"pid {pid} to become {program.decode()}", DEADLINE)


def write_env(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def unreadable_file(tmp_path: Path) -> Path:
    """A file this process may not read: chmod 0 for a user, a ptrace-guarded one for root."""
    if os.geteuid() != 0:
        path = tmp_path / "locked.env"
        path.write_text("A=1\n")
        path.chmod(0)
        return path
    guarded = Path("/proc/1/environ")
    try:
        guarded.open("rb").close()
    except PermissionError:
        return guarded
    pytest.skip("running as root with no permission-guarded file to try")
