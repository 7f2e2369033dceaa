"""Helpers every command shares: the loaded config and the runtime built from it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:
    from ..config import LoadedConfig
    from ..runtime import Runtime


def loaded_config(ctx: click.Context, *, last_valid: bool = False) -> LoadedConfig:
    """The config named by the root `--config` (or found by the search order).
    `last_valid`: an invalid file's last valid version, its problem noted (status)."""
    from ..config import load_config, load_config_or_last_valid

    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    if "loaded" not in obj:
        load = load_config_or_last_valid if last_valid else load_config
        obj["loaded"] = load(obj.get("config_path"))
        root.obj = obj
    loaded: LoadedConfig = obj["loaded"]
    return loaded


def runtime(ctx: click.Context, *, read_only: bool = False) -> Runtime:
    """The runtime (store, tmux, dispatcher...) for this invocation, closed on exit.
    `read_only`: the command only reads; its store never takes the write lock."""
    from ..runtime import Runtime

    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    if "runtime" not in obj:
        rt = Runtime(loaded_config(ctx), read_only=read_only)
        obj["runtime"] = rt
        root.obj = obj
        root.call_on_close(rt.close)
    rt_: Runtime = obj["runtime"]
    return rt_


def preflight(rt: Runtime) -> None:
    """`rt.preflight()`: refuse (exit 2) on what would make every spawn fail; show the
    other setup findings as warnings on stderr."""
    for line in rt.preflight():
        click.echo(f"warning: {line}", err=True)


def parse_ref(text: str) -> Any:
    """A work item ref from the command line (RefError -> exit 2 with its message).
    A bare number gets the ref it probably means (`1` -> `local:loop#1`)."""
    from loop_dispatch import RefError, WorkItemRef

    try:
        return WorkItemRef.parse(text.strip())
    except RefError as err:
        bare = text.strip().lstrip("#")
        if bare.isascii() and bare.isdigit():
            from ..tracker import DEFAULT_PROJECT

            raise RefError(f"{err}; did you mean 'local:{DEFAULT_PROJECT}#{bare}'?") from None
        raise


def _quiet_runtime(ctx: click.Context) -> Runtime | None:
    """The read-only runtime for a completion, or None if the config or store is not
    usable (a completion never prints an error into the operator's prompt)."""
    try:
        rt = runtime(ctx, read_only=True)
    except Exception:  # completion offers nothing rather than fail
        return None
    return rt if rt.has_state else None


def complete_ref(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[Any]:
    """Item refs for the shell: local items and every registered session's item."""
    from click.shell_completion import CompletionItem

    rt = _quiet_runtime(ctx)
    if rt is None:
        return []
    refs: set[str] = set()
    try:
        from ..tracker import LocalTracker

        refs.update(str(i.ref) for i in LocalTracker(rt.store).list())
        refs.update(str(r.work_item) for r in rt.store.registry.scan()[0])
    except Exception:  # a store that cannot answer completes nothing
        return []
    return [CompletionItem(ref) for ref in sorted(refs) if ref.startswith(incomplete)]


def complete_session(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[Any]:
    """Registered sessions for the shell: their item refs and their tmux names."""
    from click.shell_completion import CompletionItem

    rt = _quiet_runtime(ctx)
    if rt is None:
        return []
    try:
        records = rt.store.registry.scan()[0]
    except Exception:  # a store that cannot answer completes nothing
        return []
    names = {str(r.work_item) for r in records} | {r.tmux_name for r in records}
    return [CompletionItem(name) for name in sorted(names) if name.startswith(incomplete)]


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def table(rows: list[list[str]], headers: list[str]) -> str:
    """A plain aligned text table (no rich: keeps start-up fast); every cell is made
    printable (terminal control sequences neutralised)."""
    from ..terminal import printable

    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = ["  ".join(h.ljust(widths[i]) for i, h in enumerate(headers)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())
    return "\n".join(lines)


OUTPUT_HELP = "Output format (--format is the same option)."


def _root_obj(ctx: click.Context) -> dict[str, Any]:
    root = ctx.find_root()
    return root.obj if isinstance(root.obj, dict) else {}


class _OutputChoice(click.Choice):  # type: ignore[type-arg]
    """The documented formats in help and errors; old spellings accepted silently."""

    def __init__(self, shown: list[str], accepted: list[str]) -> None:
        super().__init__(shown)
        self.accepted = accepted

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value in self.accepted:
            return value
        return super().convert(value, param, ctx)


def output_option(*formats: str, table_alias: bool = False) -> Callable[[F], F]:
    """`-o/--output` (alias `--format`): `text` first and default, then `formats`.

    One option for every command that prints a result, so a script writes `-o json`
    everywhere. `table_alias` keeps the old `--format table` of list commands working
    (it means `text`). A root `the-loop -o json CMD` is the default when CMD has it.
    """
    names = ["text", *formats]
    accepted = [*names, "table"] if table_alias else names
    choice = _OutputChoice(names, accepted)

    def resolve(ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
        if value is None:
            value = _root_obj(ctx).get("output") or "text"
            if value not in accepted:
                raise click.UsageError(
                    f"this command has no -o {value}; choose from: {', '.join(names)}", ctx
                )
        return "text" if value == "table" else value

    def decorate(command: F) -> F:
        return click.option(
            "-o",
            "--output",
            "--format",
            "fmt",
            type=choice,
            default=None,
            callback=resolve,
            help=f"{OUTPUT_HELP} [default: text]",
        )(command)

    return decorate


def log_options(command: Any) -> Any:
    """`--log-level` and `--log-format` of a daemon (`poll start`, `gh-webhook start`)."""
    from ..daemonlog import FORMATS, LEVELS

    command = click.option(
        "--log-format",
        type=click.Choice(FORMATS),
        default="text",
        show_default=True,
        help="json: one object per line (journald, a log collector).",
    )(command)

    def level(ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
        chosen = value or _root_obj(ctx).get("log_level") or "info"
        return str(chosen).lower()

    return click.option(
        "--log-level",
        type=click.Choice(LEVELS, case_sensitive=False),
        default=None,
        callback=level,
        help="debug also shows idle poll cycles. [default: info]",
    )(command)
