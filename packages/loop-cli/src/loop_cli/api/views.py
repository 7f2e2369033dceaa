"""What the API serves, computed in the daemon from its own read-only runtime.

The daemon already has its imports loaded, its config validated and its store open, so
a status computed here costs the store reads and one tmux call, not a Python start. One
lock serialises the reads (one store connection, one tmux client); the sessions'
activity (a screen read per live session, for an adapter that reads screens) is kept
for `ACTIVITY_TTL` seconds so a dashboard and a scraper polling together do not
multiply tmux calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .follow import last_records

if TYPE_CHECKING:
    from ..config import LoadedConfig
    from ..runtime import Runtime

ACTIVITY_TTL = 10.0  # one screen read per live session at most this often
FRESH_SECONDS = 1.5  # the oldest status the API serves
REFRESH_SECONDS = 1.0  # how often it is recomputed while clients keep asking
WATCHED_SECONDS = 30.0  # ... that is, while one asked within this
INBOX_STATES = ("pending", "claimed", "given_up")


class Views:
    """Read-only answers for the API's endpoints (JSON-ready data)."""

    def __init__(self, loaded: LoadedConfig) -> None:
        from ..runtime import Runtime

        self.rt: Runtime = Runtime(loaded, read_only=True)
        self._lock = threading.Lock()
        self._activity: tuple[float, dict[str, str]] = (0.0, {})
        self._activity_lock = threading.Lock()
        self.snapshot = Snapshot(self.compute_status)

    def close(self) -> None:
        self.snapshot.stop()
        self.rt.close()

    def status(self) -> dict[str, Any]:
        """The status, at most `FRESH_SECONDS` old (see `Snapshot`)."""
        return self.snapshot.get()

    def compute_status(self) -> dict[str, Any]:
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
        with self._activity_lock:  # screen reads: never while status waits on the lock
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
        if not self.rt.adapter.reads_screen:  # nothing to read: no tmux call per session
            return "unknown"
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


class Snapshot:
    """The status, computed at most once per request burst.

    At 200 sessions a status costs the daemon ~50 ms (a tmux call, the store, every
    pane's /proc environ), too much to pay per `status` in a watch loop. The first
    request after a quiet spell computes it (fresh); while requests keep coming, a
    thread recomputes it every `REFRESH_SECONDS`, so each is answered at once with a
    status at most `FRESH_SECONDS` old. Nobody asking: no thread, no cost.
    """

    def __init__(self, compute: Callable[[], dict[str, Any]]) -> None:
        self._compute = compute
        self._lock = threading.Lock()
        self._value: tuple[float, dict[str, Any]] | None = None
        self._asked = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def peek(self) -> dict[str, Any] | None:
        """The snapshot when it is fresh (counts as asked), else None: no waiting."""
        now = time.monotonic()
        found = self._value
        if found is None or now - found[0] > FRESH_SECONDS:
            return None
        self._asked = now
        return found[1]

    def get(self) -> dict[str, Any]:
        now = time.monotonic()
        self._asked = now
        found = self._value
        if found is not None and now - found[0] <= FRESH_SECONDS:
            return found[1]
        with self._lock:  # one computation at a time; a waiter takes its result
            found = self._value
            if found is None or time.monotonic() - found[0] > FRESH_SECONDS:
                found = self._refresh()
            self._keep_fresh()
            return found[1]

    def _refresh(self) -> tuple[float, dict[str, Any]]:
        started = time.monotonic()
        value = (started, self._compute())
        self._value = value
        return value

    def _keep_fresh(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._run, name="the-loop-api-status", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(REFRESH_SECONDS):
            if time.monotonic() - self._asked > WATCHED_SECONDS:
                return
            with self._lock:
                try:
                    self._refresh()
                except Exception:  # the next request computes (and reports) it
                    self._value = None

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
