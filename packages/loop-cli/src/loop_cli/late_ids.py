"""Conversation ids found late: the poll daemon's look for the Codex ids spawns missed.

Codex picks its own conversation id, read from the rollout file it holds open. A spawn
waits for that file a bounded time; on a loaded host Codex can open it later, and until
the id is recorded the session's activity reads "unknown" (in `status`, for
hibernation) and a rollout cannot resume it. Each cycle looks again for the live
sessions of this host still without one (`Dispatcher.with_conversation`: under the
item's lock, from the file the pane holds only). A session that never gets one (a Codex
stuck at a login dialog) is looked at less and less often, and a cycle looks at
LOOKS_PER_CYCLE sessions at most, so a fleet of them costs the cycle little: one
batched tmux call, then one look per session that is due.
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
LOOKS_PER_CYCLE = 20  # a cycle's bound: 200 stuck sessions are looked at over 10 cycles


class LateConversations:
    """Which sessions to look at this cycle, and how long each start waits after a miss."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        # (ref, start) -> (next look, back-off): a respawn's new start is looked at at once
        self._due: dict[tuple[str, str], tuple[float, float]] = {}

    def sweep(self, rt: Runtime) -> int:
        """Look for the missing ids that are due; how many were found. Nothing while this
        host's lease ran out (fleet), nor when tmux does not answer: the next cycle looks
        again. Raises what the store raises (the caller records it and goes on)."""
        from loop_tmux import TmuxUnavailable

        if rt.fence is not None and rt.fence.refusal() is not None:
            return 0  # another host may hold these items now
        waiting = [r for r in _here(rt) if not r.conversation_id]
        self._forget({_key(r) for r in waiting})
        now = self.clock()
        due = sorted(
            (r for r in waiting if self._due.get(_key(r), (0.0, 0.0))[0] <= now),
            key=lambda r: self._due.get(_key(r), (0.0, 0.0))[0],
        )[:LOOKS_PER_CYCLE]  # the longest due first
        if not due:
            return 0
        try:
            views = rt.tmux.pane_views([r.tmux_name for r in due], capture=False)
        except TmuxUnavailable:
            return 0
        found = 0
        for record in due:
            view = views.get(record.tmux_name)
            if view is None or view.dead:  # nothing runs: no file is held
                continue
            try:
                known = rt.with_conversation(record).conversation_id
            except TmuxUnavailable:
                return found
            if known:
                found += 1
                self._due.pop(_key(record), None)
            else:
                self._missed(record, now)
        return found

    def _missed(self, record: SessionRecord, now: float) -> None:
        key = _key(record)
        backoff = min(MAX_BACKOFF, max(FIRST_BACKOFF, self._due.get(key, (0.0, 0.0))[1] * 2))
        self._due[key] = (now + backoff, backoff)

    def _forget(self, waiting: set[tuple[str, str]]) -> None:
        """Starts that got an id, ended or were replaced: no back-off kept for them."""
        for key in set(self._due) - waiting:
            del self._due[key]


def _key(record: SessionRecord) -> tuple[str, str]:
    started = record.started_at or record.created_at
    return (str(record.work_item), started.isoformat())


def _here(rt: Runtime) -> list[SessionRecord]:
    """The active sessions of this host: on a fleet's shared store, those of the items
    placed here (another host's item is never written from here, even when a pane of
    it outlived its move)."""
    active = rt.store.registry.list("active")
    if not rt.fleet:
        return active
    from loop_dispatch.hosts import Hosts

    placed = set(Hosts(rt.store).placed_on(rt.host_name))
    return [r for r in active if str(r.work_item) in placed]
