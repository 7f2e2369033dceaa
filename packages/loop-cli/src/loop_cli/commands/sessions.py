"""`the-loop sessions ...`: list, start, stop, reset, attach (and lazily, restart)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import click

from ..errors import OperationalError
from ..lazy import LazyGroup
from ..terminal import printable
from ._common import (
    complete_ref,
    complete_session,
    echo_json,
    output_option,
    parse_ref,
    preflight,
    runtime,
    table,
)

# Subcommands written elsewhere in loop-cli, imported only when run.
LAZY = {
    "say": (
        "loop_cli.commands.speak:say",
        "Send the operator's own TEXT to sessions through the inbox (nothing is posted).",
    ),
    "peek": (
        "loop_cli.commands.speak:peek",
        "Show the session's last lines (or turns) without attaching to it.",
    ),
    "link-pr": (
        "loop_cli.commands.prlinks:link_pr",
        "Route pull request PR's activity to REF (before any automatic link).",
    ),
    "unlink-pr": (
        "loop_cli.commands.prlinks:unlink_pr",
        "Remove a link-pr link (exit 1 when PR has no manual link to REF).",
    ),
    "restart": (
        "loop_cli.commands.restart:restart",
        "Relaunch running sessions onto the env file's current values.",
    ),
}


@click.group(cls=LazyGroup, lazy=LAZY)
def sessions() -> None:
    """The sessions the-loop runs, one per work item (tmux `loop-<slug>`)."""


@sessions.command("list", epilog="Example: the-loop sessions list -o json")
@output_option("json", table_alias=True)
@click.option(
    "--attention",
    "attention_only",
    is_flag=True,
    help="Only sessions the stalled-agent detector flagged (why and remedy added).",
)
@click.pass_context
def list_(ctx: click.Context, fmt: str, attention_only: bool) -> None:
    """Registered sessions with their tmux presence and activity (idle, busy, blocked)."""
    from ..sessions import attention_rows, list_rows, quarantine_lines

    rt = runtime(ctx, read_only=True)
    rows = list_rows(rt)
    if attention_only:
        rows = attention_rows(rt, rows)
    quarantined = quarantine_lines(rt)
    for line in quarantined:  # stderr: JSON output stays exactly the rows
        click.echo(printable(line), err=True)
    if fmt == "json":
        echo_json(rows)
        return
    if not rows:
        click.echo("no session needs attention" if attention_only else "no sessions registered")
        return
    kept = [f"{r['ref']}: worktree kept ({r['workspaceKept']})" for r in rows if r["workspaceKept"]]
    headers = [
        "REF",
        "TMUX",
        "STATUS",
        "PRESENCE",
        "MEMORY",
        "ACTIVITY",
        "HARNESS",
        "CONVERSATION",
        "STARTED",
        "CWD",
    ]
    body = [
        [
            r["displayRef"],
            r["tmuxName"],
            r["status"] if not r["hold"] else f"{r['status']}, {r['hold']} ({r['held']} held)",
            r["presence"],
            _mib(r["rssBytes"]),
            r["activity"] or "-",
            r["harness"],
            r["conversationId"] or "-",
            _when(r["startedAt"]),
            _home(r["cwd"]),
        ]
        for r in rows
    ]
    if "host" in rows[0]:  # a fleet on a shared store: which host runs each
        headers.insert(2, "HOST")
        for cells, r in zip(body, rows, strict=True):
            cells.insert(2, r["host"] or "-")
    if attention_only:
        headers.insert(4, "WHY")
        for cells, r in zip(body, rows, strict=True):
            cells.insert(4, "; ".join(a["why"] for a in r["attention"]))
    click.echo(table(body, headers))
    sizes = [r["rssBytes"] for r in rows if r["rssBytes"] is not None]
    click.echo(f"memory: {_mib(sum(sizes))} in {len(sizes)} live session(s) on this host")
    for line in kept:
        click.echo(line)
    for r in rows if attention_only else []:
        for a in r["attention"]:
            click.echo(f"{r['displayRef']}: {a['remedy']}")


def _mib(size: int | None) -> str:
    return "-" if size is None else f"{size / (1 << 20):.0f} MiB"


def _when(iso: str) -> str:
    """A stored UTC time in the local zone, its offset shown: `2026-12-03 21:36:01+01:00`."""
    from datetime import datetime

    return datetime.fromisoformat(iso).astimezone().isoformat(sep=" ", timespec="seconds")


def _home(path: str) -> str:
    """`path` with the home folder shown as `~` (shorter columns, nothing lost)."""
    from pathlib import Path

    home = str(Path.home())
    return "~" + path[len(home) :] if path == home or path.startswith(home + "/") else path


_COMMENT = click.option(
    "--comment", is_flag=True, help="Also post the control word on the ticket (the record)."
)


@sessions.command("start", epilog="Example: the-loop sessions start local:loop#1")
@click.argument("ref", shell_complete=complete_ref)
@_COMMENT
@output_option("json")
@click.pass_context
def start(ctx: click.Context, ref: str, comment: bool, fmt: str) -> None:
    """Start the item's session now (and watch the item); a paused or stopped one
    goes on, its held events released in arrival order."""
    from ..sessions import start as start_session

    item = parse_ref(ref)
    rt = runtime(ctx)
    preflight(rt)
    row = start_session(rt, item)
    _posted(rt, item, "start", comment)
    _echo_row(row, fmt)


@sessions.command("stop", epilog="Example: the-loop sessions stop local:loop#1")
@click.argument("ref", shell_complete=complete_session)
@_COMMENT
@output_option("json")
@click.pass_context
def stop(ctx: click.Context, ref: str, comment: bool, fmt: str) -> None:
    """Terminate the harness, keep the pane's scrollback, close the record; later
    events wait in the inbox until `sessions start` (a label never respawns it)."""
    from ..sessions import stop as stop_session

    rt = runtime(ctx)
    item = parse_ref(ref)
    row = stop_session(rt, item)
    _posted(rt, item, "stop", comment)
    _echo_row(row, fmt)


@sessions.command("pause", epilog="Example: the-loop sessions pause local:loop#1 --comment")
@click.argument("ref", shell_complete=complete_session)
@_COMMENT
@output_option("json")
@click.pass_context
def pause(ctx: click.Context, ref: str, comment: bool, fmt: str) -> None:
    """Hold the item's arriving events in the inbox (state paused); the session runs on."""
    _control(ctx, ref, "pause", comment, fmt)


