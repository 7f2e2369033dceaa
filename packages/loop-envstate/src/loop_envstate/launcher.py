"""The launcher: hand an env file to a program without a value on any command line.

the-loop starts every tmux pane as ``loop-envstate exec [FILE] --keep NAME ... --set
NAME=VALUE -- CMD``. The file's values travel only through this process's memory into
exec(), so they never appear in tmux's argv, in tmux's global environment, or in ``ps``
output. With ``--keep``, CMD's environment is built from nothing: only the kept names
of the inherited environment, then the file, then ``--set``; whatever else the tmux
server holds (a server the-loop did not start may hold anything) never reaches CMD.
"""

from __future__ import annotations

import os
import sys

from loop_envstate.envfile import display_path, is_valid_name
from loop_envstate.errors import EnvstateError

TYPE_CHECKING = False  # not typing's: importing typing costs ~7 ms at start-up

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import NoReturn

SCRIPT = "loop-envstate"
EXIT_NOT_FOUND = 127
"""CMD could not be found (the shell's and env(1)'s convention)."""
EXIT_CANNOT_RUN = 126
"""CMD was found but could not be executed."""


class LaunchError(EnvstateError):
    """exec() failed; ``code`` is the exit status to leave with (126 or 127)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def launcher_argv(
    file: str | os.PathLike[str] | None,
    sets: Mapping[str, str],
    argv: Sequence[str],
    python: str = sys.executable,
    keep: Sequence[str] | None = None,
) -> list[str]:
    """The command line that runs ``argv`` under the launcher with ``file`` and ``sets``.

    ``sets`` are the caller's own, non-secret names (they are visible in ``ps`` until
    the exec). ``keep`` (names, or ``PREFIX*``) builds the environment from nothing but
    those inherited names; None inherits everything. ``file`` may be None only with
    ``keep``. The launcher is the console script installed beside ``python`` (same
    environment, so the same version), else the one on PATH, else ``python -m
    loop_envstate``, which works wherever this package is importable.
    """
    if not argv:
        raise ValueError("launcher_argv needs a command to run")
    if file is None and not keep:
        raise ValueError("launcher_argv needs an env file, or names to keep")
    for name in sets:
        if not is_valid_name(name):
            raise ValueError(f"not a usable environment variable name: {name!r}")
    for name in keep or ():
        if not is_keep_pattern(name):
            raise ValueError(f"not a usable name to keep: {name!r}")
    command = [*_launcher_prefix(python), "exec"]
    if file is not None:
        command.append(os.fspath(file))
    for name in keep or ():
        command += ["--keep", name]
    for name, value in sets.items():
        command += ["--set", f"{name}={value}"]
    return [*command, "--", *argv]


def _launcher_prefix(python: str) -> list[str]:
    import shutil

    beside = os.path.join(os.path.dirname(python), SCRIPT)
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return [beside]
    on_path = shutil.which(SCRIPT)
    if on_path:
        return [on_path]
    return [python, "-m", "loop_envstate"]


def parse_set(argument: str) -> tuple[str, str]:
    """Split one ``--set NAME=VALUE``; the error never repeats the argument (a value)."""
    name, sep, value = argument.partition("=")
    if not sep or not is_valid_name(name):
        raise ValueError("--set needs NAME=VALUE with a usable name")
    return name, value


def is_keep_pattern(text: str) -> bool:
    """A ``--keep`` argument: a variable name, or a name prefix ending in ``*``."""
    return is_valid_name(text.removesuffix("*")) and "*" not in text.removesuffix("*")


def kept(inherited: Mapping[str, str], keep: Sequence[str]) -> dict[str, str]:
    """The inherited names ``keep`` lists (``PREFIX*`` keeps every name with PREFIX)."""
    names = {k for k in keep if not k.endswith("*")}
    prefixes = tuple(k[:-1] for k in keep if k.endswith("*"))
    return {
        k: v for k, v in inherited.items() if k in names or (prefixes and k.startswith(prefixes))
    }


def layered(
    inherited: Mapping[str, str], file_values: Mapping[str, str], sets: Mapping[str, str]
) -> dict[str, str]:
    """Inherited environment < file values < ``--set`` values.

    The caller's own names come last so a hand-edited file cannot redefine them.
    """
    env = dict(inherited)
    env.update(file_values)
    env.update(sets)
    return env


def exec_program(argv: Sequence[str], env: Mapping[str, str]) -> NoReturn:
    """Replace this process with argv (same pid), looked up on the new env's PATH.

    Only returns by raising LaunchError; the message names the program, never its
    arguments (a harness's prompt rides there).
    """
    program = argv[0]
    shown = display_path(program)
    sys.stdout.flush()
    sys.stderr.flush()
    _restore_signals()
    try:
        os.execvpe(program, list(argv), dict(env))  # noqa: S606 -- exec without a shell is the point
    except FileNotFoundError:
        raise LaunchError(EXIT_NOT_FOUND, f"command not found: {shown}") from None
    except PermissionError:
        raise LaunchError(EXIT_CANNOT_RUN, f"cannot run {shown}: permission denied") from None
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise LaunchError(EXIT_CANNOT_RUN, f"cannot run {shown}: {reason}") from None
    except ValueError:
        raise LaunchError(EXIT_CANNOT_RUN, f"cannot run {shown}: invalid argument") from None


def _restore_signals() -> None:
    """Undo the interpreter's own signal choices before exec.

    Python ignores SIGPIPE and SIGXFSZ at start-up, and an ignored signal stays
    ignored across exec(): without this the harness would not die on a closed pipe
    the way it does when started directly (subprocess does the same for its children).
    """
    import signal

    for name in ("SIGPIPE", "SIGXFSZ"):
        number = getattr(signal, name, None)
        if number is not None:
            signal.signal(number, signal.SIG_DFL)
