"""`the-loop status`: exit 0 iff every enabled service is running."""

from __future__ import annotations

import click

from ..errors import UsageError
from ._common import echo_json, runtime


@click.command()
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "slack"]),
    default="text",
    help="slack: a Slack Block Kit payload.",
)
@click.option("--post", is_flag=True, help="With --format slack: send it to the Slack webhook.")
@click.pass_context
def status(ctx: click.Context, fmt: str, post: bool) -> None:
    """Services, the last poll cycle and sessions (live/dead/unknown) from one tmux read."""
    from ..status import collect_status, render_text

    if post and fmt != "slack":
        raise UsageError("--post needs --format slack")
    rt = runtime(ctx, read_only=True)
    data = collect_status(rt)
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
    ctx.exit(0 if data["ok"] else 1)
