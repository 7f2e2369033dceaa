"""The stalled-agent detector's durable state: what it saw, since when, what it raised.

Kept in the store (its own namespace, the same migrations on SQLite and PostgreSQL), so
a restarted daemon neither raises again what it raised nor forgets since when an item
has been stuck. A row is a condition that holds now (`raised` once its threshold has
passed and `session.stalled` was written); a mark is what the next sweep compares to
(the conversation file's size and when it last grew, the unconfirmed streak).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loop_dispatch.store import Store

__all__ = ["ATTENTION_MIGRATIONS", "ATTENTION_NAMESPACE", "AttentionStore", "Mark", "Stall"]

ATTENTION_NAMESPACE = "loop_cli_attention"
ATTENTION_MIGRATIONS = [
    """
    CREATE TABLE attention_stalls (
        work_item TEXT NOT NULL,
        reason    TEXT NOT NULL,
        since     TEXT NOT NULL,
        note      TEXT NOT NULL DEFAULT '',
        raised_at TEXT,
        PRIMARY KEY (work_item, reason)
    );
    CREATE TABLE attention_marks (
        work_item TEXT PRIMARY KEY,
        conv_size INTEGER,
        grown_at  TEXT,
        streak    INTEGER NOT NULL DEFAULT 0
    );
    """,
]
_SCANNED = "attention.receiptsScannedTo"  # meta key: the last receipt event swept


@dataclass(frozen=True)
class Stall:
    """A condition that holds for an item now; `raised_at` once it was reported."""

    work_item: str
    reason: str
    since: datetime
    note: str = ""
    raised_at: datetime | None = None


@dataclass(frozen=True)
class Mark:
    work_item: str
    conv_size: int | None = None
    grown_at: datetime | None = None
    streak: int = 0


def _when(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


class AttentionStore:
    """The two tables. On a read-only store nothing is created: `ready` says whether
    the tables are there to read (a store no daemon has swept yet has none)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.ready = store.ensure_schema(ATTENTION_NAMESPACE, ATTENTION_MIGRATIONS) >= len(
            ATTENTION_MIGRATIONS
        )

    def stalls(self) -> list[Stall]:
        if not self.ready:
            return []
        rows = self._store.query(
            "SELECT work_item, reason, since, note, raised_at FROM attention_stalls "
            "ORDER BY since, work_item, reason"
        )
        return [Stall(r[0], r[1], _when(r[2]) or datetime.min, r[3], _when(r[4])) for r in rows]

    def raised(self) -> list[Stall]:
        return [s for s in self.stalls() if s.raised_at is not None]

    def put(self, stall: Stall) -> None:
        """Insert or update one condition (its `since` is the caller's to keep)."""
        with self._store.transaction() as conn:
            conn.execute(
                "INSERT INTO attention_stalls (work_item, reason, since, note, raised_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (work_item, reason) DO UPDATE SET "
                "since = excluded.since, note = excluded.note, raised_at = excluded.raised_at",
                (
                    stall.work_item,
                    stall.reason,
                    stall.since.isoformat(),
                    stall.note,
                    None if stall.raised_at is None else stall.raised_at.isoformat(),
                ),
            )

    def drop(self, work_item: str, reason: str) -> None:
        with self._store.transaction() as conn:
            conn.execute(
                "DELETE FROM attention_stalls WHERE work_item = ? AND reason = ?",
                (work_item, reason),
            )

    def marks(self) -> dict[str, Mark]:
        if not self.ready:
            return {}
        rows = self._store.query(
            "SELECT work_item, conv_size, grown_at, streak FROM attention_marks"
        )
        return {r[0]: Mark(r[0], r[1], _when(r[2]), int(r[3])) for r in rows}

    def put_mark(self, mark: Mark) -> None:
        with self._store.transaction() as conn:
            conn.execute(
                "INSERT INTO attention_marks (work_item, conv_size, grown_at, streak) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (work_item) DO UPDATE SET "
                "conv_size = excluded.conv_size, grown_at = excluded.grown_at, "
                "streak = excluded.streak",
                (
                    mark.work_item,
                    mark.conv_size,
                    None if mark.grown_at is None else mark.grown_at.isoformat(),
                    mark.streak,
                ),
            )

    def scanned_to(self) -> str | None:
        return self._store.meta.get(_SCANNED)

    def set_scanned_to(self, ts: str) -> None:
        self._store.meta.set(_SCANNED, ts)
