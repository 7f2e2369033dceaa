"""Which named harness an item's session runs (issue 27 point 7), kept per item.

A session starts under the harness its item picks: a label `<triggerLabel>:<name>` on
the item (`the-loop:codex`), else its project's `projects.P.harness`, else `harness:`
(named `default`). The choice is made when no session of the item is active and is
stored here, so every later event of that session goes through the same harness (its
adapter reads that harness's files) even when a label or the config changes meanwhile:
a new choice applies at the item's next session, never to a live one.

The table is loop-cli's own schema namespace in the state store (like the heartbeats),
created by its own migration on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from .config import DEFAULT_HARNESS, Config

if TYPE_CHECKING:
    from loop_dispatch import WorkItemRef
    from loop_dispatch.store import Store

__all__ = ["NAMESPACE", "Choice", "choose", "read", "record"]

NAMESPACE = "loop_cli.harness_choice"
MIGRATIONS = [
    """
    CREATE TABLE loop_cli_harness_choice (
        work_item  TEXT PRIMARY KEY,
        harness    TEXT NOT NULL,
        via        TEXT NOT NULL,
        chosen_at  TEXT NOT NULL
    );
    """,
]

_ready: weakref.WeakSet[Store] = weakref.WeakSet()


@dataclass(frozen=True)
class Choice:
    harness: str  # a name from `harnesses:`, or "default" (`harness:`)
    via: str  # "label", "project", "default"; "recorded": the live session's own


def _table(store: Store) -> bool:
    if store not in _ready:
        if store.ensure_schema(NAMESPACE, MIGRATIONS) < len(MIGRATIONS):
            return False  # a read-only store that never had the table
        _ready.add(store)
    return True


def read(store: Store, ref: WorkItemRef) -> Choice | None:
    """The harness recorded for the item's session, or None (never chosen)."""
    if not _table(store):
        return None
    rows = store.query(
        "SELECT harness, via FROM loop_cli_harness_choice WHERE work_item = ?", (str(ref),)
    )
    return Choice(str(rows[0][0]), str(rows[0][1])) if rows else None


def record(store: Store, ref: WorkItemRef, choice: Choice) -> None:
    """Keep the item's choice for its session (replacing an older session's)."""
    _table(store)
    now = datetime.now(timezone.utc).isoformat(timespec="microseconds")
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO loop_cli_harness_choice(work_item, harness, via, chosen_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT(work_item) DO UPDATE SET "
            "harness = excluded.harness, via = excluded.via, chosen_at = excluded.chosen_at",
            (str(ref), choice.harness, choice.via, now),
        )


def choose(config: Config, ref: WorkItemRef, labels: Callable[[], list[str]] | None) -> Choice:
    """A fresh choice for an item with no active session: the last configured harness
    label on it, else its project's harness, else `default`. `labels` is asked only
    when named harnesses exist (it may cost a request)."""
    if config.harnesses and labels is not None:
        picked = config.harness_label_names(ref.project, labels())
        if picked:
            return Choice(picked[-1], "label")
    settings = config.project_settings(ref.project)
    if settings is not None and settings.harness is not None:
        return Choice(settings.harness, "project")
    return Choice(DEFAULT_HARNESS, "default")


def in_force(config: Config, recorded: Choice | None) -> str:
    """The harness a live session keeps: its recorded one while that name is still
    configured, else `default` (a session from before names existed ran `harness:`)."""
    if recorded is None:
        return DEFAULT_HARNESS
    if recorded.harness == DEFAULT_HARNESS or recorded.harness in config.harnesses:
        return recorded.harness
    return DEFAULT_HARNESS
