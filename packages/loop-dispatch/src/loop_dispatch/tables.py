"""What the store's tables (registry, deliveries, inbox) need of the store.

The store builds its tables, so a table module that imported `store` back would close
an import circle. Tables see the store through `TableStore` (a typing Protocol naming
only what they call) and take `utcnow_iso` from here (`store` re-exports it, so
`from loop_dispatch.store import utcnow_iso` keeps working); `StoreError` lives in
`errors`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .errors import StoreError

if TYPE_CHECKING:
    from .database import Connection

__all__ = ["StoreError", "TableStore", "utcnow_iso"]


class TableStore(Protocol):
    """The store as its tables use it: where it is, a write transaction and a read."""

    @property
    def path(self) -> Path | str: ...

    def transaction(self) -> AbstractContextManager[Connection]: ...

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]: ...


def utcnow_iso() -> str:
    """Timestamps are stored as ISO-8601 UTC text: sortable and readable by hand."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")
