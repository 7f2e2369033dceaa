"""The poll path: a Source lists new events since a cursor; a cycle records and dispatches.

A Source knows its tracker (GitHub, the local tracker); this module knows the ledger.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .model import Event

if TYPE_CHECKING:
    from .dispatcher import Dispatcher, Outcome
    from .eventlog import EventLog
    from .ledger import LedgerEntry
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
    processed: int = 0
    failed: int = 0
    skipped: int = 0
    duplicate: int = 0
    rearmed: int = 0
    gave_up: int = 0
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


def run_poll_cycle(
    store: Store,
    source: Source,
    dispatcher: Dispatcher,
    events: EventLog,
    *,
    version: str,
    max_retries: int,
) -> CycleReport:
    """One poll cycle over `source`.

    1. Re-arm give-ups recorded by another version, once each (AC11; `poll.rearmed`).
    2. Poll from the stored cursor; record new events (and baseline ids) in the ledger
       and store the new cursor in the same transaction.
    3. Dispatch every pending entry of this source, oldest first: processed, skipped or
       duplicate resolve it; failed costs an attempt, and the `max_retries`-th failed
       attempt gives it up, recording `version` (`poll.gave_up`).
    4. Emit `poll.cycle` with the counts, and return them.
    """
    if max_retries < 1:
        raise ValueError("max_retries must be at least 1")
    ledger = store.ledger
    report = CycleReport(source=source.name)

    for entry in ledger.rearm(version, source.name):
        report.rearmed += 1
        events.emit(
            "poll.rearmed",
            source=SOURCE,
            work_item=entry.work_item or None,
            delivery_id=entry.delivery_id,
            detail={
                "gave_up_version": entry.gave_up_version,
                "running_version": version,
                "attempts_before": entry.attempts,
                "source": source.name,
            },
        )

    batch = _poll_source(source, store.cursors.get(source.name))
    report.errors = list(batch.errors)
    for error in batch.errors:
        events.emit(
            "poll.error",
            level="warning",
            source=SOURCE,
            detail={"source": source.name, "error": error},
        )
    report.new = ledger.record(source.name, batch.events, batch.baseline, cursor=batch.cursor)
    report.baselined = len(batch.baseline)

    for entry in ledger.pending(source.name):
        _dispatch_entry(entry, store, dispatcher, events, report, version, max_retries)

    events.emit(
        "poll.cycle",
        source=SOURCE,
        detail={k: v for k, v in report.as_dict().items() if k != "errors"}
        | {"errors": len(report.errors)},
    )
    return report


def _dispatch_safely(dispatcher: Dispatcher, event: Event) -> Outcome:
    """The dispatcher settles its own faults; anything escaping it (a lock directory
    that vanished, say) is one failed attempt, not the end of the cycle."""
    from .dispatcher import Outcome, OutcomeKind

    try:
        return dispatcher.dispatch(event)
    except Exception as exc:
        message = " ".join(str(exc).split())[:300]
        return Outcome(OutcomeKind.FAILED, "dispatch_error", f"{type(exc).__name__}: {message}")


def _dispatch_entry(
    entry: LedgerEntry,
    store: Store,
    dispatcher: Dispatcher,
    events: EventLog,
    report: CycleReport,
    version: str,
    max_retries: int,
) -> None:
    from .dispatcher import OutcomeKind

    if entry.event is None:
        # A pending row whose stored event is unreadable (hand-edited): it cannot be
        # sent, so it is given up at once, loudly.
        store.ledger.mark_failed(
            entry.delivery_id, max_retries=1, version=version, outcome="unreadable"
        )
        report.failed += 1
        report.gave_up += 1
        _emit_gave_up(events, entry, version, "unreadable_stored_event")
        return
    outcome = _dispatch_safely(dispatcher, entry.event)
    if outcome.kind is OutcomeKind.FAILED:
        report.failed += 1
        if store.ledger.mark_failed(
            entry.delivery_id, max_retries=max_retries, version=version, outcome=outcome.reason
        ):
            report.gave_up += 1
            _emit_gave_up(events, entry, version, outcome.reason)
        return
    store.ledger.mark_done(entry.delivery_id, outcome.kind.value)
    if outcome.kind is OutcomeKind.PROCESSED:
        report.processed += 1
    elif outcome.kind is OutcomeKind.SKIPPED:
        report.skipped += 1
    else:
        report.duplicate += 1


def _emit_gave_up(events: EventLog, entry: LedgerEntry, version: str, reason: str) -> None:
    events.emit(
        "poll.gave_up",
        level="error",
        source=SOURCE,
        work_item=entry.work_item or None,
        delivery_id=entry.delivery_id,
        detail={"version": version, "attempts": entry.attempts + 1, "reason": reason},
    )
