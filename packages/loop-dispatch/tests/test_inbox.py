"""The inbox and its drain: durable accept, per-item order, retries by kind of failure,
leases, the version-set give-up re-arm (AC11), and the migration from the poll ledger."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import pytest

from loop_dispatch.dispatcher import Outcome, OutcomeKind
from loop_dispatch.drain import Drain, RetryPolicy
from loop_dispatch.eventlog import EventLog
from loop_dispatch.inbox import Inbox, local_owner, owner_alive, versions_key
from loop_dispatch.model import Event
from loop_dispatch.poll import PollBatch, Source, run_poll_cycle
from loop_dispatch.store import Store


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """These tests run on both store backends (PostgreSQL: a private cluster)."""
    return str(request.param)


V1 = {"loop-cli": "1.0", "loop-dispatch": "1.0", "loop-tmux": "1.0"}


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
    """Stands in for Dispatcher: answers by delivery id (kind, reason), default processed."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[OutcomeKind, str]] = {}
        self.seen: list[str] = []
        self.lock = threading.Lock()

    def dispatch(self, event: Event) -> Outcome:
        with self.lock:
            self.seen.append(event.delivery_id)
        kind, reason = self.answers.get(event.delivery_id, (OutcomeKind.PROCESSED, "scripted"))
        return Outcome(kind, reason)


def drain(store: Store, disp, events: EventLog, versions=V1, **policy) -> Drain:
    policy.setdefault("backoff", 0.01)
    policy.setdefault("max_backoff", 0.01)
    return Drain(store, disp, events, versions=versions, policy=RetryPolicy(**policy), idle=0.01)


def test_source_protocol_is_structural() -> None:
    assert isinstance(ScriptedSource(), Source)


def test_a_poll_cycle_commits_events_and_cursor_together_and_dispatches_nothing(
    store, events, make_event
):
    e1, e2 = make_event(), make_event()
    src = ScriptedSource(batches=[PollBatch([e1, e2], "c1"), PollBatch([e1], "c2")])
    report = run_poll_cycle(store, src, events)
    assert (report.new, report.baselined) == (2, 0)
    assert store.cursors.get("test") == "c1"
    assert [e.delivery_id for e in store.inbox.entries(("pending",))] == [
        e1.delivery_id,
        e2.delivery_id,
    ]
    report = run_poll_cycle(store, src, events)  # a re-listed event is a duplicate
    assert report.new == 0
    assert src.asked == [None, "c1"]
    assert store.cursors.get("test") == "c2"


def test_baseline_is_recorded_never_forwarded(store, events, make_event) -> None:
    e = make_event()
    src = ScriptedSource(
        batches=[PollBatch([], "c", baseline=[e.delivery_id]), PollBatch([e], "d")]
    )
    run_poll_cycle(store, src, events)
    assert run_poll_cycle(store, src, events).new == 0  # seen as baseline: never forwarded
    disp = ScriptedDispatcher()
    drain(store, disp, events).run(until_idle=True)
    assert disp.seen == []


def test_source_errors_keep_the_cursor_and_are_reported(store, events) -> None:
    src = ScriptedSource(batches=[PollBatch([], "old", errors=["GitHub said 502"])])
    store.cursors.set("test", "old")
    report = run_poll_cycle(store, src, events)
    assert report.errors == ["GitHub said 502"]
    assert events.read("poll.error")[0]["detail"]["error"] == "GitHub said 502"


def test_a_raising_source_is_a_transient_error(store, events) -> None:
    class Boom:
        name = "boom"

        def poll(self, cursor):
            raise ConnectionError("reset by peer")

    report = run_poll_cycle(store, Boom(), events)
    assert report.errors == ["ConnectionError: reset by peer"]


def test_ten_thousand_comments_are_accepted_in_one_transaction(store, make_event):
    batch = [make_event(delivery_id=f"comment:test:{i}") for i in range(10_000)]
    assert len(store.inbox.accept("bulk", batch)) == 10_000
    assert store.inbox.accept("bulk", batch[:10]) == []
    assert store.inbox.counts() == {"pending": 10_000}


