"""What the API serves, computed in the daemon from its own read-only runtime.

The daemon already has its imports loaded, its config validated and its store open, so
a status computed here costs the store reads and one tmux call, not a Python start. One
lock serialises the reads (one store connection, one tmux client); the sessions'
activity (a screen read per live session) is kept for `ACTIVITY_TTL` seconds so a
dashboard and a scraper polling together do not multiply tmux calls.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from .follow import last_records

if TYPE_CHECKING:
    from ..config import LoadedConfig
    from ..runtime import Runtime

ACTIVITY_TTL = 5.0
INBOX_STATES = ("pending", "claimed", "given_up")


class Views:
    """Read-only answers for the API's endpoints (JSON-ready data)."""

    def __init__(self, loaded: LoadedConfig) -> None:
        from ..runtime import Runtime

        self.rt: Runtime = Runtime(loaded, read_only=True)
        self._lock = threading.Lock()
        self._activity: tuple[float, dict[str, str]] = (0.0, {})

    def close(self) -> None:
        self.rt.close()

    def status(self) -> dict[str, Any]:
        from ..status import collect_status

        with self._lock:
            return collect_status(self.rt)

    def attention(self) -> list[Any]:
        """The status's `attention` list (empty while no detector adds one)."""
        found = self.status().get("attention")
        return list(found) if isinstance(found, list) else []

    def sessions(self) -> list[dict[str, Any]]:
        """`sessions list -o json`'s rows, each with the harness's `activity`."""
        from ..sessions import list_rows

        with self._lock:
            rows = list_rows(self.rt)
            activity = self._activities(rows)
        for row in rows:
            row["activity"] = activity.get(row["tmuxName"], "unknown")
        return rows

    def _activities(self, rows: list[dict[str, Any]]) -> dict[str, str]:
        at, known = self._activity
        if time.monotonic() - at < ACTIVITY_TTL and all(
            r["tmuxName"] in known for r in rows if r["presence"] == "live"
        ):
            return known
        fresh = {r["tmuxName"]: self._one_activity(r) for r in rows if r["presence"] == "live"}
        self._activity = (time.monotonic(), fresh)
        return fresh

    def _one_activity(self, row: dict[str, Any]) -> str:
        try:
            seen = self.rt.tmux.observe(row["tmuxName"], capture=True)
            if seen.view is None:
                return "unknown"
            return str(self.rt.adapter.activity(seen.view, row.get("conversationId")))
        except Exception:  # one unreadable screen never fails the listing
            return "unknown"

    def inbox(self, limit: int) -> dict[str, Any]:
        """The open and given-up rows (oldest first, at most `limit`) and the counts."""
        if not self.rt.has_state:
            return {"summary": None, "counts": {}, "rows": []}
        with self._lock:
            inbox = self.rt.store.inbox
            rows = [e.as_dict() for e in inbox.entries(INBOX_STATES, limit=limit or None)]
            return {"summary": inbox.summary(), "counts": inbox.counts(), "rows": rows}

    def inbox_counts(self) -> dict[str, int]:
        if not self.rt.has_state:
            return {}
        with self._lock:
            return self.rt.store.inbox.counts()

    def hosts(self) -> list[dict[str, Any]]:
        """A fleet's hosts with their lease age (empty on SQLite)."""
        if not self.rt.fleet or not self.rt.has_state:
            return []
        from datetime import datetime, timezone

        from ..status import hosts_block

        with self._lock:
            block = hosts_block(self.rt, datetime.now(timezone.utc))
        return list(block["hosts"])

    def events(self, limit: int) -> list[dict[str, Any]]:
        return last_records(self.rt.config.event_log_path(), limit)
