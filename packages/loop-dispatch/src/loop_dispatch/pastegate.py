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

__all__ = ["PasteGate"]


class PasteGate:
    """`window()` scopes a drain's attempt; inside it `enter()` takes the gate just before
    a paste and `leave()` gives it back once the paste is recorded (the dispatcher's
    delivery record: a reclaimed event finds it and is never pasted again). Outside a
    window both do nothing, so direct dispatches never block.

    `enter` waits at most `wait` seconds: a paste held up by a stalled tmux must not
    queue every other item's attempt behind its timeout. A refused `enter` is a
    transient failure of that attempt (retried with backoff).
    """

    def __init__(self, wait: float = 2.0) -> None:
        self.wait = wait
        self._lock = threading.Lock()
        self._local = threading.local()

    @contextmanager
    def window(self) -> Iterator[None]:
        self._local.open = True
        self._local.held = False
        try:
            yield
        finally:
            self.leave()
            self._local.open = False

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
