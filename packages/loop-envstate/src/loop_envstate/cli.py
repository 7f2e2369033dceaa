"""`loop-envstate`: fingerprint a file, check pids against it, launch a program under it.

`exec` is the command of every pane the-loop starts, so its start-up is paid on every
spawn: the plain launcher line (`exec FILE [--set NAME=VALUE ...] -- CMD [ARG...]`) is
read here by hand and runs without argparse, the audit code or pathlib. Every other line
goes through argparse (cli_args), which also owns the usage errors of odd exec lines.
Exit codes: 0 ok, 1 drift (or unverified with --strict), 2 file problem or bad usage;
exec leaves with 127 when CMD is not found and 126 when it cannot run.
"""

from __future__ import annotations

import os
import sys

from loop_envstate.envfile import EnvFileError, display_path, parse, read_values
from loop_envstate.launcher import (
    LaunchError,
    exec_program,
    is_keep_pattern,
    kept,
    layered,
    parse_set,
)
from loop_envstate.usage import (
    EXIT_DRIFT,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    NEEDS_COMMAND,
    PROG,
    UsageError,
)

TYPE_CHECKING = False  # not typing's: importing typing costs ~7 ms at start-up

if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (exec only returns on failure)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        plain = plain_exec_line(args)
        if plain is not None:
            return _exec(*plain)
        return _dispatch(args)
    except UsageError as err:
        _err(str(err))
        return EXIT_USAGE
    except EnvFileError as err:
        _err(f"{PROG}: {err}")
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (`| head`): say nothing more, do not trace, and keep
        # the interpreter's final flush from failing again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


def plain_exec(args: list[str]) -> tuple[str, list[str], list[str]] | None:
    """(FILE, --set arguments, CMD) of a plain `exec FILE [--set NAME=VALUE ...] -- CMD`
    (a line without --keep); None for any other line (see `plain_exec_line`)."""
    line = plain_exec_line(args)
    if line is None or line[1] is not None or line[0] is None:
        return None
    return line[0], line[2], line[3]


def plain_exec_line(
    args: list[str],
) -> tuple[str | None, list[str] | None, list[str], list[str]] | None:
    """(FILE or None, --keep names or None, --set arguments, CMD) of a plain
    `exec [FILE] [--keep NAME ...] [--set NAME=VALUE ...] -- CMD`.

    None for any other line (help, a typo, a stray argument, an option-like FILE, no
    FILE and no --keep): argparse then reads it, so both ways accept the same lines and
    the errors stay argparse's. Like argparse, options may come before or after FILE.
    """
    if not args or args[0] != "exec" or "--" not in args:
        return None
    cut = args.index("--")
    file: str | None = None
    keeps: list[str] | None = None
    sets: list[str] = []
    index = 1
    while index < cut:
        arg = args[index]
        if arg in ("--set", "--keep") and index + 1 < cut and not args[index + 1].startswith("-"):
            if arg == "--set":
                sets.append(args[index + 1])
            else:
                keeps = [*(keeps or []), args[index + 1]]
            index += 2
        elif arg.startswith("--set="):
            sets.append(arg.removeprefix("--set="))
            index += 1
        elif arg.startswith("--keep="):
            keeps = [*(keeps or []), arg.removeprefix("--keep=")]
            index += 1
        elif file is None and not arg.startswith("-"):
            file = arg
            index += 1
        else:
            return None
    if file is None and keeps is None:
        return None
    return file, keeps, sets, args[cut + 1 :]


def _dispatch(args: list[str]) -> int:
    from loop_envstate.cli_args import Finished, read_command_line

    try:
        ns, command = read_command_line(args)
    except Finished as done:
        return done.code
    if ns.command == "fingerprint":
        return _fingerprint(ns.file, as_json=ns.json or ns.output == "json")
    if ns.command == "check":
        return _check(ns.file, ns.pids, as_json=ns.json or ns.output == "json", strict=ns.strict)
    if ns.file is None and not ns.keeps:
        raise UsageError(f"{PROG} exec: give FILE, or --keep NAME (see --help)")
    return _exec(ns.file, ns.keeps, ns.sets, command)


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


def _exec(file: str | None, keeps: list[str] | None, sets: list[str], command: list[str]) -> int:
    if not command:
        raise UsageError(NEEDS_COMMAND)
    overrides: dict[str, str] = {}
    for position, argument in enumerate(sets, start=1):
        try:
            name, value = parse_set(argument)
        except ValueError as err:
            raise UsageError(f"{PROG} exec: {err} (--set number {position})") from None
        overrides[name] = value
    for position, pattern in enumerate(keeps or (), start=1):
        if not is_keep_pattern(pattern):
            raise UsageError(
                f"{PROG} exec: --keep needs a variable NAME or PREFIX* (--keep number {position})"
            )
    values: dict[str, str] = {}
    if file is not None:
        values, malformed = read_values(file)
        if malformed:
            from loop_envstate.render import malformed_warning

            _err(malformed_warning(display_path(file), malformed))
    # With --keep, nothing is inherited but the kept names (a foreign tmux server's
    # global environment may hold anything); without it, everything is (older callers).
    inherited = os.environ if keeps is None else kept(os.environ, keeps)
    try:
        exec_program(command, layered(inherited, values, overrides))
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
