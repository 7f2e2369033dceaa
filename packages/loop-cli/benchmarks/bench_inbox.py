"""The webhook path through the inbox, end to end on loopback with a real tmux.

Signed `issue_comment` deliveries go to the receiver app (uvicorn, in this process);
each is committed to the inbox (GUID and event in one SQLite transaction) before the
202; the drain (4 workers) pastes it into the item's live tmux session (a private
socket; a harness that swallows input). For 1, 10 and 50 items it prints:

- accept cost: the 202 round trip per event (median, p99);
- drain throughput: events pasted per second while the deliveries arrive;
- comment-to-paste latency: from sending the delivery to the paste being settled
  (median, p95);

and the growth from 1 to 50 items. Bounded: a fixed number of events per run.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import httpx

from loop_cli.webhook.app import create_app
from loop_cli.webhook.seen import InboxAccept
from loop_cli.webhook.verify import sign
from loop_dispatch import Dispatcher, Event, EventKind, EventLog, GenericAdapter, Store, WorkItemRef
from loop_dispatch.drain import Drain, Settlement
from loop_tmux import Tmux

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fakegithub import payloads, served

SECRET = b"bench-secret"
REPO = "bench/app"
EVENTS = 300
SWALLOW = ["sh", "-c", "exec cat >/dev/null", "harness", "{prompt}"]


def _opening(ref: WorkItemRef) -> Event:
    return Event(
        delivery_id=f"opened:{ref}",
        work_item=ref,
        kind=EventKind.OPENED,
        actor="alice",
        body="start",
        url="https://example.invalid",
        created_at=datetime.now(timezone.utc),
    )


def run(
    items: int, events: int, pace: float, also: Callable[[Settlement], None] | None = None
) -> dict[str, float]:
    """`events` comments over `items` items, one every `pace` seconds (0: a burst).

    `also`: a second settle callback, chained as the runtime chains the reactions."""
    socket = f"bench-inbox-{uuid.uuid4().hex[:8]}"
    tmux = Tmux(socket_name=socket, config_file="/dev/null")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store = Store.open(root / "state")
        log = EventLog(root / "events.jsonl")
        dispatcher = Dispatcher(
            store,
            tmux,
            GenericAdapter(SWALLOW),
            log,
            "bench",
            cwd_for=lambda ref: root,
            lock_dir=root / "locks",
            survival_delay=0.2,
        )
        refs = [WorkItemRef("github", REPO, n + 1) for n in range(items)]
        try:
            for ref in refs:  # live sessions first: the paste path is what is timed
                assert dispatcher.dispatch(_opening(ref)).reason == "spawned"
            settled: dict[str, float] = {}
            done = threading.Event()

            def on_settled(s: Settlement) -> None:
                settled[s.entry.delivery_id] = time.perf_counter()
                if len(settled) >= events:
                    done.set()
                if also is not None:
                    also(s)

            drain = Drain(store, dispatcher, log, versions={"bench": "1"}, on_settled=on_settled)
            stop = threading.Event()
            worker = threading.Thread(target=drain.run, args=(stop,), daemon=True)
            worker.start()
            app = create_app(
                SECRET,
                InboxAccept(store, on_accepted=drain.wake),
                authorized_actors=["alice"],
                trigger_label="the-loop",
            )
            sent: dict[str, float] = {}
            accept: list[float] = []
            with served(app) as url, httpx.Client(base_url=url, timeout=10) as client:
                t0 = time.perf_counter()
                for n in range(events):
                    if pace:
                        time.sleep(max(0.0, t0 + n * pace - time.perf_counter()))
                    number = 1 + n % items
                    cid = 100_000 + n
                    body = json.dumps(
                        payloads.issue_comment(REPO, number=number, comment_id=cid, body="x" * 400)
                    ).encode()
                    headers = {
                        "Content-Type": "application/json",
                        "X-GitHub-Event": "issue_comment",
                        "X-GitHub-Delivery": f"g-{n}",
                        "X-Hub-Signature-256": sign(SECRET, body),
                    }
                    start = time.perf_counter()
                    r = client.post("/", content=body, headers=headers)
                    accept.append(time.perf_counter() - start)
                    if r.status_code != 202:
                        raise SystemExit(f"unexpected {r.status_code}: {r.text}")
                    sent[r.json()["deliveryId"]] = start
                done.wait(120)
                wall = time.perf_counter() - t0
            stop.set()
            worker.join(10)
            store.close()
        finally:
            tmux.kill_server()
    latency = sorted(settled[d] - sent[d] for d in sent if d in settled)
    accept.sort()
    return {
        "delivered": len(latency),
        "accept_ms": statistics.median(accept) * 1000,
        "accept_p99_ms": accept[int(len(accept) * 0.99)] * 1000,
        "events_per_s": len(latency) / wall,
        "latency_ms": statistics.median(latency) * 1000,
        "latency_p95_ms": latency[int(len(latency) * 0.95)] * 1000,
    }


def main() -> int:
    if shutil.which("tmux") is None:
        print("tmux not found: skipping the inbox benchmark")
        return 0
    print("webhook -> inbox (commit before 202) -> drain (4 workers) -> tmux paste")
    burst = {n: run(n, EVENTS, 0.0) for n in (1, 10, 50)}
    paced = {n: run(n, 100, 0.05) for n in (1, 10, 50)}
    for n in (1, 10, 50):
        b, p = burst[n], paced[n]
        print(
            f"{n:>2} item(s): accept (202) median {p['accept_ms']:.2f} ms, p99 "
            f"{p['accept_p99_ms']:.2f} ms; burst of {EVENTS}: {b['delivered']} delivered, "
            f"drain {b['events_per_s']:.0f} events/s; 20/s paced: {p['delivered']}/100, "
            f"comment-to-paste median {p['latency_ms']:.1f} ms, p95 {p['latency_p95_ms']:.1f} ms"
        )
    print(
        "  growth 1 -> 50 items: paced comment-to-paste median "
        f"x{paced[50]['latency_ms'] / paced[1]['latency_ms']:.2f}, burst throughput "
        f"x{burst[50]['events_per_s'] / burst[1]['events_per_s']:.2f} (one item's events "
        "are pasted one at a time, in order; items run concurrently)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
