"""`the-loop store migrate`: move a state directory's store into a shared database."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from ..envnames import is_env_name, shown
from ..errors import OperationalError, UsageError
from ..lazy import SuggestingGroup
from ._common import echo_json, output_option, runtime

if TYPE_CHECKING:
    from loop_dispatch.store import Store


@click.group(cls=SuggestingGroup)
def store() -> None:
    """The state store (SQLite file or shared PostgreSQL database)."""


@store.command(
    "migrate",
    epilog="Example: the-loop store migrate --to postgresql://loop@db.internal:5432/loop",
)
@click.option("--to", "url", required=True, help="postgresql://USER@HOST:PORT/DB (no password).")
@click.option(
    "--password-env",
    default=None,
    help="NAME of the variable holding the password (default: store.passwordEnv).",
)
@output_option("json")
@click.pass_context
def migrate(ctx: click.Context, url: str, password_env: str | None, fmt: str) -> None:
    """Copy this state directory's SQLite store into a new PostgreSQL database.

    Stop the daemons first (refused while one runs). The target must be empty; the
    source is left as it was, and the copy is checked against it before this exits 0.
    Then set store.url (and store.passwordEnv) in the config of every host.
    """
    from loop_dispatch.copy import copy_store, foreign_tables
    from loop_dispatch.postgres_db import redact_url
    from loop_dispatch.store import Store, is_postgresql_url

    from ..attention_store import ATTENTION_MIGRATIONS, ATTENTION_NAMESPACE
    from ..github.links import MIGRATIONS as GITHUB_MIGRATIONS
    from ..github.links import NAMESPACE as GITHUB_NAMESPACE
    from ..harness_choice import MIGRATIONS as CHOICE_MIGRATIONS
    from ..harness_choice import NAMESPACE as CHOICE_NAMESPACE
    from ..heartbeat import MIGRATIONS as HEARTBEAT_MIGRATIONS
    from ..heartbeat import NAMESPACE as HEARTBEAT_NAMESPACE
    from ..notify import NOTIFY_MIGRATIONS, NOTIFY_NAMESPACE
    from ..tracker import MIGRATIONS as TRACKER_MIGRATIONS
    from ..tracker import NAMESPACE as TRACKER_NAMESPACE
    from ..webhook.seen import MIGRATIONS as WEBHOOK_MIGRATIONS
    from ..webhook.seen import NAMESPACE as WEBHOOK_NAMESPACE

    rt = runtime(ctx)
    if not is_postgresql_url(url):
        raise UsageError("--to must be a postgresql://USER@HOST:PORT/DB URL")
    if rt.config.store.url:
        raise UsageError("this config already uses store.url; migrate from a SQLite state dir")
    if not rt.has_state:
        raise UsageError(f"no state store in {rt.state_dir} to migrate")
    name = password_env or rt.config.store.password_env
    if name and not is_env_name(name):
        raise UsageError("--password-env must be the NAME of a variable, not its value (not shown)")
    password = os.environ.get(name) if name else None
    if name and not password:
        raise UsageError(f"{shown(name)} (the password variable) is not set")
    foreign = foreign_tables(url, password)
    if foreign:
        listed = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise UsageError(
            f"{redact_url(url)} holds another application's tables ({listed}); "
            "migrate only into a new, empty database"
        )
    _refuse_live_daemons(rt.store)
    target = Store.open(url=url, password=password)
    try:
        # The source's write lock is held from here to the check after the copy: a
        # daemon that starts meanwhile cannot commit anything the copy would miss.
        with rt.store.transaction():
            _refuse_live_daemons(rt.store)
            copied = copy_store(
                rt.store,
                target,
                {
                    TRACKER_NAMESPACE: TRACKER_MIGRATIONS,
                    WEBHOOK_NAMESPACE: WEBHOOK_MIGRATIONS,
                    HEARTBEAT_NAMESPACE: HEARTBEAT_MIGRATIONS,
                    GITHUB_NAMESPACE: GITHUB_MIGRATIONS,
                    CHOICE_NAMESPACE: CHOICE_MIGRATIONS,
                    ATTENTION_NAMESPACE: ATTENTION_MIGRATIONS,
                    NOTIFY_NAMESPACE: NOTIFY_MIGRATIONS,
                },
            )
    finally:
        target.close()
    if fmt == "json":
        echo_json({"from": str(rt.store.path), "to": str(target.path), "tables": copied})
        return
    total = sum(copied.values())
    click.echo(f"copied {total} rows in {len(copied)} tables from {rt.store.path} to {target.path}")
    click.echo("next: set store.url (and store.passwordEnv) in every host's config")


def _refuse_live_daemons(store: Store) -> None:
    """A daemon still running on the source would accept (and acknowledge) events the
    copy never sees: refused, naming each one."""
    from ..heartbeat import read_all

    live = [
        f"{hb.service} (host {host}, pid {hb.pid})"
        for host, services in read_all(store).items()
        for hb in services.values()
        if hb.state == "running" and hb.running()
    ]
    if live:
        raise OperationalError(
            f"daemons still run on this state store: {', '.join(live)}; stop them "
            "first (what they accept during a copy would not reach the new database)"
        )
