"""The drain over the real dispatcher and the modelled fake tmux, with injected faults:
1,000 events over 50 items, every 5th paste failing as a busy server would; each event
delivered once, in arrival order per item, none lost, none given up."""

from __future__ import annotations

import time

import pytest

from loop_dispatch.drain import Drain, RetryPolicy
from loop_dispatch.model import EventKind

pytestmark = pytest.mark.slow

ITEMS = 50
PER_ITEM = 20  # the opening, then 19 comments


def test_1000_events_over_50_items_with_transient_faults_delivered_once_in_order(
    fake_tmux, make_dispatcher, make_event, store, events
):
    batch = []
    for n in range(PER_ITEM):
        for item in range(ITEMS):
            kind = EventKind.OPENED if n == 0 else EventKind.COMMENT
            batch.append(
                make_event(
                    f"local:p{item}#1",
                    delivery_id=f"e-{item}-{n}",
                    kind=kind,
                    body=f"marker e-{item}-{n} end",
                )
            )
    store.inbox.accept("test", batch)
    fake_tmux.state.set_fault(
        "flaky", {"paste-buffer": {"every": 5, "text": "server exited unexpectedly"}}
    )
    drain = Drain(
        store,
        make_dispatcher(fake_tmux.tmux),
        events,
        versions={"t": "1"},
        policy=RetryPolicy(backoff=0.01, max_backoff=0.05),
        concurrency=4,
        idle=0.01,
    )
    deadline = time.monotonic() + 600
    while store.inbox.counts().get("pending") and time.monotonic() < deadline:
        drain.run(until_idle=True)
        time.sleep(0.02)

    counts = store.inbox.counts()
    assert counts == {"done": ITEMS * PER_ITEM}, counts
    sessions = fake_tmux.state.sessions()
    assert len(sessions) == ITEMS  # one spawn per item, never a respawn
    failed = [r["detail"]["reason"] for r in events.read("dispatch.failed")]
    assert failed, "the fault was injected: some pastes must have failed"
    assert set(failed) == {"deliver_unavailable"}
    delivered = once = twice = lost = 0
    for item in range(ITEMS):
        name = f"loop-local_p{item}_1"
        pasted = " ".join(" ".join(call) for call in fake_tmux.state.typed(name))
        order = []
        for n in range(1, PER_ITEM):
            hits = pasted.count(f"marker e-{item}-{n} end")
            delivered += hits
            once += hits == 1
            twice += hits > 1
            lost += hits == 0
            order.append(pasted.find(f"marker e-{item}-{n} end"))
        assert order == sorted(order), f"{name}: arrival order broken"
    sent = ITEMS * (PER_ITEM - 1)
    print(f"comments sent {sent}: delivered once {once}, twice {twice}, lost {lost}")
    assert (once, twice, lost) == (sent, 0, 0)
