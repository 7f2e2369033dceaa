"""Which `X-GitHub-Delivery` ids were already accepted, kept in the state store.

GitHub redelivers (by hand or on a timeout) with the same delivery GUID; keeping the
ids in the store means a receiver restarted between the two still answers "duplicate".
Comment events are also de-duplicated downstream by their comment id, so this table is
the first, cheap line, not the only one.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

__all__ = ["MemorySeen", "SeenDeliveries", "StoreSeen"]

NAMESPACE = "loop_cli.webhook"
MIGRATIONS = [
    """
    CREATE TABLE loop_cli_webhook_deliveries (
        guid        TEXT PRIMARY KEY,
        event       TEXT NOT NULL,
        received_at TEXT NOT NULL
    );
    CREATE INDEX loop_cli_webhook_deliveries_by_time ON loop_cli_webhook_deliveries (received_at);
    """,
]
KEEP = timedelta(days=30)


class SeenDeliveries(Protocol):
    def first_time(self, guid: str, event: str) -> bool:
        """Record `guid`; True when it had not been recorded before."""
        ...

    def forget(self, guid: str) -> None:
        """Un-record `guid` (its event was not handled: a redelivery must be handled)."""
        ...


class MemorySeen:
    """For tests and `--no-store` use: forgets on restart."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._lock = threading.Lock()

    def first_time(self, guid: str, event: str) -> bool:
        with self._lock:
            if guid in self._ids:
                return False
            self._ids.add(guid)
            return True

    def forget(self, guid: str) -> None:
        with self._lock:
            self._ids.discard(guid)


class StoreSeen:
    """The ids in dispatch's Store, in this package's own namespace and table."""

    def __init__(self, store: Any) -> None:
        self._store = store
        store.ensure_schema(NAMESPACE, MIGRATIONS)
        self.prune()

    def first_time(self, guid: str, event: str) -> bool:
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        with self._store.transaction() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO loop_cli_webhook_deliveries(guid, event, received_at) "
                "VALUES (?, ?, ?)",
                (guid, event, now),
            )
            return cur.rowcount > 0

    def forget(self, guid: str) -> None:
        with self._store.transaction() as conn:
            conn.execute("DELETE FROM loop_cli_webhook_deliveries WHERE guid = ?", (guid,))

    def prune(self) -> None:
        """Forget ids older than GitHub would redeliver (bounded table)."""
        cutoff = (datetime.now(timezone.utc) - KEEP).isoformat(timespec="seconds")
        with self._store.transaction() as conn:
            conn.execute("DELETE FROM loop_cli_webhook_deliveries WHERE received_at < ?", (cutoff,))