def test_a_failed_accept_commits_nothing(store, make_event) -> None:
    e = make_event()

    def crash_before_commit() -> None:
        with store.transaction() as conn:
            store.inbox.accept("webhook", [e], conn=conn)
            raise RuntimeError("crash before the commit")

    with pytest.raises(RuntimeError):
        crash_before_commit()
    assert store.inbox.by_delivery(e.delivery_id) is None


def test_claims_take_only_queue_heads_so_an_item_never_runs_twice_or_out_of_order(
    store, make_event
):
    a1, a2, b1 = make_event("local:a#1"), make_event("local:a#1"), make_event("local:b#1")
    store.inbox.accept("t", [a1, a2, b1])
    first = store.inbox.claim("me", limit=10, lease_seconds=30)
    assert [e.delivery_id for e in first] == [a1.delivery_id, b1.delivery_id]
    assert store.inbox.claim("other", limit=10, lease_seconds=30) == []  # a2 waits for a1
    assert store.inbox.done(first[0].seq, "me", "processed", "delivered")
    (nxt,) = store.inbox.claim("other", limit=10, lease_seconds=30)
    assert nxt.delivery_id == a2.delivery_id


def test_an_expired_lease_or_a_dead_local_owner_is_taken_over(store, make_event) -> None:
    e = make_event()
    store.inbox.accept("t", [e])
    (held,) = store.inbox.claim("host/1/1", limit=1, lease_seconds=30, alive=lambda o: True)
    assert store.inbox.claim("me", limit=1, lease_seconds=30, alive=lambda o: True) == []
    (taken,) = store.inbox.claim("me", limit=1, lease_seconds=30, alive=lambda o: False)
    assert (taken.seq, taken.lease_owner, taken.tries) == (held.seq, "me", 2)
    assert not store.inbox.done(held.seq, "host/1/1", "processed", "late")  # lost its lease
    clock = [datetime.now(timezone.utc) + timedelta(seconds=31)]
    later = Inbox(store, clock=lambda: clock[0])
    (again,) = later.claim("third", limit=1, lease_seconds=30, alive=lambda o: True)
    assert again.lease_owner == "third"


def test_owner_identity_tells_a_dead_process_from_a_live_one() -> None:
    import subprocess
    import sys

    assert owner_alive(local_owner())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    owner = local_owner(child.pid)
    child.wait()
    assert not owner_alive(owner)
    assert owner_alive("another-host/1/1")  # judged by its lease alone


def test_transient_failures_never_use_up_the_budget(store, events, make_event) -> None:
    e = make_event()
    store.inbox.accept("t", [e])
    disp = ScriptedDispatcher()
    disp.answers[e.delivery_id] = (OutcomeKind.FAILED, "tmux_unavailable")
    d = drain(store, disp, events, max_attempts=2)
    for _ in range(6):
        d.run(until_idle=True)
        time.sleep(0.02)
    entry = store.inbox.by_delivery(e.delivery_id)
    assert (entry.state, entry.attempts) == ("pending", 0)
    assert entry.tries >= 5
    disp.answers.pop(e.delivery_id)  # tmux answers again
    time.sleep(0.02)
    assert d.run(until_idle=True).processed == 1
    assert store.inbox.by_delivery(e.delivery_id).state == "done"


def test_definite_failures_give_up_at_max_attempts_with_the_versions(store, events, make_event):
    e = make_event()
    store.inbox.accept("t", [e])
    disp = ScriptedDispatcher()
    disp.answers[e.delivery_id] = (OutcomeKind.FAILED, "harness_exited")
    d = drain(store, disp, events, max_attempts=3)
    for _ in range(5):
        d.run(until_idle=True)
        time.sleep(0.02)
    entry = store.inbox.by_delivery(e.delivery_id)
    assert (entry.state, entry.attempts, entry.gave_up_versions) == (
        "given_up",
        3,
        versions_key(V1),
    )
    assert len(disp.seen) == 3
    (gave_up,) = events.read("inbox.gave_up")
    assert gave_up["detail"]["why"] == "attempts"
    assert gave_up["detail"]["remedy"] == f"the-loop inbox retry {entry.seq}"


