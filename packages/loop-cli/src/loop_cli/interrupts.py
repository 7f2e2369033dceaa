"""Ctrl-C and SIGTERM during a bulk command: stop, record what was done, say so.

Click turns a KeyboardInterrupt into `Aborted!` and exit 1, and a SIGTERM kills the
process where it stands: either way the work done so far goes unrecorded. The commands
that act on many sessions or events (`sessions restart`, `sessions reset`,
`poll --once`) run under `trapped`, then record and print a partial summary and exit
with the shell's codes: 130 for SIGINT, 143 for SIGTERM.

Two ways to stop: `trapped()` only sets a flag the command checks between steps (the
step under way finishes, so nothing is left half done); `trapped(raise_first=True)`
raises `Interrupted` at once in the main thread, for a command whose steps can be long
waits (a survival window) and which records the partial state itself. Either way a
second signal while the record is written is noted, not acted on.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SIGNALS",
    "Interrupt",
    "Interrupted",
    "exit_code",
    "record_interrupted",
    "signal_name",
    "trapped",
]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_code(signum: int) -> int:
    """The shell's exit code for a death by `signum`: 130 (SIGINT), 143 (SIGTERM)."""
    return 128 + signum


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Interrupted(BaseException):
    """A stop signal arrived (raised in the main thread by `trapped(raise_first=True)`).

    A BaseException, like KeyboardInterrupt: `except Exception` in core code must not
    swallow it."""

    def __init__(self, signum: int, partial: Any = None) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum
        self.partial = partial  # what the interrupted operation had done, when it says

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)


@dataclass
class Interrupt:
    """Whether (and by which signal) the command was asked to stop."""

    event: threading.Event = field(default_factory=threading.Event)
    signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    @property
    def name(self) -> str:
        return signal_name(self.signum) if self.signum is not None else ""

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum) if self.signum is not None else 0


@contextlib.contextmanager
def trapped(*, raise_first: bool = False) -> Iterator[Interrupt]:
    """SIGINT and SIGTERM set the returned Interrupt (and, with `raise_first`, the first
    one raises `Interrupted`) while the block runs; the previous handlers afterwards.
    Off the main thread (where no handler can be set) it only hands back the flag."""
    state = Interrupt()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def handle(signum: int, _frame: object) -> None:
        first = not state.event.is_set()
        if first:
            state.signum = signum
            state.event.set()
        if first and raise_first:
            raise Interrupted(signum)

    previous = {sig: signal.signal(sig, handle) for sig in SIGNALS}
    try:
        yield state
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def record_interrupted(events: Any, command: str, signum_name: str, counts: dict[str, int]) -> None:
    """The `command.interrupted` record: which command, which signal, how far it got."""
    events.emit(
        "command.interrupted",
        level="warning",
        source="loop-cli",
        detail={"command": command, "signal": signum_name, "counts": counts},
    )
