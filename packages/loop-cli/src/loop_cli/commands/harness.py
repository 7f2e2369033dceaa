"""`the-loop harness check`: is the configured harness set up for unattended use?"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..lazy import SuggestingGroup
from ._common import echo_json, output_option, runtime

if TYPE_CHECKING:
    from ..harness_check import HarnessReport


@click.group(cls=SuggestingGroup)
def harness() -> None:
    """Inspect the configured coding-agent harness."""


@harness.command("check", epilog="Example: the-loop harness check -o json")
@output_option("json")
@click.pass_context
def check(ctx: click.Context, fmt: str) -> None:
    """Program, version, state dir and first-run settings (see the harnesses guide);
    exit 1 if something an unattended session needs is missing."""
    from ..harness_check import check_harness

    rt = runtime(ctx)
    report = check_harness(rt.config, rt.adapter)
    if fmt == "json":
        echo_json(report_dict(report))
        ctx.exit(0 if report.ok else 1)
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


def report_dict(report: HarnessReport) -> dict[str, object]:
    """The JSON of `harness check` (fields listed in docs/output.md)."""
    return {
        "ok": report.ok,
        "adapter": report.adapter,
        "program": report.program,
        "version": report.version or None,
        "tested": list(report.tested),
        "stateDir": report.state_dir,
        "findings": [{"ok": f.ok, "what": f.what} for f in report.findings],
    }
