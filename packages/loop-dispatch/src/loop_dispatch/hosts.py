"""Hosts of one fleet sharing a store: leases, placement by free capacity, per-host claims.

Each host runs one worker that owns the tmux sessions on that host and heartbeats a
lease row (`hosts`). A work item is placed on one host (`placements`): its events are
claimed only by that host, one at a time and in arrival order (the inbox's queue head,
row-locked with `FOR UPDATE SKIP LOCKED` on PostgreSQL, so hosts claim concurrently
without waiting on each other). An unplaced item goes to the live host with the most
free capacity (`maxSessions` minus the items placed on it). An item whose host's lease
ran out is placed again, on its next claim, on a live host; the placement records the
old host and the reason (`moved_from`, `move_reason`) until the new host has started
its fresh conversation (`take_move`), so a move is never silent.

The tables live in their own schema namespace, created on first use, so a store that
never runs hosts (the single-host default) is unchanged.
"""

from __future__ import annotations

import builtins
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import DispatchError
from .fence import TAKEOVER_MARGIN_SECONDS, LeaseFence
from .inboxtable import (
    CLAIMABLE,
    HEADS,
    SELECT,
    Clock,
    InboxEntry,
    extend_leases,
    iso,
    read_entry,
    utcnow,
)
from .procinfo import proc_start

if TYPE_CHECKING:
    from .store import Store

__all__ = [
    "HOSTS_NAMESPACE",
    "HostConflict",
    "HostInfo",
    "HostLease",
    "Hosts",
    "Move",
    "holder_gone",
    "host_owner",
    "this_machine",
]

HOSTS_NAMESPACE = "loop_dispatch_hosts"
HOSTS_MIGRATIONS = [
    """
    CREATE TABLE hosts (
        name          TEXT PRIMARY KEY,
        owner         TEXT NOT NULL,
        max_sessions  INTEGER NOT NULL,
        lease_seconds REAL NOT NULL,
        sessions      INTEGER NOT NULL DEFAULT 0,
        started_at    TEXT NOT NULL,
        heartbeat_at  TEXT NOT NULL,
        lease_until   TEXT NOT NULL
    );
    CREATE TABLE placements (
        work_item   TEXT PRIMARY KEY,
        host        TEXT NOT NULL,
        moved_from  TEXT,
        move_reason TEXT,
        placed_at   TEXT NOT NULL
    );
    CREATE INDEX placements_by_host ON placements (host);
    """,
    # v2: restart requests (`sessions restart --host/--all-hosts`): the named host's
    # worker takes its own, restarts its sessions and records the counts.
    """
    CREATE TABLE host_restarts (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,
        host         TEXT NOT NULL,
        force        INTEGER NOT NULL DEFAULT 0,
        dry_run      INTEGER NOT NULL DEFAULT 0,
        requested_by TEXT NOT NULL,
        requested_at TEXT NOT NULL,
        taken_at     TEXT,
        taken_by     TEXT,
        done_at      TEXT,
        result       TEXT
    );
    CREATE INDEX host_restarts_open ON host_restarts (host, id) WHERE done_at IS NULL;
    """,
    # v3: the machine (hostname and boot id) a lease's holder runs on, so a worker
    # restarted there can tell its dead predecessor from a live one.
    """
    ALTER TABLE hosts ADD COLUMN machine TEXT;
    """,
    # v4: the host's `host.maxLive` (NULL: uncapped), so placement never puts an item
    # on a full host (issue 25).
    """
    ALTER TABLE hosts ADD COLUMN max_live INTEGER;
    """,
    # v5 (issue 25): a restart request's rollout options (JSON: waitIdle, busy,
    # maxParallel), so `--all-hosts` runs each host's restart as it was asked.
    """
    ALTER TABLE host_restarts ADD COLUMN options TEXT;
    """,
]

# Per host: the items that hold or want a slot there (an active session, or an open
# event that would start or wake one), counted on the database at claim time.
_HOLDING = (
    "SELECT p.host, count(*) FROM placements p WHERE EXISTS (SELECT 1 FROM sessions s "
    "WHERE s.work_item = p.work_item AND s.status = 'active') OR EXISTS (SELECT 1 FROM "
    "inbox i WHERE i.work_item = p.work_item AND i.state IN ('pending', 'claimed')) "
    "GROUP BY p.host"
)

