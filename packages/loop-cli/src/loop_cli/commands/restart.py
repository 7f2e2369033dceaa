"""`the-loop sessions restart`: roll running sessions onto the env file's values."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ._common import echo_json, runtime, table

if TYPE_CHECKING:
    from loop_envstate import EnvFile

    from ..rotation.restart import Row


def _summary(rows: list[Row]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.outcome.value] = counts.get(row.outcome.value, 0) + 1
    return ", ".join(f"{n} {outcome}" for outcome, n in counts.items()) or "no sessions"


def render_text(rows: list[Row], env: EnvFile, dry_run: bool) -> str:
    """One table row per session; differing names (fingerprints only) indented below."""
    lines = [f"env file: {env.path} ({len(env.values)} names)" + (" [dry run]" if dry_run else "")]
    body = []
    for row in rows:
        body.append([row.ref, row.tmux_name or "-", row.outcome.value, row.detail])
        body.extend(["", "", "", f"  {n.describe()}"] for n in row.stale)
    lines.append(table(body, ["REF", "TMUX", "OUTCOME", "DETAIL"]) if body else "no sessions")
    lines.append(f"summary: {_summary(rows)}")
    return "\n".join(lines)


def as_json(rows: list[Row], env: EnvFile, dry_run: bool, force: bool, code: int) -> dict[str, Any]:
    return {
        "file": str(env.path),
        "malformedLines": list(env.malformed),
        "dryRun": dry_run,
        "force": force,
        "exitCode": code,
        "rows": [r.to_dict() for r in rows],
    }


@click.command()
@click.argument("refs", nargs=-1, metavar="[REF]...")
@click.option("--all", "all_", is_flag=True, help="Every registered, running session.")
@click.option("--dry-run", is_flag=True, help="Say what would happen and why; touch nothing.")
@click.option("--force", is_flag=True, help="Relaunch running sessions even if up to date.")
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.pass_context
def restart(
    ctx: click.Context, refs: tuple[str, ...], all_: bool, dry_run: bool, force: bool, fmt: str
) -> None:
    """Relaunch sessions (--all or REF...) onto the values env.file declares now.

    Each stale session's harness is respawned in place, resuming its conversation in
    its cwd; exit 1 when any relaunch failed or still holds an old value.
    """
    from ..rotation.launcher import require_env_file
    from ..rotation.restart import exit_code, restart_sessions, select

    selection = select(all_, list(refs))
    rt = runtime(ctx)
    env = require_env_file(rt.config)
    if env.malformed:
        numbers = ", ".join(map(str, env.malformed))
        click.echo(
            f"warning: env file {env.path}: malformed line(s) {numbers} ignored; "
            "the valid names are used",
            err=True,
        )
    rows = restart_sessions(selection, env, rt.restart_deps(), dry_run=dry_run, force=force)
    code = exit_code(rows)
    if fmt == "json":
        echo_json(as_json(rows, env, dry_run, force, code))
    else:
        click.echo(render_text(rows, env, dry_run))
    ctx.exit(code)
