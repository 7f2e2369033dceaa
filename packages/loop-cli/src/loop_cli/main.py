"""The click root group of `the-loop`: its options and the lazy command table.

The console script is `loop_cli.entry:main`, which answers `--version` and `--help`
without importing click and hands everything else to `main` here.
"""

from __future__ import annotations

import click

from .command_table import (
    COMMANDS,
    CONFIG_HELP,
    EPILOG,
    LOG_LEVEL_HELP,
    LOG_LEVELS,
    OUTPUT_HELP,
    OUTPUTS,
    ROOT_HELP,
    VERSION_HELP,
)
from .lazy import RootGroup


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from .versions import render_text, versions

    click.echo(render_text(versions()))
    ctx.exit(0)


@click.group(
    cls=RootGroup,
    lazy=COMMANDS,
    help=ROOT_HELP,
    epilog=EPILOG,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=str),
    default=None,
    help=CONFIG_HELP,
)
@click.option("-o", "--output", type=click.Choice(OUTPUTS), default=None, help=OUTPUT_HELP)
@click.option(
    "--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), help=LOG_LEVEL_HELP
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help=VERSION_HELP,
)
@click.pass_context
def cli(
    ctx: click.Context, config_path: str | None, output: str | None, log_level: str | None
) -> None:
    """the-loop: ticket activity into long-running coding-agent sessions."""
    ctx.obj = {"config_path": config_path, "output": output, "log_level": log_level}


def main() -> None:
    """Console script `the-loop`."""
    from .signals import exit_on_sigterm

    exit_on_sigterm()
    cli(prog_name="the-loop")


if __name__ == "__main__":  # pragma: no cover
    main()