# Candidates: claimable queue heads this host may take (placed here, unplaced, or
# placed on a host whose lease ran out more than the takeover margin ago), with their
# current placement.
_CANDIDATES = (
    HEADS  # noqa: S608 (constant text; every value is a parameter)
    + "SELECT c.seq, c.work_item, p.host FROM ("
    + CLAIMABLE.replace("SELECT i.seq FROM", "SELECT i.seq, i.work_item FROM").replace(
        " LIMIT ?", ""
    )
    + ") c LEFT JOIN placements p ON p.work_item = c.work_item "
    "WHERE p.host IS NULL OR p.host = ? OR p.host NOT IN "
    "(SELECT name FROM hosts WHERE lease_until > ?) ORDER BY c.seq LIMIT ?"
)


def host_owner(host: str, pid: int | None = None) -> str:
    """A worker's claim identity: its host NAME (not the machine's), pid, start time."""
    pid = os.getpid() if pid is None else pid
    return f"{host}/{pid}/{proc_start(pid)}"


@lru_cache(maxsize=1)
def this_machine() -> str:
    """This machine as a lease records it: hostname and boot id (a reboot is another
    machine: no pid of before it runs)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def holder_gone(owner: str, machine: str | None) -> bool:
    """True only when the lease's holder is a process of THIS machine (same boot) that
    no longer runs: its pid is gone or now belongs to a process started later."""
    if not machine or machine != this_machine() or machine.endswith("/"):
        return False
    parts = owner.rsplit("/", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    pid, start = int(parts[1]), parts[2]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return bool(start) and proc_start(pid) not in ("", start)


class HostConflict(DispatchError):
    """Another live worker holds this host name (two workers, one name)."""


def _db_now(conn: Any, store: Store, clock: Clock) -> datetime:
    """The time leases are compared on: the database's own clock on PostgreSQL (one
    clock for every host, so a host's wrong clock never moves a lease), this host's on
    the single-host SQLite store."""
    if store.backend == "postgresql":
        value = conn.execute("SELECT clock_timestamp()").fetchone()[0]
        if isinstance(value, datetime):
            return value
    return clock()


@dataclass(frozen=True, kw_only=True)
class HostInfo:
    name: str
    owner: str
    max_sessions: int
    placed: int
    sessions: int
    heartbeat_at: datetime
    lease_until: datetime
    live: bool

    def as_dict(self, now: datetime) -> dict[str, Any]:
        return {
            "name": self.name,
            "live": self.live,
            "placed": self.placed,
            "sessions": self.sessions,
            "maxSessions": self.max_sessions,
            "leaseAgeSeconds": round(max(0.0, (now - self.heartbeat_at).total_seconds()), 1),
            "owner": self.owner,
        }


@dataclass(frozen=True, kw_only=True)
class Move:
    """An item this host now holds whose conversation lived on `from_host`."""

    work_item: str
    from_host: str
    reason: str


def _locking(store: Store) -> str:
    return " FOR UPDATE SKIP LOCKED" if store.backend == "postgresql" else ""


class Hosts:
    """The hosts and placements tables of a Store."""

    def __init__(
        self, store: Store, *, clock: Clock = utcnow, margin: float = TAKEOVER_MARGIN_SECONDS
    ) -> None:
        self._store = store
        self._clock = clock
        self.margin = margin
        # On a read-only store nothing is created: `version` below the migrations' count
        # says the tables are not there to read.
        self.version = store.ensure_schema(HOSTS_NAMESPACE, HOSTS_MIGRATIONS)

    # -- leases -----------------------------------------------------------------------

    def beat(
        self,
        name: str,
        owner: str,
        *,
        max_sessions: int,
        lease_seconds: float,
        sessions: int = 0,
        max_live: int | None = None,
    ) -> bool:
        """Take or renew `name`'s lease, until the database's clock now plus
        `lease_seconds`. Returns True when the lease had lapsed (or was taken by a
        previous worker) since this owner last held it: the caller must then end its
        own agents for items no longer placed on it.

        A previous worker's lease is taken over at once when that worker was a process
        of this machine that is gone (kill -9, then a restart); otherwise only once it
        ran out more than the takeover margin ago. Raises HostConflict while another
        live worker holds the name.
        """
        machine = this_machine()
        with self._store.transaction() as conn:
            now = _db_now(conn, self._store, self._clock)
            row = conn.execute(
                "SELECT owner, lease_until, machine FROM hosts WHERE name = ?", (name,)
            ).fetchone()
            if (
                row is not None
                and row[0] != owner
                and row[1] > iso(now - timedelta(seconds=self.margin))
                and not holder_gone(row[0], row[2])
            ):
                raise HostConflict(
                    f"host name {name!r} is held by a live worker ({row[0]}); "
                    "give each host its own host.name"
                )
            lapsed = row is None or row[0] != owner or row[1] <= iso(now)
            until = iso(now + timedelta(seconds=lease_seconds))
            conn.execute(
                "INSERT INTO hosts(name, owner, max_sessions, lease_seconds, sessions, "
                "started_at, heartbeat_at, lease_until, machine, max_live) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(name) DO UPDATE SET owner = excluded.owner, "
                "max_live = excluded.max_live, "
                "max_sessions = excluded.max_sessions, lease_seconds = excluded.lease_seconds, "
                "sessions = excluded.sessions, heartbeat_at = excluded.heartbeat_at, "
                "lease_until = excluded.lease_until, machine = excluded.machine, "
                "started_at = CASE WHEN hosts.owner = "
                "excluded.owner THEN hosts.started_at ELSE excluded.started_at END",
                (
                    name,
                    owner,
                    max_sessions,
                    lease_seconds,
                    sessions,
                    iso(now),
                    iso(now),
                    until,
                    machine,
                    max_live,
                ),
            )
        return lapsed

    def leave(self, name: str, owner: str) -> None:
        """A clean stop: the lease ends now, so this host's items move on their next event."""
        with self._store.transaction() as conn:
            now = iso(_db_now(conn, self._store, self._clock))
            conn.execute(
                "UPDATE hosts SET lease_until = ? WHERE name = ? AND owner = ?", (now, name, owner)
            )

    def list(self) -> list[HostInfo]:
        now = iso(self.now())
        rows = self._store.query(
            "SELECT h.name, h.owner, h.max_sessions, h.sessions, h.heartbeat_at, h.lease_until, "
            "(SELECT count(*) FROM placements p WHERE p.host = h.name) "
            "FROM hosts h ORDER BY h.name"
        )
        return [
            HostInfo(
                name=r[0],
                owner=r[1],
                max_sessions=int(r[2]),
                sessions=int(r[3]),
                heartbeat_at=datetime.fromisoformat(r[4]),
                lease_until=datetime.fromisoformat(r[5]),
                placed=int(r[6]),
                live=r[5] > now,
            )
            for r in rows
        ]

    def now(self) -> datetime:
        """The time leases are compared on (the database's clock on PostgreSQL)."""
        if self._store.backend == "postgresql":
            value = self._store.query("SELECT clock_timestamp()")[0][0]
            if isinstance(value, datetime):
                return value
        return self._clock()

    # -- placements -------------------------------------------------------------------

    def placement(self, work_item: str) -> str | None:
        rows = self._store.query("SELECT host FROM placements WHERE work_item = ?", (work_item,))
        return rows[0][0] if rows else None

    def placed_on(self, host: str) -> builtins.list[str]:
        rows = self._store.query(
            "SELECT work_item FROM placements WHERE host = ? ORDER BY work_item", (host,)
        )
        return [r[0] for r in rows]

    def take_move(self, work_item: str, host: str) -> Move | None:
        """The move this host has to act on for `work_item` (once): clears the mark."""
        if not self._store.query(  # the common case, read-only: no commit per event
            "SELECT 1 FROM placements WHERE work_item = ? AND moved_from IS NOT NULL",
            (work_item,),
        ):
            return None
        with self._store.transaction() as conn:
            row = conn.execute(
                "SELECT moved_from, move_reason FROM placements WHERE work_item = ? AND host = ? "
                "AND moved_from IS NOT NULL",
                (work_item, host),
            ).fetchone()
            if row is None:
                return None
            conn.execute(
                "UPDATE placements SET moved_from = NULL, move_reason = NULL WHERE work_item = ?",
                (work_item,),
            )
        return Move(work_item=work_item, from_host=row[0], reason=row[1])

    def unplace(self, work_item: str, host: str) -> bool:
        """The item closed on `host`: its capacity is free again."""
        with self._store.transaction() as conn:
            cur = conn.execute(
                "DELETE FROM placements WHERE work_item = ? AND host = ?", (work_item, host)
            )
            return cur.rowcount > 0

    # -- claims -----------------------------------------------------------------------

    def claim(
        self,
        host: str,
        owner: str,
        *,
        limit: int,
        lease_seconds: float,
        alive: Callable[[str], bool],
    ) -> builtins.list[InboxEntry]:
        """Lease up to `limit` due queue heads of items placed on `host` (placing
        unplaced and orphaned items by free capacity first), oldest first.

        Nothing is claimed while `host`'s own lease has lapsed: a worker that was cut off
        must first renew (and end its stale agents) before it dispatches again.
        """
        if limit < 1:
            return []
        store = self._store
        # PostgreSQL: no writer lock; the row locks below keep hosts apart.
        kwargs = {"exclusive": False} if store.backend == "postgresql" else {}
        with store.database.transaction(**kwargs) as conn:
            now = _db_now(conn, store, self._clock)
            nows = iso(now)
            # Held: live, or run out less than the margin ago (its holder may still be
            # ending its agents): such a host's items and claims are left alone.
            held_since = iso(now - timedelta(seconds=self.margin))
            hosts = conn.execute(
                "SELECT h.name, h.owner, h.lease_until, h.max_sessions, (SELECT count(*) "
                "FROM placements p WHERE p.host = h.name), h.max_live FROM hosts h "
                "WHERE h.lease_until > ?",
                (held_since,),
            ).fetchall()
            live = {r[0]: int(r[3]) - int(r[4]) for r in hosts if r[2] > nows}
            holding = {str(r[0]): int(r[1]) for r in conn.execute(_HOLDING).fetchall()}
            room = {
                r[0]: int(r[5]) - holding.get(r[0], 0)
                for r in hosts
                if r[2] > nows and r[5] is not None
            }
            held = {r[0] for r in hosts}
            if host not in live or not any(r[0] == host and r[1] == owner for r in hosts):
                return []
            dead = self._dead_owners(conn, owner, host, held, alive)
            marks = ", ".join("?" * len(dead)) or "NULL"
            sql = _CANDIDATES.replace("{owners}", marks)
            window = max(limit * 4, 32)
            rows = conn.execute(sql, (nows, nows, *dead, host, held_since, window)).fetchall()
            chosen, moves = self._choose(rows, host, live, limit, room)
            if not chosen:
                return []
            # Lock the chosen heads; one another host holds is skipped (SKIP LOCKED), one
            # settled meanwhile fails the re-check and is left alone.
            placeholders = ", ".join("?" * len(chosen))
            locked = [
                int(r[0])
                for r in conn.execute(
                    f"SELECT seq FROM inbox WHERE seq IN ({placeholders}) AND ("  # noqa: S608
                    "(state = 'pending' AND due_at <= ?) OR (state = 'claimed' AND "
                    f"(lease_until <= ? OR lease_owner IN ({marks}))))" + _locking(store),
                    (*chosen, nows, nows, *dead),
                )
            ]
            if not locked:
                return []
            until = iso(now + timedelta(seconds=lease_seconds))
            conn.executemany(
                "UPDATE inbox SET state = 'claimed', lease_owner = ?, lease_until = ?, "
                "tries = tries + 1, updated_at = ? WHERE seq = ?",
                [(owner, until, nows, seq) for seq in locked],
            )
            placed = {int(r[0]): (r[1], r[2]) for r in rows}
            for seq in locked:
                work_item, old = placed[seq]
                if old == host:
                    continue
                reason = moves.get(work_item)
                conn.execute(
                    "INSERT INTO placements(work_item, host, moved_from, move_reason, placed_at) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT(work_item) DO UPDATE SET "
                    "host = excluded.host, moved_from = excluded.moved_from, "
                    "move_reason = excluded.move_reason, placed_at = excluded.placed_at",
                    (work_item, host, old, reason, nows),
                )
            claimed = conn.execute(
                f"{SELECT} WHERE seq IN ({', '.join('?' * len(locked))}) ORDER BY seq", locked
            ).fetchall()
        return [read_entry(r) for r in claimed]

    def renew(self, owner: str, seqs: Sequence[int], lease_seconds: float) -> int:
        """Extend the claims `owner` still holds, on the database's clock (as `claim`
        set them); returns how many it still holds."""
        if not seqs:
            return 0
        with self._store.transaction() as conn:
            until = iso(_db_now(conn, self._store, self._clock) + timedelta(seconds=lease_seconds))
            return extend_leases(conn, seqs, owner, until)

    @staticmethod
    def _dead_owners(
        conn: Any, owner: str, host: str, held: set[str], alive: Callable[[str], bool]
    ) -> builtins.list[str]:
        """Claim owners that are gone: a process of this machine that exited, a worker
        of a host whose lease ran out more than the margin ago, or an earlier worker
        of this very host (this one holds the name now, so that one is dead)."""
        owners = [
            r[0]
            for r in conn.execute(
                "SELECT DISTINCT lease_owner FROM inbox "
                "WHERE state = 'claimed' AND lease_owner IS NOT NULL"
            )
        ]
        gone = []
        for o in owners:
            name = o.partition("/")[0]
            if o != owner and (name == host or name not in held or not alive(o)):
                gone.append(o)
        return gone

    @staticmethod
    def _choose(
        rows: Sequence[Any],
        host: str,
        live: dict[str, int],
        limit: int,
        room: dict[str, int] | None = None,
    ) -> tuple[builtins.list[int], dict[str, str]]:
        """The heads this host takes: its own items, and new or orphaned items that
        placement by free capacity gives it (every host computes the same assignment
        from the same view, so each takes only its share). Ties go to this host.
        A host at its `maxLive` (`room`: slots left, capped hosts only) is never given
        an item; with every host full, a new item waits unplaced in the inbox."""
        free = dict(live)
        slots = dict(room or {})
        chosen: list[int] = []
        moves: dict[str, str] = {}
        for seq, work_item, placed in rows:
            if len(chosen) >= limit:
                break
            if placed == host:
                chosen.append(int(seq))
                continue
            open_hosts = [h for h in free if slots.get(h, 1) > 0]
            if not open_hosts:
                continue
            target = max(open_hosts, key=lambda h: (free[h], h == host, h))
            free[target] -= 1
            if target in slots:
                slots[target] -= 1
            if target == host:
                chosen.append(int(seq))
                if placed is not None:
                    moves[work_item] = "host_lease_expired"
        return chosen, moves


