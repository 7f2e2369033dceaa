"""A fleet over several hosts on one PostgreSQL store: placement by free capacity,
per-host claims (per-item order kept), lease expiry moving items, a revived host.

Hosts are simulated on one machine: drains with distinct host names, each with its own
database connection, as separate workers would have."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from datetime import datetime, timezone

import pytest

from loop_dispatch.dispatcher import Outcome, OutcomeKind
from loop_dispatch.drain import Drain, RetryPolicy
from loop_dispatch.errors import DispatchError
from loop_dispatch.eventlog import EventLog
from loop_dispatch.hosts import HostConflict, HostLease, Hosts, host_owner
from loop_dispatch.model import Event, EventKind, WorkItemRef
from loop_dispatch.pgcluster import Cluster
from loop_dispatch.store import Store

V = {"loop-cli": "1", "loop-dispatch": "1", "loop-tmux": "1"}


class Recorder:
    """A dispatcher standing in for one host's: records what it delivered, and when."""

    def __init__(self, host: str, log: list[tuple[str, str, str, float]]) -> None:
        self.host = host
        self.log = log
        self.lock = threading.Lock()

    def dispatch(self, event: Event) -> Outcome:
        with self.lock:
            self.log.append((self.host, str(event.work_item), event.delivery_id, time.monotonic()))
        return Outcome(OutcomeKind.PROCESSED, "recorded")


def _event(item: int, n: int) -> Event:
    return Event(
        delivery_id=f"comment:fleet:{item}:{n}",
        work_item=WorkItemRef("local", "fleet", item + 1),
        kind=EventKind.COMMENT,
        actor="alice",
        body=f"event {n}",
        url="",
        created_at=datetime.now(timezone.utc),
    )


@pytest.fixture
def db(pg_cluster: Cluster) -> dict[str, str]:
    return {"url": pg_cluster.create_database(), "password": pg_cluster.password}


def _open(db: dict[str, str]) -> Store:
    return Store.open(url=db["url"], password=db["password"])


def test_1000_events_over_60_items_through_two_receivers_on_three_hosts(db, tmp_path) -> None:
    capacity = {"host-a": 30, "host-b": 20, "host-c": 10}
    log: list[tuple[str, str, str, float]] = []
    stores = [_open(db) for _ in range(5)]
    drains = []
    for store, (name, cap) in zip(stores, capacity.items(), strict=False):
        lease = HostLease(store, name, max_sessions=cap, lease_seconds=30)
        lease.beat(force=True)
        drains.append(
            Drain(
                store,
                Recorder(name, log),
                EventLog(tmp_path / f"{name}.jsonl"),
                versions=V,
                policy=RetryPolicy(backoff=0.05, max_backoff=0.05),
                host=lease,
                idle=0.02,
            )
        )
    # Two receivers, each owning 30 items and accepting their events in order, in
    # small interleaved batches, while the hosts drain.
    per_item: dict[int, int] = {i: 0 for i in range(60)}
    plan: list[tuple[int, int]] = []
    n = 0
    while n < 1000:
        for item in range(60):
            if n < 1000:
                plan.append((item, per_item[item]))
                per_item[item] += 1
                n += 1

    def receive(store: Store, mine: range) -> None:
        batch = [_event(i, k) for i, k in plan if i in mine]
        for start in range(0, len(batch), 7):
            store.inbox.accept("webhook", batch[start : start + 7])

    stop = threading.Event()
    workers = [threading.Thread(target=d.run, args=(stop,), daemon=True) for d in drains]
    for w in workers:
        w.start()
    receivers = [
        threading.Thread(target=receive, args=(stores[3], range(0, 30))),
        threading.Thread(target=receive, args=(stores[4], range(30, 60))),
    ]
    for r in receivers:
        r.start()
    for r in receivers:
        r.join(timeout=120)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if stores[0].inbox.counts().get("done", 0) == 1000:
            break
        time.sleep(0.2)
    stop.set()
    for w in workers:
        w.join(timeout=30)
    try:
        assert stores[0].inbox.counts() == {"done": 1000}
        delivered = [d for _, _, d, _ in log]
        assert len(delivered) == 1000
        assert len(set(delivered)) == 1000  # each once
        by_item: dict[str, list[int]] = defaultdict(list)
        hosts_of: dict[str, set[str]] = defaultdict(set)
        for host, item, delivery, _ in log:
            by_item[item].append(int(delivery.rsplit(":", 1)[1]))
            hosts_of[item].add(host)
        for item, order in by_item.items():
            assert order == sorted(order), item  # arrival order kept per item
        assert all(len(h) == 1 for h in hosts_of.values())  # an item stays on its host
        placed = defaultdict(int)
        for h in hosts_of.values():
            placed[next(iter(h))] += 1
        for name, cap in capacity.items():
            assert 0 < placed[name] <= cap, (name, dict(placed))
        info = {h.name: h for h in Hosts(stores[0]).list()}
        assert {n: info[n].placed for n in capacity} == dict(placed)
    finally:
        for s in stores:
            s.close()


