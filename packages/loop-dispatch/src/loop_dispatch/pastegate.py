"""One paste at a time between its paste and its record, across a drain's workers.

The one window that can repeat a paste is a crash after tmux took it and before it
was recorded. Workers run items concurrently, so without a gate a kill -9 could
repeat one paste per item under way; with it, at most one. Spawns are not gated (a
spawn that outlives its attempt is recognised by its token, never pasted again), and
a paste costs a few milliseconds, so the gate bounds throughput far above any human
comment rate (see `nox -s bench`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .fence import LeaseFence

__all__ = ["PasteGate"]


class PasteGate:
    """`window()` scopes a drain's attempt; inside it `enter()` takes the gate just before
    a paste and `leave()` gives it back once the paste is recorded (the dispatcher's
    delivery record: a reclaimed event finds it and is never pasted again). Outside a
    window both do nothing, so direct dispatches never block.

    `enter` waits at most `wait` seconds: a paste held up by a stalled tmux must not
    queue every other item's attempt behind its timeout. A refused `enter` is a
    transient failure of that attempt (retried with backoff).

    With a `fence` (a fleet host's lease, see fence.py), `refusal()` says why nothing
    may be pasted or spawned now: the lease ran out by this host's clock, or lapsed
    since the window's claim (its `epoch`). The dispatcher asks it just before every
    paste and every spawn, inside a window or not.
    """

    def __init__(self, wait: float = 2.0, *, fence: LeaseFence | None = None) -> None:
        self.wait = wait
        self.fence = fence
        self._lock = threading.Lock()
        self._local = threading.local()

    @contextmanager
    def window(self, epoch: int | None = None) -> Iterator[None]:
        self._local.open = True
        self._local.held = False
        self._local.epoch = epoch
        try:
            yield
        finally:
            self.leave()
            self._local.open = False
            self._local.epoch = None

    def refusal(self) -> str | None:
        """None while this thread may paste or spawn; else why not (one line)."""
        if self.fence is None:
            return None
        return self.fence.refusal(getattr(self._local, "epoch", None))

    def enter(self) -> bool:
        """True when this thread may paste now (the gate is its own, or not in use)."""
        if not getattr(self._local, "open", False) or self._local.held:
            return True
        if not self._lock.acquire(timeout=self.wait):
            return False
        self._local.held = True
        return True

    def leave(self) -> None:
        if getattr(self._local, "held", False):
            self._local.held = False
            self._lock.release()
