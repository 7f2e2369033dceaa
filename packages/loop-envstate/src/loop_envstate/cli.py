"""`loop-envstate`: fingerprint a file, check pids against it, launch a program under it.

argparse rather than click: this module is the command of every pane the-loop starts,
so its start-up is paid on every spawn, and argparse is already in the stdlib.
Exit codes: 0 ok, 1 drift (or unverified with --strict), 2 file problem or bad usage;
exec leaves with 127 when CMD is not found and 126 when it cannot run.
"""

from __future__ import annotations

import argparse
import os
import sys

from loop_envstate.envfile import EnvFileError, display_path, parse

TYPE_CHECKING = False  # not typing's: importing typing costs ~7 ms at start-up

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn


PROG = "loop-envstate"
EXIT_OK = 0
EXIT_DRIFT = 1
EXIT_FAILED = 1  # output could not be delivered
EXIT_USAGE = 2


_NEEDS_COMMAND = f"{PROG} exec: give the command after '--': exec FILE -- CMD [ARG...]"


class _UsageError(Exception):
    """Bad command line: one line on stderr, exit 2."""


class _Parser(argparse.ArgumentParser):
    """argparse that fails with ONE line and never echoes stray arguments.

    A stray argument may be a value typed in the wrong place (`exec FILE TOKEN=x`), so
    it is counted, not shown.
    """

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments:"):
            count = len(message.split(":", 1)[1].split())
            message = f"{count} unexpected argument(s)"
        elif "invalid choice:" in message:
            message = "unknown command: choose fingerprint, check or exec"
        raise _UsageError(f"{self.prog}: {message} (see --help)")


class _VersionAction(argparse.Action):
    """--version, resolved only when asked (importlib.metadata is not free)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            text = version(PROG)
        except PackageNotFoundError:
            text = "unknown"
        print(f"{PROG} {text}")
        parser.exit(EXIT_OK)


def _pid(text: str) -> int:
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
    fp.add_argument("--json", action="store_true", help="print the documented JSON shape")

    check = commands.add_parser(
        "check",
        help="per pid: match, drift (names and both fingerprints) or unverified",
        description="Exit 0 all match, 1 any drift, 2 file or usage problem. An unverified "
        "pid (exited, refused, unsupported) fails only with --strict.",
        allow_abbrev=False,
    )
    check.add_argument("file", metavar="FILE")
    check.add_argument("pids", metavar="PID", nargs="+", type=_pid)
    check.add_argument("--json", action="store_true", help="print the documented JSON shape")
    check.add_argument("--strict", action="store_true", help="an unverified pid fails (exit 1)")

    run = commands.add_parser(
        "exec",
        help="run CMD (same pid) with inherited env < FILE < --set values",
        usage=f"{PROG} exec FILE [--set NAME=VALUE ...] -- CMD [ARG...]",
        description="Replace this process with CMD. Values reach CMD only through its "
        "environment, never a command line. FILE missing or unreadable: exit 2 and CMD "
        "is not started. Malformed lines are reported by number and CMD still runs. CMD "
        "not found: exit 127; found but not runnable: exit 126.",
        allow_abbrev=False,
    )
    run.add_argument("file", metavar="FILE")
    run.add_argument(
        "--set",
        dest="sets",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="a non-secret setting applied last (visible in ps until the exec)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (exec only returns on failure)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _dispatch(args)
    except _UsageError as err:
        _err(str(err))
        return EXIT_USAGE
    except EnvFileError as err:
        _err(f"{PROG}: {err}")
        return EXIT_USAGE
    except _Exit as done:
        return done.code
    except BrokenPipeError:
        # The reader went away (`| head`): say nothing more, do not trace, and keep
        # the interpreter's final flush from failing again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


def _dispatch(args: list[str]) -> int:
    parser = build_parser()
    command: list[str] = []
    is_exec = bool(args) and args[0] == "exec"
    if is_exec and "--" in args:
        # Everything after the first `--` is CMD's argv, untouched by argparse.
        cut = args.index("--")
        ns, command = _parse(parser, args[:cut]), args[cut + 1 :]
    elif is_exec and not {"-h", "--help"} & set(args):
        raise _UsageError(_NEEDS_COMMAND)
    else:
        ns = _parse(parser, args)
    if ns.command is None:
        raise _UsageError(f"{PROG}: a command is needed: fingerprint, check or exec (see --help)")
    if ns.command == "fingerprint":
        return _fingerprint(ns.file, as_json=ns.json)
    if ns.command == "check":
        return _check(ns.file, ns.pids, as_json=ns.json, strict=ns.strict)
    return _exec(ns.file, ns.sets, command)


def _parse(parser: argparse.ArgumentParser, args: list[str]) -> argparse.Namespace:
    try:
        return parser.parse_args(args)
    except SystemExit as done:  # --help / --version finished on purpose
        raise _Exit(done.code) from None


class _Exit(Exception):
    def __init__(self, code: object) -> None:
        super().__init__(code)
        self.code = code if isinstance(code, int) else EXIT_OK


def _fingerprint(file: str, *, as_json: bool) -> int:
    from loop_envstate.fingerprint import fingerprint
    from loop_envstate.render import fingerprints_data, fingerprints_text

    env = parse(file)
    prints = {name: fingerprint(value) for name, value in env.values.items()}
    if as_json:
        _print_json(fingerprints_data(display_path(file), prints, env.malformed))
    else:
        print(fingerprints_text(display_path(file), prints, env.malformed))
    return EXIT_OK


def _check(file: str, pids: list[int], *, as_json: bool, strict: bool) -> int:
    from loop_envstate.audit import DRIFT, UNVERIFIED, check_pids
    from loop_envstate.render import check_data, check_text, malformed_warning

    env = parse(file)
    results = check_pids(env.values, pids)
    statuses = {result.status for result in results}
    failed = DRIFT in statuses or (strict and UNVERIFIED in statuses)
    code = EXIT_DRIFT if failed else EXIT_OK
    if as_json:
        _print_json(
            check_data(display_path(file), env.malformed, results, strict=strict, exit_code=code)
        )
    else:
        if env.malformed:
            _err(malformed_warning(display_path(file), env.malformed))
        print(check_text(results))
    return code


def _exec(file: str, sets: list[str], command: list[str]) -> int:
    from loop_envstate.launcher import LaunchError, exec_program, layered, parse_set

    if not command:
        raise _UsageError(_NEEDS_COMMAND)
    overrides: dict[str, str] = {}
    for position, argument in enumerate(sets, start=1):
        try:
            name, value = parse_set(argument)
        except ValueError as err:
            raise _UsageError(f"{PROG} exec: {err} (--set number {position})") from None
        overrides[name] = value
    env = parse(file)
    if env.malformed:
        from loop_envstate.render import malformed_warning

        _err(malformed_warning(display_path(file), env.malformed))
    try:
        exec_program(command, layered(os.environ, env.values, overrides))
    except LaunchError as err:
        _err(f"{PROG} exec: {err}")
        return err.code


def _print_json(data: object) -> None:
    import json

    print(json.dumps(data, indent=2))


def _err(line: str) -> None:
    print(line, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
