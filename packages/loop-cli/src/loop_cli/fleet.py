"""One read of the tmux server, folded into a presence per session name.

Status, `sessions list` and the benchmarks all need "is each registered session live,
dead or gone": answering that with one probe per session would cost one tmux process
per session, so everything here derives from a single `Tmux.panes()` call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loop_tmux import Pane, Tmux

LIVE, DEAD, ABSENT, UNKNOWN = "live", "dead", "absent", "unknown"


@dataclass(frozen=True)
class Fleet:
    """Panes by session name; `error` set (and every answer "unknown") when tmux was silent."""

    panes: dict[str, list[Pane]]
    error: str | None = None

    def presence(self, tmux_name: str) -> str:
        if self.error is not None:
            return UNKNOWN
        panes = self.panes.get(tmux_name)
        if not panes:
            return ABSENT
        return LIVE if any(not p.dead for p in panes) else DEAD

    def live_pids(self, tmux_name: str) -> list[int]:
        return [p.pid for p in self.panes.get(tmux_name, []) if not p.dead and p.pid > 0]


def read_fleet(tmux: Tmux) -> Fleet:
    """ONE tmux call. A tmux that does not answer gives a Fleet whose answers are UNKNOWN
    (never ABSENT: an unanswered question is not a missing session)."""
    from loop_tmux import TmuxUnavailable

    try:
        panes = tmux.panes()
    except TmuxUnavailable as exc:
        return Fleet({}, error=str(exc) or "tmux did not answer")
    grouped: dict[str, list[Pane]] = {}
    for pane in panes:
        grouped.setdefault(pane.session, []).append(pane)
    return Fleet(grouped)
