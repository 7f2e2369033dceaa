"""Entry point of `the-loop`: the root group, its options and the lazy command table."""

from __future__ import annotations

import click

from . import __version__
from .lazy import RootGroup

# name -> ("module:attr", short help). Modules are imported only when their command runs.
COMMANDS: dict[str, tuple[str, str]] = {
    "config": ("loop_cli.commands.config_cmd:config", "Validate and show the effective config."),
    "status": ("loop_cli.commands.status:status", "Services, sessions and the last poll cycle."),
    "sessions": (
        "loop_cli.commands.sessions:sessions",
        "List, start, stop, reset, attach, restart.",
    ),
    "item": ("loop_cli.commands.item:item", "Work items of the built-in local tracker."),
    "poll": ("loop_cli.commands.poll:poll", "Run the poller (forever, or --once)."),
    "events": ("loop_cli.commands.events:events", "Read and follow the event log."),
    "inbox": ("loop_cli.commands.inbox:inbox", "Accepted events not yet delivered: list, retry."),
    "demo": ("loop_cli.commands.demo:demo", "Watch the whole loop run once, on a private tmux."),
    "harness": ("loop_cli.commands.harness:harness", "Check the configured harness's setup."),
    "gh-webhook": ("loop_cli.commands.webhook:gh_webhook", "The GitHub webhook receiver."),
    "store": ("loop_cli.commands.store:store", "The state store: migrate to PostgreSQL."),
    "env": ("loop_cli.commands.env:env", "Where environment values live (env doctor)."),
    "workspace": ("loop_cli.commands.workspace:workspace", "Per-item git worktrees: list, gc."),
}


@click.group(
    cls=RootGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=str),
    default=None,
    help="Config file (else $THE_LOOP_CONFIG, ./.the-loop/config.yaml, the user config dir).",
)
@click.version_option(
    __version__, "--version", prog_name="the-loop", message="%(prog)s %(version)s"
)
@click.pass_context
def cli(ctx: click.Context, config_path: str | None) -> None:
    """the-loop: ticket activity into long-running coding-agent sessions."""
    ctx.obj = {"config_path": config_path}


def main() -> None:
    """Console script `the-loop`."""
    cli(prog_name="the-loop")


if __name__ == "__main__":  # pragma: no cover
    main()
