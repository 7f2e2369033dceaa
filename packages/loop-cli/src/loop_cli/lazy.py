"""A click group whose subcommands are imported only when they run.

`the-loop --version` and `--help` must not import YAML, sqlite or tmux code, so the
command table maps names to "module:attr" strings plus a short help line, and a module
is imported only when its command is actually invoked (or asked for its own help).
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from .errors import EXIT_USAGE, classify
from .signals import Terminated, signal_exit_code


class SuggestingGroup(click.Group):
    """A group that answers a mistyped command with the nearest one (like git, gh)."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            import difflib

            near = difflib.get_close_matches(name, self.list_commands(ctx), n=1, cutoff=0.6)
            if near:
                ctx.fail(f"No such command '{name}'. Did you mean '{near[0]}'?")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List commands by their first sentence, whole (click cuts at the width)."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, first_sentence(cmd)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def first_sentence(cmd: click.Command) -> str:
    """The command's `short_help`, else the first sentence of its help, never cut."""
    if cmd.short_help:
        return cmd.short_help
    paragraph = " ".join((cmd.help or "").split("\n\n")[0].split())
    head, dot, _ = paragraph.partition(". ")
    return head + "." if dot else paragraph


class LazyGroup(SuggestingGroup):
    """`lazy` maps a command name to ("package.module:attr", "short help")."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]] | None = None, **kw: Any):
        super().__init__(*args, **kw)
        self.lazy: dict[str, tuple[str, str]] = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(super().list_commands(ctx))
        names.update(self.lazy)
        return sorted(names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name not in self.lazy:
            return None
        module_name, _, attr = self.lazy[cmd_name][0].partition(":")
        command = getattr(importlib.import_module(module_name), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.lazy[cmd_name][0]} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List commands from the table's help lines, importing nothing."""
        rows = []
        for name in self.list_commands(ctx):
            if name in self.commands:
                cmd = self.commands[name]
                if cmd.hidden:
                    continue
                rows.append((name, first_sentence(cmd)))
            else:
                rows.append((name, self.lazy[name][1]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class CliFailure(click.ClickException):
    """An expected failure rendered as `Error: ...`, one line per problem (exit 1)."""

    def show(self, file: Any = None) -> None:
        for line in self.format_message().splitlines() or [""]:
            click.echo(f"Error: {line}", err=True)


class RootGroup(LazyGroup):
    """The top-level group: the one place expected failures become `Error:` lines."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Bytes that are not UTF-8 reach Python as lone surrogates, which no store, log
        # or terminal can take: refused here, once, for every command.
        for index, arg in enumerate(args, start=1):
            if any("\udc80" <= ch <= "\udcff" for ch in arg):
                from .terminal import printable

                raw = arg.encode("utf-8", "surrogateescape")
                shown = printable(raw.decode("utf-8", "backslashreplace")[:80])
                raise failure(f"argument {index} is not valid UTF-8: '{shown}'", EXIT_USAGE)
        return super().parse_args(ctx, hoist_globals(args))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except (KeyboardInterrupt, Terminated) as exc:  # the shell's codes: 130, 143
            raise click.exceptions.Exit(signal_exit_code(exc) or 1) from None
        except Exception as exc:
            code = classify(exc)
            if code is None:
                raise
            raise failure(str(exc) or type(exc).__name__, code) from None


class CliUsageFailure(CliFailure):
    """An expected failure of the request itself (exit 2)."""

    exit_code = EXIT_USAGE


def failure(message: str, exit_code: int) -> CliFailure:
    """The click exception that prints `message` and exits with `exit_code`."""
    return CliUsageFailure(message) if exit_code == EXIT_USAGE else CliFailure(message)


GLOBAL_VALUE_OPTIONS = ("--config",)


def hoist_globals(args: list[str]) -> list[str]:
    """`CMD ... --config FILE` as `--config FILE CMD ...`: a global option works after
    the subcommand too (kubectl's way). Nothing after `--` moves."""
    front: list[str] = []
    rest: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            rest += args[index:]
            break
        if arg in GLOBAL_VALUE_OPTIONS and index + 1 < len(args):
            front += args[index : index + 2]
            index += 2
            continue
        if arg.partition("=")[0] in GLOBAL_VALUE_OPTIONS and "=" in arg:
            front.append(arg)
        else:
            rest.append(arg)
        index += 1
    return front + rest
