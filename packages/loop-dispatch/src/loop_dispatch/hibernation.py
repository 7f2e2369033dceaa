"""Hibernation (issue 25): end the harness of a session idle long enough, keep the rest.

The poll daemon runs `Hibernator.sweep` once per cycle. A session is idle when no event
of its item is open in the inbox and its adapter says "idle" (`activity(view,
conversation_id)`); "unknown", "busy" and "blocked" are never idle, so an adapter that
cannot tell never has a harness ended under it. A session idle for
`sessions.hibernateAfterSeconds` (counted from the first sweep that found it idle, or
from the item's last delivery if later) is ended; so are the oldest idle ones when items
wait for a slot (`host.maxLive`), as many as they need, after the sessions whose harness
is gone already (died: their slot is freed, nothing is ended). Ending one holds the
item's lock from the idle verdict (taken again under the lock) to the registry's
`hibernated`, so no delivery pastes into a harness being ended. The pane is terminated
like `sessions stop` (scrollback kept); the next event resumes the conversation through
the respawn rows (decision.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from loop_tmux import PaneView, Presence, TmuxUnavailable

from .lock import LockTimeout, LockUnavailable, item_lock
from .memory import session_rss
from .model import WorkItemRef
from .registry import SessionRecord

if TYPE_CHECKING:
    from .dispatcher import Dispatcher

__all__ = ["Hibernated", "Hibernator"]

SOURCE = "hibernation"
# How long the sweep waits for an item's lock: a held lock means work is under way.
LOCK_WAIT_SECONDS = 0.2


@dataclass(frozen=True)
class Hibernated:
    """One session the sweep ended."""

    work_item: str
    tmux_name: str
    idle_seconds: float
    why: str  # "idle" (hibernateAfterSeconds) or "capacity" (an item waits for a slot)


class Hibernator:
    """Idle verdicts across sweeps (in memory: a restarted daemon starts counting anew,
    which only ever delays a hibernation) and the ending of idle harnesses."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        after: float | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.d = dispatcher
        self.after = after
        self.clock = clock
        self._idle_since: dict[str, float] = {}

    @property
    def enabled(self) -> bool:
        return self.after is not None or self.d.capacity.capped

    def sweep(self) -> list[Hibernated]:
        """One pass: verdicts for every live session, then the hibernations due."""
        if not self.enabled:
            return []
        records = self.d.store.registry.list("active")
        open_items = self._open_items()
        views = self._views([r.tmux_name for r in records if str(r.work_item) not in open_items])
        now = self.clock()
        idle: list[tuple[float, SessionRecord]] = []
        for record in records:
            key = str(record.work_item)
            if key not in open_items and self._says_idle(views.get(record.tmux_name), record):
                since = self._idle_since.setdefault(key, now)
                idle.append((since, record))
            else:
                self._idle_since.pop(key, None)
        for key in set(self._idle_since) - {str(r.work_item) for r in records}:
            del self._idle_since[key]
        idle.sort(key=lambda pair: pair[0])  # the oldest idle first
        due = [(s, r, "idle") for s, r in idle if self.after is not None and now - s >= self.after]
        need = self._slots_needed(self.d.capacity.live()) - len(due)
        # A harness already gone (died, killed) holds a slot with nothing running: its
        # slot goes to a waiting item first, before any live idle harness is ended.
        gone = [(now, r, "capacity") for r in self._gone(records, views, open_items)]
        rest = [(s, r, "capacity") for s, r in idle if (s, r, "idle") not in due]
        chosen = due + (gone + rest)[: max(0, need)]
        done = []
        for since, record, why in chosen:
            ended = self._hibernate(record, now - since, why)
            if ended is not None:
                done.append(ended)
        return done

    def _slots_needed(self, live: int) -> int:
        """How many slots the items waiting for one need beyond the free ones."""
        capacity = self.d.capacity
        if not capacity.capped or capacity.max_live is None:
            return 0
        waiting = {item for _, item in capacity.waiting()}
        return max(0, len(waiting) - max(0, capacity.max_live - live))

    def _gone(
        self,
        records: list[SessionRecord],
        views: dict[str, PaneView | None],
        open_items: set[str],
    ) -> list[SessionRecord]:
        """Active records of this host whose harness tmux says is absent or dead."""
        here = self._placed_here()
        return [
            r
            for r in records
            if str(r.work_item) not in open_items
            and (here is None or str(r.work_item) in here)
            and r.tmux_name in views
            and (views[r.tmux_name] is None or getattr(views[r.tmux_name], "dead", False))
        ]

    def _placed_here(self) -> set[str] | None:
        """On a fleet, the items placed on this host (another host's sessions are
        absent from this host's tmux, never gone); None: a single host."""
        host = self.d.capacity.host
        if host is None:
            return None
        rows = self.d.store.query("SELECT work_item FROM placements WHERE host = ?", (host,))
        return {str(r[0]) for r in rows}

    def _open_items(self) -> set[str]:
        rows = self.d.store.query(
            "SELECT DISTINCT work_item FROM inbox WHERE state IN ('pending', 'claimed')"
        )
        return {str(r[0]) for r in rows}

    def _views(self, names: list[str]) -> dict[str, PaneView | None]:
        """Every screen in as few tmux calls as tmux allows; {} when tmux is silent
        (nothing is then idle: nothing is ended)."""
        if not names:
            return {}
        try:
            return self.d.tmux.pane_views(names, capture=True)
        except TmuxUnavailable:
            return {}

    def _says_idle(self, view: PaneView | None, record: SessionRecord) -> bool:
        if view is None or view.dead:
            return False
        return self.d.adapter.activity(view, record.conversation_id) == "idle"

    def _too_recent(self, ref: WorkItemRef, why: str) -> bool:
        """The item had a delivery more recently than the sweeps saw (a turn between two
        sweeps): its idle clock starts again from that delivery. (Capacity hibernations
        take the oldest idle first and are not held back.)"""
        if why != "idle" or self.after is None:
            return False
        rows = self.d.store.query(
            "SELECT max(settled_at) FROM inbox WHERE work_item = ? AND state = 'done'",
            (str(ref),),
        )
        if not rows or rows[0][0] is None:
            return False
        then = datetime.fromisoformat(str(rows[0][0]))
        quiet = max(0.0, (datetime.now(timezone.utc) - then).total_seconds())
        if quiet >= self.after:
            return False
        self._idle_since[str(ref)] = self.clock() - quiet
        return True

    def _hibernate(self, record: SessionRecord, idle_seconds: float, why: str) -> Hibernated | None:
        """Under the item's lock: the verdict again, then the end. None when the item is
        busy, locked, no longer idle, or tmux did not end it (tried next sweep)."""
        ref = record.work_item
        try:
            with item_lock(self.d.lock_dir, ref, LOCK_WAIT_SECONDS):
                current = self.d.store.registry.get(ref)
                if current is None or current.status != "active":
                    return None
                if str(ref) in self._open_items():
                    self._idle_since.pop(str(ref), None)
                    return None
                seen = self.d.tmux.observe(current.tmux_name, capture=True)
                rss: int | None = None
                if seen.presence in (Presence.ABSENT, Presence.DEAD):
                    pass  # its harness is gone already: only the slot is given back
                elif seen.presence is not Presence.LIVE or not self._says_idle(seen.view, current):
                    self._idle_since.pop(str(ref), None)
                    return None
                elif self._too_recent(ref, why):
                    return None
                else:
                    rss = (session_rss(self.d.tmux, [current.tmux_name]) or {}).get(
                        current.tmux_name
                    )
                    if not self.d.tmux.terminate(current.tmux_name, self.d.terminate_grace):
                        return None
                self.d.store.registry.hibernate(ref)
        except (LockTimeout, LockUnavailable):
            return None
        self._idle_since.pop(str(ref), None)
        self.d.events.emit(
            "session.hibernated",
            source=SOURCE,
            work_item=ref,
            detail={
                "tmux_name": current.tmux_name,
                "idle_seconds": round(idle_seconds, 1),
                "why": why,
                "conversation_id": current.conversation_id,
                "rss_bytes": rss,
            },
        )
        return Hibernated(str(ref), current.tmux_name, idle_seconds, why)
