"""Console script `the-loop`: the two answers that need no command are given here.

`--version` and `--help` are what an operator (and every wrapper script) runs most
blindly, and `status` is what runs in a watch loop; importing click alone costs more
than the rest of Python's start-up. So this entry point answers `--version` and
`--help` itself, in click's exact layout (a test holds them equal at several widths),
runs the plain `status [--config FILE] [-o text|json]` without click (same output,
errors and exit codes as the click command: tested side by side), and hands every other
command line to the click group in `main`, which imports only the command that runs.
"""

from __future__ import annotations

import sys

PROG = "the-loop"


def main() -> None:
    """Console script `the-loop`."""
    args = sys.argv[1:]
    if args == ["--version"]:
        from .versions import render_text, versions

        sys.stdout.write(render_text(versions()) + "\n")
        return
    if args in (["--help"], ["-h"]):
        sys.stdout.write(root_help())
        return
    plain = plain_status(args)
    if plain is not None:
        from .signals import exit_on_sigterm, signal_exit_code

        exit_on_sigterm()
        try:
            code = run_status(*plain)
        except BaseException as exc:  # Ctrl-C, SIGTERM: the shell's codes, no traceback
            code = signal_exit_code(exc) or 0
            if not code:
                raise
        sys.exit(code)
    from .main import main as click_main

    click_main()


def _terminal_columns() -> int:
    """shutil.get_terminal_size().columns without importing shutil (and its archive
    modules): $COLUMNS, else the terminal of stdout, else 80."""
    import os

    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def root_help(width: int | None = None) -> str:
    """The root help exactly as click's HelpFormatter lays it out at this terminal width."""
    import textwrap

    from .command_table import (
        COMMANDS,
        CONFIG_HELP,
        EPILOG,
        LOG_LEVEL_HELP,
        LOG_LEVELS,
        OUTPUT_HELP,
        OUTPUTS,
        ROOT_HELP,
        VERSION_HELP,
    )

    if width is None:
        width = max(min(_terminal_columns(), 80) - 2, 50)

    def fill(text: str, at: int, indent: str) -> str:
        wrapper = textwrap.TextWrapper(
            at, initial_indent=indent, subsequent_indent=indent, replace_whitespace=False
        )
        return wrapper.fill(text)

    def rows(items: list[tuple[str, str]]) -> list[str]:
        first = min(max(len(name) for name, _ in items), 30) + 2
        out = []
        for name, text in items:
            lines = textwrap.wrap(text, max(width - first - 2, 10), replace_whitespace=False)
            head = f"  {name}"
            if len(name) <= first - 2:
                out.append(head + " " * (first - len(name)) + lines[0])
            else:
                out += [head, " " * (first + 2) + lines[0]]
            out += [" " * (first + 2) + line for line in lines[1:]]
        return out

    options = [
        ("--config FILE", CONFIG_HELP),
        (f"-o, --output [{'|'.join(OUTPUTS)}]", OUTPUT_HELP),
        (f"--log-level [{'|'.join(LOG_LEVELS)}]", LOG_LEVEL_HELP),
        ("--version", VERSION_HELP),
        ("-h, --help", "Show this message and exit."),
    ]
    commands = [(name, COMMANDS[name][1]) for name in sorted(COMMANDS)]
    prefix = f"Usage: {PROG} "
    usage = textwrap.TextWrapper(
        width, initial_indent=prefix, subsequent_indent=" " * len(prefix)
    ).fill("[OPTIONS] COMMAND [ARGS]...")
    lines = [
        usage,
        "",
        fill(ROOT_HELP, width, "  "),
        "",
        "Options:",
        *rows(options),
        "",
        "Commands:",
        *rows(commands),
        "",
        fill(EPILOG, width, "  "),
    ]
    return "\n".join(lines) + "\n"


def plain_status(args: list[str]) -> tuple[str | None, str] | None:
    """(config path, format) for `status` with only `--config FILE` (before or after it)
    and `-o/--output/--format text|json`; None for any other line (click then parses
    it, with its own messages)."""
    import os

    if any("\udc80" <= ch <= "\udcff" for arg in args for ch in arg):
        return None  # not UTF-8: the click group's own refusal
    config: str | None = None
    fmt: str | None = None
    root_fmt: str | None = None
    seen_status = False
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        name, eq, value = arg.partition("=")
        if name in ("--config", "-o", "--output", "--format") and not eq:
            if not rest:
                return None
            value = rest.pop(0)
        elif name.startswith("-o") and len(name) > 2 and not eq:
            name, value = "-o", name[2:]
        elif not eq or name not in ("--config", "--output", "--format"):
            if arg == "status" and not seen_status:
                seen_status = True
                continue
            return None
        if name == "--config":
            if config is not None:
                return None
            config = value
        elif name == "--format" and not seen_status:
            return None  # not a root option: click's own refusal
        elif seen_status:
            if fmt is not None:
                return None
            fmt = value
        else:
            if root_fmt is not None:
                return None
            root_fmt = value
    if not seen_status:
        return None
    if config is not None and (not config or os.path.isdir(config)):
        return None  # click's own usage error for the option
    chosen = fmt or root_fmt or "text"
    return (config, chosen) if chosen in ("text", "json") else None


def run_status(config: str | None, fmt: str) -> int:
    """`status` without click: what `commands.status` does for text and json."""
    from .api import hint
    from .api.client import daemon_output

    known = hint.state_dir(config)  # the daemon's socket, found without loading the config
    served = None if known is None else daemon_output(known[1], known[0], fmt)
    if served is not None:  # its answer, rendered as this process would print it
        sys.stdout.write(served[0])
        sys.stdout.flush()
        return 0 if served[1] else 1
    from .errors import classify

    try:
        data, problem = _collect(config, fmt, asked=known is not None)
    except Exception as exc:
        code = classify(exc)
        if code is None:
            raise
        for line in (str(exc) or type(exc).__name__).splitlines() or [""]:
            sys.stderr.write(f"Error: {line}\n")
        return code
    if isinstance(data, tuple):  # the daemon answered once the config was loaded
        sys.stdout.write(data[0])
        sys.stdout.flush()
        return 0 if data[1] else 1
    from .status_text import render_output

    sys.stdout.write(render_output(data, fmt))
    sys.stdout.flush()
    if problem:  # an invalid config file: its last valid version's state, then exit 2
        sys.stderr.write(f"Error: {problem}\n")
        return 2
    return 0 if data["ok"] else 1


def _collect(
    config: str | None, fmt: str, *, asked: bool
) -> tuple[dict[str, object] | tuple[str, bool], str]:
    """The status computed here (and the config's problem), or the daemon's rendered
    answer when it was not `asked` yet (no hint) and the loaded config names it."""
    from .api import hint
    from .api.client import daemon_output
    from .config import load_config_or_last_valid

    loaded = load_config_or_last_valid(config)
    if not loaded.problem:  # a broken file is shown here (the daemon runs the old one)
        state = loaded.config.effective_state_dir()
        hint.remember(loaded.path, state)
        if loaded.config.api.socket and not asked:
            served = daemon_output(state, loaded.path, fmt)
            if served is not None:
                return served, ""
    from .runtime import Runtime
    from .status import collect_status

    rt = Runtime(loaded, read_only=True)
    try:
        return collect_status(rt), loaded.problem
    finally:
        rt.close()
