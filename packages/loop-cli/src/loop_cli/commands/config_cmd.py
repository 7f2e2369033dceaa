"""`the-loop config check`: validate the config and show what is in force."""

from __future__ import annotations

from typing import Any

import click

from ..errors import UsageError
from ..lazy import SuggestingGroup
from ._common import echo_json, loaded_config, output_option


def config_keys() -> list[str]:
    """Every key of the config as a dotted path (`routing.tmuxSocket`), from its types."""
    import typing

    import msgspec

    from ..config import Config

    def walk(cls: type[msgspec.Struct], prefix: str) -> list[str]:
        out = []
        hints = typing.get_type_hints(cls)
        for field in msgspec.structs.fields(cls):
            key = prefix + field.encode_name
            out.append(key)
            tp = hints.get(field.name)
            for candidate in (tp, *typing.get_args(tp)):
                if isinstance(candidate, type) and issubclass(candidate, msgspec.Struct):
                    out += walk(candidate, key + ".")
                    break
        return out

    return walk(Config, "")


def complete_key(_ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[Any]:
    """Config keys for the shell."""
    from click.shell_completion import CompletionItem

    return [CompletionItem(k) for k in config_keys() if k.startswith(incomplete)]


def _lookup(data: dict[str, Any], key: str) -> Any:
    """The effective value at a dotted key; UsageError naming the nearest key if none."""
    value: Any = data
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            import difflib

            near = difflib.get_close_matches(key, config_keys(), n=1, cutoff=0.6)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            raise UsageError(f"no config key {key!r}{hint}")
        value = value[part]
    return value


@click.group(cls=SuggestingGroup)
def config() -> None:
    """Validate and show the effective config."""


@config.command("check", epilog="Example: the-loop config check routing.tmuxSocket -o json")
@click.argument("key", required=False, shell_complete=complete_key)
@output_option("json", "yaml")
@click.option("--strict", is_flag=True, help="Exit 2 when there is any warning.")
@click.pass_context
def check(ctx: click.Context, key: str | None, fmt: str, strict: bool) -> None:
    """Validate the config; print the effective config (or one KEY) with secrets redacted.

    Environment variables are shown by NAME with whether they are set; never a value.
    -o text and -o yaml print the same YAML (text adds a `# config:` header line).
    Setup problems (a folder or env file that does not exist, an unwritable state
    directory, a project without a clone, a tmux server shared with another config) are
    warnings on stderr, one per line naming the key; --strict makes them exit 2.
    """
    import yaml

    from ..config import effective
    from ..preflight import setup_findings

    loaded = loaded_config(ctx)
    source = str(loaded.path) if loaded.path else "none found: embedded defaults"
    data = effective(loaded)
    warnings = [f.line() for f in setup_findings(loaded.config)]
    if key is not None:
        value = _lookup(data, key)
        if fmt == "json":
            echo_json({"config": source, "origin": loaded.origin, "key": key, "value": value})
        else:
            click.echo(yaml.safe_dump(value, sort_keys=False).rstrip().removesuffix("\n..."))
    elif fmt == "json":
        echo_json(
            {"config": source, "origin": loaded.origin, "effective": data, "warnings": warnings}
        )
    else:
        if fmt == "text":
            state = f"valid, {len(warnings)} warning(s)" if warnings else "valid"
            click.echo(f"# config: {source} (from {loaded.origin}); {state}")
        click.echo(yaml.safe_dump(data, sort_keys=False).rstrip())
    where = loaded.path or "embedded defaults"
    for line in warnings:
        click.echo(f"warning: {where}: {line}", err=True)
    if strict and warnings:
        ctx.exit(2)
