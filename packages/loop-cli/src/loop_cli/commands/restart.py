"""`the-loop sessions restart`: roll running sessions onto the env file's values."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..errors import UsageError
from ..rotation.restart import BUSY_CHOICES, DEFAULT_WAIT_IDLE, DEFAULT_WORKERS, SKIPPED_BUSY_EXIT
from ..terminal import printable
from ._common import complete_ref, echo_json, output_option, preflight, runtime, table

if TYPE_CHECKING:
    from loop_envstate import EnvFile

    from ..host_restart import HostAnswer
    from ..rotation.restart import Rollout, Row


def _counts(rows: list[Row]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.outcome.value] = counts.get(row.outcome.value, 0) + 1
    return counts


def _summary(rows: list[Row]) -> str:
    counts = _counts(rows)
    return ", ".join(f"{n} {outcome}" for outcome, n in counts.items()) or "no sessions"


def render_text(rows: list[Row], env: EnvFile, dry_run: bool) -> str:
    """One table row per session; differing names (fingerprints only) indented below."""
    lines = [f"env file: {env.path} ({len(env.values)} names)" + (" [dry run]" if dry_run else "")]
    body = []
    for row in rows:
        body.append(
            [row.ref, row.tmux_name or "-", row.outcome.value, row.activity or "-", row.detail]
        )
        body.extend(["", "", "", "", f"  {n.describe()}"] for n in row.stale)
    headers = ["REF", "TMUX", "OUTCOME", "ACTIVITY", "DETAIL"]
    lines.append(table(body, headers) if body else "no sessions")
    lines.append(f"summary: {_summary(rows)}")
    return "\n".join(lines)


def as_json(
    rows: list[Row], env: EnvFile, dry_run: bool, force: bool, code: int, how: Rollout
) -> dict[str, Any]:
    return {
        "file": str(env.path),
        "malformedLines": list(env.malformed),
        "dryRun": dry_run,
        "force": force,
        "waitIdle": how.wait_idle,
        "busy": how.busy,
        "maxParallel": how.max_parallel,
        "exitCode": code,
        "rows": [r.to_dict() for r in rows],
    }


def host_line(answer: HostAnswer, wait: float) -> str:
    """One line per asked host: its counts, or why there are none."""
    rid = f"request #{answer.request_id}"
    if answer.state == "expired":
        return (
            f"host {answer.host}: EXPIRED (its lease ran out): not restarted; {rid} stays "
            "queued until its worker is back (for up to an hour)"
        )
    if answer.state == "no-answer":
        return (
            f"host {answer.host}: NO ANSWER within {wait:g}s: {rid} is still "
            f"{answer.request_state}; it stays queued"
        )
    result = answer.result or {}
    if result.get("error"):
        return f"host {answer.host}: FAILED: {result['error']} ({rid})"
    counted = ", ".join(f"{n} {outcome}" for outcome, n in result.get("counts", {}).items())
    failed = f" [exit {result['exitCode']}]" if result.get("exitCode") else ""
    return f"host {answer.host}: {counted or 'no sessions'}{failed} ({rid})"


def _remote(
    ctx: click.Context, hosts: tuple[str, ...], all_hosts: bool, opts: dict[str, Any]
) -> None:
    """--host / --all-hosts on a fleet's shared store: ask, wait, report each host."""
    from ..host_restart import request_restarts, target_hosts

    rt = runtime(ctx)
    targets = target_hosts(rt, hosts, all_hosts)
    # Each host may wait up to --wait-idle for its sessions' turns to end.
    wait = (
        opts["wait"]
        if opts["wait"] is not None
        else 2 * rt.config.host.lease_seconds + opts["how"].wait_idle
    )
    text = opts["fmt"] == "text"
    if text:
        mode = " [dry run]" if opts["dry_run"] else (" [force]" if opts["force"] else "")
        click.echo(
            f"asked {len(targets)} host(s) to restart their sessions{mode}; waiting up to {wait:g}s"
        )
    answers = request_restarts(
        rt,
        targets,
        force=opts["force"],
        dry_run=opts["dry_run"],
        how=opts["how"],
        wait=wait,
        on_answer=(lambda a: click.echo(printable(host_line(a, wait)))) if text else None,
    )
    code = 1 if any(a.failed for a in answers) else 0
    if not code and any(a.skipped_busy for a in answers):
        code = SKIPPED_BUSY_EXIT
    if text:
        answered = sum(a.state == "done" for a in answers)
        click.echo(f"summary: {answered} of {len(answers)} host(s) answered")
    else:
        echo_json({"hosts": [a.as_dict() for a in answers], "wait": wait, "exitCode": code})
    ctx.exit(code)


def _console_restart(ctx: click.Context, refs: tuple[str, ...], fmt: str) -> None:
    """`sessions restart REF... --comment`: the console's restart, recorded on each
    ticket; exit 1 at the first one refused or failed (those before it are done)."""
    from ..console import post_control_word, run_control
    from ..sessions import operator_name
    from ._common import parse_ref

    items = [parse_ref(r) for r in refs]
    rt = runtime(ctx)
    preflight(rt)
    rows = []
    for item in items:
        row = run_control(rt, item, "restart", operator_name())
        post_control_word(rt, item, "restart", operator_name())
        rows.append(row)
        if fmt != "json":
            click.echo(f"{row['ref']}: {printable(row['detail'])}")
    if fmt == "json":
        echo_json(rows)


