"""`the-loop dashboard`: where the running poll daemon serves its dashboard."""

from __future__ import annotations

from typing import Any

import click

from ..errors import OperationalError
from ._common import echo_json, loaded_config, output_option


@click.command(epilog="Example: the-loop dashboard -o json")
@output_option("json")
@click.pass_context
def dashboard(ctx: click.Context, fmt: str) -> None:
    """Print the dashboard's URL (it opens nothing).

    With api.listen the URL carries the login token (from the variable api.tokenEnv
    names), which the browser trades for a cookie; without it the dashboard is on the
    unix socket api.sock only. Exit 1 when no poll daemon answers there.
    """
    from ..api.client import get_json
    from ..api.unixsock import socket_path

    cfg = loaded_config(ctx).config
    path = socket_path(cfg.effective_state_dir())
    answering = cfg.api.socket and get_json(path, "/api/attention") is not None
    info: dict[str, Any] = {
        "url": _url(ctx) if cfg.api.listen else None,
        "socket": str(path) if cfg.api.socket else None,
        "daemonAnswers": answering,
    }
    if fmt == "json":
        echo_json(info)
    elif info["url"]:
        click.echo(info["url"])
    else:
        click.echo(
            f"the dashboard is on the unix socket {path} only; set api.listen: "
            "127.0.0.1:8788 (and api.tokenEnv) for a browser, or forward it: "
            f"ssh -L 8788:{path} THIS-HOST"
        )
    if cfg.api.socket and not answering:
        raise OperationalError(f"no poll daemon answers on {path}: start `the-loop poll start`")


def _url(ctx: click.Context) -> str:
    from ..api.server import api_token
    from ..config import parse_listen
    from ._common import runtime

    rt = runtime(ctx, read_only=True)
    token = api_token(rt)  # unset or short: exit 2 with the variable's name
    host, port = parse_listen(rt.config.api.listen or "")
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/login?token={token}"
