"""`the-loop sessions say` and `sessions peek`: the operator's words in, the agent's out."""

from __future__ import annotations

import sys

import click

from ..terminal import printable
from ._common import complete_session, echo_json, output_option, parse_ref, runtime


@click.command(
    "say",
    epilog=(
        "Example: the-loop sessions say local:loop#1 'please rebase on main'\n\n"
        "Standard input, to one project: git log -1 --format=%B | "
        "the-loop sessions say --project acme/api -"
    ),
)
@click.argument("args", nargs=-1, required=True, metavar="[REF]... TEXT")
@click.option("--all", "all_", is_flag=True, help="Every session (live, dead or hibernated).")
@click.option("--project", metavar="P", help="Every session of project P (OWNER/REPO, local name).")
@click.option("--dry-run", is_flag=True, help="Name the sessions it would go to; queue nothing.")
@click.option(
    "--wait",
    "wait",
    type=click.FloatRange(min=0),
    default=0,
    metavar="SECONDS",
    help="Wait up to SECONDS for each message to be delivered and say how (default: 0).",
)
@output_option("json")
@click.pass_context
def say(
    ctx: click.Context,
    args: tuple[str, ...],
    all_: bool,
    project: str | None,
    dry_run: bool,
    wait: float,
    fmt: str,
) -> None:
    """Send the operator's own TEXT to sessions through the inbox (nothing is posted).

    TEXT is the last argument, `-` for standard input. It is delivered like a comment,
    in order with the item's other events (readiness, receipts, dispatch.confirmed),
    framed as the operator's words; it never starts an agent where none is registered.
    The running poll daemon (or `the-loop poll --once`) delivers it; exit 1 when, with
    --wait, a message was not delivered in time.
    """
    from ..errors import UsageError
    from ..say import MAX_CHARS, check_text, targets, wait_settled
    from ..say import say as queue
    from ..sessions import operator_name

    *ref_texts, text = args
    if bool(ref_texts) + all_ + (project is not None) != 1:
        raise UsageError("say to REF..., or --all, or --project P (exactly one of them)")
    where = "standard input" if text == "-" else "the TEXT argument"
    if text == "-":
        text = sys.stdin.read(MAX_CHARS + 1)  # more is refused: never read it all
    text = check_text(text, where)
    rt = runtime(ctx)
    records = targets(rt, [parse_ref(r) for r in ref_texts], all_, project)
    if not records:
        _show(fmt, [], "no sessions: nothing queued")
        return
    if dry_run:
        rows = [{"ref": str(r.work_item), "dryRun": True, "status": r.status} for r in records]
        _show(fmt, rows, "\n".join(f"would say it to {r['ref']}" for r in rows))
        return
    said = queue(rt, records, text, operator_name())
    if wait <= 0:
        rows = [s.row("pending") for s in said]
        lines = [f"{s.ref}: queued as inbox #{s.seq}" for s in said]
        _show(fmt, rows, "\n".join(lines))
        _warn_without_daemon(rt)
        return
    rows = wait_settled(rt, said, wait)
    lines = [f"{r['ref']}: {_how(r)}" for r in rows]
    _show(fmt, rows, "\n".join(lines))
    if any(r["outcome"] != "processed" for r in rows):
        ctx.exit(1)


def _how(row: dict[str, object]) -> str:
    if row["state"] == "done":
        reason = f" ({row['reason']})" if row.get("reason") else ""
        return f"{row['outcome']}{reason}"
    reason = f", last: {row['reason']}" if row.get("reason") else ""
    return f"not delivered yet (inbox #{row['seq']} {row['state']}{reason})"


def _warn_without_daemon(rt: object) -> None:
    from .. import heartbeat
    from ..poller import SERVICE

    beat = heartbeat.read(rt.store, SERVICE, rt.host_name)  # type: ignore[attr-defined]
    if beat is None or not beat.running():
        click.echo(
            "note: no poll daemon is running on this host; the messages wait in the inbox "
            "until `the-loop poll start` (or `the-loop poll --once`) delivers them",
            err=True,
        )


def _show(fmt: str, rows: list[dict[str, object]], text: str) -> None:
    if fmt == "json":
        echo_json(rows)
    elif text:
        click.echo(printable(text, lines=True))


@click.command(
    "peek",
    epilog="Example: the-loop sessions peek local:loop#1 -n 40\n\n"
    "The last four turns: the-loop sessions peek local:loop#1 --transcript -n 4",
)
@click.argument("ref", shell_complete=complete_session)
@click.option(
    "-n",
    "count",
    type=click.IntRange(min=1, max=100_000),
    default=None,
    help="How many lines (default 100), or with --transcript how many turns (default 10).",
)
@click.option(
    "--transcript",
    is_flag=True,
    help="The conversation's last turns from the harness's own file (Claude Code, Codex).",
)
@output_option("json")
@click.pass_context
def peek(ctx: click.Context, ref: str, count: int | None, transcript: bool, fmt: str) -> None:
    """Show the session's last lines (or turns) without attaching to it.

    The pane's text as it stands, history included, with control characters made
    visible; nothing is typed into the session.
    """
    from ..peek import pane_lines, transcript_turns

    item = parse_ref(ref)
    rt = runtime(ctx, read_only=True)
    if transcript:
        found = transcript_turns(rt, item, count or 10)
        if fmt == "json":
            echo_json(found)
            return
        for turn in found["turns"]:
            click.echo(f"--- {turn['role']}")
            click.echo(printable(turn["text"], lines=True))
        if not found["turns"]:
            click.echo("no turns yet")
        return
    shown = pane_lines(rt, item, count or 100)
    if fmt == "json":
        echo_json(shown)
        return
    click.echo(printable("\n".join(shown["lines"]), lines=True))
