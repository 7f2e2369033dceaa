"""`the-loop events`: filter and follow the event log."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, TypedDict

import click

from ._common import complete_ref, echo_json, loaded_config, output_option, parse_ref


class _Filters(TypedDict):
    types_glob: str | None
    work_item: str | None
    delivery_id: str | None
    level: str | None
    since: datetime | None


@click.command(epilog="Example: the-loop events --type 'inbox.*' --since 1h -o jsonl")
@click.option("--type", "type_glob", default=None, help="Type glob(s), comma-separated.")
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
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Newest N only.")
@output_option("json", "jsonl", table_alias=True)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events (Ctrl-C stops).")
@click.pass_context
def events(
    ctx: click.Context,
    type_glob: str | None,
    work_item: str | None,
    delivery_id: str | None,
    level: str | None,
    since: str | None,
    limit: int | None,
    fmt: str,
    follow: bool,
) -> None:
    """Read the event log; filters combine (every event type is in the events guide).

    --follow keeps printing until Ctrl-C (exit 130) or SIGTERM (exit 143)."""
    from ..events_query import TABLE_HEADER, parse_since, table_line
    from ..runtime import open_event_log

    log = open_event_log(loaded_config(ctx).config)
    filters: _Filters = {
        "types_glob": type_glob,
        "work_item": str(parse_ref(work_item)) if work_item else None,
        "delivery_id": delivery_id,
        "level": level,
        "since": parse_since(since) if since else None,
    }
    if follow and fmt == "json":
        raise click.UsageError("--follow prints a stream: use -o text or jsonl")
    if fmt == "json":
        echo_json(log.read(limit=limit, **filters))
        return

    def out(rec: dict[str, Any]) -> None:
        if fmt == "jsonl":
            click.echo(json.dumps(rec, ensure_ascii=False, separators=(",", ":")))
        else:
            click.echo(table_line(rec))

    if fmt == "text":
        click.echo(TABLE_HEADER)
    if not follow:
        for rec in log.read(limit=limit, **filters):
            out(rec)
        return
    # One generator: the existing records, then the new ones, with no gap between.
    for rec in log.follow(**filters, from_start=True, limit=limit):  # Ctrl-C: exit 130
        out(rec)