class HostLease:
    """One worker's hold on its host name: beats every `lease_seconds / 3`, and keeps
    its own deadline (`fence`, see fence.py) so that it stops pasting when the lease
    runs out by its own clock, whatever the database can still tell it."""

    def __init__(
        self,
        store: Store,
        name: str,
        *,
        max_sessions: int,
        lease_seconds: float,
        max_live: int | None = None,
        owner: str | None = None,
        clock: Clock = utcnow,
        sessions: Callable[[], int] | None = None,
        fence: LeaseFence | None = None,
        margin: float = TAKEOVER_MARGIN_SECONDS,
    ) -> None:
        self.hosts = Hosts(store, clock=clock, margin=margin)
        self.name = name
        self.owner = owner or host_owner(name)
        self.max_sessions = max_sessions
        self.max_live = max_live
        self.lease_seconds = lease_seconds
        self.fence = fence or LeaseFence(lease_seconds)
        self._sessions = sessions
        self._next = float("-inf")

    def beat(self, *, force: bool = False) -> bool | None:
        """Renew when due (or `force`); True when the lease had lapsed, None if not due.

        The renewal's start on the fence's clock bounds from below when the database
        set the new expiry, so the fence's deadline never outlasts the database's."""
        started = self.fence.now()
        if not force and started < self._next:
            return None
        count = self._sessions() if self._sessions is not None else 0
        lapsed = self.hosts.beat(
            self.name,
            self.owner,
            max_sessions=self.max_sessions,
            lease_seconds=self.lease_seconds,
            sessions=count,
            max_live=self.max_live,
        )
        self.fence.renewed(started)
        if lapsed:
            self.fence.lapsed()
        self._next = started + self.lease_seconds / 3
        return lapsed


def end_stale_agents(store: Store, tmux: Any, host: str) -> list[str]:
    """After a lapsed lease: end this host's agents for items placed elsewhere now.

    Their items moved to live hosts (fresh conversations there); the stale agents here
    must neither receive events nor keep working. Returns the tmux names ended.
    """
    from loop_tmux import Presence

    hosts = Hosts(store)
    ended = []
    for record in store.registry.list():
        placed = hosts.placement(str(record.work_item))
        if placed is None or placed == host:
            continue
        if tmux.probe(record.tmux_name) in (Presence.LIVE, Presence.DEAD):
            tmux.terminate(record.tmux_name)
            tmux.kill(record.tmux_name)
            ended.append(record.tmux_name)
    return ended
