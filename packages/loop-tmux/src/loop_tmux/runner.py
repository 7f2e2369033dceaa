"""Running one tmux command line and reading what came back.

Kept apart from the client so the classification of tmux's answers (which decides
ABSENT versus UNKNOWN) is one small, testable table.
"""

from __future__ import annotations

import os
import re
import subprocess
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


def is_transient(answer: Answer) -> bool:
    """Whether tmux answered with an error a server in the middle of exiting gives."""
    if not answer.answered or answer.ok:
        return False
    return any(text in answer.stderr for text in _TRANSIENT_TEXTS)


def tmux_environ(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment tmux clients run with: `base` (default ours), minus TMUX and
    TMUX_PANE.

    With TMUX set, a tmux client without -L/-S talks to the server named there, so the
    "default server" would depend on where the-loop happens to run.
    """
    source = os.environ if base is None else base
    return {k: v for k, v in source.items() if k not in _STRIPPED_ENV}


def run(
    argv: Sequence[str],
    timeout: float,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
) -> Answer:
    """Run a tmux command line (with `env` when given); never raises for tmux's failures."""
    try:
        done = subprocess.run(
            list(argv),
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            env=tmux_environ(env),
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Answer(None, reason=f"tmux did not answer within {timeout:g}s")
    except OSError as exc:
        return Answer(None, reason=f"cannot run {argv[0]}: {exc.strerror or exc}")
    return Answer(
        done.returncode,
        done.stdout.decode("utf-8", errors="replace"),
        done.stderr.decode("utf-8", errors="replace"),
    )
