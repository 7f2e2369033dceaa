"""Helpers every command shares: the loaded config and the runtime built from it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from ..config import LoadedConfig
    from ..runtime import Runtime


def loaded_config(ctx: click.Context) -> LoadedConfig:
    """The config named by the root `--config` (or found by the search order)."""
    from ..config import load_config

    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    if "loaded" not in obj:
        obj["loaded"] = load_config(obj.get("config_path"))
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


def parse_ref(text: str) -> Any:
    """A work item ref from the command line (RefError -> exit 2 with its message)."""
    from loop_dispatch import WorkItemRef

    return WorkItemRef.parse(text.strip())


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
    return click.option(
        "--log-level",
        type=click.Choice(LEVELS, case_sensitive=False),
        default="info",
        show_default=True,
        help="debug also shows idle poll cycles.",
    )(command)
