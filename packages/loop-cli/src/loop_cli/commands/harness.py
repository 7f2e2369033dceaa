"""`the-loop harness check`: is the configured harness set up for unattended use?"""

from __future__ import annotations

import click

from ._common import runtime


@click.group()
def harness() -> None:
    """Inspect the configured coding-agent harness."""


@harness.command("check")
@click.pass_context
def check(ctx: click.Context) -> None:
    """Program, version, state dir and first-run settings (docs/harnesses.md); exit 1 if
    something an unattended session needs is missing."""
    from ..harness_check import check_harness

    rt = runtime(ctx)
    report = check_harness(rt.config, rt.adapter)
    click.echo(
        f"adapter: {report.adapter}  program: {report.program}  version: {report.version or '?'}"
    )
    if report.tested:
        click.echo(f"tested with: {', '.join(report.tested)}")
    if report.state_dir:
        click.echo(f"state dir: {report.state_dir} (from {report.state_source})")
    for finding in report.findings:
        click.echo(f"  [{'ok' if finding.ok else 'MISSING'}] {finding.what}")
    ctx.exit(0 if report.ok else 1)
