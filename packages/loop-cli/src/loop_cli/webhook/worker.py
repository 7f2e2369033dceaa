"""A bounded queue and one thread that hands accepted events to the dispatcher.

The HTTP side answers 202 as soon as an event is queued; the dispatcher (SQLite, file
locks, tmux) runs here, off the event loop, one event at a time per receiver. A full
queue is refused (503) rather than grown without bound.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from loop_dispatch import Event

__all__ = ["Worker"]

log = logging.getLogger(__name__)
_STOP = object()


class Worker:
    def __init__(self, handle: Callable[[Event], object], *, maxsize: int = 1000) -> None:
        self._handle = handle
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=maxsize)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.handled = 0
        self.failed = 0

    def start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="the-loop-webhook-worker", daemon=True
                )
                self._thread.start()

    def submit(self, event: Event) -> bool:
        """Queue an event; False when the queue is full."""
        self.start()
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            return False
        return True

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    def stop(self, timeout: float = 30.0) -> bool:
        """Finish what is queued (up to `timeout`), then end the thread. True if drained."""
        thread = self._thread
        if thread is None:
            return True
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._queue.put(_STOP, timeout=0.1)
                break
            except queue.Full:
                if time.monotonic() > deadline:
                    return False
        thread.join(max(0.0, deadline - time.monotonic()))
        return not thread.is_alive()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            try:
                self._handle(item)
                self.handled += 1
            except Exception as exc:  # one bad event must not stop the receiver
                self.failed += 1
                log.error("webhook: handling %s failed: %s", item.delivery_id, type(exc).__name__)
