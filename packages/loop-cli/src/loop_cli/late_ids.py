"""Conversation ids found late: the poll daemon's look for the Codex ids spawns missed.

Codex picks its own conversation id, read from the rollout file it holds open. A spawn
waits for that file a bounded time; on a loaded host Codex can open it later, and until
the id is recorded the session's activity reads "unknown" (in `status`, for
hibernation) and a rollout cannot resume it. Each cycle looks again for the live
sessions of this host still without one (`Dispatcher.with_conversation`: under the
item's lock, from the file the pane holds only). A session that never gets one (a Codex
stuck at a login dialog) is looked at less and less often, so a fleet of them costs the
cycle little: one batched tmux call, then one look per session that is due.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loop_dispatch import SessionRecord

    from .runtime import Runtime

__all__ = ["LateConversations"]

FIRST_BACKOFF = 5.0  # seconds before a session without an id is looked at again
MAX_BACKOFF = 300.0


class LateConversations:
    """Which sessions to look at this cycle, and how long each waits after a miss."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._due: dict[str, tuple[float, float]] = {}  # ref -> (next look, back-off)

    def sweep(self, rt: Runtime) -> int:
        """Look for the missing ids that are due; how many were found. Raises what the
        store or tmux raise (the caller records it and goes on)."""
        from loop_tmux import TmuxUnavailable

        waiting = [r for r in rt.store.registry.list("active") if not r.conversation_id]
        self._forget({str(r.work_item) for r in waiting})
        now = self.clock()
        due = [r for r in waiting if self._due.get(str(r.work_item), (0.0, 0.0))[0] <= now]
        if not due:
            return 0
        views = rt.tmux.pane_views([r.tmux_name for r in due], capture=False)
        found = 0
        for record in due:
            view = views.get(record.tmux_name)
            if view is None or view.dead:  # not running here (another host's, or gone)
                continue
            try:
                known = rt.with_conversation(record).conversation_id
            except TmuxUnavailable:
                return found  # tmux stopped answering: the next cycle tries again
            if known:
                found += 1
                self._due.pop(str(record.work_item), None)
            else:
                self._missed(record, now)
        return found

    def _missed(self, record: SessionRecord, now: float) -> None:
        key = str(record.work_item)
        backoff = min(MAX_BACKOFF, max(FIRST_BACKOFF, self._due.get(key, (0.0, 0.0))[1] * 2))
        self._due[key] = (now + backoff, backoff)

    def _forget(self, waiting: set[str]) -> None:
        """Sessions that got an id, closed or went: no back-off kept for them."""
        for key in set(self._due) - waiting:
            del self._due[key]