def test_the_horizon_gives_up_even_a_transient_failure(store, events, make_event) -> None:
    e = make_event()
    store.inbox.accept("t", [e])
    disp = ScriptedDispatcher()
    disp.answers[e.delivery_id] = (OutcomeKind.FAILED, "tmux_unavailable")
    drain(store, disp, events, give_up_after=0.0).run(until_idle=True)
    assert store.inbox.by_delivery(e.delivery_id).state == "given_up"
    assert events.read("inbox.gave_up")[0]["detail"]["why"] == "horizon"


def test_backoff_doubles_up_to_its_cap_with_jitter() -> None:
    policy = RetryPolicy(backoff=1.0, max_backoff=8.0, jitter=lambda: 1.0)
    assert [policy.delay(t, 0) for t in range(1, 7)] == [1, 2, 4, 8, 8, 8]
    low = RetryPolicy(backoff=1.0, max_backoff=8.0, jitter=lambda: 0.5)
    assert low.delay(3, 0) == 2.0


def test_ac11_give_up_is_rearmed_once_by_a_change_of_any_deciding_version(
    store, events, make_event
):
    """AC11: a give-up records the versions of loop-tmux, loop-dispatch and loop-cli; a
    release of ANY of them re-arms it once with a fresh budget; the running set never
    re-arms its own give-up (a cron `poll --once` never re-forwards it)."""
    e = make_event()
    store.inbox.accept("t", [e])
    disp = ScriptedDispatcher()
    disp.answers[e.delivery_id] = (OutcomeKind.FAILED, "harness_exited")
    d1 = drain(store, disp, events, max_attempts=1)
    d1.run(until_idle=True)
    assert store.inbox.by_delivery(e.delivery_id).state == "given_up"
    for _ in range(3):
        assert d1.run(until_idle=True).rearmed == 0
    assert len(disp.seen) == 1

    tmux_only = dict(V1, **{"loop-tmux": "1.1"})  # only loop-tmux was released
    d2 = drain(store, disp, events, versions=tmux_only, max_attempts=1)
    report = d2.run(until_idle=True)
    assert report.rearmed == 1
    assert len(disp.seen) == 2
    (rearmed,) = events.read("inbox.rearmed")
    assert rearmed["deliveryId"] == e.delivery_id
    assert json.loads(rearmed["detail"]["gave_up_versions"]) == V1
    entry = store.inbox.by_delivery(e.delivery_id)
    assert (entry.state, entry.rearm_count) == ("given_up", 1)
    assert entry.gave_up_versions == versions_key(tmux_only)
    for _ in range(3):
        assert d2.run(until_idle=True).rearmed == 0
    assert len(disp.seen) == 2


def test_ac11_rearmed_event_that_now_succeeds_is_delivered(store, events, make_event):
    e = make_event()
    store.inbox.accept("t", [e])
    disp = ScriptedDispatcher()
    disp.answers[e.delivery_id] = (OutcomeKind.FAILED, "spawn_failed")
    drain(store, disp, events, max_attempts=1).run(until_idle=True)
    disp.answers.pop(e.delivery_id)  # the upgrade fixed the bug
    report = drain(store, disp, events, versions=dict(V1, **{"loop-cli": "2.0"})).run(
        until_idle=True
    )
    assert (report.rearmed, report.processed) == (1, 1)
    assert store.inbox.by_delivery(e.delivery_id).state == "done"


def test_a_dispatcher_that_raises_costs_one_attempt_not_the_drain(store, events, make_event):
    bad, good = make_event("local:a#1"), make_event("local:b#1")
    store.inbox.accept("t", [bad, good])

    class Raising(ScriptedDispatcher):
        def dispatch(self, event):
            if event.delivery_id == bad.delivery_id:
                raise OSError("lock directory vanished")
            return super().dispatch(event)

    # A long backoff: the retried row is not due again before the run goes idle.
    report = drain(store, Raising(), events, backoff=30, max_backoff=30).run(until_idle=True)
    assert (report.retried, report.processed) == (1, 1)
    entry = store.inbox.by_delivery(bad.delivery_id)
    assert (entry.state, entry.attempts, entry.last_reason) == ("pending", 1, "dispatch_error")


def test_an_unreadable_stored_event_is_given_up_loudly(store, events, make_event):
    e = make_event()
    store.inbox.accept("t", [e])
    with store.transaction() as conn:
        conn.execute("UPDATE inbox SET event = '{broken' WHERE delivery_id = ?", (e.delivery_id,))
    report = drain(store, ScriptedDispatcher(), events).run(until_idle=True)
    assert report.gave_up == 1
    assert store.inbox.by_delivery(e.delivery_id).state == "given_up"
    assert events.read("inbox.gave_up")[0]["detail"]["reason"] == "unreadable_stored_event"


