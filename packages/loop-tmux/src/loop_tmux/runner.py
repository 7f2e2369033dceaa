"""Running one tmux command line and reading what came back.

Kept apart from the client so the classification of tmux's answers (which decides
ABSENT versus UNKNOWN) is one small, testable table.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# tmux's own texts (3.3a; older spellings kept) meaning "there is no such session".
_ABSENT_TEXTS = (
    "no server running on",
    "can't find session",
    "no such session",
    "session not found",
)
# A socket that is not there, or that nothing listens on, is a server that is not there.
# Other connect errors (EACCES, ...) say nothing about the session: UNKNOWN.
_CONNECT_ABSENT = re.compile(
    r"(error connecting to|failed to connect to server).*"
    r"(No such file or directory|Connection refused)"
)
_STRIPPED_ENV = ("TMUX", "TMUX_PANE")
_SOCKET_DIR_VAR = "TMUX_TMPDIR"
# What a client sees from a server that is shutting down (its last session just went).
_TRANSIENT_TEXTS = ("server exited unexpectedly", "no current target", "lost server")


@dataclass(frozen=True)
class Answer:
    """One tmux invocation's outcome. ``returncode`` is None when tmux did not answer."""

    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    reason: str | None = None  # why there was no answer

    @property
    def answered(self) -> bool:
        return self.returncode is not None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def error(self) -> str:
        """A one-line description: tmux's own stderr, or why it did not answer."""
        if self.reason is not None:
            return self.reason
        text = " ".join(self.stderr.split())
        return text or f"tmux exited with status {self.returncode}"


def says_absent(answer: Answer) -> bool:
    """Whether tmux's answer is a definite "no such session / no server"."""
    if not answer.answered or answer.ok:
        return False
    text = answer.stderr
    return any(marker in text for marker in _ABSENT_TEXTS) or bool(_CONNECT_ABSENT.search(text))


def says_no_server(answer: Answer) -> bool:
    """Whether tmux's answer is a definite "no server at all" (every session absent)."""
    if not answer.answered or answer.ok:
        return False
    text = answer.stderr
    return "no server running on" in text or bool(_CONNECT_ABSENT.search(text))


def is_transient(answer: Answer) -> bool:
    """Whether tmux answered with an error a server in the middle of exiting gives."""
    if not answer.answered or answer.ok:
        return False
    return any(text in answer.stderr for text in _TRANSIENT_TEXTS)


def tmux_environ(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment tmux clients run with: `base` (default ours), minus TMUX and
    TMUX_PANE, plus our TMUX_TMPDIR.

    With TMUX set, a tmux client without -L/-S talks to the server named there, so the
    "default server" would depend on where the-loop happens to run. TMUX_TMPDIR says
    where every socket lives: a scrubbed `base` (a server's allowlist) must not drop it,
    or the daemon's server would listen in /tmp/tmux-UID while `tmux` and `sessions
    attach`, run with it, look in the operator's chosen directory.
    """
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items() if k not in _STRIPPED_ENV}
    tmpdir = os.environ.get(_SOCKET_DIR_VAR)
    if tmpdir and _SOCKET_DIR_VAR not in env:
        env[_SOCKET_DIR_VAR] = tmpdir
    return env


# tmux clients under way, so a process that stops can end them (`kill_clients`).
_CLIENTS: set[subprocess.Popen[bytes]] = set()
_CLIENTS_LOCK = threading.Lock()


def run(
    argv: Sequence[str],
    timeout: float,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
) -> Answer:
    """Run a tmux command line (with `env` when given); never raises for tmux's failures.

    A client that outlives `timeout` is killed: tmux then fails its queued command at
    the point it needs the client (`load-buffer -` reading stdin), so a paste sent to a
    stalled server is never carried out after the caller has given it up.
    """
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=tmux_environ(env),
        )
    except OSError as exc:
        return Answer(None, reason=f"cannot run {argv[0]}: {exc.strerror or exc}")
    with _CLIENTS_LOCK:
        _CLIENTS.add(proc)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        # wait(), not communicate(): the client handed its stdout/stderr to the stalled
        # server, so the pipes see no EOF until the server runs again.
        proc.wait()
        return Answer(None, reason=f"tmux did not answer within {timeout:g}s")
    finally:
        with _CLIENTS_LOCK:
            _CLIENTS.discard(proc)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
    if proc.returncode < 0:  # ended by a signal (kill_clients, an operator): no answer
        return Answer(None, reason="the tmux client was ended before tmux answered")
    return Answer(
        proc.returncode,
        out.decode("utf-8", errors="replace"),
        err.decode("utf-8", errors="replace"),
    )


def kill_clients() -> int:
    """Kill every tmux client this process is waiting on; returns how many.

    For a daemon that stops while tmux is stalled: its waiting clients would otherwise
    outlive it and carry their commands out at the thaw, after the events they served
    were handed to the next daemon. Killed, their pastes fail inside tmux instead.
    """
    with _CLIENTS_LOCK:
        waiting = list(_CLIENTS)
    for proc in waiting:
        with contextlib.suppress(OSError):
            proc.kill()
    return len(waiting)
