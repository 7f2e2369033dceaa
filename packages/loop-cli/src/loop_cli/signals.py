"""SIGINT and SIGTERM end every command with the shell's codes: 130 and 143.

Python's default is a traceback-free `Aborted!` and exit 1 for Ctrl-C (click's) and an
unhandled death for SIGTERM, so a script could not tell "interrupted" from "failed".
SIGTERM is turned into `Terminated` (a BaseException, like KeyboardInterrupt, so no
`except Exception` swallows it and every `finally` runs); the root group maps both to
their exit codes. Commands that stop gracefully (`interrupts.trapped`, the daemons)
install their own handlers for their duration and keep the same codes.
"""

from __future__ import annotations

# signal.py builds enums over _signal: a third of a served `status`'s imports. typeshed
# has no stub for _signal; its three names used here are signal.py's own.
import _signal  # type: ignore[import-not-found]

EXIT_SIGINT = 130
EXIT_SIGTERM = 143


class Terminated(BaseException):
    """SIGTERM arrived: unwind and exit 143."""


def _raise_terminated(_signum: int, _frame: object) -> None:
    raise Terminated


def exit_on_sigterm() -> None:
    """Make SIGTERM raise `Terminated` in the main thread (unless it is ignored)."""
    if _signal.getsignal(_signal.SIGTERM) == _signal.SIG_DFL:
        _signal.signal(_signal.SIGTERM, _raise_terminated)


def signal_exit_code(exc: BaseException) -> int | None:
    """130 for a KeyboardInterrupt, 143 for Terminated, None for anything else."""
    if isinstance(exc, Terminated):
        return EXIT_SIGTERM
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_SIGINT
    return None
