"""The CLI's name, exit codes and usage error, shared by `cli` and `cli_args`.

Kept apart so that `cli_args` (argparse) and `cli` (the plain exec path) both read them
without importing each other: `cli` imports `cli_args` only for lines it cannot read by
hand, and `cli_args` never imports `cli`.
"""

from __future__ import annotations

from loop_envstate.errors import EnvstateError

PROG = "loop-envstate"
EXIT_OK = 0
EXIT_DRIFT = 1
EXIT_FAILED = 1  # output could not be delivered
EXIT_USAGE = 2
NEEDS_COMMAND = f"{PROG} exec: give the command after '--': exec FILE -- CMD [ARG...]"


class UsageError(EnvstateError):
    """Bad command line: one line on stderr, exit 2."""