@sessions.command("resume", epilog="Example: the-loop sessions resume local:loop#1")
@click.argument("ref", shell_complete=complete_session)
@_COMMENT
@output_option("json")
@click.pass_context
def resume(ctx: click.Context, ref: str, comment: bool, fmt: str) -> None:
    """Release the held events in arrival order (a stopped item starts again)."""
    _control(ctx, ref, "resume", comment, fmt)


def _control(ctx: click.Context, ref: str, verb: str, comment: bool, fmt: str) -> None:
    from ..console import run_control
    from ..sessions import operator_name

    item = parse_ref(ref)
    rt = runtime(ctx)
    preflight(rt)
    row = run_control(rt, item, verb, operator_name())
    _posted(rt, item, verb, comment)
    if fmt == "json":
        echo_json(row)
    else:
        click.echo(f"{row['ref']}: {printable(row['detail'])}")


def _posted(rt: Any, item: Any, verb: str, comment: bool) -> None:
    if comment:
        from ..console import post_control_word
        from ..sessions import operator_name

        post_control_word(rt, item, verb, operator_name())


def _echo_row(row: dict[str, object], fmt: str) -> None:
    """One session's outcome: `REF: OUTCOME (TMUX)` or its JSON object."""
    if fmt == "json":
        echo_json(row)
    else:
        click.echo(f"{row['ref']}: {row['outcome']} ({row['tmuxName']})")


@sessions.command("reset", epilog="Example: the-loop sessions reset local:loop#1 --dry-run")
@click.argument("refs", nargs=-1, shell_complete=complete_session)
@click.option("--all", "all_", is_flag=True, help="Every registered session.")
@click.option("--dry-run", is_flag=True, help="Say what would happen; touch nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask on a terminal (--all asks).")
@output_option("json")
@click.pass_context
def reset(
    ctx: click.Context, refs: tuple[str, ...], all_: bool, dry_run: bool, yes: bool, fmt: str
) -> None:
    """Forget this machine's state for items: kill their tmux session, drop the record.

    The poll ledger is kept, so comments already handled are not forwarded again.
    With --all on a terminal it first asks (--yes does not); without a terminal
    (scripts, cron) it proceeds.
    """
    rows: list[dict[str, object]] = []

    def emit(text: str, row: dict[str, object] | None) -> None:
        if fmt != "json":
            click.echo(text)
        elif row is None:  # a remark, not a row: JSON output stays exactly the rows
            click.echo(text, err=True)
        else:
            rows.append(row)

    try:
        _reset(ctx, refs, all_, dry_run, yes, emit)
    finally:
        if fmt == "json":
            echo_json(rows)


