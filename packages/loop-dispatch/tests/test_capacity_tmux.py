"""host.maxLive and hibernation (issue 25) against a real tmux server (private socket)
running the fake harness, through the real Drain and Dispatcher.

What counts as delivered is the fake harness's own record (its prompt on start, every
paste), keyed by a marker in each comment: never the-loop's own account. Idleness is
read the way the adapters read it: structurally, from the harness's own conversation
file (its last record ends a turn), never from the-loop's bookkeeping.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from loop_dispatch.adapters import GenericAdapter
from loop_dispatch.drain import Drain, RetryPolicy
from loop_dispatch.hibernation import Hibernator
from loop_dispatch.launch import LaunchSpec
from loop_dispatch.memory import session_rss
from loop_dispatch.model import WorkItemRef
from loop_tmux.testing import finished_records

pytestmark = pytest.mark.tmux

V = {"loop-cli": "1", "loop-dispatch": "1", "loop-tmux": "1"}
MARK = re.compile(r"MK-\d+-\d+-KM")


class FileIdleAdapter(GenericAdapter):
    """The fake harness as Claude Code: idle when its conversation file's last record
    ends a turn, busy while a turn is open, unknown with no file (never idle then)."""

    def __init__(self, program: Path, convo: Path) -> None:
        super().__init__(
            [str(program), "--session-id", "{session_id}", "{prompt}"],
            [str(program), "--resume", "{session_id}", "{prompt}"],
            name="fake-claude",
        )
        self.convo = convo

    def activity(self, view, conversation_id=None) -> str:
        records = read_conversation(self.convo, conversation_id) if conversation_id else []
        if not records:
            return "unknown"
        return "idle" if records[-1]["event"] == "turn_done" else "busy"


def read_conversation(directory: Path, conversation_id: str) -> list[dict]:
    return finished_records(directory / f"{conversation_id}.jsonl")


class UnknownAdapter(FileIdleAdapter):
    def activity(self, view, conversation_id=None) -> str:
        return "unknown"


def _launcher(convo: Path, turn: float = 0.3):
    def launch(record, argv):
        return LaunchSpec(
            list(argv), {"FAKE_HARNESS_DIR": str(convo), "FAKE_HARNESS_TURN_SECONDS": str(turn)}
        )

    return launch


def _received(convo: Path) -> Counter[str]:
    """Each marker's arrivals in any harness: a start's prompt or a pasted message."""
    counts: Counter[str] = Counter()
    for path in convo.glob("*.jsonl"):
        for record in finished_records(path):
            text = record.get("prompt") if record["event"] == "start" else record.get("text")
            if record["event"] in ("start", "message") and text:
                counts.update(MARK.findall(text))
    return counts


def _live_loop_sessions(tmux) -> int:
    return len({p.session for p in tmux.panes() if p.session.startswith("loop-") and not p.dead})


def _open(store) -> int:
    rows = store.query("SELECT count(*) FROM inbox WHERE state IN ('pending', 'claimed')")
    return int(rows[0][0])


class Sampler(threading.Thread):
    """Peak live harnesses (tmux's own answer) and active records, every 20 ms."""

    def __init__(self, tmux, store) -> None:
        super().__init__(daemon=True)
        self.tmux, self.store = tmux, store
        self.peak_live = self.peak_active = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak_live = max(self.peak_live, _live_loop_sessions(self.tmux))
            active = self.store.query("SELECT count(*) FROM sessions WHERE status = 'active'")
            self.peak_active = max(self.peak_active, int(active[0][0]))
            self.stop.wait(0.02)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_max_live_two_drains_fair_never_over_committed_every_comment_once(
    real_tmux, fake_harness, make_dispatcher, store, events, make_event, wait_for
):
    """Five items, `maxLive: 2`, two drains dispatching concurrently (each with its own
    dispatcher, as two processes on one host), the poll daemon's sweep hibernating the
    oldest idle sessions when items wait. Never more than 2 harnesses live; the items
    get their slots in arrival order; each comment (openings, then one follow-up each
    that wakes a hibernated session) reaches a harness exactly once."""
    program, convo = fake_harness
    adapter = FileIdleAdapter(program, convo)
    dispatchers = [
        make_dispatcher(real_tmux, adapter, launcher=_launcher(convo), max_live=2) for _ in range(2)
    ]
    policy = RetryPolicy(backoff=0.05, max_backoff=0.2, capacity_backoff=0.1)
    drains = [
        Drain(store, d, events, versions=V, policy=policy, concurrency=3, idle=0.02, owner=f"d{n}")
        for n, d in enumerate(dispatchers)
    ]
    sweeper = Hibernator(dispatchers[0], after=None)
    refs = [WorkItemRef.parse(f"local:cap#{n}") for n in range(1, 6)]
    sent = []
    for n, ref in enumerate(refs, 1):  # one accept each: arrival order is item order
        sent.append(f"MK-{n}-1-KM")
        store.inbox.accept("test", [make_event(ref, body=f"open {sent[-1]}")])

    stop = threading.Event()
    sampler = Sampler(real_tmux, store)
    sampler.start()
    threads = [threading.Thread(target=d.run, args=(stop,), daemon=True) for d in drains]

    def sweep() -> None:
        while not stop.is_set():
            sweeper.sweep()
            stop.wait(0.2)

    threads.append(threading.Thread(target=sweep, daemon=True))
    for t in threads:
        t.start()
    try:
        wait_for(lambda: _open(store) == 0, timeout=90)
        asleep = {str(r.work_item) for r in store.registry.list() if r.hibernated}
        for n, ref in enumerate(refs, 1):  # a follow-up each: most meet a hibernated session
            sent.append(f"MK-{n}-2-KM")
            store.inbox.accept("test", [make_event(ref, body=f"again {sent[-1]}")])
        wait_for(lambda: _open(store) == 0, timeout=90)
        wait_for(lambda: set(_received(convo)) >= set(sent), timeout=20)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        sampler.stop.set()
        sampler.join(5)

    counts = _received(convo)
    tally = {
        "sent": len(sent),
        "once": sum(1 for m in sent if counts[m] == 1),
        "twice": sum(1 for m in sent if counts[m] > 1),
        "lost": sum(1 for m in sent if counts[m] == 0),
    }
    print(f"\ncapacity tally: {tally}, peak live {sampler.peak_live}")
    assert tally == {"sent": 10, "once": 10, "twice": 0, "lost": 0}
    assert sampler.peak_live <= 2
    assert sampler.peak_active <= 2
    # Fair: the items that waited got their slots in arrival order (each record is made,
    # its created_at stamped, under the slot lock); the first two attempts to take the
    # lock found free slots and waited for nothing.
    deferred = {
        e["workItem"]
        for e in events.read("session.deferred")
        if e["detail"]["path"] == "first_spawn"
    }
    assert len(deferred) >= 3
    waited = [r for r in refs if str(r) in deferred]
    assert sorted(waited, key=lambda r: store.registry.get(r).created_at) == waited
    assert len(events.read("session.spawned")) == 5
    assert all(e["detail"]["max_live"] == 2 for e in events.read("session.deferred"))
    hibernated = events.read("session.hibernated")
    assert hibernated
    assert all(e["detail"]["why"] == "capacity" for e in hibernated)
    # Every follow-up to a hibernated session woke its conversation: resumed, never fresh.
    assert len(asleep) >= 3  # five items, at most two live
    # (The sweep goes on while the follow-ups arrive: it may put more items to sleep
    # after `asleep` was read, so those are a floor, not the whole set.)
    respawned = events.read("session.respawned")
    assert all(e["detail"]["resumed"] for e in respawned), respawned
    woken = {e["workItem"] for e in respawned}
    assert asleep <= woken <= {e["workItem"] for e in hibernated}
    assert not events.read("session.resume_failed")
    assert not [e for e in events.read("inbox.gave_up")]


def test_an_idle_session_hibernates_keeps_its_scrollback_and_resumes_on_its_next_comment(
    real_tmux, fake_harness, make_dispatcher, store, events, make_event, wait_for
):
    """`sessions.hibernateAfterSeconds`: idle that long with nothing pending, the harness
    is ended (not mid-turn), the pane and its scrollback stay, the record is
    `hibernated`; the next comment resumes the same conversation with it as prompt."""
    program, convo = fake_harness
    adapter = FileIdleAdapter(program, convo)
    disp = make_dispatcher(real_tmux, adapter, launcher=_launcher(convo))
    ref = WorkItemRef.parse("local:nap#1")
    name = ref.tmux_name()
    assert disp.dispatch(make_event(ref, body="start MK-1-1-KM")).reason == "spawned"
    record = store.registry.get(ref)
    sweeper = Hibernator(disp, after=1.0)

    # A pending event keeps it awake, however long it idles.
    pending = make_event(ref, body="queued MK-1-2-KM")
    store.inbox.accept("test", [pending])
    wait_for(lambda: adapter.activity(None, record.conversation_id) == "idle", timeout=20)
    time.sleep(1.2)
    assert sweeper.sweep() == []
    assert sweeper.sweep() == []
    assert store.registry.get(ref).status == "active"
    Drain(store, disp, events, versions=V, idle=0.02).run(until_idle=True)
    # pasted: the harness records it a moment later (its own write, under load)
    wait_for(lambda: _received(convo)["MK-1-2-KM"] >= 1, timeout=20)
    assert _received(convo)["MK-1-2-KM"] == 1

    wait_for(lambda: adapter.activity(None, record.conversation_id) == "idle", timeout=20)
    assert sweeper.sweep() == []  # the first idle verdict starts the clock
    slept = wait_for(lambda: sweeper.sweep(), timeout=20)
    assert [h.why for h in slept] == ["idle"]
    assert store.registry.get(ref).status == "hibernated"
    assert real_tmux.probe(name).value == "dead"  # the pane stays (scrollback), as on close
    [exit_record] = [
        r for r in read_conversation(convo, record.conversation_id) if r["event"] == "exit"
    ]
    assert exit_record["signal"] == "SIGTERM"
    assert "mid_turn" not in exit_record
    [event] = events.read("session.hibernated")
    assert event["detail"]["conversation_id"] == record.conversation_id
    assert event["detail"]["rss_bytes"] > 1 << 20

    nudge = make_event(ref, body="wake up MK-1-3-KM")
    outcome = disp.dispatch(nudge)
    assert outcome.reason == "respawned"
    assert store.registry.get(ref).status == "active"
    assert store.registry.get(ref).conversation_id == record.conversation_id
    starts = wait_for(
        lambda: (
            [r for r in read_conversation(convo, record.conversation_id) if r["event"] == "start"][
                1:
            ]
            and [
                r for r in read_conversation(convo, record.conversation_id) if r["event"] == "start"
            ]
        )
    )
    assert [s["mode"] for s in starts] == ["fresh", "resume"]
    assert "MK-1-3-KM" in starts[-1]["prompt"]
    assert _received(convo) == Counter({"MK-1-1-KM": 1, "MK-1-2-KM": 1, "MK-1-3-KM": 1})


def test_unknown_activity_never_hibernates(
    real_tmux, fake_harness, make_dispatcher, store, events, make_event, wait_for
):
    """An adapter that cannot tell ("unknown") never has its harness ended, even with
    items waiting for a slot: the agent's work comes first."""
    program, convo = fake_harness
    disp = make_dispatcher(
        real_tmux, UnknownAdapter(program, convo), launcher=_launcher(convo), max_live=1
    )
    ref = WorkItemRef.parse("local:nap#2")
    assert disp.dispatch(make_event(ref)).reason == "spawned"
    waiting = make_event(WorkItemRef.parse("local:nap#3"))
    store.inbox.accept("test", [waiting])
    Drain(store, disp, events, versions=V, idle=0.02).run(until_idle=True)
    assert store.inbox.by_delivery(waiting.delivery_id).last_reason == "capacity_full"
    sweeper = Hibernator(disp, after=1.0)
    time.sleep(1.2)
    for _ in range(3):
        assert sweeper.sweep() == []
    assert store.registry.get(ref).status == "active"
    assert real_tmux.probe(ref.tmux_name()).value == "live"


def test_memory_is_the_rss_of_each_panes_process_tree(real_tmux, tmp_path):
    """One pass over the process table: a pane whose shell runs a child holding ~40 MB
    reports at least that much, the child included."""
    import sys

    hog = "import time; x = b'1' * (40 << 20); time.sleep(60)"
    argv = ["sh", "-c", f'{sys.executable} -c "{hog}"; sleep 60']
    assert real_tmux.spawn("loop-local_mem_1", argv, str(tmp_path)).ok
    assert real_tmux.spawn("loop-local_mem_2", ["sleep", "60"], str(tmp_path)).ok
    from loop_tmux.testing import wait_until

    rss = wait_until(
        lambda: (
            (r := session_rss(real_tmux, ["loop-local_mem_1", "loop-local_mem_2"]))
            and r.get("loop-local_mem_1", 0) > 40 << 20
            and r
        ),
        timeout=20,
    )
    assert 0 < rss["loop-local_mem_2"] < 20 << 20
    assert "bystander" not in rss


def test_a_session_whose_item_is_locked_is_never_ended(
    real_tmux, fake_harness, make_dispatcher, store, make_event, wait_for
):
    """The sweep takes the item's lock before its verdict and holds it to the end: while
    a delivery holds the item (here: the test holds its lock), nothing is ended."""
    from loop_dispatch.lock import item_lock

    program, convo = fake_harness
    adapter = FileIdleAdapter(program, convo)
    disp = make_dispatcher(real_tmux, adapter, launcher=_launcher(convo))
    ref = WorkItemRef.parse("local:nap#4")
    assert disp.dispatch(make_event(ref)).reason == "spawned"
    record = store.registry.get(ref)
    wait_for(lambda: adapter.activity(None, record.conversation_id) == "idle", timeout=20)
    sweeper = Hibernator(disp, after=0.0)
    with item_lock(disp.lock_dir, ref):
        assert sweeper.sweep() == []
        assert sweeper.sweep() == []
        assert real_tmux.probe(ref.tmux_name()).value == "live"
        assert store.registry.get(ref).status == "active"
    assert [h.work_item for h in sweeper.sweep()] == [str(ref)]


def test_a_slot_lock_held_past_the_timeout_is_a_wait_never_a_counted_failure(
    real_tmux, fake_harness, make_dispatcher, store, events, make_event
):
    """The capacity lock is held while a granted item makes its worktree (possibly
    longer than the lock timeout): an item asking meanwhile waits (`capacity_full`),
    it is not an `internal_error` counted against its attempts and given up."""
    from loop_dispatch.lock import file_lock

    program, convo = fake_harness
    disp = make_dispatcher(
        real_tmux,
        FileIdleAdapter(program, convo),
        launcher=_launcher(convo),
        max_live=2,
        lock_timeout=0.2,
    )
    ref = WorkItemRef.parse("local:slotlock#1")
    event = make_event(ref, body="MK-9-1-KM")
    store.inbox.accept("test", [event])
    with file_lock(disp.capacity.lock_path, "a granted item making its worktree"):
        Drain(store, disp, events, versions=V, idle=0.02).run(until_idle=True)
        entry = store.inbox.by_delivery(event.delivery_id)
        assert entry.state == "pending"
        assert (entry.last_reason, entry.attempts) == ("capacity_full", 0)
        assert not events.read("inbox.gave_up")
    assert store.registry.get(ref) is None
    assert disp.dispatch(event).reason == "spawned"  # the lock free: it takes its slot


def test_a_dead_harness_gives_its_slot_to_a_waiting_item(
    real_tmux, fake_harness, make_dispatcher, store, events, make_event, wait_for
):
    """A harness that died (crash, kill) leaves an `active` record: with items waiting
    and no slot free, the sweep frees that slot first (the record hibernates, nothing to
    end), so the waiting item is not starved forever; the dead one resumes on its next
    event."""
    program, convo = fake_harness
    disp = make_dispatcher(
        real_tmux, FileIdleAdapter(program, convo), launcher=_launcher(convo), max_live=1
    )
    crashed, waiter = WorkItemRef.parse("local:crash#1"), WorkItemRef.parse("local:crash#2")
    assert disp.dispatch(make_event(crashed, body="MK-8-1-KM")).reason == "spawned"
    assert real_tmux.terminate(crashed.tmux_name(), 0.5)  # the harness dies on its own
    wait_for(lambda: real_tmux.probe(crashed.tmux_name()).value == "dead", timeout=20)
    event = make_event(waiter, body="MK-8-2-KM")
    store.inbox.accept("test", [event])
    drain = Drain(store, disp, events, versions=V, idle=0.02)
    drain.run(until_idle=True)
    assert store.inbox.by_delivery(event.delivery_id).last_reason == "capacity_full"
    sweeper = Hibernator(disp, after=None)
    assert [h.work_item for h in sweeper.sweep()] == [str(crashed)]
    assert store.registry.get(crashed).status == "hibernated"
    wait_for(lambda: disp.dispatch(event).reason == "spawned", timeout=20)
    assert store.registry.get(waiter).status == "active"
    assert wait_for(lambda: _received(convo)["MK-8-2-KM"] == 1, timeout=20)


def _place(store, ref: WorkItemRef, host: str) -> None:
    from loop_dispatch.hosts import Hosts

    Hosts(store)  # the placements table
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO placements (work_item, host, placed_at) VALUES (?, ?, ?)",
            (str(ref), host, "2026-01-01T00:00:00Z"),
        )


