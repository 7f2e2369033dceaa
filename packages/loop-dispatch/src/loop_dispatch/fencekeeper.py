"""The fence keeper: ends a worker's agents when its host lease runs out, even while the
worker itself is frozen (SIGSTOP), hung on a database that stopped answering, or dead.

A separate small process (`python -m loop_dispatch.fencekeeper`), started by the worker
with its own file descriptors closed (it never holds the worker's locks). The worker
writes each new deadline (fence.py's clock, the same in every process of the machine)
to its stdin after every successful renewal. When the deadline passes with no newer
one, the keeper signals every live pane of the worker's `loop-*` sessions on its
private tmux server (SIGTERM to each pane's process group, SIGKILL after one second):
the panes stay (remain-on-exit) with their scrollback, and an event for an item still
placed on this host later resumes its conversation. It knows the pane pids from a
listing refreshed while the lease is good, so a tmux server that stopped answering does
not save the agents either.

When the worker's pipe closes (it stopped or died), the keeper waits for the last
deadline, then acts only if no worker holds the state directory's daemon lock by then
(a worker restarted at once owns the agents again). "stop" on its stdin (a clean stop)
ends it without touching anything.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from .fence import fence_clock

__all__ = ["FenceKeeper", "main"]

REFRESH_SECONDS = 2.0
TMUX_ANSWER_SECONDS = 2.0
TERM_GRACE_SECONDS = 1.0


def _start_time(pid: int) -> str:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return ""
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else ""


class FenceKeeper:
    """The worker's handle on its keeper process: `extend(deadline)` after each renewal,
    `close()` at a clean stop (the keeper then guards the last deadline and leaves)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self._lock = threading.Lock()

    @classmethod
    def start(
        cls, *, socket_name: str | None, socket_path: str | None, lock: Path | None
    ) -> FenceKeeper:
        argv = [sys.executable, "-m", "loop_dispatch.fencekeeper"]
        if socket_name:
            argv += ["--socket-name", socket_name]
        if socket_path:
            argv += ["--socket-path", socket_path]
        if lock is not None:
            argv += ["--lock", str(lock)]
        proc = subprocess.Popen(  # close_fds: it never holds the worker's locks
            argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, close_fds=True
        )
        return cls(proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def extend(self, deadline: float) -> None:
        self._send(f"deadline {deadline:.6f}\n")

    def _send(self, line: str) -> None:
        stdin: IO[bytes] | None = self.proc.stdin
        if stdin is None:
            return
        with self._lock, contextlib.suppress(OSError, ValueError):
            stdin.write(line.encode())
            stdin.flush()

    def close(self) -> None:
        """Close the pipe: the keeper guards the last deadline unless a worker of this
        state directory runs again by then, then exits (its parent never waits)."""
        with self._lock, contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()


class Keeper:
    def __init__(self, socket_name: str | None, socket_path: str | None, lock: Path | None):
        from loop_tmux import Tmux

        self.tmux = Tmux(
            socket_name=socket_name, socket_path=socket_path, timeout=TMUX_ANSWER_SECONDS
        )
        self.lock = lock
        self.deadline = float("inf")  # nothing to guard before the first deadline
        self.pids: dict[int, str] = {}  # live pane pid -> its start time (pid reuse)
        self.refreshed = float("-inf")

    def refresh(self) -> None:
        with contextlib.suppress(Exception):
            panes = self.tmux.panes(timeout=TMUX_ANSWER_SECONDS)
            self.pids = {
                p.pid: _start_time(p.pid)
                for p in panes
                if p.session.startswith("loop-") and not p.dead and p.pid > 0
            }
        self.refreshed = fence_clock()

    def end_agents(self) -> int:
        """SIGTERM then SIGKILL every live pane's process group; returns how many."""
        self.refresh()
        targets = {pid: start for pid, start in self.pids.items() if _start_time(pid) == start}
        for pid in targets:
            _signal(pid, signal.SIGTERM)
        until = time.monotonic() + TERM_GRACE_SECONDS
        while time.monotonic() < until and any(_start_time(p) == s for p, s in targets.items()):
            time.sleep(0.05)
        for pid, start in targets.items():
            if _start_time(pid) == start:
                _signal(pid, signal.SIGKILL)
        self.pids = {}
        return len(targets)

    def worker_gone(self) -> bool:
        """No worker holds the daemon lock (checked without keeping it)."""
        if self.lock is None:
            return True
        try:
            with open(self.lock, "a+") as handle:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return False
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
                return True
        except OSError:
            return True

    def run(self, stdin: int) -> int:
        buffer = b""
        while True:
            now = fence_clock()
            if now >= self.deadline:
                ended = self.end_agents()
                _say(f"the host lease ran out by this host's clock: ended {ended} agent(s)")
                self.deadline = float("inf")
            elif now - self.refreshed >= REFRESH_SECONDS:
                self.refresh()
            wait = min(0.1, max(0.0, self.deadline - fence_clock()))
            ready, _, _ = select.select([stdin], [], [], wait)
            if not ready:
                continue
            chunk = os.read(stdin, 4096)
            if not chunk:
                return self.orphaned()
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                words = line.decode(errors="replace").split()
                if words == ["stop"]:
                    return 0
                if len(words) == 2 and words[0] == "deadline":
                    with contextlib.suppress(ValueError):
                        self.deadline = float(words[1])

    def orphaned(self) -> int:
        """The worker is gone: at its last deadline, end its agents unless a new worker
        of this state directory runs by then."""
        if self.deadline == float("inf"):
            return 0
        while fence_clock() < self.deadline:
            time.sleep(min(0.1, max(0.0, self.deadline - fence_clock())))
            if fence_clock() - self.refreshed >= REFRESH_SECONDS:
                self.refresh()
        if self.worker_gone():
            _say(f"the worker is gone and its lease ran out: ended {self.end_agents()} agent(s)")
        return 0


def _say(text: str) -> None:
    """One line on stderr (the worker's, inherited: its journal)."""
    with contextlib.suppress(OSError):
        sys.stderr.write(f"the-loop fence keeper (pid {os.getpid()}): {text}\n")
        sys.stderr.flush()


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(OSError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loop_dispatch.fencekeeper")
    parser.add_argument("--socket-name")
    parser.add_argument("--socket-path")
    parser.add_argument("--lock", type=Path)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the worker's to handle
    keeper = Keeper(args.socket_name, args.socket_path, args.lock)
    return keeper.run(sys.stdin.fileno())


if __name__ == "__main__":
    raise SystemExit(main())
