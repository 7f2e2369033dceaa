"""The poll ledger: what the poller has seen, and what became of each comment.

Per delivery: state (`pending`, `done`, `baseline`, `gave_up`), attempts, first/last
seen, and for a give-up the version that gave up. A pending row keeps the event itself,
so a failed dispatch is retried on the next cycle although the source's cursor moved on.
A give-up recorded by another version is re-armed with a fresh budget, once per give-up
(AC11 of seed 002): after the re-arm, a new give-up carries the running version and is
never re-armed by it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .model import Event, WorkItemRef
from .store import UPSERT_CURSOR, utcnow_iso

if TYPE_CHECKING:
    from .store import Store

__all__ = ["Ledger", "LedgerEntry"]

_COLUMNS = (
    "delivery_id, source, work_item, state, attempts, event, last_outcome, "
    "gave_up_version, rearm_count, first_seen, last_seen"
)
_UNSET = object()
_SELECT = "SELECT " + _COLUMNS + " FROM ledger"  # noqa: S608 (constant column list)


@dataclass(frozen=True)
class LedgerEntry:
    delivery_id: str
    source: str
    work_item: str
    state: str
    attempts: int
    event: Event | None
    last_outcome: str | None
    gave_up_version: str | None
    rearm_count: int
    first_seen: str
    last_seen: str


def _entry(row: tuple[Any, ...]) -> LedgerEntry:
    """A row in `_COLUMNS` order; the stored event JSON becomes an Event (or None)."""
    event = None
    if row[5]:
        try:
            event = Event.from_dict(json.loads(row[5]))
        except ValueError:
            event = None  # a hand-edited row: reported as a pending entry without event
        # The event must be this row's: a stored event naming another delivery or item
        # (hand-edited) would be sent there and settled here.
        if event is not None and (event.delivery_id, str(event.work_item)) != (row[0], row[2]):
            event = None
    delivery_id, source, work_item, state, attempts = row[:5]
    last_outcome, gave_up_version, rearm_count, first_seen, last_seen = row[6:]
    return LedgerEntry(
        delivery_id=delivery_id,
        source=source,
        work_item=work_item,
        state=state,
        attempts=int(attempts),
        event=event,
        last_outcome=last_outcome,
        gave_up_version=gave_up_version,
        rearm_count=int(rearm_count),
        first_seen=first_seen,
        last_seen=last_seen,
    )


class Ledger:
    def __init__(self, store: Store) -> None:
        self._store = store

    def record(
        self,
        source: str,
        events: Iterable[Event],
        baseline: Iterable[tuple[str, WorkItemRef | str] | str] = (),
        *,
        cursor: object = _UNSET,
    ) -> int:
        """Record new events as pending and baseline ids as seen, in ONE transaction.

        With `cursor`, the source's cursor is stored in the same transaction, so it
        never moves past an event that is not in the ledger. Already-known ids only
        get their last_seen bumped. Returns the number of newly pending events.
        """
        now = utcnow_iso()
        ev_rows = [
            (e.delivery_id, source, str(e.work_item), json.dumps(e.to_dict()), now, now)
            for e in events
        ]
        base_rows = []
        for item in baseline:
            if isinstance(item, str):
                base_rows.append((item, source, "", now, now))
            else:
                base_rows.append((item[0], source, str(item[1]), now, now))
        with self._store.transaction() as conn:
            cur = conn.executemany(
                "INSERT OR IGNORE INTO ledger(delivery_id, source, work_item, state, event, "
                "first_seen, last_seen) VALUES (?, ?, ?, 'pending', ?, ?, ?)",
                ev_rows,
            )
            new = max(cur.rowcount, 0)
            conn.executemany(
                "INSERT OR IGNORE INTO ledger(delivery_id, source, work_item, state, "
                "first_seen, last_seen) VALUES (?, ?, ?, 'baseline', ?, ?)",
                base_rows,
            )
            if len(ev_rows) > new:
                conn.executemany(
                    "UPDATE ledger SET last_seen = ? WHERE delivery_id = ?",
                    [(now, r[0]) for r in ev_rows],
                )
            if cursor is not _UNSET:
                conn.execute(UPSERT_CURSOR, (source, cursor, now))
        return new

    def get(self, delivery_id: str) -> LedgerEntry | None:
        rows = self._store.query(_SELECT + " WHERE delivery_id = ?", (delivery_id,))
        return _entry(tuple(rows[0])) if rows else None

    def entries(self, source: str | None = None, state: str | None = None) -> list[LedgerEntry]:
        sql = _SELECT + " WHERE 1=1"
        params: list[str] = []
        if source is not None:
            sql += " AND source = ?"
            params.append(source)
        if state is not None:
            sql += " AND state = ?"
            params.append(state)
        return [_entry(tuple(r)) for r in self._store.query(sql + " ORDER BY rowid", params)]

    def pending(self, source: str) -> list[LedgerEntry]:
        """Pending entries of `source`, oldest first (the order they were seen)."""
        return self.entries(source, "pending")

    def counts(self, source: str | None = None) -> dict[str, int]:
        sql = "SELECT state, count(*) FROM ledger"
        params: tuple[str, ...] = ()
        if source is not None:
            sql += " WHERE source = ?"
            params = (source,)
        return {r[0]: r[1] for r in self._store.query(sql + " GROUP BY state", params)}

    def mark_done(self, delivery_id: str, outcome: str) -> None:
        """Resolved (processed, skipped or duplicate): the stored event is dropped."""
        with self._store.transaction() as conn:
            conn.execute(
                "UPDATE ledger SET state = 'done', event = NULL, last_outcome = ?, last_seen = ? "
                "WHERE delivery_id = ?",
                (outcome, utcnow_iso(), delivery_id),
            )

    def mark_failed(
        self, delivery_id: str, *, max_retries: int, version: str, outcome: str = "failed"
    ) -> bool:
        """One more failed attempt; at `max_retries` give up, recording `version`.

        Returns True when this failure spent the budget.
        """
        with self._store.transaction() as conn:
            row = conn.execute(
                "SELECT attempts FROM ledger WHERE delivery_id = ?", (delivery_id,)
            ).fetchone()
            if row is None:
                return False
            attempts = int(row[0]) + 1
            gave_up = attempts >= max_retries
            conn.execute(
                "UPDATE ledger SET attempts = ?, last_outcome = ?, last_seen = ?, "
                "state = ?, gave_up_version = ? WHERE delivery_id = ?",
                (
                    attempts,
                    outcome,
                    utcnow_iso(),
                    "gave_up" if gave_up else "pending",
                    version if gave_up else None,
                    delivery_id,
                ),
            )
            return gave_up

    def rearm(self, version: str, source: str | None = None) -> list[LedgerEntry]:
        """Re-arm every give-up recorded by a version other than `version` (AC11).

        Fresh budget (attempts 0), `rearm_count` + 1. A give-up without a recorded
        version (none is written by this code) is left alone: it cannot be told apart.
        """
        sql = (
            _SELECT + " WHERE state = 'gave_up' "
            "AND gave_up_version IS NOT NULL AND gave_up_version != ?"
        )
        params: list[str] = [version]
        if source is not None:
            sql += " AND source = ?"
            params.append(source)
        with self._store.transaction() as conn:
            rows = conn.execute(sql + " ORDER BY rowid", params).fetchall()
            conn.executemany(
                "UPDATE ledger SET state = 'pending', attempts = 0, "
                "rearm_count = rearm_count + 1, last_seen = ? WHERE delivery_id = ?",
                [(utcnow_iso(), r[0]) for r in rows],
            )
        return [_entry(tuple(r)) for r in rows]
