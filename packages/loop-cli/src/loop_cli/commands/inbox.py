"""`the-loop inbox`: what is waiting, in flight or given up, and the operator's remedies."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING

import click

from ..errors import UsageError
from ..lazy import SuggestingGroup
from ._common import complete_ref, echo_json, output_option, parse_ref, runtime, table

if TYPE_CHECKING:
    from loop_dispatch.inbox import InboxEntry

STATES = {
    "pending": ("pending", "claimed"),
    "in-flight": ("claimed",),
    "given-up": ("given_up",),
    "paused": ("paused",),
    "done": ("done",),
    "all": ("pending", "claimed", "paused", "given_up"),
}
DEFAULT_LIMIT = 100  # a backlog of thousands is a count and a page, not a screenful each
MAX_SEQ = 2**63 - 1  # inbox ids are SQLite/PostgreSQL 64-bit integers


def _check_ids(ids: tuple[int, ...]) -> None:
    """One line for an id no row can have (the store cannot even be asked about it)."""
    for seq in ids:
        if not 1 <= seq <= MAX_SEQ:
            raise UsageError(
                f"inbox row id {seq} is out of range (ids run from 1 to {MAX_SEQ}); "
                "see `the-loop inbox list`"
            )


@click.group(cls=SuggestingGroup)
def inbox() -> None:
    """Accepted events not yet delivered (pending, in flight, given up)."""


def _age(moment: datetime) -> str:
    seconds = int((datetime.now(timezone.utc) - moment).total_seconds())
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def _row(entry: InboxEntry) -> list[str]:
    state = "in flight" if entry.state == "claimed" else entry.state.replace("_", " ")
    return [
        str(entry.seq),
        state,
        entry.work_item,
        entry.delivery_id,
        _age(entry.received_at),
        str(entry.attempts),
        str(entry.tries),
        click.unstyle(entry.last_reason or "-"),
    ]


@inbox.command("list", epilog="Example: the-loop inbox list --state given-up -o json")
@click.option(
    "--state",
    type=click.Choice(list(STATES)),
    default="all",
    help="Which rows: pending (waiting or in flight), in-flight, given-up, paused (held "
    "while their item is paused or stopped), done, all (default: all not done).",
)
@click.option(
    "--item",
    "ref",
    default=None,
    shell_complete=complete_ref,
    help="Only this work item's rows (a ref).",
)
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=DEFAULT_LIMIT,
    show_default=True,
    help="At most this many rows, oldest first (0: every row).",
)
@output_option("json")
@click.pass_context
def list_(ctx: click.Context, state: str, ref: str | None, limit: int, fmt: str) -> None:
    """Rows oldest first: age since accepted, definite attempts, tries, last reason."""
    rt = runtime(ctx, read_only=True)
    total = 0
    if not rt.has_state:
        entries: list[InboxEntry] = []
    else:
        item = str(parse_ref(ref)) if ref else None
        entries = rt.store.inbox.entries(STATES[state], work_item=item, limit=limit or None)
        if limit and len(entries) == limit:
            total = rt.store.inbox.count(STATES[state], work_item=item)
    more = total - len(entries) if total > len(entries) else 0
    if more:  # stderr: JSON output stays exactly the rows
        click.echo(
            f"inbox: showing the oldest {len(entries)} of {total} rows; "
            "--limit N for more, --limit 0 for all",
            err=True,
        )
    if fmt == "json":
        echo_json([e.as_dict() for e in entries])
        return
    if not entries:
        click.echo(
            "inbox: nothing done yet"
            if state == "done"
            else "inbox: nothing pending, in flight or given up"
        )
        return
    headers = ["ID", "STATE", "ITEM", "DELIVERY", "AGE", "ATTEMPTS", "TRIES", "LAST REASON"]
    click.echo(table([_row(e) for e in entries], headers))


@inbox.command("retry", epilog="Example: the-loop inbox retry --given-up")
@click.argument("ids", nargs=-1, type=int)
@click.option(
    "--item",
    "ref",
    default=None,
    shell_complete=complete_ref,
    help="Every given-up or waiting row of this item.",
)
@click.option("--given-up", "given_up", is_flag=True, help="Every given-up row.")
@output_option("json")
@click.pass_context
def retry(
    ctx: click.Context, ids: tuple[int, ...], ref: str | None, given_up: bool, fmt: str
) -> None:
    """Re-arm rows now with a fresh attempt budget (recorded as `inbox.retried`).

    IDS that name no pending or given-up row are refused (exit 2) after the
    others are re-armed."""
    if not ids and ref is None and not given_up:
        raise UsageError("name the rows to retry: IDs, --item REF or --given-up")
    _check_ids(ids)
    rt = runtime(ctx)
    item = str(parse_ref(ref)) if ref else None
    entries = rt.store.inbox.retry(seqs=ids, work_item=item, given_up=given_up)
    for entry in entries:
        rt.event_log.emit(
            "inbox.retried",
            source="loop-cli",
            work_item=entry.work_item or None,
            delivery_id=entry.delivery_id,
            detail={"seq": entry.seq, "was": entry.state, "attempts_before": entry.attempts},
        )
    missing = sorted(set(ids) - {entry.seq for entry in entries})
    if fmt == "json":
        echo_json({"rearmed": [e.seq for e in entries], "missing": missing})
    elif entries or not missing:  # a refusal alone is not announced as a success
        click.echo(f"re-armed {len(entries)} event(s); a running daemon delivers them next")
    if missing:
        shown = ", ".join(map(str, missing))
        raise UsageError(f"no pending or given-up inbox row {shown}; see `the-loop inbox list`")


@inbox.command("drop", epilog="Example: the-loop inbox drop 12 --reason 'sent twice'")
@click.argument("seq", type=int)
@click.option("--reason", required=True, help="Why (recorded in the event log).")
@output_option("json")
@click.pass_context
def drop(ctx: click.Context, seq: int, reason: str, fmt: str) -> None:
    """Settle a pending or given-up row as dropped (kept in the table, recorded)."""
    if not reason.strip():
        raise UsageError("--reason must say why")
    _check_ids((seq,))
    rt = runtime(ctx)
    entry = rt.store.inbox.drop(seq, reason.strip())
    if entry is None:
        raise UsageError(f"no pending or given-up inbox row {seq}; see `the-loop inbox list`")
    rt.event_log.emit(
        "inbox.dropped",
        source="loop-cli",
        work_item=entry.work_item or None,
        delivery_id=entry.delivery_id,
        detail={"seq": seq, "was": entry.state, "reason": " ".join(reason.split())[:300]},
    )
    if fmt == "json":
        echo_json({"dropped": seq, "deliveryId": entry.delivery_id, "was": entry.state})
    else:
        click.echo(f"dropped inbox row {seq} ({entry.delivery_id})")