def test_operator_retry_and_drop(store, events, make_event) -> None:
    e, f = make_event("local:a#1"), make_event("local:b#1")
    store.inbox.accept("t", [e, f])
    disp = ScriptedDispatcher()
    disp.answers[e.delivery_id] = (OutcomeKind.FAILED, "spawn_failed")
    disp.answers[f.delivery_id] = (OutcomeKind.FAILED, "spawn_failed")
    drain(store, disp, events, max_attempts=1).run(until_idle=True)
    assert [r.delivery_id for r in store.inbox.retry(given_up=True)] == [
        e.delivery_id,
        f.delivery_id,
    ]
    assert store.inbox.by_delivery(e.delivery_id).attempts == 0
    dropped = store.inbox.drop(store.inbox.by_delivery(f.delivery_id).seq, "obsolete")
    assert dropped is not None
    row = store.inbox.by_delivery(f.delivery_id)
    assert (row.state, row.outcome, row.last_error) == ("done", "dropped", "obsolete")
    assert store.inbox.drop(row.seq, "again") is None


def test_1000_events_over_50_items_with_transient_faults_each_delivered_once_in_order(
    store, events, make_event
):
    """Concurrency across items, order within each, injected transient failures."""
    import random

    rng = random.Random(7)
    batch = [make_event(f"local:p{i % 50}#1", delivery_id=f"d{i}") for i in range(1000)]
    store.inbox.accept("t", batch)
    delivered: dict[str, list[int]] = {}
    lock = threading.Lock()

    class Flaky:
        def dispatch(self, event):
            if rng.random() < 0.2:
                return Outcome(OutcomeKind.FAILED, "tmux_unavailable")
            with lock:
                delivered.setdefault(str(event.work_item), []).append(int(event.delivery_id[1:]))
            return Outcome(OutcomeKind.PROCESSED, "delivered")

    d = Drain(
        store,
        Flaky(),
        events,
        versions=V1,
        policy=RetryPolicy(backoff=0.001, max_backoff=0.002),
        concurrency=8,
        idle=0.005,
    )
    deadline = time.monotonic() + 120
    while store.inbox.counts().get("pending") and time.monotonic() < deadline:
        d.run(until_idle=True)
        time.sleep(0.003)
    flat = [n for seq in delivered.values() for n in seq]
    assert sorted(flat) == list(range(1000))  # each once: none lost, none twice
    for ref, seq in delivered.items():
        assert seq == sorted(seq), ref  # arrival order kept per item
    assert store.inbox.counts() == {"done": 1000}


def test_stop_starts_no_new_attempt(store, events, make_event) -> None:
    batch = [make_event(f"local:p{i}#1") for i in range(10)]
    store.inbox.accept("t", batch)
    stop = threading.Event()
    started: list[str] = []

    class Slow:
        def dispatch(self, event):
            started.append(event.delivery_id)
            stop.set()
            time.sleep(0.2)
            return Outcome(OutcomeKind.PROCESSED, "delivered")

    Drain(store, Slow(), events, versions=V1, concurrency=1, idle=0.01).run(stop)
    assert len(started) == 1
    assert store.inbox.counts() == {"done": 1, "pending": 9}


