"""A worker's own fence on its host lease: deadline by its own clock, epochs of claims."""

from __future__ import annotations

from loop_dispatch.fence import LeaseFence
from loop_dispatch.pastegate import PasteGate


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_closed_until_renewed_then_open_until_the_renewals_start_plus_the_lease() -> None:
    clock = Clock()
    fence = LeaseFence(10.0, clock=clock)
    assert fence.refusal() is not None  # never renewed: nothing may be pasted
    fence.renewed(started=99.0)  # the renewal began at 99 and returned at 100
    assert fence.refusal() is None
    clock.now = 108.9
    assert fence.refusal() is None
    clock.now = 109.0  # 99 + 10: the database's expiry is no earlier than this
    assert "ran out" in (fence.refusal() or "")


def test_a_claim_from_before_an_expiry_never_pastes_even_once_renewed() -> None:
    clock = Clock()
    fence = LeaseFence(10.0, clock=clock)
    fence.renewed(started=100.0)
    claimed = fence.epoch
    assert fence.refusal(claimed) is None
    clock.now = 115.0  # frozen past the deadline (SIGSTOP), then thawed
    fence.renewed(started=115.0)  # and the lease renewed at once
    assert fence.refusal() is None  # new claims may paste
    assert "since the event was claimed" in (fence.refusal(claimed) or "")
    assert fence.refusal(fence.epoch) is None


def test_a_renewal_that_finds_the_lease_lapsed_fences_older_claims() -> None:
    fence = LeaseFence(10.0, clock=Clock())
    fence.renewed(started=100.0)
    claimed = fence.epoch
    fence.lapsed()
    assert fence.refusal(claimed) is not None
    assert fence.refusal(fence.epoch) is None


def test_every_renewal_reaches_the_keeper() -> None:
    seen: list[float] = []
    fence = LeaseFence(10.0, clock=Clock())
    fence.on_renewed(seen.append)
    fence.renewed(started=100.0)
    fence.renewed(started=103.0)
    assert seen == [110.0, 113.0]


def test_the_paste_gate_asks_the_fence_with_its_windows_epoch() -> None:
    clock = Clock()
    fence = LeaseFence(10.0, clock=clock)
    gate = PasteGate(fence=fence)
    fence.renewed(started=100.0)
    epoch = fence.epoch
    with gate.window(epoch):
        assert gate.refusal() is None
        fence.lapsed()
        assert gate.refusal() is not None
    assert gate.refusal() is None  # outside a window: the deadline alone
    clock.now = 111.0
    assert gate.refusal() is not None
    assert PasteGate().refusal() is None  # no fence (single host): never refused
