"""`the-loop config check`: validate the config and show what is in force."""

from __future__ import annotations

import click

from ..lazy import SuggestingGroup
from ._common import echo_json, loaded_config, output_option


@click.group(cls=SuggestingGroup)
def config() -> None:
    """Validate and show the effective config."""


@config.command("check", epilog="Example: the-loop config check -o json")
@output_option("json", "yaml")
@click.pass_context
def check(ctx: click.Context, fmt: str) -> None:
    """Validate the config; print the effective config with secrets redacted.

    Environment variables are shown by NAME with whether they are set; never a value.
    -o text and -o yaml print the same YAML (text adds a `# config:` header line).
    """
    import yaml

    from ..config import effective

    loaded = loaded_config(ctx)
    source = str(loaded.path) if loaded.path else "none found: embedded defaults"
    data = effective(loaded)
    if fmt == "json":
        echo_json({"config": source, "origin": loaded.origin, "effective": data})
        return
    if fmt == "text":
        click.echo(f"# config: {source} (from {loaded.origin}); valid")
    click.echo(yaml.safe_dump(data, sort_keys=False).rstrip())
