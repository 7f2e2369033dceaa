"""Delivery de-duplication: a delivery id is handled once, by whichever path saw it first.

States: `claimed` (a dispatch is in flight), `processed` and `skipped` (kept forever, so
a redelivery is a duplicate). A failed dispatch releases its claim (the row is deleted),
so the same delivery can be retried.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from .store import utcnow_iso

if TYPE_CHECKING:
    from .store import Store

__all__ = ["Deliveries", "KeptState"]

KeptState = Literal["processed", "skipped"]


class Deliveries:
    def __init__(self, store: Store) -> None:
        self._store = store

    def claim(self, delivery_id: str, *, reclaim_in_flight: bool = False) -> bool:
        """Insert-if-absent; True when this caller now owns the delivery.

        `reclaim_in_flight`: also take over a `claimed` row. Only a caller holding the
        work item's lock may ask for it: a claim it finds then belongs to a holder that
        died mid-dispatch (the lock was released by the OS), and at-least-once beats lost.
        """
        now = utcnow_iso()
        with self._store.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO deliveries(delivery_id, state, updated_at) "
                "VALUES (?, 'claimed', ?) ON CONFLICT(delivery_id) DO NOTHING",
                (delivery_id, now),
            )
            if cur.rowcount:
                return True
            if reclaim_in_flight:
                cur = conn.execute(
                    "UPDATE deliveries SET updated_at = ? "
                    "WHERE delivery_id = ? AND state = 'claimed'",
                    (now, delivery_id),
                )
                return cur.rowcount > 0
            return False

    def release(self, delivery_id: str) -> None:
        """A failed (retryable) dispatch: forget the claim so a retry can claim again."""
        with self._store.transaction() as conn:
            conn.execute(
                "DELETE FROM deliveries WHERE delivery_id = ? AND state = 'claimed'", (delivery_id,)
            )

    def keep(self, delivery_id: str, state: KeptState = "processed") -> None:
        """A processed or skipped dispatch: the id stays, so a redelivery is a duplicate."""
        with self._store.transaction() as conn:
            conn.execute(
                "INSERT INTO deliveries(delivery_id, state, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT(delivery_id) DO UPDATE SET state = excluded.state, "
                "updated_at = excluded.updated_at",
                (delivery_id, state, utcnow_iso()),
            )

    def state(self, delivery_id: str) -> str | None:
        rows = self._store.query(
            "SELECT state FROM deliveries WHERE delivery_id = ?", (delivery_id,)
        )
        return rows[0][0] if rows else None
