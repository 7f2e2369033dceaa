"""What the store's tables (registry, deliveries, inbox) need of the store.

The store builds its tables, so a table module that imported `store` back would close
an import circle. Tables see the store through `Database` (a typing Protocol naming
only what they call) and take `StoreError` and `utcnow_iso` from here; `store`
re-exports both, so `from loop_dispatch.store import StoreError` keeps working.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from .errors import DispatchError

__all__ = ["Database", "StoreError", "utcnow_iso"]


class Database(Protocol):
    """The store as its tables use it: its file, a write transaction and a read."""

    path: Path

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]: ...


class StoreError(DispatchError):
    """The state file cannot be used: corrupt, not SQLite, newer schema, unwritable.

    `str(err)` is one line naming the file and what is wrong.
    """

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"state store {path}: {reason}")
        self.path = path
        self.reason = reason


def utcnow_iso() -> str:
    """Timestamps are stored as ISO-8601 UTC text: sortable and readable by hand."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")
