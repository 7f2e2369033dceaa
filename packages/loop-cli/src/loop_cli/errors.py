"""The CLI's own error types: each becomes a one-line `Error: ...` and an exit code.

Core code raises these; the root command group turns them into output (see `main.py`),
so an expected failure never reaches an operator as a traceback.
"""

from __future__ import annotations

EXIT_OPERATIONAL = 1
EXIT_USAGE = 2


class LoopError(Exception):
    """An expected failure. `str(err)` is the message (one line per problem)."""

    exit_code = EXIT_OPERATIONAL


class UsageError(LoopError):
    """Bad arguments or a request that cannot be honoured as asked (exit 2)."""

    exit_code = EXIT_USAGE


class ConfigError(UsageError):
    """The config file is missing, unreadable or invalid (exit 2).

    `problems` holds one line per problem, each naming the file and the key path.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class OperationalError(LoopError):
    """Something the operator asked for could not be done right now (exit 1)."""


def classify(exc: BaseException) -> int | None:
    """Exit code for an expected failure, or None for a bug (which keeps its traceback).

    Each in-repo library has one exception root (`DispatchError`, `TmuxError`,
    `EnvstateError`), matched by `isinstance`, never by name. The libraries are imported
    here, on the failure path only, so `--version` and `--help` stay free of them.
    """
    if isinstance(exc, LoopError):
        return exc.exit_code
    from loop_dispatch import DispatchError, RefError
    from loop_envstate import EnvFileError, EnvstateError
    from loop_tmux import TmuxError

    if isinstance(exc, (RefError, EnvFileError)):
        return EXIT_USAGE
    if isinstance(exc, (DispatchError, TmuxError, EnvstateError)):
        return EXIT_OPERATIONAL
    return None
