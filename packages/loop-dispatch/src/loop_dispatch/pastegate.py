"""One paste at a time between its paste and its settle, across a drain's workers.

The one window that can repeat a paste is a crash after tmux took it and before the
inbox recorded it. Workers run items concurrently, so without a gate a kill -9 could
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
    """`window()` is an attempt (dispatch, then settle); `enter()` is called just before a
    paste. Outside a window `enter()` does nothing, so direct dispatches never block."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()

    @contextmanager
    def window(self) -> Iterator[None]:
        self._local.open = True
        self._local.held = False
        try:
            yield
        finally:
            if self._local.held:
                self._lock.release()
            self._local.open = False
            self._local.held = False

    def enter(self) -> None:
        if getattr(self._local, "open", False) and not self._local.held:
            self._lock.acquire()
            self._local.held = True
