"""Service heartbeats in the state store, so `status` can tell a daemon is running.

Each daemon writes one row per (service, host) in its own table: its pid and machine,
when it last beat, how long a beat stays fresh (`staleAfter`, chosen by the daemon from
its own cadence) and what it last did. The host is the fleet's host name
(`host.name`, default the machine's hostname), so on a shared PostgreSQL store the
daemons of two hosts keep a row each instead of overwriting one. A service runs when
its state is "running", its last beat is fresh, and (on this machine) its pid is alive.
A clean stop writes "stopped". The webhook daemon uses the same functions.

On the single-host SQLite store `read` without a host answers the latest row of the
service, whichever host name wrote it, so a renamed host changes nothing there.
"""

from __future__ import annotations

import json
import os
import socket
import weakref
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loop_dispatch.store import Store

__all__ = ["NAMESPACE", "Heartbeat", "beat", "read", "read_all", "stopped"]

PREFIX = "service."  # the meta keys heartbeats had before they got their own table
NAMESPACE = "loop_cli.heartbeats"
MIGRATIONS = [
    # v1: one row per (service, host). Rows of the meta table written before (one per
    # service, whichever host beat last) move here under host '' (host name unknown).
    """
    CREATE TABLE loop_cli_heartbeats (
        service    TEXT NOT NULL,
        host       TEXT NOT NULL,
        record     TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (service, host)
    );
    INSERT INTO loop_cli_heartbeats(service, host, record, updated_at)
        SELECT substr(key, 9), '', value, updated_at FROM meta WHERE key LIKE 'service.%';
    DELETE FROM meta WHERE key LIKE 'service.%';
    """,
]

_ready: weakref.WeakSet[Store] = weakref.WeakSet()


@dataclass(frozen=True)
class Heartbeat:
    service: str
    state: str  # "running" (a daemon), "once" (a cron-driven --once run), "stopped"
    pid: int
    machine: str  # socket.gethostname() of the process that wrote it
    started: datetime
    beat: datetime
    stale_after: float
    detail: dict[str, Any]
    host: str = ""  # the fleet host name it beat as ('' for a row from before hosts)

    def age(self, now: datetime | None = None) -> float:
        return ((now or datetime.now(timezone.utc)) - self.beat).total_seconds()

    def running(self, now: datetime | None = None) -> bool:
        """Fresh, not stopped, and (for a daemon on this machine) its process exists.

        A `--once` run has exited by design: its freshness alone says cron is running it.
        """
        if self.state not in ("running", "once") or self.age(now) > self.stale_after:
            return False
        if self.state == "once":
            return True
        return self.machine != socket.gethostname() or _pid_alive(self.pid)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _table(store: Store) -> bool:
    """Create (or bring up to date) the heartbeat table once per open store. False on a
    read-only store whose table is missing or older: no daemon has beaten in it."""
    if store not in _ready:
        if store.ensure_schema(NAMESPACE, MIGRATIONS) < len(MIGRATIONS):
            return False  # a reader: nothing is migrated, so nothing to read
        _ready.add(store)
    return True


def beat(
    store: Store,
    service: str,
    *,
    stale_after: float,
    started: datetime,
    detail: dict[str, Any] | None = None,
    state: str = "running",
    host: str | None = None,
) -> None:
    """Write this process's heartbeat for `service` as `host` (default: the machine's
    hostname), in one small transaction."""
    _table(store)
    now = datetime.now(timezone.utc)
    record = {
        "state": state,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": started.isoformat(),
        "beat": now.isoformat(),
        "staleAfter": stale_after,
        "detail": detail or {},
    }
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO loop_cli_heartbeats(service, host, record, updated_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT(service, host) DO UPDATE SET "
            "record = excluded.record, updated_at = excluded.updated_at",
            (
                service,
                host or socket.gethostname(),
                json.dumps(record, sort_keys=True),
                now.isoformat(timespec="microseconds"),
            ),
        )


def stopped(
    store: Store,
    service: str,
    *,
    started: datetime,
    detail: dict[str, Any] | None = None,
    host: str | None = None,
) -> None:
    """Record a clean stop, so status says "stopped" at once rather than after staleAfter."""
    beat(store, service, stale_after=0, started=started, detail=detail, state="stopped", host=host)


def read(store: Store, service: str, host: str | None = None) -> Heartbeat | None:
    """The last heartbeat of `service` on `host` (None: the latest of any host), or None
    (never written, or unreadable by hand edits)."""
    if not _table(store):
        return None
    if host is None:
        rows = store.query(
            "SELECT host, record FROM loop_cli_heartbeats WHERE service = ? "
            "ORDER BY updated_at DESC, host LIMIT 1",
            (service,),
        )
    else:
        rows = store.query(
            "SELECT host, record FROM loop_cli_heartbeats WHERE service = ? AND host = ?",
            (service, host),
        )
    return _parse(service, rows[0][0], rows[0][1]) if rows else None


def read_all(store: Store) -> dict[str, dict[str, Heartbeat]]:
    """Every host's heartbeats: host name -> service -> heartbeat (unreadable rows and
    rows from before host names are left out)."""
    if not _table(store):
        return {}
    out: dict[str, dict[str, Heartbeat]] = {}
    rows = store.query(
        "SELECT service, host, record FROM loop_cli_heartbeats WHERE host <> '' "
        "ORDER BY host, service"
    )
    for service, host, raw in rows:
        hb = _parse(service, host, raw)
        if hb is not None:
            out.setdefault(host, {})[service] = hb
    return out


def _parse(service: str, host: str, raw: str) -> Heartbeat | None:
    try:
        data = json.loads(raw)
        return Heartbeat(
            service=service,
            state=str(data["state"]),
            pid=int(data["pid"]),
            machine=str(data["host"]),
            started=datetime.fromisoformat(data["started"]),
            beat=datetime.fromisoformat(data["beat"]),
            stale_after=float(data["staleAfter"]),
            detail=dict(data.get("detail") or {}),
            host=host,
        )
    except (ValueError, KeyError, TypeError):
        return None
