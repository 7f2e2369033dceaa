"""The poll path: a Source lists new events since a cursor; a cycle records and dispatches.

A Source knows its tracker (GitHub, the local tracker); this module knows the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from .model import Event

__all__ = ["CycleReport", "PollBatch", "Source"]


@dataclass
class PollBatch:
    """What one `Source.poll` call found.

    events: new events, oldest first, each with a stable `delivery_id`.
    cursor: where the next poll starts; returned unchanged when `errors` is non-empty
        and the source could not tell what it missed.
    baseline: delivery ids of a newly watched item's existing comments: recorded as
        seen, never forwarded.
    errors: transient problems (one line each, no secrets); the cycle reports them.
    """

    events: list[Event]
    cursor: str | None
    baseline: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@runtime_checkable
class Source(Protocol):
    """A tracker the poller reads. `name` keys the stored cursor."""

    name: str

    def poll(self, cursor: str | None) -> PollBatch: ...


@dataclass
class CycleReport:
    """Counts from one poll cycle (rendered by the CLI, emitted as `poll.cycle`)."""

    source: str
    new: int = 0
    baselined: int = 0
    processed: int = 0
    failed: int = 0
    skipped: int = 0
    duplicate: int = 0
    rearmed: int = 0
    gave_up: int = 0
    errors: list[str] = field(default_factory=list)
