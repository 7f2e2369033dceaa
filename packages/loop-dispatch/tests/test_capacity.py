"""host.maxLive's slots (capacity.py): counted under one host lock held until the record
is active, and granted oldest-waiting-first. Real store, real flocks, real threads."""

from __future__ import annotations

import threading
import time

from loop_dispatch.capacity import Capacity, live_count, waiting_for_slot
from loop_dispatch.model import WorkItemRef

A, B, C = (WorkItemRef.parse(f"local:slots#{n}") for n in (1, 2, 3))


def _register(store, ref: WorkItemRef) -> None:
    store.registry.register(ref, harness="x", conversation_id=None, cwd="/")


def test_the_last_slot_is_taken_once_however_the_takers_race(store, tmp_path) -> None:
    """A holds the last slot's lock until its record is active; B, asking meanwhile
    (another drain, another process), waits for it and is then refused: never both."""
    cap = Capacity(store, tmp_path / "locks", 1)
    first = cap.take(A, None)
    assert first.granted
    asked: dict[str, object] = {}
    other = threading.Thread(target=lambda: asked.setdefault("b", cap.take(B, None)))
    other.start()
    time.sleep(0.5)
    assert "b" not in asked  # waiting on the lock while A is not yet registered
    _register(store, A)
    first.release()
    other.join(10)
    second = asked["b"]
    assert second.granted is False
    assert (second.live, second.max_live) == (1, 1)


def test_the_oldest_waiting_item_gets_the_next_slot(store, make_event, tmp_path) -> None:
    """Items deferred `capacity_full` wait in arrival order: a slot goes to the oldest;
    a newer one (or one outside the inbox, e.g. `sessions start`) waits behind it. An
    item that holds a slot already (active) is not counted as waiting."""
    cap = Capacity(store, tmp_path / "locks", 2)
    _register(store, C)  # one live
    older, newer = make_event(A), make_event(B)
    store.inbox.accept("test", [older])
    store.inbox.accept("test", [newer])
    seqs = {}
    for entry in store.inbox.claim("me", limit=5, lease_seconds=60):
        seqs[entry.work_item] = entry.seq
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
    assert [item for _, item in waiting_for_slot(store)] == [str(A), str(B)]
    refused = cap.take(B, seqs[str(B)])
    assert (refused.granted, refused.ahead) == (False, 1)
    assert cap.take(B, None).granted is False  # not from the inbox: behind every waiter
    granted = cap.take(A, seqs[str(A)])
    assert (granted.granted, granted.ahead) == (True, 0)
    _register(store, A)
    granted.release()
    assert live_count(store) == 2
    assert [item for _, item in waiting_for_slot(store)] == [str(B)]  # A holds its slot


def test_hibernated_and_closed_records_hold_no_slot(store, tmp_path) -> None:
    for ref in (A, B, C):
        _register(store, ref)
    assert store.registry.hibernate(A)
    store.registry.close(B)
    assert live_count(store) == 1
    assert store.registry.get(A).active  # taken on, hibernated
    assert store.registry.get(A).hibernated
    assert store.registry.wake(A)
    assert live_count(store) == 2
    assert not store.registry.wake(A)  # only a hibernated record wakes
