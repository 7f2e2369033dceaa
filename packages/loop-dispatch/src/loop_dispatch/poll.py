"""The poll path: a Source lists new events since a cursor; a cycle commits them.

A Source knows its tracker (GitHub, the local tracker); a cycle commits what it read to
the inbox, and the drain dispatches it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .model import Event

if TYPE_CHECKING:
    from .eventlog import EventLog
    from .store import Store

__all__ = ["CycleReport", "PollBatch", "Source", "run_poll_cycle"]

SOURCE = "poller"


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
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _poll_source(source: Source, cursor: str | None) -> PollBatch:
    """A source that raises is a transient error: nothing recorded, cursor unchanged."""
    try:
        return source.poll(cursor)
    except Exception as exc:
        message = " ".join(str(exc).split())[:300] or type(exc).__name__
        return PollBatch(events=[], cursor=cursor, errors=[f"{type(exc).__name__}: {message}"])


def run_poll_cycle(store: Store, source: Source, events: EventLog) -> CycleReport:
    """One poll cycle over `source`: read, then commit to the inbox. Nothing is dispatched
    here: the drain does that, for every ingress alike.

    The new events, the baseline ids and the source's new cursor are ONE transaction,
    so the cursor never moves past an event the inbox does not hold. Emits `poll.cycle`.
    """
    from .store import UPSERT_CURSOR, utcnow_iso

    report = CycleReport(source=source.name)
    batch = _poll_source(source, store.cursors.get(source.name))
    report.errors = list(batch.errors)
    for error in batch.errors:
        events.emit(
            "poll.error",
            level="warning",
            source=SOURCE,
            detail={"source": source.name, "error": error},
        )
    with store.transaction() as conn:
        accepted = store.inbox.accept(source.name, batch.events, batch.baseline, conn=conn)
        conn.execute(UPSERT_CURSOR, (source.name, batch.cursor, utcnow_iso()))
    report.new = len(accepted)
    report.baselined = len(batch.baseline)
    idle = not report.new and not report.baselined and not report.errors
    events.emit(
        "poll.cycle",
        level="debug" if idle else "info",  # an idle cycle is no news in a daemon's log
        source=SOURCE,
        detail={"source": source.name, "new": report.new, "baselined": report.baselined}
        | {"errors": len(report.errors)},
    )
    return report
