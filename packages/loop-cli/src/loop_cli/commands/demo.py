"""`the-loop demo`: watch the loop run once, narrated; exit 0 only if all was observed."""

from __future__ import annotations

import click

from ..errors import OperationalError


@click.command(epilog="Example: the-loop demo --keep")
@click.option("--keep", is_flag=True, help="Leave the session and temp state to explore.")
@click.option(
    "--timeout", type=float, default=20.0, hidden=True, help="Seconds to wait for each observation."
)
@click.option(
    "--harness",
    type=click.Choice(["claude-code", "codex"]),
    default=None,
    help="Run a real, installed CLI instead (against a loopback model API: no account).",
)
@click.option("--binary", default=None, help="The harness program (default: claude / codex).")
def demo(keep: bool, timeout: float, harness: str | None, binary: str | None) -> None:
    """Run the whole loop on a private tmux server with the bundled demo agent."""
    from ..demo import Demo, Step

    agent = (
        f"the real {harness} CLI and a loopback model API" if harness else "the bundled demo agent"
    )
    click.echo(f"the-loop demo: a local work item, {agent}, a private tmux server.")

    def narrate(step: Step) -> None:
        mark = "ok  " if step.ok else "FAIL"
        click.echo(f"[{mark}] {step.title}")
        click.echo(f"       {step.observed}")

    runner = Demo(keep=keep, on_step=narrate, timeout=timeout, harness=harness, binary=binary)
    click.echo(f"working in {runner.report.workdir} (tmux socket {runner.report.socket})")
    report = runner.run()
    click.echo("")
    click.echo("What the event log recorded (comment bodies are never logged):")
    for rec in report.events:
        if rec.get("type") in ("poll.cycle",):
            continue
        click.echo(
            f"  {rec.get('type'):26} {rec.get('workItem') or '':18} {rec.get('deliveryId') or ''}"
        )
    click.echo("")
    if report.kept:
        click.echo("Kept for you to explore:")
        click.echo(f"  attach:   {report.attach_command()}   (detach: Ctrl-b d)")
        click.echo(f"  inspect:  the-loop --config {report.config_path} sessions list")
        click.echo(
            f"  comment:  the-loop --config {report.config_path} item comment "
            f"'{report.ref}' 'hello again' && the-loop --config {report.config_path} "
            "poll --once"
        )
        click.echo(f"  clean up: tmux -L {report.socket} kill-server; rm -rf {report.workdir}")
    else:
        click.echo("Cleaned up: the private tmux server and the temporary state are gone.")
    if not report.ok:
        failed = next((s for s in report.steps if not s.ok), None)
        raise OperationalError(
            f"demo step not observed: {failed.title}: {failed.observed}"
            if failed
            else "the demo did not run"
        )
    click.echo(
        f"All {len(report.steps)} steps observed. This is the main job: every comment "
        "on a ticket reaches a long-running agent, which survives a crash."
    )
