"""`the-loop completion SHELL`: the shell script that completes commands, options,
item refs, session names and config keys (click's own completion machinery)."""

from __future__ import annotations

import click

SHELLS = ("bash", "zsh", "fish")
ENV_VAR = "_THE_LOOP_COMPLETE"


@click.command(
    epilog="Example: the-loop completion bash > ~/.local/share/bash-completion/completions/the-loop"
)
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script for SHELL; load it from your shell's startup file
    (see the operator guide, "Shell completion")."""
    from click.shell_completion import get_completion_class

    from ..main import cli

    cls = get_completion_class(shell)
    if cls is None:  # pragma: no cover - the three are built into click
        raise click.UsageError(f"no completion for {shell}")
    click.echo(cls(cli, {}, "the-loop", ENV_VAR).source())