def _reset(
    ctx: click.Context,
    refs: tuple[str, ...],
    all_: bool,
    dry_run: bool,
    yes: bool,
    emit: Callable[[str, dict[str, object] | None], None],
) -> None:
    from loop_dispatch import RefError

    from ..sessions import apply_reset, reset_plans, reset_quarantined

    rt = runtime(ctx)
    parsed, raw = [], []
    for text in refs:
        try:
            parsed.append(parse_ref(text))
        except RefError:
            raw.append(text)  # only a quarantined row's exact text is accepted
    if all_ and rt.has_state:
        raw = [q.key for q in rt.store.registry.quarantined()]
    if raw and not dry_run:
        for key in reset_quarantined(rt, raw):
            emit(
                f"reset quarantined row {printable(key)!r}: forgotten",
                {"quarantinedRow": key, "dryRun": False, "done": ["forgotten"]},
            )
    elif raw:
        for key in raw:
            emit(
                f"would reset quarantined row {printable(key)!r}: forget the row",
                {"quarantinedRow": key, "dryRun": True, "done": ["forget the row"]},
            )
    if raw and not parsed and not all_:
        return
    plans = reset_plans(rt, parsed, all_)
    if not plans:
        emit("no sessions registered; nothing to reset", None)
        return
    if all_ and not dry_run and not yes:
        confirm_bulk(f"reset {_counted(plans)}", plans)
    if dry_run:
        for plan in plans:
            emit(
                f"would reset {plan.ref} ({plan.presence}): {'; '.join(plan.actions())}",
                {"ref": str(plan.ref), "dryRun": True, "done": list(plan.actions())},
            )
        return
    from ..interrupts import record_interrupted, trapped

    done = 0
    with trapped() as stop:  # Ctrl-C / SIGTERM: the item under way finishes, then stop
        for plan in plans:
            if stop.requested:
                break
            row = apply_reset(rt, plan)
            done += 1
            emit(
                f"reset {row['ref']}: {', '.join(row['done']) or 'nothing to do'}",
                {"ref": row["ref"], "dryRun": False, "done": list(row["done"])},
            )
    if stop.requested:
        left = [str(p.ref) for p in plans[done:]]
        counts = {"reset": done, "not_reset": len(left)}
        record_interrupted(rt.event_log, "sessions reset", stop.name, counts)
        click.echo(
            f"interrupted by {stop.name}: reset {done} of {len(plans)}; not reset: "
            + printable(", ".join(left) or "none"),
            err=True,
        )
        ctx.exit(stop.exit_code)


def _counted(plans: list[Any]) -> str:
    live = sum(1 for p in plans if p.presence == "live")
    return f"{len(plans)} session(s), ending {live} live agent(s)"


def confirm_bulk(what: str, plans: list[Any]) -> None:
    """On a terminal, ask before a bulk action that ends agents; a "no" touches nothing
    and exits 1. Without a terminal (scripts, cron) there is no one to ask."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return
    for plan in plans:
        click.echo(f"  {plan.ref} ({plan.presence})", err=True)
    if not click.confirm(f"{what}?", default=False, err=True):
        raise OperationalError("not confirmed; nothing was reset (--yes skips this question)")


@sessions.command("attach", epilog="Example: the-loop sessions attach local:loop#1 --read-only")
@click.argument("ref", shell_complete=complete_session)
@click.option(
    "--read-only",
    "-r",
    "read_only",
    is_flag=True,
    help="Only watch (tmux attach -r): no key reaches the agent; deliveries go on.",
)
@click.pass_context
def attach(ctx: click.Context, ref: str, read_only: bool) -> None:
    """Attach this terminal to the item's tmux session (exact name, right socket)."""
    from ..sessions import attach_argv

    argv = attach_argv(runtime(ctx), parse_ref(ref), read_only=read_only)
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    try:
        os.execvpe(argv[0], argv, env)  # noqa: S606 - argv is tmux and our own names
    except OSError as exc:
        raise OperationalError(f"cannot run tmux: {exc.strerror or exc}") from None