@click.command(epilog="Example: the-loop sessions restart --all --dry-run")
@click.argument("refs", nargs=-1, metavar="[REF]...", shell_complete=complete_ref)
@click.option("--all", "all_", is_flag=True, help="Every running session of this host.")
@click.option(
    "--host",
    "hosts",
    multiple=True,
    metavar="NAME",
    help="Ask host NAME's worker to restart its sessions (repeatable; through the store).",
)
@click.option("--all-hosts", is_flag=True, help="Ask every host of the fleet (through the store).")
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help=(
        "With --host/--all-hosts: how long to wait for the answers "
        "(default: 2 leases + --wait-idle)."
    ),
)
@click.option(
    "--wait-idle",
    type=click.FloatRange(min=0),
    default=DEFAULT_WAIT_IDLE,
    show_default=True,
    metavar="SECONDS",
    help="How long to wait for each busy session's turn to end before it is relaunched.",
)
@click.option(
    "--busy",
    type=click.Choice(BUSY_CHOICES),
    default="skip",
    show_default=True,
    help="A session still mid-turn at the deadline: leave it running (skip) or relaunch it.",
)
@click.option(
    "--max-parallel",
    type=click.IntRange(min=1),
    default=DEFAULT_WORKERS,
    show_default=True,
    metavar="N",
    help="At most N relaunches in flight at once.",
)
@click.option("--dry-run", is_flag=True, help="Say what would happen and why; touch nothing.")
@click.option("--force", is_flag=True, help="Relaunch running sessions even if up to date.")
@click.option(
    "--comment",
    is_flag=True,
    help="For REF...: restart as `the-loop restart` on the ticket does, and post it there.",
)
@output_option("json")
@click.pass_context
def restart(
    ctx: click.Context,
    refs: tuple[str, ...],
    all_: bool,
    hosts: tuple[str, ...],
    all_hosts: bool,
    wait: float | None,
    wait_idle: float,
    busy: str,
    max_parallel: int,
    dry_run: bool,
    force: bool,
    comment: bool,
    fmt: str,
) -> None:
    """Relaunch sessions (--all or REF...) onto the values env.file declares now.

    Each stale session's harness is respawned in place at its next idle moment (a turn
    is never cut: the item's lock is held from the idle verdict to the relaunch),
    resuming its conversation in its cwd. Exit 1 when any relaunch failed or still
    holds an old value; 3 when a session stayed busy past --wait-idle and was left
    running (skipped-busy). On a fleet, --host NAME / --all-hosts ask those hosts'
    workers to do the same with their own sessions, with the same options, and report
    each host (exit 1 when one failed or did not answer).
    With --comment, each REF is restarted at once as the control word `the-loop
    restart` does (relaunched in place, its conversation resumed, whatever its
    environment; refused when the harness cannot resume) and the word is posted on its
    ticket.
    """
    from ..host_restart import this_host_selection
    from ..rotation.launcher import require_env_file
    from ..rotation.restart import Rollout, exit_code, restart_sessions, select

    remote = bool(hosts) or all_hosts
    if comment:
        if remote or all_ or not refs or dry_run or force:
            raise UsageError(
                "--comment restarts the work items named (REF...) as the ticket's "
                "`the-loop restart` does; it takes no --all, --host, --dry-run or --force"
            )
        _console_restart(ctx, refs, fmt)
        return
    if remote and (all_ or refs):
        raise UsageError("give --host/--all-hosts, or --all, or work item refs: one of them")
    if wait is not None and not remote:
        raise UsageError("--wait applies to --host/--all-hosts only")
    how = Rollout(wait_idle=wait_idle, busy=busy, max_parallel=max_parallel)
    if remote and runtime(ctx).fleet:
        opts = {"wait": wait, "fmt": fmt, "force": force, "dry_run": dry_run, "how": how}
        _remote(ctx, hosts, all_hosts, opts)
        return
    rt = runtime(ctx)
    if remote:  # the SQLite store: one host, this one, restarted right here
        from ..host_restart import target_hosts

        target_hosts(rt, hosts, all_hosts)
        all_ = True
    selection = select(all_, list(refs))
    if selection.all:
        selection = this_host_selection(rt)
    env = require_env_file(rt.config)
    if not dry_run:
        preflight(rt)  # no tmux: refuse before any session is touched
    if env.malformed:
        numbers = ", ".join(map(str, env.malformed))
        click.echo(
            f"warning: env file {env.path}: malformed line(s) {numbers} ignored; "
            "the valid names are used",
            err=True,
        )
    from ..interrupts import Interrupted, record_interrupted, trapped

    stopped: Interrupted | None = None
    with trapped(raise_first=True):  # Ctrl-C / SIGTERM: the rows so far, recorded
        try:
            rows = restart_sessions(
                selection, env, rt.restart_deps(), dry_run=dry_run, force=force, how=how
            )
        except Interrupted as stop:
            stopped, rows = stop, list(stop.partial or [])
    code = exit_code(rows) if stopped is None else stopped.exit_code
    if fmt == "json":
        data = as_json(rows, env, dry_run, force, code, how)
        if stopped is not None:
            data["interrupted"] = str(stopped)
        echo_json(data)
    else:
        click.echo(render_text(rows, env, dry_run))
    if stopped is not None:
        counts = _counts(rows)
        if not dry_run:
            record_interrupted(rt.event_log, "sessions restart", str(stopped), counts)
        click.echo(
            f"interrupted by {stopped}: summary above is partial "
            f"({sum(counts.values())} session(s) selected"
            + (f", {counts['interrupted']} not relaunched" if counts.get("interrupted") else "")
            + ")",
            err=True,
        )
    ctx.exit(code)
