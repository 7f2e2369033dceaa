"""What one `poll --once` drain did, per attempt and per event.

The drain hands every settled attempt to `on_settled`; this keeps them, so the run
can print one line per attempt that did not simply succeed (its reason and error,
never the event's text) and count EVENTS by how their last attempt ended (one event
retried twice in a run is one event to retry, not two).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .terminal import printable

if TYPE_CHECKING:
    from loop_dispatch.drain import Settlement

__all__ = ["Attempts"]


class Attempts:
    """Settlements of one drain run, in the order they came (thread-safe)."""

    # Summary keys, as `poll --once` has always printed them.
    COUNTS = ("processed", "retried", "skipped", "duplicate", "gave_up", "lost", "held")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.settled: list[Settlement] = []

    def add(self, settlement: Settlement) -> None:
        with self._lock:
            self.settled.append(settlement)

    def _last(self) -> dict[int, Settlement]:
        """Each event's last settlement in this run, by inbox row."""
        with self._lock:
            return {s.entry.seq: s for s in self.settled}

    def counts(self) -> dict[str, int]:
        """Events (not tries) by how their last attempt ended."""
        out = dict.fromkeys(self.COUNTS, 0)
        for s in self._last().values():
            out[_bucket(s)] += 1
        return out

    def definite(self) -> int:
        """Events whose last attempt failed definitively (counted, not transient)."""
        return sum(
            1
            for s in self._last().values()
            if s.state == "retry" and (s.outcome is None or not s.outcome.transient)
        )

    def gave_up(self) -> int:
        return sum(1 for s in self._last().values() if s.state == "given_up")

    def lines(self) -> list[str]:
        """One line per attempt that did not simply succeed (processed or duplicate)."""
        with self._lock:
            settled = list(self.settled)
        return [
            printable(_line(s)) for s in settled if _bucket(s) not in ("processed", "duplicate")
        ]


def _bucket(s: Settlement) -> str:
    if s.state == "lost":
        return "lost"
    if s.state == "given_up":
        return "gave_up"
    if s.state == "retry":
        return "retried"
    if s.state == "held":
        return "held"
    assert s.outcome is not None  # a "done" settlement always has its outcome
    return s.outcome.kind.value


def _line(s: Settlement) -> str:
    entry, outcome = s.entry, s.outcome
    who = f"{entry.work_item or '-'} {entry.delivery_id}"
    reason = outcome.reason if outcome is not None else "unreadable_stored_event"
    error = (outcome.detail if outcome is not None else "") or "-"
    error = " ".join(error.split())
    if s.state == "lost":
        return f"lease lost: {who}: another drain took it over and settles it"
    if s.state == "given_up":
        why = s.retry.why if s.retry is not None else "attempts"
        return (
            f"GAVE UP:  {who}: {reason} ({why}): {error}; "
            f"re-arm with `the-loop inbox retry {entry.seq}`"
        )
    if s.state == "retry":
        transient = outcome is not None and outcome.transient
        kind = (
            "transient"
            if transient
            else f"definite, attempt {s.retry.attempts if s.retry else '?'}"
        )
        when = ""
        if s.retry is not None and s.retry.due_at is not None:
            when = f"; next try at {s.retry.due_at.strftime('%H:%M:%S')}Z"
        return f"failed:   {who}: {reason} ({kind}{when}): {error}"
    return f"skipped:  {who}: {reason}: {error}"
