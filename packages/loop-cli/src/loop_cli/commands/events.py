"""`the-loop events`: filter and follow the event log."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any, TypedDict

import click

from ._common import complete_ref, echo_json, loaded_config, output_option, parse_ref


class _Filters(TypedDict):
    types_glob: str | None
    exclude_types: str | None
    work_item: str | None
    delivery_id: str | None
    level: str | None
    since: datetime | None


@click.command(epilog="Example: the-loop events --type 'dispatch.*' --since 1h --limit 20 -o jsonl")
@click.option(
    "--type",
    "type_glob",
    default=None,
    help="Type glob(s), comma-separated; `!glob` excludes (`--type '!dispatch.*'`).",
)
@click.option(
    "--exclude-type",
    "exclude",
    multiple=True,
    metavar="GLOB",
    help="Leave out these types (repeatable, or comma-separated).",
)
@click.option(
    "--work-item",
    default=None,
    shell_complete=complete_ref,
    help="Only this work item's events (a ref).",
)
@click.option("--delivery-id", default=None, help="Only this delivery's events.")
@click.option(
    "--level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default=None,
    help="Minimum level.",
)
@click.option("--since", default=None, help="15m, 2h, 1d or an ISO-8601 time.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="The newest N matching events (default 50).",
)
@click.option("--all", "everything", is_flag=True, help="Every matching event (no limit).")
@output_option("json", "jsonl", table_alias=True)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events (Ctrl-C stops).")
@click.pass_context
def events(
    ctx: click.Context,
    type_glob: str | None,
    exclude: tuple[str, ...],
    work_item: str | None,
    delivery_id: str | None,
    level: str | None,
    since: str | None,
    limit: int | None,
    everything: bool,
    fmt: str,
    follow: bool,
) -> None:
    """Read the event log, newest 50 by default (types are listed in the docs' events page).

    poll.cycle (one per poll) is hidden unless a --type glob names it. The newest events
    are read from the end of the log, so --limit N costs N, not the log's size. Table
    times are in the local zone, their offset shown; the table fits the terminal.
    --follow keeps printing until Ctrl-C (exit 130) or SIGTERM (exit 143).
    """
    from ..events_query import DEFAULT_LIMIT, excluded_types, parse_since
    from ..runtime import open_event_log

    if everything and limit is not None:
        raise click.UsageError("--all and --limit contradict each other: give one")
    shown = None if everything else (limit or DEFAULT_LIMIT)
    log = open_event_log(loaded_config(ctx).config)
    filters: _Filters = {
        "types_glob": type_glob,
        "exclude_types": excluded_types(type_glob, exclude),
        "work_item": str(parse_ref(work_item)) if work_item else None,
        "delivery_id": delivery_id,
        "level": level,
        "since": parse_since(since) if since else None,
    }
    if follow and fmt == "json":
        raise click.UsageError("--follow prints a stream: use -o text or jsonl")
    if fmt == "json":
        echo_json(log.read(limit=shown, **filters))
        return
    if not follow:
        records = log.read(limit=shown, **filters)
        _print(records, records, fmt)
        if fmt == "text" and limit is None and shown is not None and len(records) == shown:
            click.echo(f"(the newest {shown}; --limit N or --all for more)", err=True)
        return
    # One generator: the existing records, then the new ones, with no gap between.
    _print(log.follow(**filters, from_start=True, limit=shown), [], fmt)  # Ctrl-C: exit 130


def _print(records: Iterable[dict[str, Any]], sized_by: list[dict[str, Any]], fmt: str) -> None:
    """Each record as a JSON line or a table line (the table sized by `sized_by`)."""
    from ..events_query import EventTable

    table = EventTable(sized_by, _terminal_width()) if fmt == "text" else None
    if table is not None:
        click.echo(table.header())
    for rec in records:
        if table is None:
            click.echo(json.dumps(rec, ensure_ascii=False, separators=(",", ":")))
        else:
            click.echo(table.line(rec))


def _terminal_width() -> int | None:
    """The terminal's width ($COLUMNS first); None when stdout is not a terminal."""
    import os
    import shutil
    import sys

    if os.environ.get("COLUMNS", "").isdigit() or sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None
