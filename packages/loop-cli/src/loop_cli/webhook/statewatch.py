"""The receiver's heartbeat, and how it tells a busy store from a lost one.

A receiver whose state is gone must stop, as the poller does, so its supervisor
restarts it on the real state (or keeps failing, visibly) rather than answering 202 for
deliveries nothing will ever read. Its state is lost when:

- its state directory or `state.db` was deleted or replaced (the daemon's ground);
- the store says it no longer exists (a dropped PostgreSQL database);
- the store has not taken a heartbeat for longer than the heartbeat's stale window:
  `status` already reports the receiver stale by then.

Every failed beat is logged with its cause, one line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from loop_dispatch.errors import one_line

__all__ = ["StateWatch"]

log = logging.getLogger("loop_cli.webhook")


class StateWatch:
    """Write the heartbeat; return a one-line problem once the state is lost."""

    def __init__(
        self,
        write: Callable[[], None],
        *,
        ground: Callable[[], str | None] | None,
        stale_after: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.write = write
        self.ground = ground
        self.stale_after = stale_after
        self.clock = clock
        self.failing_since: float | None = None

    @property
    def failing(self) -> bool:
        """Whether the last beat was not written (a stop then writes nothing either)."""
        return self.failing_since is not None

    def beat(self) -> str | None:
        problem = self.ground() if self.ground is not None else None
        if problem:
            return problem
        started = self.clock()
        try:
            self.write()
        except Exception as exc:
            return self._failed(exc, started)
        self.failing_since = None
        return None

    def _failed(self, exc: Exception, started: float) -> str | None:
        cause = f"{type(exc).__name__}: {one_line(exc)}"
        if self.failing_since is None:
            self.failing_since = started
        if getattr(exc, "gone", False):
            return f"the state store no longer exists ({cause})"
        failing = self.clock() - self.failing_since
        if failing > self.stale_after:
            return f"the state store has not taken a heartbeat for {failing:.0f}s ({cause})"
        log.warning("webhook heartbeat not written: %s", cause)
        return None
