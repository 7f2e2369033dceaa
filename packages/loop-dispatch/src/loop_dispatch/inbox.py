"""The inbox: every accepted event, durable before anyone is told "accepted".

One table holds every delivery id any ingress has seen (poller, webhook, local tracker,
manual starts): its arrival order (`seq`), the event itself while it is undelivered,
and all retry state (attempts, next due time, lease, give-up versions). Sources keep
only what reading needs (cursors, ETags); the drain (`drain.py`) dispatches.

States: `pending` (waiting until `due_at`), `claimed` (a drain holds a lease on it),
`done` (processed, skipped, duplicate or dropped: the event text is dropped),
`given_up` (kept with its event, so `inbox retry` can re-arm it), `baseline` (an id seen
and deliberately never forwarded: a newly watched item's existing comments), `paused`
(held while its item is paused or stopped: a pending row with `held_at` set, out of the
item's queue until `release_held` puts it back in arrival order).

Claims take only the head of each work item's queue (its oldest pending or claimed
row), so one item's events are dispatched one at a time and in arrival order, while
different items run concurrently. Claim, lease and settle are single statements over
this table, so they map one to one onto a PostgreSQL `SELECT ... FOR UPDATE SKIP
LOCKED` queue: the claim is `UPDATE inbox SET state='claimed', lease... WHERE seq IN
(SELECT seq ... ORDER BY seq LIMIT n FOR UPDATE SKIP LOCKED) RETURNING ...`.
"""

from __future__ import annotations

import builtins
import json
import os
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .inboxtable import (
    CLAIMABLE,
    HEADS,
    OPEN,
    SELECT,
    STATE,
    Clock,
    InboxEntry,
    extend_leases,
    iso,
    read_entry,
    read_time,
    utcnow,
)
from .model import Event
from .procinfo import proc_start

if TYPE_CHECKING:
    from .database import Connection
    from .tables import TableStore

__all__ = [
    "OPEN_STATES",
    "Inbox",
    "InboxEntry",
    "Retry",
    "local_owner",
    "owner_alive",
    "versions_key",
]

OPEN_STATES = ("pending", "claimed")
KEEP_SETTLED = timedelta(days=30)


def versions_key(versions: Mapping[str, str]) -> str:
    """The give-up re-arm key: the versions of the packages that decide a delivery."""
    return json.dumps(dict(sorted(versions.items())), separators=(",", ":"))


def local_owner(pid: int | None = None) -> str:
    """This process's claim identity: host, pid and start time (pid reuse is told apart)."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}/{pid}/{proc_start(pid)}"


def owner_alive(owner: str) -> bool:
    """False only when the owner is a process of THIS host that is gone.

    A claimer on another host is judged by its lease alone.
    """
    host, _, rest = owner.partition("/")
    pid_text, _, start = rest.partition("/")
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not start or proc_start(pid) in ("", start)


def _count(value: Any) -> int:
    """A stored counter; a damaged one reads as 0."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


@dataclass(frozen=True, kw_only=True)
class Retry:
    """What a failed attempt left: given up, or due again at `due_at`."""

    given_up: bool
    due_at: datetime | None
    attempts: int
    tries: int
    why: str  # the reason token, or "horizon"/"attempts" for a give-up