def test_the_poll_ledger_migrates_into_the_inbox(tmp_path) -> None:
    """A v1 state file (the poll ledger) opens as v2: pending rows keep their events,
    give-ups keep their version (as a loop-cli-only set, so the upgrade re-arms them
    once), done and baseline rows still de-duplicate."""
    from loop_dispatch.store import CORE_MIGRATIONS, _run_script

    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    _run_script(conn, CORE_MIGRATIONS[0])
    conn.execute("PRAGMA user_version = 1")
    conn.execute("CREATE TABLE schema_versions (namespace TEXT PRIMARY KEY, version INTEGER)")
    conn.execute("INSERT INTO schema_versions VALUES ('loop_dispatch', 1)")
    now = datetime.now(timezone.utc).isoformat()

    def event(n: int) -> str:
        return json.dumps(
            {
                "deliveryId": f"comment:local:{n}",
                "workItem": "local:loop#1",
                "kind": "comment",
                "actor": "a",
                "body": "b",
                "url": "u",
                "createdAt": now,
                "commentId": str(n),
            }
        )

    rows = [
        ("comment:local:1", "done", None, None, 0),
        ("comment:local:2", "pending", event(2), None, 1),
        ("comment:local:3", "gave_up", event(3), "0.1.0", 3),
        ("comment:local:4", "baseline", None, None, 0),
    ]
    for delivery, state, ev, version, attempts in rows:
        conn.execute(
            "INSERT INTO ledger(delivery_id, source, work_item, state, attempts, event, "
            "last_outcome, gave_up_version, first_seen, last_seen) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (delivery, "local", "local:loop#1", state, attempts, ev, "failed", version, now, now),
        )
    conn.commit()
    conn.close()
    with Store.open(tmp_path) as store:
        assert store.schema_version() == len(CORE_MIGRATIONS)
        inbox = store.inbox
        states = {
            e.delivery_id: e.state
            for e in inbox.entries(("done", "pending", "given_up", "baseline"))
        }
        assert states == {
            "comment:local:1": "done",
            "comment:local:2": "pending",
            "comment:local:3": "given_up",
            "comment:local:4": "baseline",
        }
        assert inbox.by_delivery("comment:local:2").event is not None
        given_up = inbox.by_delivery("comment:local:3")
        assert json.loads(given_up.gave_up_versions) == {"loop-cli": "0.1.0"}
        assert [e.delivery_id for e in inbox.rearm(versions_key(V1))] == ["comment:local:3"]
        tables = {r[0] for r in store.query("SELECT name FROM sqlite_master WHERE type='table'")}
        assert "ledger" not in tables


def test_a_damaged_inbox_row_is_quarantined_and_never_stops_the_drain(
    store, events, make_event
) -> None:
    """Issue 10: a hand-edited row (a timestamp that does not read) is given up as
    unreadable; every other item's event is still delivered."""
    bad, good = make_event("local:a#1"), make_event("local:b#2")
    store.inbox.accept("test", [bad, good])
    with store.transaction() as conn:  # a text column takes any text on both backends
        conn.execute(
            "UPDATE inbox SET received_at = 'yesterday' WHERE delivery_id = ?",
            (bad.delivery_id,),
        )
    assert len(store.inbox.entries(("pending",))) == 2  # listing reads past it
    assert store.inbox.summary()["pending"] == 2  # and so does status
    disp = ScriptedDispatcher()
    drain(store, disp, events).run(until_idle=True)
    assert disp.seen == [good.delivery_id]
    damaged = store.inbox.by_delivery(bad.delivery_id)
    assert damaged.state == "given_up"
    assert damaged.last_reason == "unreadable_stored_event"


def test_configure_raises_concurrency_and_policy_of_a_running_drain(store, events, make_event):
    """A config reload (issue 27) reaches a drain that is running: a higher concurrency
    starts its extra workers at once, and the new policy decides the next failure."""
    release = threading.Event()
    running: set[str] = set()
    peak = 0
    lock = threading.Lock()

    class Held:
        def dispatch(self, event):
            nonlocal peak
            with lock:
                running.add(event.delivery_id)
                peak = max(peak, len(running))
            release.wait(30)
            with lock:
                running.discard(event.delivery_id)
            return Outcome(OutcomeKind.FAILED, "harness_rejected")

    store.inbox.accept("t", [make_event(f"local:p{i}#1") for i in range(3)])
    d = Drain(store, Held(), events, versions=V1, concurrency=1, idle=0.01)
    stop = threading.Event()
    thread = threading.Thread(target=d.run, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while len(running) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert peak == 1  # one worker: the other two wait
        d.configure(policy=RetryPolicy(max_attempts=1), concurrency=3, lease_seconds=60.0)
        deadline = time.monotonic() + 10
        while peak < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert peak == 3
        release.set()
        deadline = time.monotonic() + 10
        while store.inbox.counts().get("given_up", 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.inbox.counts() == {"given_up": 3}  # maxAttempts 1: the new policy
    finally:
        release.set()
        stop.set()
        thread.join(30)
