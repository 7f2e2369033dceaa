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


# Error types of the in-repo libraries that are expected failures, with their exit code.
# Matched by module and name so that the root group need not import those libraries.
FOREIGN_ERRORS: dict[str, int] = {
    "RefError": EXIT_USAGE,
    "EnvFileError": EXIT_USAGE,
    "LockTimeout": EXIT_OPERATIONAL,
}
FOREIGN_MODULES = ("loop_dispatch", "loop_tmux", "loop_envstate")


def classify(exc: BaseException) -> int | None:
    """Exit code for an expected failure, or None for a bug (which keeps its traceback)."""
    if isinstance(exc, LoopError):
        return exc.exit_code
    module = type(exc).__module__ or ""
    if module.split(".")[0] in FOREIGN_MODULES:
        for klass in type(exc).__mro__:
            if klass.__name__ in FOREIGN_ERRORS:
                return FOREIGN_ERRORS[klass.__name__]
        if type(exc).__name__.endswith("Error") or type(exc).__name__.endswith("Unavailable"):
            return EXIT_OPERATIONAL
    return None