class Inbox:
    """The inbox table of a Store. Every method is one transaction."""

    def __init__(self, store: TableStore, *, clock: Clock = utcnow) -> None:
        self._store = store
        self._clock = clock

    # -- ingress --------------------------------------------------------------------

    def accept(
        self,
        source: str,
        events: Iterable[Event],
        baseline: Iterable[str | tuple[str, str]] = (),
        *,
        conn: Connection | None = None,
        over_baseline: bool = False,
    ) -> list[Event]:
        """Commit `events` (pending, due now) and `baseline` ids; returns the new events.

        A delivery id already present (from any ingress) is ignored: that is the
        de-duplication between the poller, the webhook and redeliveries. With
        `over_baseline` (a push ingress: the webhook), an id only baselined so far is
        taken as the event: a poller that first saw the item after the comment was
        written must not swallow a comment GitHub itself reports as new. With `conn`,
        runs inside the caller's transaction (a cursor move, a webhook GUID record).
        """
        events = list(events)
        if conn is None:
            with self._store.transaction() as own:
                return self._accept(own, source, events, baseline, over_baseline)
        return self._accept(conn, source, events, baseline, over_baseline)

    def _accept(
        self,
        conn: Connection,
        source: str,
        events: list[Event],
        baseline: Iterable[str | tuple[str, str]],
        over_baseline: bool = False,
    ) -> list[Event]:
        now = iso(self._clock())
        accepted = []
        conflict = (
            "ON CONFLICT(delivery_id) DO UPDATE SET state = 'pending', event = excluded.event, "
            "work_item = excluded.work_item, source = excluded.source, due_at = excluded.due_at, "
            "updated_at = excluded.updated_at WHERE inbox.state = 'baseline'"
            if over_baseline
            else "ON CONFLICT(delivery_id) DO NOTHING"
        )
        # Constant texts only: every value is a parameter.
        insert = (  # noqa: S608
            "INSERT INTO inbox(delivery_id, work_item, source, state, event, due_at, "
            "received_at, updated_at) VALUES (?, ?, ?, 'pending', ?, ?, ?, ?) "
        ) + conflict
        for event in events:
            cur = conn.execute(
                insert,
                (
                    event.delivery_id,
                    str(event.work_item),
                    source,
                    json.dumps(event.to_dict()),
                    now,
                    now,
                    now,
                ),
            )
            if cur.rowcount > 0:
                accepted.append(event)
        rows = []
        for item in baseline:
            delivery, ref = (item, "") if isinstance(item, str) else item
            rows.append((delivery, ref, source, now, now, now))
        conn.executemany(
            "INSERT INTO inbox(delivery_id, work_item, source, state, due_at, received_at, "
            "updated_at) VALUES (?, ?, ?, 'baseline', ?, ?, ?) "
            "ON CONFLICT(delivery_id) DO NOTHING",
            rows,
        )
        return accepted

    # -- the drain's side -------------------------------------------------------------

    def claim(
        self,
        owner: str,
        *,
        limit: int,
        lease_seconds: float,
        alive: Callable[[str], bool] = owner_alive,
    ) -> builtins.list[InboxEntry]:
        """Lease up to `limit` due queue heads to `owner`, oldest first.

        A claim whose lease ran out, or whose owner is a process of this host that is
        gone (killed mid-dispatch), is taken over: at-least-once beats lost.
        """
        if limit < 1:
            return []
        now = self._clock()
        with self._store.transaction() as conn:
            owners = [
                r[0]
                for r in conn.execute(
                    "SELECT DISTINCT lease_owner FROM inbox "
                    "WHERE state = 'claimed' AND lease_owner IS NOT NULL"
                )
            ]
            dead = [o for o in owners if o != owner and not alive(o)]
            marks = ", ".join("?" * len(dead)) or "NULL"
            # The head of each item's queue: a walk over the items with open rows (one
            # index seek each, on the partial index of open rows), then each item's
            # oldest open row. Cost grows with the number of items, not of waiting rows.
            # Placeholders only: every value is a parameter.
            sql = HEADS + CLAIMABLE.replace("{owners}", marks)
            rows = conn.execute(sql, (iso(now), iso(now), *dead, limit)).fetchall()
            seqs = [int(r[0]) for r in rows]
            if not seqs:
                return []
            until = iso(now + timedelta(seconds=lease_seconds))
            conn.executemany(
                "UPDATE inbox SET state = 'claimed', lease_owner = ?, lease_until = ?, "
                "tries = tries + 1, updated_at = ? WHERE seq = ?",
                [(owner, until, iso(now), seq) for seq in seqs],
            )
            placeholders = ", ".join("?" * len(seqs))
            claimed = conn.execute(
                f"{SELECT} WHERE seq IN ({placeholders}) ORDER BY seq", seqs
            ).fetchall()
        return [read_entry(r) for r in claimed]

    def renew(self, owner: str, seqs: Iterable[int], lease_seconds: float) -> int:
        """Extend the leases `owner` still holds; returns how many it still holds."""
        seqs = list(seqs)
        if not seqs:
            return 0
        now = self._clock()
        until = iso(now + timedelta(seconds=lease_seconds))
        with self._store.transaction() as conn:
            return extend_leases(conn, seqs, owner, until)

    def done(self, seq: int, owner: str, outcome: str, reason: str) -> bool:
        """Settled for good (processed, skipped, duplicate). False: the lease was lost."""
        now = iso(self._clock())
        with self._store.transaction() as conn:
            cur = conn.execute(
                "UPDATE inbox SET state = 'done', event = NULL, outcome = ?, last_reason = ?, "
                "lease_owner = NULL, lease_until = NULL, settled_at = ?, updated_at = ? "
                "WHERE seq = ? AND state = 'claimed' AND lease_owner = ?",
                (outcome, reason, now, now, seq, owner),
            )
            return cur.rowcount > 0

    def fail(
        self,
        seq: int,
        owner: str,
        *,
        reason: str,
        error: str,
        definite: bool,
        max_attempts: int,
        give_up_after: float,
        delay: Callable[[int, int], float],
        versions: str,
    ) -> Retry | None:
        """One failed attempt. Definite failures count against `max_attempts`; every
        failure gives up once `give_up_after` seconds have passed since it was armed
        (accepted, or last re-armed by `rearm`/`retry`).
        Otherwise the row is due again after `delay(tries, attempts)` seconds.
        None: the lease was lost (another claimer owns the row now)."""
        now = self._clock()
        with self._store.transaction() as conn:
            row = conn.execute(
                "SELECT attempts, tries, COALESCE(armed_at, received_at) FROM inbox "
                "WHERE seq = ? AND state = 'claimed' AND lease_owner = ?",
                (seq, owner),
            ).fetchone()
            if row is None:
                return None
            attempts = _count(row[0]) + (1 if definite else 0)
            tries = _count(row[1])
            try:
                age = (now - datetime.fromisoformat(row[2])).total_seconds()
            except (TypeError, ValueError):  # a damaged row: past any horizon
                age = float("inf")
            why = reason
            if definite and attempts >= max_attempts:
                why = "attempts"
            elif age >= give_up_after:
                why = "horizon"
            given_up = why in ("attempts", "horizon")
            due = now + timedelta(seconds=max(0.0, delay(tries, attempts)))
            conn.execute(
                "UPDATE inbox SET state = ?, attempts = ?, due_at = ?, last_reason = ?, "
                "last_error = ?, gave_up_versions = ?, lease_owner = NULL, lease_until = NULL, "
                "settled_at = ?, updated_at = ? "
                "WHERE seq = ? AND state = 'claimed' AND lease_owner = ?",
                (
                    "given_up" if given_up else "pending",
                    attempts,
                    iso(now if given_up else due),
                    reason,
                    error[:500],
                    versions if given_up else None,
                    iso(now) if given_up else None,
                    iso(now),
                    seq,
                    owner,
                ),
            )
        return Retry(
            given_up=given_up,
            due_at=None if given_up else due,
            attempts=attempts,
            tries=tries,
            why=why,
        )

    def release(self, owner: str, seqs: Iterable[int] | None = None) -> int:
        """Hand claims back (pending, due now) without counting a try as failed: a clean
        stop before the dispatch began."""
        now = iso(self._clock())
        sql = (
            "UPDATE inbox SET state = 'pending', lease_owner = NULL, lease_until = NULL, "
            "tries = CASE WHEN tries > 0 THEN tries - 1 ELSE 0 END, due_at = ?, updated_at = ? "
            "WHERE state = 'claimed' AND lease_owner = ?"
        )
        with self._store.transaction() as conn:
            if seqs is None:
                return max(conn.execute(sql, (now, now, owner)).rowcount, 0)
            return sum(
                max(conn.execute(sql + " AND seq = ?", (now, now, owner, s)).rowcount, 0)
                for s in seqs
            )

    def rearm(self, versions: str) -> list[InboxEntry]:
        """Re-arm every give-up recorded under other versions, once per give-up (AC11).

        Fresh budget (attempts 0), due now, `rearm_count` + 1; a later give-up records
        the running versions and is never re-armed by them. Give-ups whose event cannot
        be read stay given up (nothing could be sent).
        """
        now = iso(self._clock())
        with self._store.transaction() as conn:
            rows = conn.execute(
                SELECT + " WHERE state = 'given_up' AND gave_up_versions IS NOT NULL "
                "AND gave_up_versions != ? AND event IS NOT NULL ORDER BY seq",
                (versions,),
            ).fetchall()
            conn.executemany(
                "UPDATE inbox SET state = 'pending', attempts = 0, due_at = ?, armed_at = ?, "
                "rearm_count = rearm_count + 1, settled_at = NULL, updated_at = ? "
                "WHERE seq = ? AND state = 'given_up'",
                [(now, now, now, r[0]) for r in rows],
            )
        return [read_entry(r) for r in rows]

    def hold(self, seq: int, owner: str) -> bool:
        """Hold a claimed row (its item is paused or stopped): kept with its event, out of
        the item's queue, without counting a try. False: the lease was lost."""
        now = iso(self._clock())
        with self._store.transaction() as conn:
            cur = conn.execute(
                "UPDATE inbox SET state = 'pending', held_at = ?, last_reason = 'held', "
                "lease_owner = NULL, lease_until = NULL, "
                "tries = CASE WHEN tries > 0 THEN tries - 1 ELSE 0 END, updated_at = ? "
                "WHERE seq = ? AND state = 'claimed' AND lease_owner = ?",
                (now, now, seq, owner),
            )
            return cur.rowcount > 0

    def release_held(self, work_item: str) -> int:
        """Put an item's held rows back in its queue, due now: their sequence numbers
        are older than anything that arrived since, so they go first, in arrival order."""
        now = iso(self._clock())
        with self._store.transaction() as conn:
            cur = conn.execute(
                "UPDATE inbox SET held_at = NULL, due_at = ?, updated_at = ? "
                "WHERE work_item = ? AND state = 'pending' AND held_at IS NOT NULL",
                (now, now, work_item),
            )
            return max(cur.rowcount, 0)

    # -- the operator's side ------------------------------------------------------------

    def retry(
        self,
        *,
        seqs: Iterable[int] = (),
        work_item: str | None = None,
        given_up: bool = False,
    ) -> list[InboxEntry]:
        """Re-arm chosen rows now with a fresh budget: given-up rows, or pending rows
        waiting out a backoff (they become due at once)."""
        clauses: list[str] = []
        params: list[Any] = []
        given = list(seqs)
        seqs = [s for s in given if _storable(s)]  # no row has an id the store cannot hold
        if given and not seqs:
            return []
        if seqs:
            clauses.append(f"seq IN ({', '.join('?' * len(seqs))})")
            params += seqs
        if work_item is not None:
            clauses.append("work_item = ?")
            params.append(work_item)
        if given_up:
            clauses.append("state = 'given_up'")
        if not clauses:
            return []
        now = iso(self._clock())
        where = " AND ".join(clauses) + " AND state IN ('pending', 'given_up') "
        with self._store.transaction() as conn:
            rows = conn.execute(
                SELECT + " WHERE event IS NOT NULL AND " + where + "ORDER BY seq", params
            ).fetchall()
            conn.executemany(
                "UPDATE inbox SET state = 'pending', attempts = 0, due_at = ?, armed_at = ?, "
                "settled_at = NULL, updated_at = ? "
                "WHERE seq = ? AND state IN ('pending', 'given_up')",
                [(now, now, now, r[0]) for r in rows],
            )
        return [read_entry(r) for r in rows]

    def drop(self, seq: int, reason: str) -> InboxEntry | None:
        """Settle a pending or given-up row as dropped by the operator (kept, recorded)."""
        if not _storable(seq):
            return None
        now = iso(self._clock())
        with self._store.transaction() as conn:
            row = conn.execute(
                SELECT + " WHERE seq = ? AND state IN ('pending', 'given_up')", (seq,)
            ).fetchone()
            if row is None:
                return None
            conn.execute(
                "UPDATE inbox SET state = 'done', event = NULL, outcome = 'dropped', "
                "last_reason = 'dropped', last_error = ?, settled_at = ?, updated_at = ? "
                "WHERE seq = ? AND state IN ('pending', 'given_up')",
                (reason[:500], now, now, seq),
            )
        return read_entry(row)

    def prune(self, keep: timedelta = KEEP_SETTLED) -> int:
        """Forget settled rows (done, baseline) older than `keep`; returns how many.

        Their ids only de-duplicate re-reads of the same comment, which no ingress
        makes after weeks (the poller re-reads minutes back, GitHub redelivers for days):
        the table stays bounded on a daemon that runs for months.
        """
        cutoff = iso(self._clock() - keep)
        with self._store.transaction() as conn:
            cur = conn.execute(
                "DELETE FROM inbox WHERE state IN ('done', 'baseline') AND updated_at < ?",
                (cutoff,),
            )
            return max(cur.rowcount, 0)

    # -- reads --------------------------------------------------------------------------

    def get(self, seq: int) -> InboxEntry | None:
        if not _storable(seq):
            return None
        rows = self._store.query(SELECT + " WHERE seq = ?", (seq,))
        return read_entry(rows[0]) if rows else None

    def by_delivery(self, delivery_id: str) -> InboxEntry | None:
        rows = self._store.query(SELECT + " WHERE delivery_id = ?", (delivery_id,))
        return read_entry(rows[0]) if rows else None

    def entries(
        self,
        states: Sequence[str] = ("pending", "claimed", "given_up"),
        *,
        work_item: str | None = None,
        limit: int | None = None,
    ) -> list[InboxEntry]:
        """Rows in the given states (`paused`: held ones), oldest first."""
        sql = SELECT + f" WHERE ({STATE}) IN ({', '.join('?' * len(states))})"
        params: list[Any] = list(states)
        if work_item is not None:
            sql += " AND work_item = ?"
            params.append(work_item)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [read_entry(r) for r in self._store.query(sql, params)]

    def count(
        self,
        states: Sequence[str] = ("pending", "claimed", "given_up"),
        *,
        work_item: str | None = None,
    ) -> int:
        """How many rows `entries` would list without a limit."""
        marks = ", ".join("?" * len(states))
        sql = _COUNT + f" WHERE ({STATE}) IN ({marks})"
        params: list[Any] = list(states)
        if work_item is not None:
            sql += " AND work_item = ?"
            params.append(work_item)
        return int(self._store.query(sql, params)[0][0])

    def counts(self) -> dict[str, int]:
        rows = self._store.query(f"SELECT {STATE}, count(*) FROM inbox GROUP BY {STATE}")  # noqa: S608
        return {str(r[0]): int(r[1]) for r in rows}

    def summary(self) -> dict[str, Any]:
        """What `status` shows: pending, in flight, given up, the oldest pending age."""
        counts = {
            str(r[0]): int(r[1])
            for r in self._store.query(
                f"SELECT {STATE}, count(*) FROM inbox "  # noqa: S608 (constant text)
                f"WHERE state IN ('pending', 'claimed') GROUP BY {STATE}"
            )
        }
        given = self._store.query("SELECT count(*) FROM inbox WHERE state = 'given_up'")
        counts["given_up"] = int(given[0][0])
        rows = self._store.query(f"SELECT min(received_at) FROM inbox WHERE {OPEN}")  # noqa: S608
        oldest = rows[0][0] if rows else None
        age = None
        if oldest:
            try:
                age = max(0.0, (self._clock() - datetime.fromisoformat(oldest)).total_seconds())
            except (TypeError, ValueError):  # a damaged row: status still answers
                age = None
        return {
            "pending": counts.get("pending", 0),
            "inFlight": counts.get("claimed", 0),
            "givenUp": counts.get("given_up", 0),
            "paused": counts.get("paused", 0),
            "oldestPendingSeconds": None if age is None else round(age, 1),
        }

    def oldest_open(self) -> tuple[InboxEntry, datetime] | None:
        """The open (pending or claimed) row waiting longest since it was armed (accepted,
        or re-armed by `retry`/`rearm`), with that moment: how long delivery has made no
        progress on it (`status` health). None when nothing is open."""
        rows = self._store.query(
            SELECT.replace(" FROM inbox", ", COALESCE(armed_at, received_at) FROM inbox")
            + f" WHERE {OPEN} "
            "ORDER BY COALESCE(armed_at, received_at), seq LIMIT 1"
        )
        if not rows:
            return None
        entry = read_entry(rows[0][:-1])
        try:
            armed = read_time(rows[0][-1]) or entry.received_at
        except (TypeError, ValueError):  # a damaged row: its received time stands
            armed = entry.received_at
        return entry, armed

    def next_due(self) -> datetime | None:
        """When the earliest pending row falls due (the drain sleeps until then)."""
        rows = self._store.query(
            "SELECT min(due_at) FROM inbox WHERE state = 'pending' AND held_at IS NULL"
        )
        return read_time(rows[0][0]) if rows and rows[0][0] else None


_COUNT = "SELECT count(*) FROM inbox"


def _storable(seq: int) -> bool:
    """Whether `seq` fits the stores' 64-bit integer ids (a larger one names no row, and
    binding it would raise OverflowError)."""
    return -(2**63) <= seq < 2**63
