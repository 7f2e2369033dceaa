"""Closing an item: terminate its harness (scrollback kept), close its record, release
its worktree. A close settles only once tmux says the harness is gone: a tmux that does
not answer leaves the record active and the close retried (transient). A busy harness is
left to finish its turn (`harness_busy`, transient, one `session.close_deferred`) until
`close_grace` runs out (issue 20: a close by someone else never cuts a turn short)."""

from __future__ import annotations

import time
from typing import Any

from loop_tmux import Presence

from .executor import Host, one_line
from .model import Event, WorkItemRef
from .reasons import Outcome, Reason
from .registry import SessionRecord
from .workspace import WorkspaceError, in_use

__all__ = ["Closer"]

SOURCE = "dispatcher"


class Closer:
    """The close rows of one dispatcher; remembers when it first found a harness busy."""

    def __init__(self, dispatcher: Host) -> None:
        self.d = dispatcher
        self._waits: dict[str, float] = {}  # delivery id -> monotonic first "busy"

    def close(
        self, ref: WorkItemRef, delivery_id: str | None, event: Event | None = None
    ) -> Outcome:
        d = self.d
        record = d.store.registry.get(ref)
        if record is None or not record.active:
            return Outcome.of(Reason.NO_ACTIVE_SESSION)
        terminated = None
        if d.kill_harness_on_close:
            # A ticket's close waits for the turn; the operator's `sessions stop` (no
            # event) ends the harness at once, as asked.
            waiting = None if event is None else self._waits_for_idle(record, delivery_id, event)
            if waiting is not None:
                return waiting
            gone = self._end_harness(record)
            if gone is not None:
                return self._failed(ref, delivery_id, gone)
            terminated = True
        waited = self._waits.pop(delivery_id or "", None)
        d.store.registry.close(ref)
        keep = event is not None and event.keep_workspace
        workspace = (
            self._keep_workspace(ref)
            if keep
            else self._release_workspace(ref, delivery_id, record.tmux_name)
        )
        d.events.emit(
            "session.closed",
            source=SOURCE,
            work_item=ref,
            delivery_id=delivery_id,
            detail={
                "tmux_name": record.tmux_name,
                "terminated": terminated,
                "harness_kept": not d.kill_harness_on_close,
                # who closed it: a login, "" when the ingress could not say
                "closed_by": None if event is None else one_line(event.actor)[:100],
                "waited_seconds": None if waited is None else round(time.monotonic() - waited, 1),
                **workspace,
            },
        )
        return Outcome.of(Reason.CLOSED)

    def _keep_workspace(self, ref: WorkItemRef) -> dict[str, Any]:
        """A close by someone who is not an authorized actor leaves the worktree and its
        branch in place: a reopen and relabel resumes there."""
        if self.d.workspaces is None:
            return {}
        return {"workspace": str(self.d.workspaces.path_for(ref)), "workspace_kept": True}

    def _waits_for_idle(
        self, record: SessionRecord, delivery_id: str | None, event: Event
    ) -> Outcome | None:
        """None when the harness may be ended now (idle, gone, or the grace is over);
        else a transient `harness_busy`, so the inbox tries the close again later."""
        d = self.d
        key = delivery_id or f"close:{record.work_item}"
        first = self._waits.get(key)
        if first is not None and time.monotonic() - first >= d.close_grace:
            return None
        if not self._busy(record):
            return None
        if first is None:
            self._waits[key] = time.monotonic()
            d.emit(
                "session.close_deferred",
                event,
                record.work_item,
                tmux_name=record.tmux_name,
                closed_by=one_line(event.actor)[:100],
                grace_seconds=d.close_grace,
            )
        return Outcome.of(
            Reason.HARNESS_BUSY,
            f"{record.tmux_name} is mid-turn: it is closed at its next idle moment "
            f"(at most {d.close_grace:g}s after the close was first held back)",
        )

    def _screen(self, name: str) -> str | None:
        """The live pane's screen; None when gone, dead or tmux did not answer."""
        seen = self.d.tmux.observe(name, capture=True)
        if seen.presence is not Presence.LIVE or seen.view is None or seen.view.dead:
            return None
        return seen.view.screen

    def _busy(self, record: SessionRecord) -> bool:
        """Is the harness mid-turn? The adapter's own reading, from the harness's files
        then its screen (`activity(view, conversation)`: "busy" or "idle"); otherwise a screen that
        changes within `close_quiet` seconds is a harness at work. No answer from tmux
        reads as not busy: the termination's own calls say what tmux can."""
        d = self.d
        seen = d.tmux.observe(record.tmux_name, capture=True)
        view = seen.view
        if seen.presence is not Presence.LIVE or view is None or view.dead or view.screen is None:
            return False
        activity = d.adapter.activity(view, record.conversation_id)
        if activity in ("busy", "idle"):
            return activity == "busy"
        d.sleep(d.close_quiet)
        later = self._screen(record.tmux_name)
        return later is not None and later != view.screen

    def _release_workspace(
        self, ref: WorkItemRef, delivery_id: str | None, tmux_name: str
    ) -> dict[str, Any]:
        """Remove the item's worktree when that loses nothing and nothing runs there (a
        harness kept by `kill_harness_on_close=False`, a process inside it, a tmux that
        does not answer); else keep it, saying why (one event). Runs under the item's
        lock, so no spawn starts between the check and the removal. Never fails the
        close: the record is already closed."""
        d = self.d
        if d.workspaces is None:
            return {}
        path = d.workspaces.path_for(ref)
        try:
            busy = in_use(path, d.tmux, tmux_name) if path.exists() else ""
            if busy:
                reason, kept = busy, True
            else:
                state = d.workspaces.release(ref)
                if not state.exists:
                    return {}
                reason, kept = state.why_kept(), not state.clean
        except WorkspaceError as exc:
            reason = one_line(str(exc))
            kept = True
        d.events.emit(
            "workspace.kept" if kept else "workspace.removed",
            level="warning" if kept else "info",
            source=SOURCE,
            work_item=ref,
            delivery_id=delivery_id,
            detail={"path": str(path), **({"reason": reason} if kept else {})},
        )
        return {"workspace": str(path), "workspace_kept": kept}

    def _end_harness(self, record: SessionRecord) -> Outcome | None:
        """Terminate the pane's programs; None once tmux says none is live."""
        tmux = self.d.tmux
        presence = tmux.probe(record.tmux_name)
        if presence is Presence.LIVE and tmux.terminate(record.tmux_name, self.d.terminate_grace):
            return None
        if presence is Presence.LIVE:
            presence = tmux.probe(record.tmux_name)
        if presence is Presence.UNKNOWN:
            return Outcome.of(
                Reason.TMUX_UNAVAILABLE, f"tmux did not answer about {record.tmux_name}"
            )
        if presence is Presence.LIVE:
            return Outcome.of(
                Reason.TERMINATE_FAILED, f"a program in {record.tmux_name} outlived SIGKILL"
            )
        return None

    def _failed(self, ref: WorkItemRef, delivery_id: str | None, outcome: Outcome) -> Outcome:
        self.d.events.emit(
            "dispatch.failed",
            level="warning",
            source=SOURCE,
            work_item=ref,
            delivery_id=delivery_id,
            detail={"reason": outcome.reason, "error": outcome.detail, "kind": "closed"},
        )
        return outcome
