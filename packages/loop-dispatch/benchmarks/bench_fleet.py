"""Benchmark: a fleet on a shared PostgreSQL store, 1, 2 and 3 hosts, against SQLite.

Each "host" is a drain with its own host name, its own database connection and its
own tmux server on a private socket; its dispatcher pastes each event into the item's
live session (a minimal harness that swallows input), so what is timed runs from the
inbox commit to the paste tmux confirmed. Two receivers (their own connections)
accept the events.

1. Throughput: 600 events over 60 items accepted in small batches as fast as the
   receivers can, drained to the end: events per second.
2. Latency: 120 events accepted one at a time at 20 per second: median and p95 of
   accept-to-paste.

PostgreSQL runs as a private cluster with its durable defaults (fsync on); SQLite in
WAL with synchronous=NORMAL (the-loop's setting). Prints one line per configuration
and the growth from 1 to 3 hosts.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from loop_dispatch.dispatcher import Outcome, OutcomeKind
from loop_dispatch.drain import Drain, RetryPolicy
from loop_dispatch.eventlog import EventLog
from loop_dispatch.hosts import HostLease
from loop_dispatch.model import Event, EventKind, WorkItemRef
from loop_dispatch.pgcluster import ClusterUnavailable, start_cluster
from loop_dispatch.store import Store
from loop_tmux import Tmux

SWALLOW = ["sh", "-c", "exec cat >/dev/null"]
V = {"loop-cli": "b", "loop-dispatch": "b", "loop-tmux": "b"}
ITEMS = 60


class Paster:
    """One host's dispatcher: spawn the item's session once, then paste each event."""

    def __init__(self, tmux: Tmux, accepted: dict[str, float], pasted: dict[str, float]):
        self.tmux = tmux
        self.accepted = accepted
        self.pasted = pasted
        self.spawned: set[str] = set()
        self.lock = threading.Lock()

    def dispatch(self, event: Event) -> Outcome:
        name = event.work_item.tmux_name()
        if name not in self.spawned:
            self.tmux.spawn(name, SWALLOW, "/")
            self.spawned.add(name)
        result = self.tmux.deliver(name, event.body)
        with self.lock:
            self.pasted[event.delivery_id] = time.monotonic()
        if not getattr(result, "ok", True):
            return Outcome(OutcomeKind.FAILED, "paste_failed", "")
        return Outcome(OutcomeKind.PROCESSED, "pasted")


def _event(tag: str, item: int, n: int) -> Event:
    return Event(
        delivery_id=f"bench:{tag}:{item}:{n}",
        work_item=WorkItemRef("local", "bench", item + 1),
        kind=EventKind.COMMENT,
        actor="bench",
        body=f"event {n} for item {item}",
        url="",
        created_at=datetime.now(timezone.utc),
    )


def run(opener, hosts: int, fleet: bool, workdir: Path) -> dict[str, float]:
    """One configuration: returns events/s and latency figures."""
    accepted: dict[str, float] = {}
    pasted: dict[str, float] = {}
    stores = [opener() for _ in range(hosts + 2)]
    tmuxes = []
    drains = []
    for h in range(hosts):
        tmux = Tmux(socket_name=f"loop-bench-{uuid.uuid4().hex[:8]}", config_file="/dev/null")
        tmux.spawn("bystander", ["sleep", "3600"], "/")
        tmuxes.append(tmux)
        lease = None
        if fleet:
            lease = HostLease(stores[h], f"host-{h}", max_sessions=ITEMS, lease_seconds=30)
            lease.beat(force=True)
        drains.append(
            Drain(
                stores[h],
                Paster(tmux, accepted, pasted),
                EventLog(workdir / f"events-{h}.jsonl"),
                versions=V,
                policy=RetryPolicy(backoff=0.05, max_backoff=0.05),
                host=lease,
                concurrency=4,
                idle=0.01,
            )
        )
    stop = threading.Event()
    threads = [threading.Thread(target=d.run, args=(stop,), daemon=True) for d in drains]
    for t in threads:
        t.start()
    receivers = stores[hosts:]

    def accept(store: Store, events: list[Event]) -> None:
        for start in range(0, len(events), 5):
            batch = events[start : start + 5]
            store.inbox.accept("bench", batch)
            now = time.monotonic()
            for e in batch:
                accepted[e.delivery_id] = now
            for d in drains:
                d.wake()

    def wait_all(ids: list[str], limit: float = 600) -> None:
        deadline = time.monotonic() + limit
        while any(i not in pasted for i in ids):
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out: {sum(i in pasted for i in ids)}/{len(ids)} pasted")
            time.sleep(0.01)

    try:
        # Warm-up: every item's session spawned (not timed).
        warm = [_event("warm", i, 0) for i in range(ITEMS)]
        accept(receivers[0], warm)
        wait_all([e.delivery_id for e in warm])
        # 1. throughput
        events = [_event("tp", i % ITEMS, i // ITEMS) for i in range(600)]
        halves = [events[0::2], events[1::2]]
        started = time.monotonic()
        rs = [threading.Thread(target=accept, args=(receivers[k], halves[k])) for k in range(2)]
        for r in rs:
            r.start()
        for r in rs:
            r.join()
        wait_all([e.delivery_id for e in events])
        rate = len(events) / (time.monotonic() - started)
        # 2. latency at a steady 20 events/s
        paced = [_event("lat", i % ITEMS, i // ITEMS) for i in range(120)]
        for e in paced:
            accept(receivers[0], [e])
            time.sleep(0.05)
        wait_all([e.delivery_id for e in paced])
        lat = sorted((pasted[e.delivery_id] - accepted[e.delivery_id]) * 1000 for e in paced)
        return {
            "rate": rate,
            "median_ms": statistics.median(lat),
            "p95_ms": lat[int(len(lat) * 0.95) - 1],
        }
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        for tmux in tmuxes:
            tmux.kill_server(timeout=10)  # only our private servers
        for s in stores:
            s.close()


def main() -> int:
    results = {}
    with tempfile.TemporaryDirectory(prefix="loop-bench-fleet-") as tmp:
        base = Path(tmp)
        sqlite_dir = base / "sqlite"
        results["sqlite, 1 host"] = run(lambda: Store.open(sqlite_dir), 1, False, base)
        try:
            cluster = start_cluster(durable=True)
        except ClusterUnavailable as exc:
            print(f"PostgreSQL part skipped: {exc}")
            cluster = None
        if cluster is not None:
            try:
                for hosts in (1, 2, 3):
                    url = cluster.create_database()
                    results[f"postgresql, {hosts} host{'s' if hosts > 1 else ''}"] = run(
                        lambda url=url: Store.open(url=url, password=cluster.password),
                        hosts,
                        True,
                        base,
                    )
            finally:
                cluster.stop()
    print(f"fleet: {ITEMS} items, 600 events (throughput), 120 at 20/s (latency)")
    for name, r in results.items():
        print(
            f"  {name:<22} {r['rate']:7.1f} events/s   accept-to-paste median "
            f"{r['median_ms']:6.1f} ms, p95 {r['p95_ms']:6.1f} ms"
        )
    one, three = results.get("postgresql, 1 host"), results.get("postgresql, 3 hosts")
    if one and three:
        print(
            f"  growth 1 -> 3 hosts: throughput x{three['rate'] / one['rate']:.2f}, "
            f"median latency x{three['median_ms'] / one['median_ms']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
