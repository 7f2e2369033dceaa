"""What each live session is doing now: idle, busy, blocked (on a dialog) or unknown.

The configured adapter answers from the harness's own files first (docs/harnesses.md);
the panes it may also look at are read for the whole fleet in one batched tmux call
(`Tmux.pane_views`), never one call per session. Sessions started by another harness
than the configured one are "unknown": their files are not this adapter's to read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from .fleet import LIVE, Fleet

if TYPE_CHECKING:
    from loop_dispatch import HarnessAdapter
    from loop_dispatch.registry import SessionRecord
    from loop_tmux import PaneView, Tmux

__all__ = ["ACTIVITIES", "activities", "counts", "live_views"]

ACTIVITIES = ("idle", "busy", "blocked", "unknown")


def live_views(
    tmux: Tmux, records: Iterable[SessionRecord], fleet: Fleet, *, capture: bool
) -> dict[str, PaneView | None]:
    """The pane of every live session among `records`, in one batched tmux call; empty
    when tmux does not answer (nothing can be said of any of them then)."""
    from loop_tmux import TmuxUnavailable

    live = [r.tmux_name for r in records if fleet.presence(r.tmux_name) == LIVE]
    if not live:
        return {}
    try:
        return tmux.pane_views(live, capture=capture)
    except TmuxUnavailable:
        return {}


def activity_of(
    adapter: HarnessAdapter | None, record: SessionRecord, view: PaneView | None
) -> str | None:
    """One session's activity; None when its pane is not live (nothing runs).
    `adapter`: the one that started it (None: another harness's, "unknown")."""
    if view is None or view.dead:
        return None
    if adapter is None or record.harness != adapter.name:
        return "unknown"
    return adapter.activity(view, record.conversation_id)


def activities(
    adapter_of: Callable[[SessionRecord], HarnessAdapter | None],
    records: Iterable[SessionRecord],
    views: Mapping[str, PaneView | None],
) -> dict[str, str | None]:
    """ref -> activity (None for a session without a live pane), each read by the
    adapter of the harness that started it."""
    out: dict[str, str | None] = {}
    for record in records:
        view = views.get(record.tmux_name)
        live = view is not None and not view.dead  # the adapter is looked up for live ones
        out[str(record.work_item)] = activity_of(adapter_of(record), record, view) if live else None
    return out


def counts(found: Mapping[str, str | None]) -> dict[str, int]:
    """How many live sessions are in each activity (every activity named, zeros too)."""
    out = dict.fromkeys(ACTIVITIES, 0)
    for value in found.values():
        if value is not None:
            out[value] = out.get(value, 0) + 1
    return out
