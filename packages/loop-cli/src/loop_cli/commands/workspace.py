"""`the-loop workspace list|gc`: the per-item git worktrees (workspace.mode worktree)."""

from __future__ import annotations

from typing import Any

import click

from ..lazy import SuggestingGroup
from ._common import echo_json, output_option, runtime, table


@click.group(cls=SuggestingGroup)
def workspace() -> None:
    """The per-item git worktrees (`workspace.mode: worktree`)."""


def _render(rows: list[dict[str, Any]], fmt: str, with_action: bool) -> None:
    if fmt == "json":
        echo_json(rows)
        return
    if not rows:
        click.echo("no worktrees")
        return
    headers = ["PATH", "REF", "BRANCH", "SESSION", "UNSAVED"]
    if with_action:
        headers += ["ACTION", "WHY"]
    out = []
    for r in rows:
        line = [
            r["path"],
            r["ref"] or "-",
            r["branch"] or "-",
            "active" if r["sessionActive"] else "-",
            r["unsaved"] or "-",
        ]
        if with_action:
            line += [r["action"], r["why"] or "-"]
        out.append(line)
    click.echo(table(out, headers))


@workspace.command("list", epilog="Example: the-loop workspace list -o json")
@output_option("json", table_alias=True)
@click.pass_context
def list_(ctx: click.Context, fmt: str) -> None:
    """Every item worktree, its branch, and what it holds that is not saved."""
    from ..workspaces import list_rows

    _render(list_rows(runtime(ctx, read_only=True)), fmt, with_action=False)


@workspace.command("gc", epilog="Example: the-loop workspace gc --dry-run")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@click.option(
    "--force", is_flag=True, help="Also remove worktrees holding unsaved work (never one in use)."
)
@output_option("json", table_alias=True)
@click.pass_context
def gc(ctx: click.Context, dry_run: bool, force: bool, fmt: str) -> None:
    """Remove worktrees of items without an active session that hold no unsaved work."""
    from ..workspaces import gc as run_gc

    _render(run_gc(runtime(ctx), dry_run=dry_run, force=force), fmt, with_action=True)
