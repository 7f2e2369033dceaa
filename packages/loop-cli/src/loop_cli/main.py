"""The click root group of `the-loop`: its options and the lazy command table.

The console script is `loop_cli.entry:main`, which answers `--version` and `--help`
without importing click and hands everything else to `main` here.
"""

from __future__ import annotations

import click

from . import __version__
from .command_table import COMMANDS, CONFIG_HELP, ROOT_HELP
from .lazy import RootGroup


@click.group(
    cls=RootGroup,
    lazy=COMMANDS,
    help=ROOT_HELP,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=str),
    default=None,
    help=CONFIG_HELP,
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
