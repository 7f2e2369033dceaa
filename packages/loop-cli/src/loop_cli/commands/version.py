"""`the-loop version`: every part's version, for a bug report."""

from __future__ import annotations

import click

from ._common import echo_json, output_option


@click.command(epilog="Example: the-loop version -o json")
@output_option("json")
def version(fmt: str) -> None:
    """The four packages (released separately), Python and tmux; `not found` / null for
    a part that is not installed."""
    from ..versions import render_text, versions

    found = versions()
    if fmt == "json":
        echo_json(found)
    else:
        click.echo(render_text(found))
