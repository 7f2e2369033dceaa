"""Issue 15's acceptance: 1,000 events over 60 items arriving through two webhook
receivers on a fleet of three hosts: each delivered once, in order per item; items
spread over the hosts by capacity. Real pieces throughout: a private PostgreSQL
cluster, two `gh-webhook start --route` receivers (signed GitHub-style deliveries over
HTTP), each beside a host's worker under that host's name, three `poll start` workers
with their own host.name, private tmux server and fake harness.

What counts is what the harnesses recorded (first prompts and pastes), keyed by a
unique marker per comment: never the-loop's own account. Prints the counts (-s).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from inbox_rig import (
    MARK_RE,
    Rig,
    comment_body,
    fleet_host,
    marker,
    new_guid,
    order_violations,
    post,
    tally,
)

from loop_tmux.testing import wait_for

pytestmark = [pytest.mark.tmux, pytest.mark.slow]

EVENTS = 1000
ITEMS = 60
CAPACITY = {"host-a": 30, "host-b": 20, "host-c": 15}  # 65 places for 60 items
SENDERS = 4
FIRST_ISSUE = 101


def test_1000_events_over_60_items_through_two_receivers_on_three_hosts(
    tmp_path: Path, tmux_socket: str, extra_socket, pg_cluster
) -> None:
    url = pg_cluster.create_database()
    sockets = {"host-a": tmux_socket, "host-b": extra_socket(), "host-c": extra_socket()}

    def host(name: str, folder: str, **options: Any) -> Rig:
        return fleet_host(
            tmp_path / folder,
            sockets[name],
            name,
            pg_cluster,
            url,
            capacity=CAPACITY[name],
            lease=10.0,
            **options,
        )

    hosts = {
        name: host(name, name, interval=2.0, max_backoff=1.0, concurrency=4) for name in CAPACITY
    }
    # Two receivers behind the "load balancer", on host-a and host-b beside their
    # workers (tracker github: they take GitHub's deliveries; on a fleet they only commit).
    senders = {
        name: host(name, f"{name}-receiver", tracker="github") for name in ("host-a", "host-b")
    }
    try:
        workers = [rig.poller() for rig in hosts.values()]
        for worker in workers:
            worker.start()
        urls = []
        for rig in senders.values():
            receiver = rig.webhook()
            receiver.start()
            urls.append(receiver.url)

        # Event k goes to item k % 60, as that item's (k // 60)-th comment; each item's
        # comments are sent in order by one sender, alternating between the receivers.
        plan: dict[int, list[tuple[int, str]]] = {}
        for k in range(EVENTS):
            item = FIRST_ISSUE + k % ITEMS
            plan.setdefault(item, []).append((k, marker(item, k // ITEMS)))
        sent = [marker(FIRST_ISSUE + k % ITEMS, k // ITEMS) for k in range(EVENTS)]
        answers: Counter[str] = Counter()
        failures: list[BaseException] = []
        lock = threading.Lock()

        def send(items: list[int]) -> None:
            try:
                for round_ in range(max(len(plan[i]) for i in items)):
                    for item in items:
                        if round_ >= len(plan[item]):
                            continue
                        k, mark = plan[item][round_]
                        body = comment_body(item, 500_000 + k, f"comment {k}: {mark}")
                        guid = new_guid()
                        for attempt in range(20):  # a redelivery keeps its GUID
                            r = post(urls[k % 2], body, guid, timeout=10)
                            if r.status_code in (200, 202):
                                break
                            time.sleep(0.2 * (attempt + 1))
                        with lock:
                            answers[str(r.status_code)] += 1
            except BaseException as exc:
                failures.append(exc)

        items = sorted(plan)
        started = time.monotonic()
        threads = [
            threading.Thread(target=send, args=(items[s::SENDERS],), daemon=True)
            for s in range(SENDERS)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(150)
        assert not failures, repr(failures[0])
        all_sent = round(time.monotonic() - started, 1)

        def counts() -> Counter[str]:
            total: Counter[str] = Counter()
            for rig in hosts.values():
                total += rig.marker_counts()
            return total

        wait_for(lambda: all(counts()[m] for m in sent), timeout=150, interval=1.0)
        all_in = round(time.monotonic() - started, 1)
        time.sleep(2.0)  # a straggling second paste lands now or never
        result = tally(sent, counts())
        order = {name: order_violations(rig) for name, rig in hosts.items()}
        per_host: dict[str, set[int]] = {}
        for name, rig in hosts.items():
            per_host[name] = {
                int(m.group(1)) for text, _ in rig.received() for m in MARK_RE.finditer(text)
            }
        on_two = sorted(i for i in items if sum(i in s for s in per_host.values()) > 1)
        spread = {name: len(per_host[name]) for name in CAPACITY}
        line = (
            f"fleet acceptance: sent={result['sent']} once={result['once']} "
            f"twice={result['twice']} more={result['more']} lost={result['lost']} "
            f"out-of-order items={sum(len(v) for v in order.values())} "
            f"items per host={spread} capacity={CAPACITY} items on two hosts={len(on_two)} "
            f"answers={dict(answers)}; all sent at {all_sent}s, all delivered at {all_in}s"
        )
        print("\n" + line)
        assert answers["202"] == EVENTS, line
        assert result["once"] == EVENTS, line
        assert result["twice"] == 0, line
        assert result["more"] == 0, line
        assert result["lost"] == 0, line
        assert not any(order.values()), (line, order)
        assert not on_two, line
        assert sum(spread.values()) == ITEMS, line
        for name, cap in CAPACITY.items():
            assert 0 < spread[name] <= cap, line
    finally:
        for rig in [*senders.values(), *hosts.values()]:
            rig.close()
