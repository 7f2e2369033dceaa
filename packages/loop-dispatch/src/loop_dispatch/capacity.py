"""`host.maxLive`: the most harnesses running on one host at once (issue 25).

A live harness is an item whose registry record is `active` (a hibernated or closed
one holds no slot). A spawn, a reopen or the wake of a hibernated item takes a slot
first: under the host's capacity lock (one flock per host, so concurrent drains and
threads take slots one at a time) it counts the live records and the items waiting
for a slot ahead of it (inbox heads whose last attempt was deferred `capacity_full`,
oldest first), and is granted only while `live + ahead < maxLive`. The lock is kept
until the record is active (the count then includes it), so two items never both
take the last slot.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .lock import file_lock
from .model import WorkItemRef

if TYPE_CHECKING:
    from .tables import TableStore

__all__ = ["CAPACITY_LOCK", "Capacity", "Slot", "live_count", "waiting_for_slot"]

CAPACITY_LOCK = "host-capacity.lock"
_REASON = "capacity_full"


def live_count(store: TableStore, host: str | None = None) -> int:
    """Records holding a slot: active ones (on a fleet, those placed on `host`)."""
    if host is None:
        rows = store.query("SELECT count(*) FROM sessions WHERE status = 'active'")
    else:
        rows = store.query(
            "SELECT count(*) FROM sessions s JOIN placements p ON p.work_item = s.work_item "
            "WHERE s.status = 'active' AND p.host = ?",
            (host,),
        )
    return int(rows[0][0]) if rows else 0


def waiting_for_slot(store: TableStore, host: str | None = None) -> list[tuple[int, str]]:
    """(seq, work item) of the open inbox rows deferred for a slot, oldest first."""
    # An item whose record is active already holds its slot (granted, not yet settled).
    sql = (
        "SELECT i.seq, i.work_item FROM inbox i "
        "WHERE i.state IN ('pending', 'claimed') AND i.last_reason = ? AND i.work_item "
        "NOT IN (SELECT work_item FROM sessions WHERE status = 'active')"
    )
    params: tuple[object, ...] = (_REASON,)
    if host is not None:
        sql += " AND i.work_item IN (SELECT work_item FROM placements WHERE host = ?)"
        params = (_REASON, host)
    return [(int(r[0]), str(r[1])) for r in store.query(sql + " ORDER BY i.seq", params)]


@dataclass
class Slot:
    """One attempt's ask for a slot: the verdict, the figures, and the held lock."""

    granted: bool
    live: int
    max_live: int
    ahead: int
    _held: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)

    def release(self) -> None:
        """Let the next item count (idempotent)."""
        self._held.close()


class Capacity:
    """Slots of one host. `max_live=None`: uncapped (every ask is granted, no lock)."""

    def __init__(
        self,
        store: TableStore,
        lock_dir: Path,
        max_live: int | None,
        *,
        host: str | None = None,
        lock_timeout: float = 30.0,
    ) -> None:
        if max_live is not None and max_live < 1:
            raise ValueError("maxLive must be at least 1")
        self.store = store
        self.lock_path = Path(lock_dir) / CAPACITY_LOCK
        self.max_live = max_live
        self.host = host
        self.lock_timeout = lock_timeout

    @property
    def capped(self) -> bool:
        return self.max_live is not None

    def live(self) -> int:
        return live_count(self.store, self.host)

    def waiting(self) -> list[tuple[int, str]]:
        return waiting_for_slot(self.store, self.host)

    def take(self, ref: WorkItemRef, seq: int | None) -> Slot:
        """Ask for a slot for `ref`, whose inbox row is `seq` (None: not from the inbox,
        e.g. `sessions start`, which waits behind every deferred item). A granted slot
        keeps the lock held until `Slot.release`; a refused one releases it at once."""
        assert self.max_live is not None
        held = contextlib.ExitStack()
        held.enter_context(file_lock(self.lock_path, "host capacity", self.lock_timeout))
        try:
            live = self.live()
            ahead = sum(
                1 for s, item in self.waiting() if item != str(ref) and (seq is None or s < seq)
            )
        except BaseException:
            held.close()
            raise
        slot = Slot(live + ahead < self.max_live, live, self.max_live, ahead, held)
        if not slot.granted:
            slot.release()
        return slot
