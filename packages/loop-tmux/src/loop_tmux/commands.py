"""Building tmux command lines that tmux will not reinterpret.

tmux splits its argument list into commands at any argument that ENDS with ``;`` (even
after ``--``), so a harness prompt ending in ``;`` would be cut and the rest run as a
tmux command. An argument ending in ``\\;`` is kept with the backslash removed, so every
argument ending in ``;`` is escaped that way (verified on tmux 3.3a).

A shell-command given as ONE argument is run by tmux through ``sh -c``; a one-element
argv is therefore wrapped so the program is exec'd verbatim, never shell-parsed.
``-c`` directories are format-expanded by tmux, so ``#`` is doubled.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

SEPARATOR = ";"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def escape_arg(arg: str) -> str:
    """Escape one argument so tmux's argument splitter keeps it whole."""
    if arg.endswith(";"):
        return arg[:-1] + "\\;"
    return arg


def chain(*commands: Sequence[str]) -> list[str]:
    """Join tmux commands into one argument list, ``;``-separated, each arg escaped."""
    out: list[str] = []
    for index, command in enumerate(commands):
        if index:
            out.append(SEPARATOR)
        out.extend(escape_arg(arg) for arg in command)
    return out


def program_args(argv: Sequence[str]) -> list[str]:
    """The shell-command part of new-session/respawn-pane, never shell-interpreted."""
    if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError("argv must be a non-empty list of strings")
    if any("\x00" in a for a in argv):
        raise ValueError("argv must not contain NUL characters")
    if len(argv) == 1:
        return ["/bin/sh", "-c", 'exec "$0"', argv[0]]
    return list(argv)


def directory_arg(cwd: str) -> str:
    """A ``-c`` value that tmux's format expansion leaves unchanged."""
    return cwd.replace("#", "##")


def env_flags(env: Mapping[str, str] | None) -> list[str]:
    """``-e NAME=VALUE`` pairs, in name order; names are checked, values never shown."""
    flags: list[str] = []
    entries = env or {}
    for name in sorted(entries):
        value = entries[name]
        if not _ENV_NAME.match(name) or not isinstance(value, str) or "\x00" in value:
            raise ValueError(f"invalid environment entry {name!r} (name or value)")
        flags += ["-e", f"{name}={value}"]
    return flags
