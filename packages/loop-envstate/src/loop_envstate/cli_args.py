"""The argparse command line of `loop-envstate`: every form but the launcher's plain one.

Kept out of cli.py so `loop-envstate exec FILE -- CMD`, the command of every pane
the-loop starts, never pays for argparse (with the gettext, locale and shutil imports
it brings, about 7 ms). argparse rather than click for the same reason: it is stdlib.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn

from loop_envstate.usage import EXIT_OK, NEEDS_COMMAND, PROG, UsageError


class Finished(Exception):
    """--help or --version has printed its answer; leave with ``code``."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse that fails with ONE line and never echoes stray arguments.

    A stray argument may be a value typed in the wrong place (`exec FILE TOKEN=x`), so
    it is counted, not shown.
    """

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments:"):
            count = len(message.split(":", 1)[1].split())
            message = f"{count} unexpected argument(s)"
        elif "invalid choice:" in message and "-o/--output" in message:
            message = "-o/--output must be text or json"
        elif "invalid choice:" in message:
            message = "unknown command: choose fingerprint, check or exec"
        raise UsageError(f"{self.prog}: {message} (see --help)")


class _VersionAction(argparse.Action):
    """--version: the package's own `__version__` (no importlib.metadata lookup)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from loop_envstate import __version__

        print(f"{PROG} {__version__}")
        parser.exit(EXIT_OK)


def pid_argument(text: str) -> int:
    """A positive decimal pid; the complaint describes the argument, never repeats it."""
    if text.isascii() and text.isdigit() and int(text) > 0:
        return int(text)
    if text.startswith("-") and text[1:].isdigit():
        got = "a negative number"
    elif text.isascii() and text.isdigit():
        got = "zero"
    else:
        got = "something that is not a number"
    raise argparse.ArgumentTypeError(f"a PID must be a positive integer, got {got}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Env files and process environments, by fingerprint only: a value "
        "is never printed.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action=_VersionAction)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    fp = commands.add_parser(
        "fingerprint",
        help="each declared name with its fingerprint, and the malformed line numbers",
        allow_abbrev=False,
    )
    fp.add_argument("file", metavar="FILE")
    fp.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="text (default) or json: the documented JSON shape",
    )
    fp.add_argument("--json", action="store_true", help="the same as -o json")

    check = commands.add_parser(
        "check",
        help="per pid: match, drift (names and both fingerprints) or unverified",
        description="Exit 0 all match, 1 any drift, 2 file or usage problem. An unverified "
        "pid (exited, refused, unsupported) fails only with --strict.",
        allow_abbrev=False,
    )
    check.add_argument("file", metavar="FILE")
    check.add_argument("pids", metavar="PID", nargs="+", type=pid_argument)
    check.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="text (default) or json: the documented JSON shape",
    )
    check.add_argument("--json", action="store_true", help="the same as -o json")
    check.add_argument("--strict", action="store_true", help="an unverified pid fails (exit 1)")

    run = commands.add_parser(
        "exec",
        help="run CMD (same pid) with inherited env < FILE < --set values",
        usage=f"{PROG} exec [FILE] [--keep NAME ...] [--set NAME=VALUE ...] -- CMD [ARG...]",
        description="Replace this process with CMD. Values reach CMD only through its "
        "environment, never a command line. With --keep, CMD's environment is built from "
        "nothing: the kept inherited names, then FILE, then --set (FILE is then optional). "
        "FILE missing or unreadable: exit 2 and CMD "
        "is not started. Malformed lines are reported by number and CMD still runs. CMD "
        "not found: exit 127; found but not runnable: exit 126.",
        allow_abbrev=False,
    )
    run.add_argument("file", metavar="FILE", nargs="?", default=None)
    run.add_argument(
        "--keep",
        dest="keeps",
        metavar="NAME",
        action="append",
        default=None,
        help="an inherited name CMD keeps (PREFIX* for a prefix); given, nothing else is inherited",
    )
    run.add_argument(
        "--set",
        dest="sets",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="a non-secret setting applied last (visible in ps until the exec)",
    )
    return parser


def read_command_line(args: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The parsed options and, for exec, CMD's argv (everything after the first `--`).

    Raises UsageError for a bad line and Finished after --help or --version.
    """
    parser = build_parser()
    command: list[str] = []
    is_exec = bool(args) and args[0] == "exec"
    if is_exec and "--" in args:
        cut = args.index("--")
        args, command = args[:cut], args[cut + 1 :]
    elif is_exec and not {"-h", "--help"} & set(args):
        raise UsageError(NEEDS_COMMAND)
    try:
        ns = parser.parse_args(args)
    except SystemExit as done:  # --help / --version finished on purpose
        raise Finished(done.code if isinstance(done.code, int) else EXIT_OK) from None
    if ns.command is None:
        raise UsageError(f"{PROG}: a command is needed: fingerprint, check or exec (see --help)")
    return ns, command
