"""A worker's own view of its host lease: after it runs out, nothing is pasted or spawned.

The shared store decides who holds a host's items, but a worker cannot ask it before
every paste (it may be cut off from it, or frozen between asking and pasting). So each
worker keeps a deadline on its own clock: a renewal that began at local time `t` and
succeeded makes the lease good until `t + lease` here. The store set the lease's expiry
from its own clock at a moment after `t`, so the local deadline never falls after the
store's expiry. Another host takes the items only once the store's clock passes that
expiry plus `TAKEOVER_MARGIN_SECONDS`: the holder stops (and its fence keeper ends its
agents, see fencekeeper.py) in the margin between.

The local clock is CLOCK_BOOTTIME where the platform has it (it keeps counting through
a suspend of the machine, as the store's clock does), else the monotonic clock; it never
jumps with the wall clock.

Every claim is stamped with the fence's epoch; the epoch moves on whenever the deadline
passed or the store said the lease had lapsed. An attempt of an older epoch never
pastes: its items may have moved meanwhile, even if the lease is good again now.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["TAKEOVER_MARGIN_SECONDS", "LeaseFence", "fence_clock"]

TAKEOVER_MARGIN_SECONDS = 5.0
"""How long past a lease's expiry (on the store's clock) another host waits before it
takes that host's items: the holder's keeper ends its agents within about 3 s of the
holder's own deadline (a tmux answer within 2 s, SIGTERM, SIGKILL after 1 s)."""

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


def fence_clock() -> float:
    """Seconds on a clock that never jumps and counts through suspend where it can."""
    if _BOOTTIME is not None:
        return time.clock_gettime(_BOOTTIME)
    return time.monotonic()


class LeaseFence:
    """The deadline and epoch of one worker's host lease (closed until first renewed)."""

    def __init__(self, lease_seconds: float, *, clock: Callable[[], float] = fence_clock) -> None:
        self.lease_seconds = lease_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._deadline = float("-inf")
        self._epoch = 0
        self._listeners: list[Callable[[float], None]] = []

    def now(self) -> float:
        return self._clock()

    @property
    def epoch(self) -> int:
        """The current epoch; stamp a claim with it before the claim is asked for."""
        with self._lock:
            self._expire_locked()
            return self._epoch

    @property
    def deadline(self) -> float:
        with self._lock:
            return self._deadline

    def on_renewed(self, listener: Callable[[float], None]) -> None:
        """`listener(deadline)` after every successful renewal (the fence keeper)."""
        self._listeners.append(listener)

    def renewed(self, started: float) -> None:
        """A renewal that began at `started` (this clock) succeeded. If the old deadline
        had passed by now, attempts stamped before are fenced out for good."""
        with self._lock:
            self._expire_locked()
            self._deadline = max(self._deadline, started + self.lease_seconds)
            deadline = self._deadline
        for listener in self._listeners:
            listener(deadline)

    def lapsed(self) -> None:
        """The store says the lease had lapsed: what was claimed before may be elsewhere."""
        with self._lock:
            self._epoch += 1

    def refusal(self, epoch: int | None = None) -> str | None:
        """None while pasting is allowed (for an attempt of `epoch`, when given), else why
        not, in one line."""
        with self._lock:
            if self._expire_locked():
                return "this host's lease ran out (by its own clock): not pasted"
            if epoch is not None and epoch != self._epoch:
                return "this host's lease lapsed since the event was claimed: not pasted"
            return None

    def _expire_locked(self) -> bool:
        """True when the deadline has passed (the epoch moves on once per expiry)."""
        if self._clock() < self._deadline:
            return False
        if self._deadline != float("-inf"):
            self._epoch += 1
            self._deadline = float("-inf")
        return True
