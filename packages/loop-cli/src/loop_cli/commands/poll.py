"""`the-loop poll start` (foreground daemon) and `the-loop poll --once` (for cron)."""

from __future__ import annotations

import signal
import threading
from typing import Any

import click

from ..errors import OperationalError
from ._common import runtime


def _line(summary: dict[str, Any]) -> str:
    if summary.get("result") == "error":
        return f"poll cycle at {summary['at']}: error: {summary.get('error')}"
    if summary.get("result") == "standby":  # a fleet: another host polls
        return f"poll cycle at {summary['at']}: standby ({summary.get('reason')})"
    line = f"poll cycle at {summary['at']}: {summary['new']} new"
    if "processed" in summary:  # --once also drained the inbox
        line += (
            f", {summary['processed']} processed, {summary['retried']} to retry,"
            f" {summary['skipped']} skipped, {summary['duplicate']} duplicate,"
            f" {summary['gave_up']} gave up, {summary['rearmed']} re-armed"
        )
    return line + f", {summary['errors']} source errors"


@click.group(invoke_without_command=True)
@click.option("--once", is_flag=True, help="Run one cycle and exit (for cron).")
@click.pass_context
def poll(ctx: click.Context, once: bool) -> None:
    """Run the poller: `poll start` (foreground) or `poll --once`.

    --once reads the source into the inbox, then dispatches everything due now once;
    it exits 1 when the source reported errors or an event was given up, else 0.
    Events that failed transiently stay in the inbox for the next run.
    """
    if ctx.invoked_subcommand is not None:
        if once:
            raise click.UsageError("--once cannot be combined with a subcommand")
        return
    if not once:
        click.echo(ctx.get_help())
        ctx.exit(2)
    from ..poller import cycle_summary, drain_once, record_once, run_cycle

    rt = runtime(ctx)
    rt.check_launch()
    report = run_cycle(rt)
    drained = drain_once(rt)
    summary = cycle_summary(report, drained)
    record_once(rt, summary)
    click.echo(_line(summary))
    for error in report.errors:
        click.echo(f"source error: {error}", err=True)
    if report.errors or drained.gave_up:
        raise OperationalError(
            f"poll cycle had {len(report.errors)} source error(s), {drained.gave_up} give-up(s)"
        )


@poll.command("start")
@click.option(
    "--cycles",
    type=click.IntRange(min=1),
    default=None,
    hidden=True,
    help="Stop after N cycles (tests).",
)
@click.pass_context
def start(ctx: click.Context, cycles: int | None) -> None:
    """Poll in the foreground at polling.intervalSeconds and dispatch the inbox, until
    SIGTERM or SIGINT (then within about 2 s plus one tmux timeout)."""
    from loop_dispatch.drain import GroundLost

    from ..poller import daemon_lock, run_forever

    rt = runtime(ctx)
    rt.source()  # refuse at once (exit 2) on a source that cannot be built
    rt.check_launch()
    with daemon_lock(rt):  # refuse (exit 1) while another poller runs on this state dir
        stop = threading.Event()

        def on_signal(signum: int, _frame: object) -> None:
            stop.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        click.echo(
            f"the-loop poller: every {rt.config.polling.interval_seconds:g}s, tracker "
            f"{rt.config.tracker}, state {rt.state_dir}"
        )
        try:
            n = run_forever(rt, stop, on_cycle=lambda s: click.echo(_line(s)), max_cycles=cycles)
        except GroundLost as exc:
            raise OperationalError(f"the-loop poller: stopping: {exc}") from None
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    click.echo(f"the-loop poller: stopped after {n} cycle(s)")
