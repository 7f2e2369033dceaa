"""`the-loop env doctor`: where each declared value lives, by fingerprint only."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..lazy import SuggestingGroup
from ._common import echo_json, output_option, runtime, table

if TYPE_CHECKING:
    from ..agent_env import Exposure, Stray
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


@click.group(cls=SuggestingGroup)
def env() -> None:
    """Environment values: where each declared name's value lives (fingerprints only)."""


@env.command(epilog="Example: the-loop env doctor -o json")
@output_option("json")
@click.pass_context
def doctor(ctx: click.Context, fmt: str) -> None:
    """Each env.file name's fingerprint: in the file, this process, tmux's global
    environment, and how many sessions hold each distinct value."""
    from loop_tmux import TmuxUnavailable

    from ..agent_env import exposure_summary, exposures, stray_names, stray_summary
    from ..rotation.doctor import GlobalEnvironment, env_doctor, global_environment
    from ..rotation.launcher import require_env_file

    rt = runtime(ctx)
    try:
        panes = rt.tmux.panes()
        tmux_global = global_environment(rt.tmux)
    except TmuxUnavailable as err:
        panes, tmux_global = [], GlobalEnvironment(None, str(err))
    exposed = exposures(rt.config, tmux_global.values, panes)
    credentials = render_exposures(exposed, tmux_global.error)
    if rt.config.env.file is None:
        # The credential check needs no env file; the per-name table does.
        strays = stray_names(rt.config, panes)
        if fmt == "json":
            echo_json(
                {
                    "file": None,
                    "credentialExposure": exposure_summary(exposed),
                    "strayNames": stray_summary(strays),
                }
            )
        else:
            click.echo(
                "env file: none configured (key env.file)\n"
                + credentials
                + "\n"
                + render_strays(strays, tmux_global.error)
            )
        return
    declared = require_env_file(rt.config)
    strays = stray_names(rt.config, panes, declared.names)
    records = rt.store.registry.scan("active")[0] if rt.has_state else []
    report = env_doctor(declared, records, panes, tmux_global)
    if fmt == "json":
        echo_json(
            {
                **report.to_dict(),
                "credentialExposure": exposure_summary(exposed),
                "strayNames": stray_summary(strays),
            }
        )
    else:
        click.echo(
            render_text(report)
            + "\n"
            + credentials
            + "\n"
            + render_strays(strays, tmux_global.error)
        )


def render_strays(strays: list[Stray], tmux_error: str | None) -> str:
    """The doctor's lines for names an agent holds beyond what it may (names only)."""
    if tmux_error:
        return f"names outside the allowed set: not checked (tmux: {tmux_error})"
    if not strays:
        return (
            "names outside the allowed set: none in any pane (allowlist, harness.passEnv, "
            "env.file, THE_LOOP_*)"
        )
    lines = [f"names outside the allowed set: {len(strays)} pane(s)"]
    lines += [f"  {s.line()}" for s in strays]
    lines.append(
        "  remedy: relaunch the-loop's sessions (`sessions restart --force REF` with "
        "env.file, else `sessions stop` then `sessions start`): the launcher builds a "
        "pane's environment from the allowed names only"
    )
    return "\n".join(lines)


def render_exposures(exposed: list[Exposure], tmux_error: str | None) -> str:
    """The credential lines of the doctor: where an agent can read a daemon credential."""
    if tmux_error:
        return f"daemon credentials: not checked (tmux: {tmux_error})"
    if not exposed:
        return "daemon credentials: none visible to agents (tmux global environment, panes)"
    lines = [f"daemon credentials: {len(exposed)} visible to agents"]
    lines += [f"  {e.line()}" for e in exposed]
    lines.append(
        "  remedy: stop the sessions and the tmux server (`tmux -L SOCKET kill-server`); "
        "the-loop restarts it with a clean environment"
    )
    return "\n".join(lines)
