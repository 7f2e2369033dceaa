"""`the-loop env doctor`: where each declared value lives, by fingerprint only."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ._common import echo_json, runtime, table

if TYPE_CHECKING:
    from ..rotation.doctor import DoctorReport


def _mark(fp: str | None, file_fp: str) -> str:
    if fp is None:
        return "unknown"
    if fp == "unset" or fp == file_fp:
        return fp if fp == "unset" else f"{fp} (file)"
    return f"{fp} (OLD)"


def _sessions(counts: dict[str, int], file_fp: str) -> str:
    if not counts:
        return "-"
    parts = []
    for fp, n in counts.items():
        tag = " (file)" if fp == file_fp else ("" if fp == "unset" else " (OLD)")
        parts.append(f"{n} x {fp}{tag}")
    return ", ".join(parts)


def render_text(report: DoctorReport) -> str:
    lines = [f"env file: {report.path} ({len(report.rows)} names)"]
    if report.malformed:
        numbers = ", ".join(f"line {n}" for n in report.malformed)
        lines.append(f"malformed lines ignored: {numbers} (the valid names are used)")
    rows = [
        [
            r.name,
            r.file,
            _mark(r.process, r.file),
            _mark(r.tmux_global, r.file) if report.tmux_server_running else "no server",
            _sessions(r.sessions, r.file),
        ]
        for r in report.rows
    ]
    headers = ["NAME", "FILE", "THIS PROCESS", "TMUX GLOBAL", "SESSIONS"]
    lines.append(table(rows, headers) if rows else "the file declares no names")
    if report.tmux_error:
        lines.append(f"tmux global environment: unknown ({report.tmux_error})")
    elif not report.tmux_server_running:
        lines.append("tmux global environment: no tmux server running")
    lines.append(
        f"sessions: {report.sessions_read} read"
        + (f", {report.sessions_unreadable} unreadable" if report.sessions_unreadable else "")
    )
    return "\n".join(lines)


@click.group()
def env() -> None:
    """Environment values: where each declared name's value lives (fingerprints only)."""


@env.command()
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.pass_context
def doctor(ctx: click.Context, fmt: str) -> None:
    """Each env.file name's fingerprint: in the file, this process, tmux's global
    environment, and how many sessions hold each distinct value."""
    from loop_tmux import TmuxUnavailable

    from ..rotation.doctor import GlobalEnvironment, env_doctor, global_environment
    from ..rotation.launcher import require_env_file

    rt = runtime(ctx)
    declared = require_env_file(rt.config)
    try:
        panes = rt.tmux.panes()
        tmux_global = global_environment(rt.tmux)
    except TmuxUnavailable as err:
        panes, tmux_global = [], GlobalEnvironment(None, str(err))
    records = rt.store.registry.list("active") if rt.has_state else []
    report = env_doctor(declared, records, panes, tmux_global)
    if fmt == "json":
        echo_json(report.to_dict())
    else:
        click.echo(render_text(report))
