"""Restart requests between the hosts of a fleet, carried by the shared store.

`sessions restart --host NAME` (or `--all-hosts`) never reaches another machine by
ssh: it writes one request per host here, and each host's worker (`poll start`) takes
the requests for its own host name, restarts its own sessions and records the outcome
as counts per outcome (never a name's value, never a session's detail). A request no
worker took stays visible, pending, until its host takes it or it is older than
`max_age` (then it is closed as expired, so a host back after days does not act on
an old request).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .hosts import HOSTS_MIGRATIONS, HOSTS_NAMESPACE
from .inboxtable import Clock, iso, utcnow

if TYPE_CHECKING:
    from .store import Store

__all__ = ["REQUEST_MAX_AGE", "RestartRequest", "RestartRequests", "summary"]

REQUEST_MAX_AGE = 3600.0
"""Seconds a request may wait for its host; older ones are closed as expired."""

_COLUMNS = (
    "id, host, force, dry_run, requested_by, requested_at, taken_at, taken_by, done_at, result,"
    " options"
)


@dataclass(frozen=True, kw_only=True)
class RestartRequest:
    """One host's restart request and, once done, its result (counts only)."""

    id: int
    host: str
    force: bool
    dry_run: bool
    requested_by: str
    requested_at: datetime
    taken_at: datetime | None
    taken_by: str | None
    done_at: datetime | None
    result: dict[str, Any] | None
    # How the asker wants the restart run (issue 25: waitIdle, busy, maxParallel);
    # empty for a request written before they existed: the host's defaults apply.
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """ "pending" (no worker took it yet), "taken" (under way) or "done"."""
        if self.done_at is not None:
            return "done"
        return "taken" if self.taken_at is not None else "pending"

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "host": self.host,
            "state": self.state,
            "force": self.force,
            "dryRun": self.dry_run,
            "requestedBy": self.requested_by,
            "requestedAt": self.requested_at.isoformat(),
            "takenAt": self.taken_at.isoformat() if self.taken_at else None,
            "doneAt": self.done_at.isoformat() if self.done_at else None,
            "result": self.result,
            "options": self.options,
        }


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _json_object(text: str | None, what: str) -> dict[str, Any] | None:
    """A stored JSON object; None when empty, {"error": ...} when unreadable."""
    if not text:
        return None
    try:
        loaded = json.loads(text)
    except ValueError:
        return {"error": f"unreadable {what}"}
    return loaded if isinstance(loaded, dict) else None


def _request(row: Sequence[Any]) -> RestartRequest:
    result = _json_object(row[9], "result")
    return RestartRequest(
        id=int(row[0]),
        host=row[1],
        force=bool(row[2]),
        dry_run=bool(row[3]),
        requested_by=row[4],
        requested_at=datetime.fromisoformat(row[5]),
        taken_at=_time(row[6]),
        taken_by=row[7],
        done_at=_time(row[8]),
        result=result,
        options=_json_object(row[10], "options") or {},
    )


def summary(
    counts: Mapping[str, int], *, exit_code: int, error: str | None = None
) -> dict[str, Any]:
    """The only result shape a request keeps: outcome counts, the exit code, and a
    one-line error when the restart could not run at all."""
    out: dict[str, Any] = {
        "counts": {str(k): int(v) for k, v in sorted(counts.items())},
        "exitCode": int(exit_code),
    }
    if error:
        out["error"] = " ".join(error.split())[:300]
    return out


class RestartRequests:
    """The `host_restarts` table of a Store (the hosts namespace)."""

    def __init__(
        self, store: Store, *, clock: Clock = utcnow, max_age: float = REQUEST_MAX_AGE
    ) -> None:
        self._store = store
        self._clock = clock
        self._max_age = max_age
        store.ensure_schema(HOSTS_NAMESPACE, HOSTS_MIGRATIONS)

    def request(
        self,
        hosts: Sequence[str],
        *,
        by: str,
        force: bool = False,
        dry_run: bool = False,
        options: Mapping[str, Any] | None = None,
    ) -> list[RestartRequest]:
        """One pending request per host, written in one transaction."""
        now = iso(self._clock())
        ids = []
        kept = json.dumps(dict(options), sort_keys=True) if options else None
        with self._store.transaction() as conn:
            for host in hosts:
                cur = conn.execute(
                    "INSERT INTO host_restarts(host, force, dry_run, requested_by, requested_at,"
                    " options) VALUES (?, ?, ?, ?, ?, ?) RETURNING id",  # both backends
                    (host, int(force), int(dry_run), by, now, kept),
                )
                ids.append(int(cur.fetchone()[0]))
        return self.get(ids)

    def get(self, ids: Sequence[int]) -> list[RestartRequest]:
        """The requests with these ids, in id order."""
        if not ids:
            return []
        marks = ", ".join("?" * len(ids))
        rows = self._store.query(
            f"SELECT {_COLUMNS} FROM host_restarts WHERE id IN ({marks}) ORDER BY id",  # noqa: S608
            [int(i) for i in ids],
        )
        return [_request(r) for r in rows]

    def open(self, host: str | None = None) -> list[RestartRequest]:
        """Requests not done yet (of `host`, or of every host), oldest first."""
        where, params = "done_at IS NULL", []
        if host is not None:
            where, params = "done_at IS NULL AND host = ?", [host]
        rows = self._store.query(
            f"SELECT {_COLUMNS} FROM host_restarts WHERE {where} ORDER BY id",  # noqa: S608
            params,
        )
        return [_request(r) for r in rows]

    def take(self, host: str, owner: str) -> list[RestartRequest]:
        """The pending requests of `host`, taken by `owner` (its worker), oldest first.

        Requests older than `max_age` are closed as expired instead. A request another
        worker took meanwhile is not taken twice (the update checks it is still pending).
        """
        now = self._clock()
        nows = iso(now)
        oldest = iso(now - timedelta(seconds=self._max_age))
        expired = json.dumps(
            summary({}, exit_code=1, error="expired: no worker of this host took it in time")
        )
        with self._store.transaction() as conn:
            conn.execute(
                "UPDATE host_restarts SET done_at = ?, result = ? "
                "WHERE host = ? AND taken_at IS NULL AND done_at IS NULL AND requested_at < ?",
                (nows, expired, host, oldest),
            )
            ids = [
                int(r[0])
                for r in conn.execute(
                    "SELECT id FROM host_restarts WHERE host = ? AND taken_at IS NULL "
                    "AND done_at IS NULL ORDER BY id",
                    (host,),
                ).fetchall()
            ]
            taken = []
            for rid in ids:
                cur = conn.execute(
                    "UPDATE host_restarts SET taken_at = ?, taken_by = ? "
                    "WHERE id = ? AND taken_at IS NULL",
                    (nows, owner, rid),
                )
                if cur.rowcount > 0:
                    taken.append(rid)
        return self.get(taken)

    def finish(self, request_id: int, result: Mapping[str, Any]) -> None:
        """Record what the restart did (see `summary`: counts only) and close it."""
        with self._store.transaction() as conn:
            conn.execute(
                "UPDATE host_restarts SET done_at = ?, result = ? WHERE id = ?",
                (iso(self._clock()), json.dumps(dict(result), sort_keys=True), request_id),
            )