def test_a_second_worker_with_a_live_host_name_is_refused(db) -> None:
    with _open(db) as one, _open(db) as two:
        live = host_owner("h")  # this very process: alive
        HostLease(one, "h", max_sessions=5, lease_seconds=30, owner=live).beat(force=True)
        with pytest.raises(HostConflict, match=r"host\.name") as refused:
            HostLease(two, "h", max_sessions=5, lease_seconds=30, owner="h/2/2").beat(force=True)
        assert isinstance(refused.value, DispatchError)  # the CLI's one-line refusal
        assert "\n" not in str(refused.value)


def test_a_dead_workers_lease_on_this_machine_is_taken_over_at_once(db) -> None:
    """kill -9, then the restart: the lease's holder was a process of this machine that
    is gone, so its 30 s lease does not keep the host down. A holder recorded on
    another machine is judged by its lease alone (and the margin after it)."""
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)
    gone = host_owner("h", dead.pid)
    with _open(db) as one, _open(db) as two:
        first = HostLease(one, "h", max_sessions=5, lease_seconds=30, owner=gone)
        first.beat(force=True)
        # (pid reused since? then its start time differs: still told apart)
        second = HostLease(two, "h", max_sessions=5, lease_seconds=30)
        assert second.beat(force=True) is True  # taken over: its agents are its own now
        assert [h.owner for h in Hosts(two).list()] == [second.owner]
        # The same dead holder, but recorded on another machine: refused.
        with one.transaction() as conn:
            conn.execute("UPDATE hosts SET owner = ?, machine = ?", (gone, "elsewhere/boot"))
        with pytest.raises(HostConflict):
            HostLease(two, "h", max_sessions=5, lease_seconds=30).beat(force=True)


def test_leases_are_compared_on_the_databases_clock_not_the_hosts(db) -> None:
    """A host whose clock runs 30 s ahead (or behind) neither sees a live host as
    expired nor makes its own lease look longer."""
    from datetime import timedelta

    def ahead() -> datetime:
        return datetime.now(timezone.utc) + timedelta(seconds=30)

    def behind() -> datetime:
        return datetime.now(timezone.utc) - timedelta(seconds=30)

    with _open(db) as sa, _open(db) as sb:
        a = HostLease(sa, "host-a", max_sessions=5, lease_seconds=3, owner=host_owner("host-a"))
        b = HostLease(
            sb, "host-b", max_sessions=5, lease_seconds=3, owner="host-b/2/2", clock=ahead
        )
        a.beat(force=True)
        b.beat(force=True)
        sa.inbox.accept("webhook", [_event(7, 0)])
        held = a.hosts.claim("host-a", a.owner, limit=5, lease_seconds=60, alive=lambda o: True)
        assert len(held) == 1
        sa.inbox.accept("webhook", [_event(7, 1)])
        sa.inbox.done(held[0].seq, a.owner, "processed", "ok")
        # B, 30 s ahead, sees A live: it takes nothing of A's.
        assert (
            b.hosts.claim("host-b", b.owner, limit=5, lease_seconds=60, alive=lambda o: True) == []
        )
        assert {h.name: h.live for h in b.hosts.list()} == {"host-a": True, "host-b": True}
        # A's claims, renewed by a drain whose clock runs 2 minutes behind, stay held
        # (renewed on the database's clock): nobody claims the item's head again.
        held = a.hosts.claim("host-a", a.owner, limit=5, lease_seconds=60, alive=lambda o: True)
        assert [e.delivery_id for e in held] == ["comment:fleet:7:1"]
        late = Hosts(sa, clock=lambda: datetime.now(timezone.utc) - timedelta(seconds=120))
        assert late.renew(a.owner, [held[0].seq], 60) == 1
        assert (
            a.hosts.claim("host-a", a.owner, limit=5, lease_seconds=60, alive=lambda o: True) == []
        )
        # A host 30 s behind does not hold its lease 30 s longer than it beat for.
        c = HostLease(
            sb, "host-c", max_sessions=5, lease_seconds=2, owner="host-c/3/3", clock=behind
        )
        c.beat(force=True)
        time.sleep(2.5)
        assert {h.name: h.live for h in a.hosts.list()}["host-c"] is False


