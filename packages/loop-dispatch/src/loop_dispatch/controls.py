"""An item's hold (issue 24): `paused` or `stopped`, set by a control word or the
operator's `sessions pause|stop`, cleared by `resume` or `start`.

While an item is held, its arriving events wait in the inbox (`Inbox.hold`); the
hold itself lives here, one row per held item, so every process and host of a fleet
sees it in the same store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .control import Hold
from .inboxtable import iso, utcnow
from .model import WorkItemRef

if TYPE_CHECKING:
    from .tables import TableStore

__all__ = ["Controls"]


class Controls:
    """The `controls` table of a Store."""

    def __init__(self, store: TableStore) -> None:
        self._store = store

    def get(self, ref: WorkItemRef | str) -> Hold | None:
        rows = self._store.query("SELECT hold FROM controls WHERE work_item = ?", (str(ref),))
        if not rows:
            return None
        try:
            return Hold(rows[0][0])
        except ValueError:  # a hand-edited row: held, the safe reading
            return Hold.PAUSED

    def all(self) -> dict[str, Hold]:
        """Every held item (`status`, `sessions list`)."""
        out: dict[str, Hold] = {}
        for work_item, hold in self._store.query("SELECT work_item, hold FROM controls"):
            try:
                out[str(work_item)] = Hold(hold)
            except ValueError:
                out[str(work_item)] = Hold.PAUSED
        return out

    def set(self, ref: WorkItemRef, hold: Hold, actor: str) -> None:
        now = iso(utcnow())
        with self._store.transaction() as conn:
            conn.execute(
                "INSERT INTO controls(work_item, hold, actor, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(work_item) DO UPDATE SET hold = excluded.hold, "
                "actor = excluded.actor, updated_at = excluded.updated_at",
                (str(ref), hold.value, actor, now),
            )

    def clear(self, ref: WorkItemRef) -> bool:
        """Lift the hold; False when there was none."""
        with self._store.transaction() as conn:
            cur = conn.execute("DELETE FROM controls WHERE work_item = ?", (str(ref),))
            return cur.rowcount > 0
