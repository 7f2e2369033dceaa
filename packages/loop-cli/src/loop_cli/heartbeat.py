"""Service heartbeats in the state store, so `status` can tell a daemon is running.

Each daemon writes `service.<name>` in the store's meta table: its pid and host, when it
last beat, how long a beat stays fresh (`staleAfter`, chosen by the daemon from its own
cadence) and what it last did. A service runs when its state is "running", its last
beat is fresh, and (on this host) its pid is alive. A clean stop writes "stopped".
The webhook daemon uses the same functions.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loop_dispatch.store import Store

PREFIX = "service."


@dataclass(frozen=True)
class Heartbeat:
    service: str
    state: str  # "running" (a daemon), "once" (a cron-driven --once run), "stopped"
    pid: int
    host: str
    started: datetime
    beat: datetime
    stale_after: float
    detail: dict[str, Any]

    def age(self, now: datetime | None = None) -> float:
        return ((now or datetime.now(timezone.utc)) - self.beat).total_seconds()

    def running(self, now: datetime | None = None) -> bool:
        """Fresh, not stopped, and (for a daemon on this host) its process still exists.

        A `--once` run has exited by design: its freshness alone says cron is running it.
        """
        if self.state not in ("running", "once") or self.age(now) > self.stale_after:
            return False
        if self.state == "once":
            return True
        return self.host != socket.gethostname() or _pid_alive(self.pid)


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


def beat(
    store: Store,
    service: str,
    *,
    stale_after: float,
    started: datetime,
    detail: dict[str, Any] | None = None,
    state: str = "running",
) -> None:
    """Write this process's heartbeat for `service` (one small transaction)."""
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
    store.meta.set(PREFIX + service, json.dumps(record, sort_keys=True))


def stopped(
    store: Store, service: str, *, started: datetime, detail: dict[str, Any] | None = None
) -> None:
    """Record a clean stop, so status says "stopped" at once rather than after staleAfter."""
    beat(store, service, stale_after=0, started=started, detail=detail, state="stopped")


def read(store: Store, service: str) -> Heartbeat | None:
    """The last heartbeat of `service`, or None (never written, or unreadable by hand edits)."""
    raw = store.meta.get(PREFIX + service)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        return Heartbeat(
            service=service,
            state=str(data["state"]),
            pid=int(data["pid"]),
            host=str(data["host"]),
            started=datetime.fromisoformat(data["started"]),
            beat=datetime.fromisoformat(data["beat"]),
            stale_after=float(data["staleAfter"]),
            detail=dict(data.get("detail") or {}),
        )
    except (ValueError, KeyError, TypeError):
        return None
