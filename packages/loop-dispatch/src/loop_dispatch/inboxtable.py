"""The inbox table as the inbox, the hosts' claims and restart requests share it.

The one text form of a time in these tables and the clock that writes it, the inbox's
column list and the queue-head queries a claim builds on, and how a row reads as an
InboxEntry. `inbox.py` owns the table; `hosts.py` claims from it too (with placements),
and `hostrestarts.py` stamps its requests in the same time form: all three import these
public names from here, none reaches into another's private ones.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from .model import Event

__all__ = [
    "CLAIMABLE",
    "COLUMNS",
    "HEADS",
    "OPEN",
    "SELECT",
    "STATE",
    "Clock",
    "InboxEntry",
    "extend_leases",
    "iso",
    "read_entry",
    "read_time",
    "utcnow",
]

# A held row (issue 24: its item is paused or stopped) is a pending row with `held_at`
# set: it reads as state `paused` and is out of its item's queue until released.
STATE = "CASE WHEN state = 'pending' AND held_at IS NOT NULL THEN 'paused' ELSE state END"
COLUMNS = (
    "seq, delivery_id, work_item, source, " + STATE + ", event, attempts, tries, due_at, "
    "lease_owner, lease_until, outcome, last_reason, last_error, gave_up_versions, "
    "rearm_count, received_at, settled_at, updated_at"
)
SELECT = "SELECT " + COLUMNS + " FROM inbox"  # noqa: S608 (constant column list)

# The queue heads (each item's oldest pending or claimed row), by a loose index scan:
# the same recursive query runs on SQLite and PostgreSQL.
OPEN = "state IN ('pending', 'claimed') AND held_at IS NULL"
HEADS = (
    "WITH RECURSIVE items(w) AS ("  # noqa: S608 (constant text)
    f"SELECT (SELECT min(work_item) FROM inbox WHERE {OPEN}) "
    "UNION ALL SELECT (SELECT min(work_item) FROM inbox "
    f"WHERE {OPEN} AND work_item > items.w) FROM items WHERE items.w IS NOT NULL), "
    "heads(seq) AS (SELECT (SELECT min(seq) FROM inbox "
    f"WHERE work_item = items.w AND {OPEN}) FROM items WHERE items.w IS NOT NULL) "
)

# Due heads: pending and due, or claimed under a lease that ran out or whose owner is
# gone (`{owners}` becomes one placeholder per gone owner).
CLAIMABLE = (
    "SELECT i.seq FROM heads JOIN inbox i ON i.seq = heads.seq WHERE "
    "(i.state = 'pending' AND i.due_at <= ?) OR (i.state = 'claimed' AND "
    "(i.lease_until <= ? OR i.lease_owner IN ({owners}))) ORDER BY i.seq LIMIT ?"
)

Clock = Callable[[], datetime]


def _test_skew() -> timedelta:
    """TEST ONLY: `THE_LOOP_TEST_CLOCK_SKEW` (seconds, may be negative) shifts this
    process's wall clock as the inbox and hosts read it, to model a host whose clock is
    wrong (tests-integration/test_fleet_fencing.py). Leases are compared on the
    database's clock, so on a fleet it changes no lease; never set it in production."""
    text = os.environ.get("THE_LOOP_TEST_CLOCK_SKEW", "")
    try:
        return timedelta(seconds=float(text)) if text else timedelta(0)
    except ValueError:
        return timedelta(0)


_SKEW = _test_skew()


def utcnow() -> datetime:
    """Now, in UTC (shifted by the test-only skew)."""
    return datetime.now(timezone.utc) + _SKEW


def iso(moment: datetime) -> str:
    """The one text form of a time in this table: sortable, fixed width, UTC."""
    return moment.astimezone(timezone.utc).isoformat(timespec="microseconds")