def test_a_host_whose_lease_ran_out_keeps_its_items_for_the_margin(db) -> None:
    """Another host takes the items only once the lease ran out more than the takeover
    margin ago (the holder's fence stops it within the margin)."""
    with _open(db) as sa, _open(db) as sb:
        a = HostLease(
            sa, "host-a", max_sessions=5, lease_seconds=1.0, owner="host-a/1/1", margin=2.0
        )
        b = HostLease(
            sb, "host-b", max_sessions=5, lease_seconds=30, owner="host-b/2/2", margin=2.0
        )
        a.beat(force=True)
        b.beat(force=True)
        sa.inbox.accept("webhook", [_event(8, 0)])
        assert a.hosts.claim("host-a", a.owner, limit=5, lease_seconds=60, alive=lambda o: True)
        sa.inbox.accept("webhook", [_event(8, 1)])
        time.sleep(1.5)  # A's lease ran out 0.5 s ago: inside the margin
        assert (
            b.hosts.claim("host-b", b.owner, limit=5, lease_seconds=60, alive=lambda o: True) == []
        )
        assert a.fence.refusal() is not None  # and A itself no longer pastes
        time.sleep(2.0)  # past lease + margin
        took = b.hosts.claim("host-b", b.owner, limit=5, lease_seconds=60, alive=lambda o: True)
        assert [e.delivery_id for e in took] == ["comment:fleet:8:0"]


def test_a_dead_hosts_items_move_with_their_events_and_the_revived_host_gets_nothing(db):
    """Host A claims and dies (no beat, no settle). After its lease, host B takes A's
    items: placement moved (old host and reason, taken once), the claimed event
    delivered by B. A, revived, learns its lease lapsed and claims nothing of them."""
    with _open(db) as sa, _open(db) as sb:
        a = HostLease(
            sa, "host-a", max_sessions=10, lease_seconds=1.5, owner="host-a/1/1", margin=0.5
        )
        b = HostLease(
            sb, "host-b", max_sessions=2, lease_seconds=30, owner="host-b/2/2", margin=0.5
        )
        assert a.beat(force=True) is True  # first beat: nothing held before
        b.beat(force=True)
        sa.inbox.accept("webhook", [_event(1, 0), _event(1, 1), _event(2, 0)])
        held = a.hosts.claim("host-a", a.owner, limit=10, lease_seconds=60, alive=lambda o: True)
        assert sorted(e.delivery_id for e in held) == ["comment:fleet:1:0", "comment:fleet:2:0"]
        # B may not take them while A's lease holds.
        assert (
            b.hosts.claim("host-b", b.owner, limit=10, lease_seconds=60, alive=lambda o: True) == []
        )
        time.sleep(2.5)  # A's host lease runs out, and the margin (its rows still say 60 s)
        b.beat(force=True)
        took = b.hosts.claim("host-b", b.owner, limit=10, lease_seconds=60, alive=lambda o: True)
        assert sorted(e.delivery_id for e in took) == ["comment:fleet:1:0", "comment:fleet:2:0"]
        move = b.hosts.take_move("local:fleet#2", "host-b")
        assert (move.from_host, move.reason) == ("host-a", "host_lease_expired")
        assert b.hosts.take_move("local:fleet#2", "host-b") is None  # once
        assert b.hosts.placed_on("host-a") == []
        for e in took:
            assert sb.inbox.done(e.seq, b.owner, "processed", "ok")
        # A comes back: its lease had lapsed; its old claims are gone; it gets nothing.
        assert a.beat(force=True) is True
        assert not sa.inbox.done(held[0].seq, a.owner, "processed", "stale")
        assert (
            a.hosts.claim("host-a", a.owner, limit=10, lease_seconds=60, alive=lambda o: True) == []
        )
        nxt = b.hosts.claim("host-b", b.owner, limit=10, lease_seconds=60, alive=lambda o: True)
        assert [e.delivery_id for e in nxt] == ["comment:fleet:1:1"]


HOLDER = """
import os, sys, time
from loop_dispatch.store import Store
store = Store.open(url=os.environ["T_URL"], password=os.environ["T_PASSWORD"])
role = store.role_lock("poller")
print("held" if role.try_hold() else "refused", flush=True)
time.sleep(600)
"""


