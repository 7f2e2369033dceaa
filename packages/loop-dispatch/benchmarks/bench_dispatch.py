"""Benchmarks for loop-dispatch (a plain script, run by `nox -s bench`).

1. Dispatch into live sessions: events spread over N items whose sessions already run
   (a real tmux server on a private socket, a minimal harness that swallows input).
   Prints events/s, median and p95 latency, tmux processes per event, and how the
   median grows from 10 to 50 items.
2. Inbox bookkeeping: a poll cycle committing M new comments (one transaction with the
   cursor), then the drain settling them with a dispatcher that answers at once, so
   what is timed is the inbox itself (claim, lease, settle). M = 1,000 and 10,000.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import loop_tmux.runner as tmux_runner
from loop_dispatch import (
    Dispatcher,
    Event,
    EventKind,
    EventLog,
    GenericAdapter,
    PollBatch,
    Store,
    WorkItemRef,
    run_poll_cycle,
)
from loop_dispatch.dispatcher import Outcome, OutcomeKind
from loop_tmux import Tmux

# A harness that keeps its pane alive and swallows pasted text, costing no CPU.
SWALLOW = ["sh", "-c", "exec cat >/dev/null", "harness", "{prompt}"]


class CountingRunner:
    """Counts tmux processes started by loop_tmux (wraps its one runner function)."""

    def __init__(self) -> None:
        self.calls = 0
        self._real = tmux_runner.run

    def __enter__(self) -> CountingRunner:
        def run(*args, **kwargs):
            self.calls += 1
            return self._real(*args, **kwargs)

        tmux_runner.run = run
        return self

    def __exit__(self, *exc: object) -> None:
        tmux_runner.run = self._real


def _event(ref: WorkItemRef, n: int) -> Event:
    return Event(
        delivery_id=f"comment:bench:{uuid.uuid4().hex}",
        work_item=ref,
        kind=EventKind.COMMENT,
        actor="bench",
        body=f"comment {n}: " + "lorem ipsum " * 20,
        url="",
        created_at=datetime.now(timezone.utc),
    )


def bench_live_dispatch(items: int, events: int) -> dict[str, float]:
    socket = f"loop-bench-{uuid.uuid4().hex[:8]}"
    tmux = Tmux(socket_name=socket, config_file="/dev/null")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store = Store.open(root / "state")
        log = EventLog(root / "events.jsonl")
        disp = Dispatcher(
            store,
            tmux,
            GenericAdapter(SWALLOW, name="swallow"),
            log,
            "bench",
            cwd_for=lambda ref: root,
            lock_dir=root / "locks",
            survival_delay=0,
        )
        refs = [WorkItemRef("local", "bench", i + 1) for i in range(items)]
        try:
            for ref in refs:  # first spawns: not timed
                assert disp.dispatch(_event(ref, 0)).reason == "spawned"
            latencies = []
            with CountingRunner() as counter:
                started = time.perf_counter()
                for n in range(events):
                    t0 = time.perf_counter()
                    outcome = disp.dispatch(_event(refs[n % items], n))
                    latencies.append(time.perf_counter() - t0)
                    if outcome.reason != "delivered":
                        raise SystemExit(f"unexpected outcome {outcome}")
                elapsed = time.perf_counter() - started
            store.close()
        finally:
            tmux.kill_server()  # this server only; also removes the socket file tmux leaves
    latencies.sort()
    return {
        "events_per_s": events / elapsed,
        "median_ms": statistics.median(latencies) * 1000,
        "p95_ms": latencies[int(len(latencies) * 0.95)] * 1000,
        "tmux_per_event": counter.calls / events,
    }


class AnswerAtOnce:
    def dispatch(self, event: Event) -> Outcome:
        return Outcome(OutcomeKind.PROCESSED, "bench")


class BulkSource:
    name = "bench"

    def __init__(self, batch: list[Event]) -> None:
        self.batch = batch

    def poll(self, cursor: str | None) -> PollBatch:
        return PollBatch(self.batch, "next") if cursor is None else PollBatch([], cursor)


def bench_poll_cycle(comments: int) -> dict[str, float]:
    """The poll path on the inbox: one cycle commits `comments` new events (with the
    cursor, one transaction); the drain then settles them (a dispatcher that answers at
    once, so the figure is the inbox's own cost: claim, lease, settle)."""
    from loop_dispatch.drain import Drain

    ref_count = 50
    batch = [
        _event(WorkItemRef("github", "acme/widgets", 1 + n % ref_count), n) for n in range(comments)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store = Store.open(root / "state")
        log = EventLog(root / "events.jsonl")
        t0 = time.perf_counter()
        report = run_poll_cycle(store, BulkSource(batch), log)
        commit = time.perf_counter() - t0
        assert report.new == comments, report
        t0 = time.perf_counter()
        drained = Drain(store, AnswerAtOnce(), log, versions={"bench": "1"}, idle=0.001).run(
            until_idle=True
        )
        drain = time.perf_counter() - t0
        assert drained.processed == comments, drained
        t0 = time.perf_counter()
        report = run_poll_cycle(store, BulkSource(batch), log)
        idle = time.perf_counter() - t0
        assert report.new == 0
        store.close()
    return {
        "commit_s": commit,
        "per_comment_us": commit / comments * 1e6,
        "drain_s": drain,
        "drain_per_s": comments / drain,
        "idle_cycle_s": idle,
    }


def bench_decide(calls: int = 200_000) -> dict[str, float]:
    """The decision table alone: `decide` on the facts of a delivery's steps (a look, a
    paste, its answer) and of a respawn's, round robin; pure, so this is its whole cost."""
    try:
        from loop_dispatch.decision import Deliver, Facts, Spawn, Start, Survival, decide
    except ImportError:  # a tree without the table
        return {}
    from loop_tmux import Presence

    steps = [
        Facts(active=True),
        Facts(active=True, pasted=Deliver.OK),
        Facts(active=True, pasted=Deliver.MISSING, missing_then=Presence.ABSENT, prepared=True),
        Facts(start=Start.RESUME, spawned=Spawn.SPAWNED, survival=Survival.SURVIVED),
    ]
    rounds = calls // len(steps)
    started = time.perf_counter()
    for _ in range(rounds):
        for facts in steps:
            decide(facts)
    elapsed = time.perf_counter() - started
    return {"ns_per_call": elapsed / (rounds * len(steps)) * 1e9}


def main() -> int:
    print("loop-dispatch benchmarks")
    table = bench_decide()
    if table:
        print(f"decide (the pure decision table): {table['ns_per_call']:.0f} ns/call")
    if shutil.which("tmux") is None:
        print("tmux not found: skipping the live-dispatch benchmark")
    else:
        small = bench_live_dispatch(items=10, events=200)
        large = bench_live_dispatch(items=50, events=1000)
        for label, r in (("10 items, 200 events", small), ("50 items, 1000 events", large)):
            print(
                f"dispatch into live sessions, {label}: {r['events_per_s']:.1f} events/s, "
                f"median {r['median_ms']:.2f} ms, p95 {r['p95_ms']:.2f} ms, "
                f"{r['tmux_per_event']:.2f} tmux processes/event"
            )
        print(
            "  median latency growth 10 -> 50 items: "
            f"x{large['median_ms'] / small['median_ms']:.2f}"
        )
    results = {m: bench_poll_cycle(m) for m in (1_000, 10_000)}
    for m, r in results.items():
        print(
            f"poll cycle committing {m:,} new comments to the inbox: {r['commit_s']:.3f} s "
            f"({r['per_comment_us']:.0f} us/comment; idle cycle after "
            f"{r['idle_cycle_s'] * 1000:.1f} ms); drain settling them (50 items, no-op "
            f"dispatch): {r['drain_s']:.2f} s = {r['drain_per_s']:.0f} events/s"
        )
    growth = results[10_000]["commit_s"] / results[1_000]["commit_s"]
    dgrowth = results[10_000]["drain_s"] / results[1_000]["drain_s"]
    print(
        f"  growth 1k -> 10k comments: commit x{growth:.2f}, drain x{dgrowth:.2f}"
        " (linear would be x10)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