@dataclass(frozen=True, kw_only=True)
class InboxEntry:
    """One row. `event` is None once settled, or when the stored text is unreadable."""

    seq: int
    delivery_id: str
    work_item: str
    source: str
    state: str
    event: Event | None
    attempts: int
    tries: int
    due_at: datetime
    lease_owner: str | None
    lease_until: datetime | None
    outcome: str | None
    last_reason: str | None
    last_error: str | None
    gave_up_versions: str | None
    rearm_count: int
    received_at: datetime
    settled_at: datetime | None
    updated_at: datetime

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, without the event body (never shown: it is untrusted text)."""
        kind = None if self.event is None else self.event.kind.value
        return {
            "seq": self.seq,
            "deliveryId": self.delivery_id,
            "workItem": self.work_item,
            "source": self.source,
            "state": self.state,
            "kind": kind,
            "attempts": self.attempts,
            "tries": self.tries,
            "dueAt": self.due_at.isoformat(),
            "leaseOwner": self.lease_owner,
            "outcome": self.outcome,
            "lastReason": self.last_reason,
            "lastError": self.last_error,
            "gaveUpVersions": None
            if self.gave_up_versions is None
            else json.loads(self.gave_up_versions),
            "rearmCount": self.rearm_count,
            "receivedAt": self.received_at.isoformat(),
            "settledAt": None if self.settled_at is None else self.settled_at.isoformat(),
        }


def extend_leases(conn: Any, seqs: Sequence[int], owner: str, until: str) -> int:
    """Move the lease of each row `owner` still holds to `until`; how many it held.
    One statement shape for the inbox's and the fleet's renewals (the latter dates
    `until` on the database's clock)."""
    held = 0
    for seq in seqs:
        cur = conn.execute(
            "UPDATE inbox SET lease_until = ? WHERE seq = ? AND state = 'claimed' "
            "AND lease_owner = ?",
            (until, seq, owner),
        )
        held += max(cur.rowcount, 0)
    return held


def read_time(text: str | None) -> datetime | None:
    """A stored time (None stays None)."""
    return None if text is None else datetime.fromisoformat(text)


def _event(row: Sequence[Any]) -> Event | None:
    """The stored event, only when it is this row's own (a hand-edited row naming another
    delivery or item would be sent there and settled here)."""
    if not row[5]:
        return None
    try:
        event = Event.from_dict(json.loads(row[5]))
    except ValueError:
        return None
    # Refs parse canonical (lower-case GitHub names); a stored copy of the delivery id
    # written before that (schema v4 renamed the row's) matches case-insensitively.
    if event.delivery_id != row[1] and event.delivery_id.lower() == str(row[1]).lower():
        event = dataclasses.replace(event, delivery_id=row[1])
    if (event.delivery_id, str(event.work_item)) != (row[1], row[2]):
        return None
    return event


def read_entry(row: Sequence[Any]) -> InboxEntry:
    """The row as an entry. A row whose columns do not read (hand-edited, damaged) is
    quarantined: an entry without its event (the drain gives it up as
    `unreadable_stored_event`), so it never stops a claim, a listing or another item."""
    try:
        return _readable_entry(row)
    except (TypeError, ValueError):
        return _damaged_entry(row)


def _readable_entry(row: Sequence[Any]) -> InboxEntry:
    due, received, updated = (datetime.fromisoformat(row[i]) for i in (8, 16, 18))
    return InboxEntry(
        seq=int(row[0]),
        delivery_id=row[1],
        work_item=row[2],
        source=row[3],
        state=row[4],
        event=_event(row),
        attempts=int(row[6]),
        tries=int(row[7]),
        due_at=due,
        lease_owner=row[9],
        lease_until=read_time(row[10]),
        outcome=row[11],
        last_reason=row[12],
        last_error=row[13],
        gave_up_versions=row[14],
        rearm_count=int(row[15]),
        received_at=received,
        settled_at=read_time(row[17]),
        updated_at=updated,
    )


def _damaged_entry(row: Sequence[Any]) -> InboxEntry:
    def text(value: Any) -> str:
        return value if isinstance(value, str) else repr(value)

    def number(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def moment(value: Any) -> datetime | None:
        try:
            return datetime.fromisoformat(value) if isinstance(value, str) else None
        except ValueError:
            return None

    epoch = datetime.fromtimestamp(0, timezone.utc)
    return InboxEntry(
        seq=number(row[0]),
        delivery_id=text(row[1]),
        work_item=text(row[2]),
        source=text(row[3]),
        state=text(row[4]),
        event=None,
        attempts=number(row[6]),
        tries=number(row[7]),
        due_at=moment(row[8]) or epoch,
        lease_owner=row[9] if isinstance(row[9], str) else None,
        lease_until=moment(row[10]),
        outcome=row[11] if isinstance(row[11], str) else None,
        last_reason=row[12] if isinstance(row[12], str) else None,
        last_error="quarantined: the stored row does not read",
        gave_up_versions=row[14] if isinstance(row[14], str) else None,
        rearm_count=number(row[15]),
        received_at=moment(row[16]) or epoch,
        settled_at=moment(row[17]),
        updated_at=moment(row[18]) or epoch,
    )
