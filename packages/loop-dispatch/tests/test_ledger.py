"""The poll ledger and poll cycle: baseline, retry budget, version-tagged give-up (AC11)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from loop_dispatch.dispatcher import Outcome, OutcomeKind
from loop_dispatch.eventlog import EventLog
from loop_dispatch.model import Event
from loop_dispatch.poll import PollBatch, Source, run_poll_cycle
from loop_dispatch.store import Store


@dataclass
class ScriptedSource:
    """A Source returning queued batches; records the cursors it was asked with."""

    name: str = "test"
    batches: list[PollBatch] = field(default_factory=list)
    asked: list[str | None] = field(default_factory=list)

    def poll(self, cursor: str | None) -> PollBatch:
        self.asked.append(cursor)
        if self.batches:
            return self.batches.pop(0)
        return PollBatch(events=[], cursor=cursor)


class ScriptedDispatcher:
    """Stands in for Dispatcher: answers by delivery id, default processed."""

    def __init__(self) -> None:
        self.answers: dict[str, OutcomeKind] = {}
        self.seen: list[str] = []

    def dispatch(self, event: Event) -> Outcome:
        self.seen.append(event.delivery_id)
        kind = self.answers.get(event.delivery_id, OutcomeKind.PROCESSED)
        return Outcome(kind, "scripted")


def cycle(store: Store, source: Source, dispatcher, events: EventLog, version: str, retries=3):
    return run_poll_cycle(store, source, dispatcher, events, version=version, max_retries=retries)


def test_source_protocol_is_structural() -> None:
    assert isinstance(ScriptedSource(), Source)


def test_new_events_are_dispatched_once_and_cursor_stored(store, events, make_event) -> None:
    e1, e2 = make_event(), make_event()
    src = ScriptedSource(batches=[PollBatch([e1, e2], "c1"), PollBatch([e1], "c2")])
    disp = ScriptedDispatcher()
    report = cycle(store, src, disp, events, "1.0")
    assert (report.new, report.processed) == (2, 2)
    assert store.cursors.get("test") == "c1"
    report = cycle(store, src, disp, events, "1.0")
    assert report.new == 0
    assert disp.seen == [e1.delivery_id, e2.delivery_id]
    assert src.asked == [None, "c1"]
    assert store.ledger.get(e1.delivery_id).state == "done"
    assert store.ledger.get(e1.delivery_id).event is None  # body not kept once done
    assert events.read("poll.cycle")[-1]["detail"]["new"] == 0


def test_baseline_is_recorded_never_forwarded(store, events, make_event) -> None:
    old = make_event()
    src = ScriptedSource(batches=[PollBatch([], "c1", baseline=[old.delivery_id])])
    disp = ScriptedDispatcher()
    report = cycle(store, src, disp, events, "1.0")
    assert report.baselined == 1
    assert disp.seen == []
    assert store.ledger.get(old.delivery_id).state == "baseline"
    src.batches.append(PollBatch([old], "c2"))  # seen again later: still not forwarded
    cycle(store, src, disp, events, "1.0")
    assert disp.seen == []


def test_source_errors_keep_the_cursor_and_are_reported(store, events) -> None:
    store.cursors.set("test", "c0")
    src = ScriptedSource(batches=[PollBatch([], "c0", errors=["HTTP 502 from api"])])
    report = cycle(store, src, ScriptedDispatcher(), events, "1.0")
    assert report.errors == ["HTTP 502 from api"]
    assert store.cursors.get("test") == "c0"
    assert events.read("poll.error")[0]["detail"]["error"] == "HTTP 502 from api"


def test_a_raising_source_is_a_transient_error(store, events) -> None:
    class Broken:
        name = "broken"

        def poll(self, cursor):
            raise ConnectionError("network unreachable")

    report = cycle(store, Broken(), ScriptedDispatcher(), events, "1.0")
    assert report.errors
    assert "network unreachable" in report.errors[0]


def test_failed_event_is_retried_next_cycle_although_cursor_moved(store, events, make_event):
    e = make_event()
    src = ScriptedSource(batches=[PollBatch([e], "c1")])
    disp = ScriptedDispatcher()
    disp.answers[e.delivery_id] = OutcomeKind.FAILED
    assert cycle(store, src, disp, events, "1.0").failed == 1
    assert store.ledger.get(e.delivery_id).attempts == 1
    disp.answers.pop(e.delivery_id)
    report = cycle(store, src, disp, events, "1.0")
    assert report.processed == 1
    assert disp.seen == [e.delivery_id, e.delivery_id]
    assert store.ledger.get(e.delivery_id).state == "done"


def test_skipped_and_duplicate_resolve_the_entry(store, events, make_event) -> None:
    s, d = make_event(), make_event()
    disp = ScriptedDispatcher()
    disp.answers = {s.delivery_id: OutcomeKind.SKIPPED, d.delivery_id: OutcomeKind.DUPLICATE}
    report = cycle(store, ScriptedSource(batches=[PollBatch([s, d], "c")]), disp, events, "1")
    assert (report.skipped, report.duplicate) == (1, 1)
    assert store.ledger.get(s.delivery_id).last_outcome == "skipped"
    assert not store.ledger.pending("test")


def test_ac11_give_up_records_version_and_is_rearmed_once_by_another(store, events, make_event):
    """AC11: give-up after max_retries records the version; another version re-arms it
    exactly once with a fresh budget; the running version never re-arms its own."""
    e = make_event()
    src = ScriptedSource(batches=[PollBatch([e], "c1")])
    disp = ScriptedDispatcher()
    disp.answers[e.delivery_id] = OutcomeKind.FAILED
    for _ in range(3):
        cycle(store, src, disp, events, "1.0", retries=3)
    entry = store.ledger.get(e.delivery_id)
    assert (entry.state, entry.attempts, entry.gave_up_version) == ("gave_up", 3, "1.0")
    assert len(events.read("poll.gave_up")) == 1
    assert events.read("poll.gave_up")[0]["detail"]["version"] == "1.0"

    # Same version, e.g. `poll --once` from cron: never re-armed, never re-forwarded.
    for _ in range(3):
        report = cycle(store, src, disp, events, "1.0")
        assert report.rearmed == 0
    assert len(disp.seen) == 3

    # An upgrade: re-armed once, with a fresh budget, and the event log says so.
    disp.answers[e.delivery_id] = OutcomeKind.FAILED
    report = cycle(store, src, disp, events, "1.1")
    assert report.rearmed == 1
    assert len(disp.seen) == 4
    rearmed = events.read("poll.rearmed")
    assert len(rearmed) == 1
    assert rearmed[0]["deliveryId"] == e.delivery_id
    assert rearmed[0]["detail"]["gave_up_version"] == "1.0"
    assert store.ledger.get(e.delivery_id).attempts == 1  # fresh budget, one spent

    # It fails on: the new give-up carries 1.1, and 1.1 never re-arms it.
    cycle(store, src, disp, events, "1.1")
    cycle(store, src, disp, events, "1.1")
    entry = store.ledger.get(e.delivery_id)
    assert (entry.state, entry.gave_up_version, entry.rearm_count) == ("gave_up", "1.1", 1)
    for _ in range(3):
        assert cycle(store, src, disp, events, "1.1").rearmed == 0
    assert len(disp.seen) == 6
    assert len(events.read("poll.rearmed")) == 1


def test_ac11_rearmed_event_that_now_succeeds_is_delivered(store, events, make_event):
    """AC11: the stranded comment is picked up on the first cycle after the upgrade."""
    e = make_event()
    src = ScriptedSource(batches=[PollBatch([e], "c1")])
    disp = ScriptedDispatcher()
    disp.answers[e.delivery_id] = OutcomeKind.FAILED
    cycle(store, src, disp, events, "1.0", retries=1)
    assert store.ledger.get(e.delivery_id).state == "gave_up"
    disp.answers.pop(e.delivery_id)  # the upgrade fixed the bug
    report = cycle(store, src, disp, events, "2.0", retries=1)
    assert (report.rearmed, report.processed) == (1, 1)
    assert store.ledger.get(e.delivery_id).state == "done"


def test_rearm_is_per_source(store, events, make_event) -> None:
    e = make_event()
    src = ScriptedSource(name="a", batches=[PollBatch([e], "c")])
    disp = ScriptedDispatcher()
    disp.answers[e.delivery_id] = OutcomeKind.FAILED
    cycle(store, src, disp, events, "1", retries=1)
    other = ScriptedSource(name="b")
    assert cycle(store, other, disp, events, "2").rearmed == 0
    assert cycle(store, src, disp, events, "2").rearmed == 1


def test_max_retries_must_be_positive(store, events) -> None:
    with pytest.raises(ValueError):
        cycle(store, ScriptedSource(), ScriptedDispatcher(), events, "1", retries=0)


def test_ten_thousand_comments_are_recorded_in_one_transaction(store, events, make_event):
    batch = [make_event(delivery_id=f"comment:test:{i}") for i in range(10_000)]
    assert store.ledger.record("bulk", batch, cursor="c") == 10_000
    assert store.ledger.record("bulk", batch[:10], cursor="c2") == 0
    assert store.ledger.counts("bulk") == {"pending": 10_000}
    assert store.cursors.get("bulk") == "c2"


def test_a_dispatcher_that_raises_costs_one_attempt_not_the_cycle(store, events, make_event):
    bad, good = make_event(), make_event()

    class Raising(ScriptedDispatcher):
        def dispatch(self, event):
            if event.delivery_id == bad.delivery_id:
                raise OSError("lock directory vanished")
            return super().dispatch(event)

    report = cycle(
        store, ScriptedSource(batches=[PollBatch([bad, good], "c")]), Raising(), events, "1"
    )
    assert (report.failed, report.processed) == (1, 1)
    entry = store.ledger.get(bad.delivery_id)
    assert (entry.state, entry.attempts, entry.last_outcome) == ("pending", 1, "dispatch_error")


def test_an_unreadable_stored_event_is_given_up_loudly(store, events, make_event):
    e = make_event()
    store.ledger.record("test", [e])
    with store.transaction() as conn:
        conn.execute("UPDATE ledger SET event = '{broken' WHERE delivery_id = ?", (e.delivery_id,))
    report = cycle(store, ScriptedSource(), ScriptedDispatcher(), events, "1")
    assert report.gave_up == 1
    assert store.ledger.get(e.delivery_id).state == "gave_up"
    assert events.read("poll.gave_up")[0]["detail"]["reason"] == "unreadable_stored_event"
