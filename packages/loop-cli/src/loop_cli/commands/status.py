"""`the-loop status`: exit 0 iff every enabled service is running."""

from __future__ import annotations

from typing import Any

import click

from ..errors import UsageError
from ._common import echo_json, loaded_config, output_option, runtime


@click.command(epilog="Example: the-loop status -o json")
@output_option("json", "slack")
@click.option("--post", is_flag=True, help="With -o slack: send it to the Slack webhook.")
@click.pass_context
def status(ctx: click.Context, fmt: str, post: bool) -> None:
    """Services, the last poll cycle and sessions (live/dead/unknown) from one tmux read.

    Exit 0 when every enabled service runs, else 1. -o slack prints a Slack Block Kit
    payload (--post sends it). While the config file is invalid, status shows the
    state its last valid version names, then the config error (exit 2).
    """
    from ..status import collect_status
    from ..status_text import render_text

    if post and fmt != "slack":
        raise UsageError("--post needs -o slack")
    loaded = loaded_config(ctx, last_valid=True)  # a broken file: its last valid version
    # A broken file is shown by this process (the daemon runs the old one); else the
    # running daemon answers when it can.
    data = None if loaded.problem else _served(ctx)
    if data is None:
        data = collect_status(runtime(ctx, read_only=True))
    if fmt == "json":
        echo_json(data)
    elif fmt == "slack":
        from ..slack import post_status, render_status_blocks

        payload = render_status_blocks(data)
        if post:
            post_status(payload)
        else:
            echo_json(payload)
    else:
        click.echo(render_text(data))
    problem = loaded.problem
    if problem:  # a config refusal stays exit 2, after the state it could still show
        click.echo(f"Error: {problem}", err=True)
        ctx.exit(2)
    ctx.exit(0 if data["ok"] else 1)


def _served(ctx: click.Context) -> dict[str, Any] | None:
    """The running poll daemon's status over api.sock, when it answers."""
    from ..api.client import daemon_status
    from ._common import loaded_config

    loaded = loaded_config(ctx)
    if not loaded.config.api.socket:
        return None
    return daemon_status(loaded.config.effective_state_dir(), loaded.path)
