"""`the-loop poll start` (foreground daemon) and `the-loop poll --once` (for cron)."""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Any

import click

from ..errors import OperationalError
from ..lazy import SuggestingGroup
from ._common import echo_json, log_options, output_option, preflight, runtime

if TYPE_CHECKING:
    from ..attempts import Attempts
    from ..interrupts import Interrupt
    from ..runtime import Runtime


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
        if summary.get("held"):  # paused or stopped items' events, waiting (issue 24)
            line += f", {summary['held']} held"
    return line + f", {summary['errors']} source errors"


@click.group(
    cls=SuggestingGroup, invoke_without_command=True, epilog="Example: the-loop poll --once -o json"
)
@click.option("--once", is_flag=True, help="Run one cycle and exit (for cron).")
@output_option("json")
@click.pass_context
def poll(ctx: click.Context, once: bool, fmt: str) -> None:
    """Run the poller: `poll start` (foreground) or `poll --once`.

    --once reads the source into the inbox, then dispatches everything due now once,
    printing one line per attempt that did not simply succeed. It exits 1 when the
    source reported errors, or an event failed definitively or was given up, else 0.
    Events that failed transiently stay in the inbox for the next run. SIGINT/SIGTERM:
    the attempts under way finish, the rest wait for the next run (exit 130/143).
    """
    if ctx.invoked_subcommand is not None:
        if once:
            raise click.UsageError("--once cannot be combined with a subcommand")
        return
    if not once:
        click.echo(ctx.get_help())
        ctx.exit(2)
    from ..interrupts import trapped

    rt = runtime(ctx)
    preflight(rt)  # no tmux, a missing folder or env file: refuse now
    with trapped() as stop:
        _once(ctx, rt, stop, fmt)


def _once(ctx: click.Context, rt: Runtime, stop: Interrupt, fmt: str) -> None:
    from ..attempts import Attempts
    from ..poller import cycle_summary, drain_once, hibernate_idle, record_once, run_cycle

    report = run_cycle(rt)
    attempts = Attempts()
    drained = None
    if not stop.requested:
        drained = drain_once(rt, stop=stop.event, on_settled=attempts.add)
    summary = cycle_summary(report, drained, attempts=attempts)
    if not stop.requested:
        summary["hibernated"] = hibernate_idle(rt)
    if stop.requested:
        summary["interrupted"] = stop.name
    record_once(rt, summary)
    if fmt == "json":
        echo_json({**summary, "attempts": attempts.lines(), "sourceErrors": report.errors})
    else:
        for line in attempts.lines():
            click.echo(line)
        click.echo(_line(summary))
        for error in report.errors:
            click.echo(f"source error: {error}", err=True)
    if stop.requested:
        _interrupted(ctx, rt, stop, summary, attempts)
    definite, gave_up = attempts.definite(), attempts.gave_up()
    if report.errors or definite or gave_up:
        raise OperationalError(
            f"poll cycle had {len(report.errors)} source error(s), {gave_up} give-up(s)"
            + (f", {definite} event(s) failed definitively" if definite else "")
        )


def _interrupted(
    ctx: click.Context, rt: Runtime, stop: Interrupt, summary: dict[str, Any], attempts: Attempts
) -> None:
    """Record and say how far an interrupted `--once` got, then exit 130/143."""
    from ..interrupts import record_interrupted

    counts = {k: summary.get(k, 0) for k in ("new", *attempts.COUNTS)}
    record_interrupted(rt.event_log, "poll --once", stop.name, counts)
    click.echo(
        f"interrupted by {stop.name}: the attempts under way finished; what is still due "
        "waits in the inbox for the next run",
        err=True,
    )
    ctx.exit(stop.exit_code)


@poll.command("start", epilog="Example: the-loop poll start --log-level debug")
@click.option(
    "--cycles",
    type=click.IntRange(min=1),
    default=None,
    hidden=True,
    help="Stop after N cycles (tests).",
)
@log_options
@click.pass_context
def start(ctx: click.Context, cycles: int | None, log_level: str, log_format: str) -> None:
    """Poll in the foreground at polling.intervalSeconds and dispatch the inbox, until
    SIGTERM or SIGINT (then within about 2 s plus one tmux timeout). The config file
    is re-read before each cycle and at once on SIGHUP: live keys apply, restart-only
    keys and an invalid file are refused, each with an event.

    Logs one line per decision (spawn, delivery, respawn, failure and its reason,
    give-up) to stderr; an idle cycle only at --log-level debug. Serves the read-only
    API and dashboard on api.sock in the state dir (and on api.listen): `the-loop
    dashboard` prints its URL."""
    from loop_dispatch.drain import GroundLost

    from ..api.server import api_token, serving
    from ..daemon_signals import hangup_reloads
    from ..daemonlog import configured, daemon_logger
    from ..live_config import LiveConfig
    from ..poller import daemon_lock, run_forever

    rt = runtime(ctx)
    preflight(rt)  # no tmux, a missing folder or env file: refuse now, not retry for a day
    rt.sources()  # refuse at once (exit 2) on a source that cannot be built
    api_token(rt)  # api.listen without its token: refuse now (exit 2)
    log = daemon_logger()
    live = LiveConfig(rt.loaded, rt.apply_config, rt.event_log, "poller")
    # One poller per state dir; SIGHUP re-reads the config.
    with (
        configured(log_level, log_format),
        daemon_lock(rt),
        serving(rt) as api,  # the read-only API on api.sock (and api.listen): issue 26
        hangup_reloads("the-loop poller") as hangup,
    ):
        stop = threading.Event()

        def on_signal(signum: int, _frame: object) -> None:
            stop.set()

        def on_cycle(summary: dict[str, Any]) -> None:
            if summary.get("result") == "standby":  # errors are logged as poll.error
                log.debug(_line(summary))

        def on_started() -> None:
            log.info(
                "the-loop poller: every %gs, tracker %s, state %s, config %s%s",
                rt.config.polling.interval_seconds,
                "+".join(rt.config.active_trackers()),
                rt.state_dir,
                live.digest or "embedded defaults",
                f", API on {api.where()}" if api.where() else "",
            )

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            n = run_forever(
                rt,
                stop,
                on_cycle=on_cycle,
                on_started=on_started,
                max_cycles=cycles,
                live=live,
                hangup=hangup,
            )
        except GroundLost as exc:
            raise OperationalError(f"the-loop poller: stopping: {exc}") from None
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        log.info("the-loop poller: stopped after %d cycle(s)", n)
