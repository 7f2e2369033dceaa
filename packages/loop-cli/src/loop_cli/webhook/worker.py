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


def failed(result: object) -> bool:
    """Did the handler report a retryable failure (dispatch's `Outcome.kind == failed`)?"""
    kind = getattr(result, "kind", None)
    return getattr(kind, "value", kind) == "failed"


class Worker:
    """`on_failure(tag)` runs when handling the event queued with `tag` raised or
    reported a retryable failure (the receiver forgets its delivery GUID then, so a
    redelivery from GitHub is handled again rather than answered "duplicate")."""

    def __init__(
        self,
        handle: Callable[[Event], object],
        *,
        maxsize: int = 1000,
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        self._handle = handle
        self._on_failure = on_failure
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

    def submit(self, event: Event, tag: str = "") -> bool:
        """Queue an event; False when the queue is full."""
        self.start()
        try:
            self._queue.put_nowait((tag, event))
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
            tag, event = item
            try:
                result = self._handle(event)
            except Exception as exc:  # one bad event must not stop the receiver
                log.error("webhook: handling %s failed: %s", event.delivery_id, type(exc).__name__)
                result = None
                ok = False
            else:
                ok = not failed(result)
            if ok:
                self.handled += 1
                continue
            if self._on_failure is not None and tag:
                try:
                    self._on_failure(tag)
                except Exception as exc:  # a busy store: the GUID stays; the poller still retries
                    log.warning("webhook: could not forget %s: %s", tag, type(exc).__name__)
            self.failed += 1  # counted once forgotten: a redelivery seen after this is taken