def _wait_for_slot(store, event) -> None:
    store.inbox.accept("test", [event])
    [entry] = [e for e in store.inbox.claim("me", limit=5, lease_seconds=60)]
    store.inbox.fail(
        entry.seq,
        "me",
        reason="capacity_full",
        error="",
        definite=False,
        max_attempts=3,
        give_up_after=float("inf"),
        delay=lambda t, a: 0.0,
        versions="{}",
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_on_a_fleet_the_sweep_counts_and_ends_only_this_hosts_sessions(
    real_tmux, fake_harness, make_dispatcher, store, make_event, wait_for
):
    """On a fleet the registry holds every host's sessions. This host's sweep frees
    slots by its own live count (other hosts' sessions do not make it end an idle
    harness while it has a slot free) and never takes another host's session, absent
    from this host's tmux, for a dead one."""
    program, convo = fake_harness
    adapter = FileIdleAdapter(program, convo)
    mine, waiter = WorkItemRef.parse("local:fleet#1"), WorkItemRef.parse("local:fleet#2")
    theirs = [WorkItemRef.parse(f"local:fleet#{n}") for n in (11, 12, 13)]
    for ref in (mine, waiter):
        _place(store, ref, "host-a")
    for ref in theirs:
        _place(store, ref, "host-b")
        store.registry.register(ref, harness="x", conversation_id=None, cwd="/")
    roomy = make_dispatcher(
        real_tmux, adapter, launcher=_launcher(convo), max_live=2, host="host-a"
    )
    assert roomy.dispatch(make_event(mine, body="MK-7-1-KM")).reason == "spawned"
    conversation = store.registry.get(mine).conversation_id
    wait_for(lambda: adapter.activity(None, conversation) == "idle", timeout=20)
    _wait_for_slot(store, make_event(waiter, body="MK-7-2-KM"))
    assert Hibernator(roomy, after=None).sweep() == []  # 1/2 live here: a slot is free
    assert store.registry.get(mine).status == "active"

    full = make_dispatcher(real_tmux, adapter, launcher=_launcher(convo), max_live=1, host="host-a")
    assert [h.work_item for h in Hibernator(full, after=None).sweep()] == [str(mine)]
    assert all(store.registry.get(ref).status == "active" for ref in theirs)


def test_a_hibernated_record_found_live_is_active_again_and_holds_its_slot(
    real_tmux, fake_harness, make_dispatcher, store, make_event, wait_for
):
    """A hibernated record whose harness is running after all (a wake whose spawn tmux
    did not answer is set back to hibernated; the harness may still have started): the
    next event delivers into it, and the record is `active` again, so the harness is
    counted against `maxLive` and swept like any other, never running uncounted."""
    from loop_dispatch.capacity import live_count

    program, convo = fake_harness
    adapter = FileIdleAdapter(program, convo)
    disp = make_dispatcher(real_tmux, adapter, launcher=_launcher(convo), max_live=2)
    ref = WorkItemRef.parse("local:awake#1")
    assert disp.dispatch(make_event(ref, body="MK-6-1-KM")).reason == "spawned"
    conversation = store.registry.get(ref).conversation_id
    wait_for(lambda: adapter.activity(None, conversation) == "idle", timeout=20)
    assert store.registry.hibernate(ref)  # the undone wake; the harness runs on
    # found live on the wake's look: pasted into it (AC6's respawn_averted), not respawned
    assert disp.dispatch(make_event(ref, body="MK-6-2-KM")).reason == "respawn_averted"
    assert wait_for(lambda: _received(convo)["MK-6-2-KM"] == 1, timeout=20)
    assert store.registry.get(ref).status == "active"
    assert live_count(store) == 1


def test_a_session_that_just_answered_a_comment_is_not_idle_since_before_it(
    real_tmux, fake_harness, make_dispatcher, store, events, make_event, wait_for
):
    """Idle time counts from the item's last delivery too: a comment delivered and
    answered between two sweeps (neither saw the turn) does not leave the clock running
    from before it, so the harness that just took a comment is not ended at once (with
    an adapter whose screen lags a paste, mid-turn)."""
    program, convo = fake_harness
    adapter = FileIdleAdapter(program, convo)
    disp = make_dispatcher(real_tmux, adapter, launcher=_launcher(convo, turn=0.1))
    ref = WorkItemRef.parse("local:nap#5")
    assert disp.dispatch(make_event(ref, body="MK-5-1-KM")).reason == "spawned"
    conversation = store.registry.get(ref).conversation_id
    wait_for(lambda: adapter.activity(None, conversation) == "idle", timeout=20)
    sweeper = Hibernator(disp, after=2.0)
    assert sweeper.sweep() == []  # the first idle verdict starts the clock
    time.sleep(2.2)
    store.inbox.accept("test", [make_event(ref, body="MK-5-2-KM")])
    Drain(store, disp, events, versions=V, idle=0.02).run(until_idle=True)
    wait_for(lambda: _received(convo)["MK-5-2-KM"] == 1, timeout=20)
    wait_for(lambda: adapter.activity(None, conversation) == "idle", timeout=20)
    assert sweeper.sweep() == []
    assert store.registry.get(ref).status == "active"
    assert wait_for(lambda: sweeper.sweep(), timeout=20)  # idle 2 s after it: ended
    assert store.registry.get(ref).status == "hibernated"