def test_the_poller_role_passes_to_another_host_within_one_lease_when_its_host_dies(db):
    import os
    import signal
    import subprocess
    import sys

    env = dict(os.environ, T_URL=db["url"], T_PASSWORD=db["password"])
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        with _open(db) as other:
            role = other.role_lock("poller")
            assert role.try_hold() is False  # one poller for the cluster
            assert role.try_hold() is False
            lease = 5.0
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait(timeout=10)
            killed = time.monotonic()
            while not role.try_hold():
                assert time.monotonic() - killed < lease, "the role did not pass in one lease"
                time.sleep(0.1)
            assert role.try_hold() is True  # and it stays held
            role.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=10)
        if holder.stdout is not None:
            holder.stdout.close()


def test_a_moved_item_gets_a_fresh_conversation_noted_as_session_moved(db, tmp_path) -> None:
    """Through the drain: the new host closes the old record (its conversation lived on
    the dead host) before dispatching, and `session.moved` names both hosts."""
    from loop_dispatch.model import WorkItemRef as Ref

    with _open(db) as sa, _open(db) as sb:
        a = HostLease(
            sa, "host-a", max_sessions=5, lease_seconds=1.0, owner="host-a/1/1", margin=0.3
        )
        b = HostLease(
            sb, "host-b", max_sessions=5, lease_seconds=30, owner="host-b/2/2", margin=0.3
        )
        a.beat(force=True)
        sa.inbox.accept("webhook", [_event(4, 0)])
        held = a.hosts.claim("host-a", a.owner, limit=5, lease_seconds=60, alive=lambda o: True)
        assert len(held) == 1
        sa.registry.register(Ref("local", "fleet", 5), harness="h", conversation_id="old", cwd="/")
        time.sleep(1.5)
        log: list[tuple[str, str, str, float]] = []
        seen_active: list[bool] = []

        class Checking(Recorder):
            def dispatch(self, event: Event) -> Outcome:
                record = sb.registry.get(event.work_item)
                seen_active.append(record is not None and record.active)
                return super().dispatch(event)

        events = EventLog(tmp_path / "b.jsonl")
        drain = Drain(sb, Checking("host-b", log), events, versions=V, host=b, idle=0.02)
        report = drain.run(until_idle=True)
        assert report.processed == 1
        assert [d for _, _, d, _ in log] == ["comment:fleet:4:0"]
        assert seen_active == [False]  # the dispatcher starts fresh, never resumes "old"
        moved = events.read("session.moved")
        assert len(moved) == 1
        assert moved[0]["detail"]["from_host"] == "host-a"
        assert moved[0]["detail"]["to_host"] == "host-b"
        assert moved[0]["detail"]["previous_conversation_id"] == "old"


def test_placement_never_puts_an_item_on_a_host_at_its_max_live(db) -> None:
    """Issue 25: host A (maxLive 1) holds a live session; host B (maxLive 2) has room
    for two. New items go to B only, however much placement weight (maxSessions) A
    has; with both full, a new item waits unplaced in the inbox, never lost."""
    with _open(db) as sa, _open(db) as sb:
        a = HostLease(sa, "host-a", max_sessions=50, lease_seconds=30, owner="a/1/1", max_live=1)
        b = HostLease(sb, "host-b", max_sessions=5, lease_seconds=30, owner="b/2/2", max_live=2)
        a.beat(force=True)
        b.beat(force=True)
        sa.inbox.accept("webhook", [_event(0, 0)])
        [first] = a.hosts.claim("host-a", a.owner, limit=5, lease_seconds=60, alive=lambda o: True)
        sa.registry.register(
            WorkItemRef.parse(first.work_item), harness="x", conversation_id=None, cwd="/"
        )
        sa.inbox.done(first.seq, a.owner, "processed", "spawned")
        sa.inbox.accept("webhook", [_event(n, 0) for n in (1, 2, 3)])

        def claim(lease: HostLease) -> list[str]:
            got = lease.hosts.claim(
                lease.name, lease.owner, limit=5, lease_seconds=60, alive=lambda o: True
            )
            return [e.work_item for e in got]

        assert claim(a) == []  # A is full: nothing new for it
        assert claim(b) == ["local:fleet#2", "local:fleet#3"]  # B's two slots
        assert claim(a) == []
        assert claim(b) == []  # its two placed items hold both of its slots
        hosts = Hosts(sa)
        assert hosts.placement("local:fleet#4") is None  # waiting, unplaced
        waiting = sa.query("SELECT state FROM inbox WHERE work_item = 'local:fleet#4'")
        assert [r[0] for r in waiting] == ["pending"]
