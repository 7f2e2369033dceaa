"""The dispatcher: one event in, one outcome out, never a live agent destroyed.

It decides; loop-tmux acts. The decision tree is seed 002's (AC2, AC6-AC12), one small
method per branch:

1. duplicate delivery id -> `duplicate` (logged at debug);
2. no active session -> first spawn, fresh conversation, under a spawn token recorded
   before tmux is asked; a live occupant carrying one of this item's tokens is ours
   (a spawn tmux carried out late) and is adopted; one without is never killed:
   failed, with the operator's remedy named;
3. active session -> deliver -> processed;
4. deliver unanswered (not a definite "missing") -> failed, retryable; never a respawn (AC2);
5. deliver says missing -> re-probe: live -> deliver into it, recorded as an averted
   respawn (AC6); otherwise respawn, resuming the recorded conversation when the adapter
   can and the pane survives a short window, else a fresh conversation with
   `session.resume_failed` (AC12);
6. a spawn on the respawn path that meets a live occupant delivers into it (AC7); an
   unclearable occupant -> skipped, `session_occupied`, delivery kept (AC8); any other
   failure -> failed, delivery released (AC9);
7. close events terminate the harness (scrollback kept) and close the record, only once
   tmux says the harness is gone (a silent tmux leaves the close to be retried); a busy
   harness is ended only at its next idle moment or once `close_grace` has passed
   (issue 20: a close by someone else never cuts a turn short);
8. an event that may not start an agent (`Event.spawns` false: a CI result, a PR's
   closing) for an item without an active session -> skipped, `not_taken_on`.

Failed outcomes are transient (`TRANSIENT_REASONS`: retried by the inbox without using
up an attempt) or definite (counted against the attempt budget).

Every branch emits its own event type (AC10). Everything runs under the work item's
file lock, so two processes never act on one item at once.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any

from loop_tmux import DeliverResult, Presence, SpawnOutcome, SpawnResult, Tmux, TmuxUnavailable

from .adapters import HarnessAdapter, Readiness, new_conversation_id
from .eventlog import EventLog
from .framing import frame, spawn_prompt
from .launch import Launcher, default_launcher
from .lock import LockTimeout, LockUnavailable
from .model import Event, EventKind, WorkItemRef
from .pastegate import PasteGate
from .registry import SessionRecord
from .relaunch import Relauncher
from .store import Store, StoreError
from .workspace import WorkspaceError, Workspaces, in_use

__all__ = ["TRANSIENT_REASONS", "Dispatcher", "Outcome", "OutcomeKind"]

SOURCE = "dispatcher"

# Failures that say nothing about the event: tmux did not answer, the item's lock or the
# store is busy, the harness is not ready yet. The inbox retries them with backoff until
# its time horizon, never counting them against the attempt budget. Every other failed
# reason is definite (the harness cannot start, a stranger holds the name, tmux refused).
TRANSIENT_REASONS = frozenset(
    {
        "tmux_unavailable",
        "deliver_unavailable",
        "probe_unknown",
        "spawn_unanswered",
        "item_locked",
        "store_unavailable",
        "lock_unavailable",
        "harness_not_ready",
        "harness_blocked",
        "launch_unavailable",
        "harness_busy",
    }
)


class OutcomeKind(str, Enum):
    PROCESSED = "processed"
    FAILED = "failed"  # retryable: the delivery id is released
    SKIPPED = "skipped"  # non-retryable: the delivery id is kept
    DUPLICATE = "duplicate"


@dataclass(frozen=True)
class Outcome:
    """What became of one event. `reason` is a stable token; `detail` one line for humans."""

    kind: OutcomeKind
    reason: str
    detail: str = ""
    # The harness's own files hold the pasted text (adapters with receipts).
    confirmed: bool = False

    @property
    def retryable(self) -> bool:
        return self.kind is OutcomeKind.FAILED

    @property
    def transient(self) -> bool:
        """A failure that says nothing about the event (retried, never counted)."""
        return self.kind is OutcomeKind.FAILED and self.reason in TRANSIENT_REASONS


def _processed(reason: str, detail: str = "", *, confirmed: bool = False) -> Outcome:
    return Outcome(OutcomeKind.PROCESSED, reason, detail, confirmed)


def _failed(reason: str, detail: str = "") -> Outcome:
    return Outcome(OutcomeKind.FAILED, reason, detail)


def _capability(adapter: object, name: str, default: Callable[..., Any]) -> Callable[..., Any]:
    """An adapter's optional capability, or `default` for adapters without it."""
    found = getattr(adapter, name, None)
    return found if callable(found) else default


def _epoch(moment: datetime) -> float:
    return moment.timestamp() if moment.tzinfo else moment.replace(tzinfo=timezone.utc).timestamp()


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())[:500]


class Dispatcher:
    """Turns events into tmux actions for one harness adapter and one tmux server."""

    def __init__(
        self,
        store: Store,
        tmux: Tmux,
        adapter: HarnessAdapter,
        events: EventLog,
        version: str,
        *,
        cwd_for: Callable[[WorkItemRef], Path],
        lock_dir: Path,
        launcher: Launcher = default_launcher,
        survival_delay: float = 1.0,
        terminate_grace: float = 5.0,
        lock_timeout: float | None = None,
        kill_harness_on_close: bool = True,
        receipt_seconds: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
        workspaces: Workspaces | None = None,
        paste_gate: PasteGate | None = None,
        close_grace: float = 600.0,
        close_quiet: float = 1.0,
    ) -> None:
        self.store = store
        self.tmux = tmux
        self.adapter = adapter
        self.events = events
        self.version = version
        self.cwd_for = cwd_for
        self.lock_dir = Path(lock_dir)
        self.launcher = launcher
        self.survival_delay = survival_delay
        self.terminate_grace = terminate_grace
        self.lock_timeout = lock_timeout
        self.kill_harness_on_close = kill_harness_on_close
        # Lock, resume argv, spawn under a token, survival check, record: the steps env
        # rotation's relaunch takes too (relaunch.py).
        self.relauncher = Relauncher.with_item_locks(
            lock_dir=self.lock_dir,
            lock_timeout=lock_timeout,
            registry=store.registry,
            tmux=tmux,
            launcher=launcher,
            survival_delay=survival_delay,
        )
        self.receipt_seconds = receipt_seconds
        self._sleep = sleep
        self.workspaces = workspaces
        self.paste_gate = paste_gate
        # A close waits for the harness's idle moment at most `close_grace` seconds,
        # counted from the first time this dispatcher found it busy (monotonic clock);
        # `close_quiet`: how long a screen must stay still to read as idle when the
        # adapter cannot tell (see `_harness_busy`).
        self.close_grace = close_grace
        self.close_quiet = close_quiet
        self._close_waits: dict[str, float] = {}

    # -- entry points ----------------------------------------------------------------

    def dispatch(self, event: Event) -> Outcome:
        """Handle one event under its work item's lock; settle the delivery id.

        An item still locked after `lock_timeout` is an ordinary retryable failure
        (`item_locked`): nothing was claimed or done.
        """
        try:
            with self.relauncher.lock(event.work_item):
                return self._dispatch_locked(event)
        except LockTimeout as exc:
            outcome = _failed("item_locked", _one_line(str(exc)))
            self._emit_failed(event, outcome)
            return outcome
        except LockUnavailable as exc:
            outcome = _failed("lock_unavailable", _one_line(str(exc)))
            self._emit_failed(event, outcome, level="error")
            return outcome

    def _dispatch_locked(self, event: Event) -> Outcome:
        """The tree for one event, with the lock held: claim, decide, settle."""
        try:
            claimed = self.store.deliveries.claim(event.delivery_id, reclaim_in_flight=True)
        except (sqlite3.Error, StoreError) as exc:
            # Nothing was claimed and nothing done: an ordinary retryable failure.
            outcome = _failed("store_unavailable", _one_line(str(exc)))
            self._emit_failed(event, outcome, level="error")
            return outcome
        if not claimed:
            return self._duplicate(event)
        try:
            outcome = self._decide(event)
        except StoreError as exc:  # a hand-edited or damaged row: named, never guessed at
            outcome = _failed("store_unavailable", _one_line(str(exc)))
            self._emit_failed(event, outcome, level="error")
        except TmuxUnavailable as exc:
            outcome = _failed("tmux_unavailable", _one_line(str(exc)))
            self._emit_failed(event, outcome)
        except Exception as exc:  # an unexpected fault must not strand the claim
            outcome = _failed("internal_error", f"{type(exc).__name__}: {_one_line(str(exc))}")
            self._emit_failed(event, outcome, level="error")
        try:
            self._settle(event, outcome)
        except Exception as exc:
            # The work is done (a paste may have landed): report the outcome anyway, so
            # the caller settles its own record rather than pasting again.
            self._emit(
                "dispatch.settle_failed",
                event,
                event.work_item,
                "error",
                reason=outcome.reason,
                error=f"{type(exc).__name__}: {_one_line(str(exc))}",
            )
        return outcome

    def start(
        self, ref: WorkItemRef, prompt: str, *, actor: str = "operator", url: str = ""
    ) -> Outcome:
        """Manual start (`the-loop sessions start`): a MANUAL event through the same tree."""
        event = Event(
            delivery_id=f"manual:{uuid.uuid4()}",
            work_item=ref,
            kind=EventKind.MANUAL,
            actor=actor,
            body=prompt,
            url=url,
            created_at=datetime.now(timezone.utc),
        )
        return self.dispatch(event)

    def close(self, ref: WorkItemRef, *, delivery_id: str | None = None) -> Outcome:
        """Terminate the item's harness (keeping scrollback) and close its record.

        With `kill_harness_on_close=False` the harness is left running; a later event
        then meets it as a live occupant carrying this item's spawn token and adopts it.
        """
        try:
            with self.relauncher.lock(ref):
                return self._close(ref, delivery_id)
        except LockUnavailable as exc:
            return _failed("lock_unavailable", _one_line(str(exc)))

    # -- settling ----------------------------------------------------------------------

    def _settle(self, event: Event, outcome: Outcome) -> None:
        deliveries = self.store.deliveries
        if outcome.kind is OutcomeKind.FAILED:
            deliveries.release(event.delivery_id)
        elif outcome.kind is OutcomeKind.SKIPPED:
            deliveries.keep(event.delivery_id, "skipped")
        else:
            deliveries.keep(event.delivery_id, "processed")

    def _emit(
        self, type_: str, event: Event | None, ref: WorkItemRef, level: str = "info", **detail: Any
    ) -> None:
        self.events.emit(
            type_,
            level=level,
            source=SOURCE,
            work_item=ref,
            delivery_id=None if event is None else event.delivery_id,
            detail=detail,
        )

    def _emit_failed(self, event: Event, outcome: Outcome, level: str = "warning") -> None:
        self._emit(
            "dispatch.failed",
            event,
            event.work_item,
            level,
            reason=outcome.reason,
            error=outcome.detail,
            kind=event.kind.value,
        )

    # -- 1. duplicate --------------------------------------------------------------------

    def _duplicate(self, event: Event) -> Outcome:
        self._emit(
            "dispatch.duplicate",
            event,
            event.work_item,
            "debug",
            state=self.store.deliveries.state(event.delivery_id),
        )
        return Outcome(OutcomeKind.DUPLICATE, "duplicate_delivery")

    # -- the tree ----------------------------------------------------------------------

    def _decide(self, event: Event) -> Outcome:
        if event.kind is EventKind.CLOSED:
            return self._close(event.work_item, event.delivery_id, event)
        record = self.store.registry.get(event.work_item)
        carried = self._carried_by_spawn(event, record)
        if carried is not None:
            return carried
        if (record is None or not record.active) and not event.spawns:
            return self._not_taken_on(event)
        if record is None or not record.active:
            if event.kind is EventKind.MANUAL and self._resumable(record):
                assert record is not None
                return self._reopen(event, record)
            return self._first_spawn(event, record)
        return self._deliver(record, event)

    def _not_taken_on(self, event: Event) -> Outcome:
        """An event only for an agent already at work (a CI result, a PR's closing)
        meets an item nobody took on: it starts nothing (issue 20)."""
        self._emit("dispatch.not_taken_on", event, event.work_item, kind=event.kind.value)
        return Outcome(OutcomeKind.SKIPPED, "not_taken_on", "the item has no active session")

    # -- 2b. an operator's start of a stopped session: its conversation goes on ---------------

    def _resumable(self, record: SessionRecord | None) -> bool:
        """A closed record whose conversation this adapter can resume."""
        return (
            record is not None
            and bool(record.conversation_id)
            and record.harness == self.adapter.name
            and self.adapter.can_resume
        )

    def _reopen(self, event: Event, previous: SessionRecord) -> Outcome:
        """`sessions start` after `sessions stop`: the record is active again under its
        conversation, and the harness is respawned resuming it (the respawn path: a
        conversation with nothing saved falls back to a fresh one, `session.resume_failed`).
        A live occupant takes the first-spawn path, which adopts ours or refuses a
        stranger's."""
        presence = self.tmux.probe(previous.tmux_name)
        if presence is Presence.UNKNOWN:
            raise TmuxUnavailable(f"tmux did not answer whether {previous.tmux_name} is live")
        if presence is Presence.LIVE:
            return self._first_spawn(event, previous)
        cwd = self._workspace(event)
        if isinstance(cwd, Outcome):
            return cwd
        record = self.store.registry.register(
            event.work_item,
            harness=previous.harness,
            conversation_id=previous.conversation_id,
            cwd=cwd,
        )
        outcome = self._respawn(record, event, presence)
        if outcome.kind is not OutcomeKind.PROCESSED:
            self._undo_register(event.work_item, previous)
        return outcome

    # -- 1b. an earlier attempt's harness already holds the event ----------------------------

    def _carried_by_spawn(self, event: Event, record: SessionRecord | None) -> Outcome | None:
        """An earlier attempt of this very event started a harness with it as its prompt
        (the attempt was killed before its settle, or tmux carried the spawn out late):
        that live harness holds the event already, so it is adopted, never pasted into.

        One indexed store lookup for every event; tmux is asked only when the lookup
        finds a spawn of this event. None: take the ordinary path.
        """
        ref = event.work_item
        tokens = self.store.registry.tokens_carrying(ref, event.delivery_id)
        if not tokens:
            return None
        name = record.tmux_name if record is not None else ref.tmux_name()
        token = self.tmux.session_token(name)  # TmuxUnavailable: a transient failure
        if token not in tokens:
            return None  # that harness is gone (or never came): deliver as usual
        presence = self.tmux.probe(name)
        if presence is Presence.UNKNOWN:
            # Not knowing is not "gone": the ordinary path would paste into it again.
            raise TmuxUnavailable(f"tmux did not answer whether {name} is live")
        if presence is not Presence.LIVE:
            return None
        return self._carried(event, record, name, token)

    def _carried(
        self, event: Event, record: SessionRecord | None, name: str, token: str
    ) -> Outcome | None:
        """Adopt the live harness started with this event as its prompt; nothing is pasted."""
        ref = event.work_item
        spawned = self.store.registry.token_spawn(ref, token)
        if spawned is None:  # the token row went with a reset: ordinary path
            return None
        if record is None or not record.active or record.conversation_id != spawned.conversation_id:
            adopted = self.store.registry.register(
                ref,
                harness=spawned.harness,
                conversation_id=spawned.conversation_id,
                cwd=spawned.cwd,
            )
            self._emit(
                "session.adopted",
                event,
                ref,
                tmux_name=adopted.tmux_name,
                conversation_id=adopted.conversation_id,
                harness=adopted.harness,
                carried=True,
            )
        self._emit("dispatch.carried", event, ref, tmux_name=name, token_matched=True)
        return _processed("carried_by_spawn")

    # -- 2. first spawn --------------------------------------------------------------------

    def _first_spawn(self, event: Event, previous: SessionRecord | None) -> Outcome:
        """Register first, then spawn: a crash in between heals as a respawn next time."""
        ref = event.work_item
        cwd = self._workspace(event)
        if isinstance(cwd, Outcome):
            return cwd
        conversation = self._new_conversation()
        started = time.time()
        record = self.store.registry.register(
            ref, harness=self.adapter.name, conversation_id=conversation, cwd=cwd
        )
        prompt, cut = spawn_prompt(event)
        argv = self.adapter.fresh_argv(prompt, conversation or "")
        result = self._spawn(record, argv, delivery_id=event.delivery_id)
        if result.outcome is SpawnOutcome.SPAWNED and self._exited_at_once(record):
            # Nothing ran: the event is not used up. The dead pane keeps its scrollback
            # (why it died) until the retry clears it.
            self._undo_register(ref, previous)
            return self._harness_exited(event, record)
        if result.outcome is SpawnOutcome.SPAWNED:
            conversation = self._discover(record, started) or conversation
            self._emit(
                "session.spawned",
                event,
                ref,
                tmux_name=record.tmux_name,
                harness=record.harness,
                conversation_id=conversation,
                cwd=str(record.cwd),
                pid=result.pid,
                cut_chars=cut,
            )
            return _processed("spawned")
        self._undo_register(ref, previous)
        if result.outcome is SpawnOutcome.OCCUPIED_LIVE:
            return self._occupied_live(event, record)
        if result.outcome is SpawnOutcome.OCCUPIED_UNCLEARABLE:
            return self._skip_occupied(event, record, result, path="first_spawn")
        # tmux silent: it may still create the session when it resumes; that session
        # carries our token and is adopted by the next attempt.
        reason = "spawn_failed" if result.answered else "spawn_unanswered"
        outcome = _failed(reason, _one_line(result.error))
        self._emit_failed(event, outcome)
        return outcome

    def _occupied_live(self, event: Event, record: SessionRecord) -> Outcome:
        """A live session holds the item's name while no active session is registered:
        ours (its spawn token is one this item recorded) is adopted and handed the event;
        a stranger's is never touched."""
        ref = event.work_item
        token = self.tmux.session_token(record.tmux_name)
        if token is not None and token in self.store.registry.tokens_carrying(
            ref, event.delivery_id
        ):
            # tmux carried this event's own spawn out between our probe and our spawn.
            carried = self._carried(event, None, record.tmux_name, token)
            if carried is not None:
                return carried
        spawned = None if token is None else self.store.registry.token_spawn(ref, token)
        if spawned is None:
            outcome = _failed(
                "occupied_unregistered",
                f"tmux session {record.tmux_name} is live but no active session is registered "
                f"for {ref} and it carries no spawn token of this item; it was not touched. "
                f"Remedy: `tmux kill-session -t {record.tmux_name}` or `the-loop sessions "
                f"reset {ref}`",
            )
            self._emit_failed(event, outcome, level="error")
            return outcome
        adopted = self.store.registry.register(
            ref,
            harness=spawned.harness,
            conversation_id=spawned.conversation_id,
            cwd=spawned.cwd,
        )
        held = self._hold_back(adopted, event)
        if held is not None:
            return held
        result, confirm = self._paste(adopted, event)
        if not result.ok:
            # Registered now: the retry takes the ordinary delivery path.
            reason = "deliver_failed" if result.session_missing else "deliver_unavailable"
            outcome = _failed(reason, _one_line(result.error))
            self._emit_failed(event, outcome)
            return outcome
        self._emit(
            "session.adopted",
            event,
            ref,
            tmux_name=adopted.tmux_name,
            conversation_id=adopted.conversation_id,
            harness=adopted.harness,
        )
        return _processed("adopted", confirmed=confirm())

    def _workspace(self, event: Event) -> Path | Outcome:
        """Where the item's harness runs: its worktree (made now if needed, trust seeded
        where the adapter knows how) or, in shared mode, the configured cwd."""
        ref = event.work_item
        if self.workspaces is None:
            return self.cwd_for(ref)
        try:
            path = self.workspaces.ensure(ref)
        except WorkspaceError as exc:
            outcome = _failed("workspace_failed", _one_line(str(exc)))
            self._emit_failed(event, outcome, level="error")
            return outcome
        prepare = getattr(self.adapter, "prepare_workspace", None)
        if prepare is not None:
            try:
                prepare(path)
            except Exception as exc:  # trust not seeded: the agent may stop at a dialog
                self._emit(
                    "workspace.trust_failed",
                    event,
                    ref,
                    "warning",
                    path=str(path),
                    error=_one_line(str(exc)),
                )
        return path

    def _undo_register(self, ref: WorkItemRef, previous: SessionRecord | None) -> None:
        if previous is None:
            self.store.registry.reset(ref)
        else:
            self.store.registry.restore(previous)

    def _spawn(
        self,
        record: SessionRecord,
        harness_argv: list[str],
        conversation: str | None = None,
        *,
        delivery_id: str,
    ) -> SpawnResult:
        """Spawn under a fresh token, recorded in the store before tmux is asked, naming
        the event the harness starts with as its prompt. Nothing is spawned once this
        host's lease ran out by its own clock (a transient failure: retried, or taken
        over by the host that holds the item by then)."""
        refusal = self.paste_gate.refusal() if self.paste_gate is not None else None
        if refusal is not None:
            return SpawnResult(outcome=SpawnOutcome.FAILED, error=refusal, answered=False)
        return self.relauncher.spawn(
            record,
            harness_argv,
            conversation,
            delivery_id=delivery_id,
            extra_env=_capability(self.adapter, "launch_env", dict)(),
        )

    # -- the harness's own word: conversation ids, readiness, receipts -----------------------

    def _new_conversation(self) -> str | None:
        """Our id for a new conversation, or None for a harness that picks its own."""
        return (
            new_conversation_id()
            if getattr(self.adapter, "assigns_conversation_id", True)
            else None
        )

    def _discover(self, record: SessionRecord, started: float, *, wait: bool = True) -> str | None:
        """Codex: read the id of the conversation this spawn started from the harness's
        own files (bounded wait) and record it; None while unknown (not resumable)."""
        if getattr(self.adapter, "assigns_conversation_id", True):
            return None
        discover = _capability(self.adapter, "discover_conversation", lambda *_: None)
        others = {
            r.conversation_id
            for r in self.store.registry.list()
            if r.conversation_id and r.work_item != record.work_item
        }
        deadline = time.monotonic() + self.receipt_seconds
        while True:
            found = discover(record.cwd, started, others)
            if found is not None:
                self.store.registry.set_conversation(record.work_item, found)
                return str(found)
            if not wait or time.monotonic() >= deadline:
                return None
            self._sleep(0.2)

    def _hold_back(self, record: SessionRecord, event: Event) -> Outcome | None:
        """Readiness before a paste: None when the paste may go in; else a transient
        failure (the inbox retries it), with `session.blocked` for a dialog."""
        if not getattr(self.adapter, "reads_screen", False):
            return None
        try:
            view = self.tmux.pane_view(record.tmux_name, capture=True)
        except TmuxUnavailable:
            return None  # the paste's own call says what tmux can
        if view is None or view.dead:
            return None  # the paste reports the session missing: the respawn path
        readiness: Readiness = self.adapter.readiness(view)  # type: ignore[attr-defined]
        if readiness.ready:
            return None
        if readiness.dialog is not None:
            self._emit(
                "session.blocked",
                event,
                record.work_item,
                "warning",
                tmux_name=record.tmux_name,
                harness=self.adapter.name,
                dialog=readiness.dialog,
            )
            outcome = _failed(
                "harness_blocked",
                f"{readiness.detail}; nothing was typed into it. Answer it once "
                f"(`tmux attach -t {record.tmux_name}`) or settle it in the harness's settings "
                "(docs/harnesses.md)",
            )
        else:
            outcome = _failed("harness_not_ready", readiness.detail)
        self._emit_failed(event, outcome, level="info")
        return outcome

    def _paste(
        self, record: SessionRecord, event: Event
    ) -> tuple[DeliverResult, Callable[[], bool]]:
        """Paste the framed event. The callable returned confirms it (adapters with
        receipts), called once the caller has logged the delivery."""
        text = frame(event)
        if not getattr(self.adapter, "has_receipts", False):
            return self._gated_deliver(record.tmux_name, text, event), lambda: False
        conversation = record.conversation_id or self._discover(
            record, _epoch(record.updated_at), wait=False
        )
        mark = self.adapter.receipt_mark(conversation)  # type: ignore[attr-defined]
        result = self._gated_deliver(record.tmux_name, text, event)
        return result, lambda: self._confirm(record, event, conversation, mark, text)

    def _await_receipt(self, conversation: str | None, mark: int, text: str) -> tuple[str, float]:
        begun = time.monotonic()
        while True:
            receipt = self.adapter.receipt(conversation, mark, text)  # type: ignore[attr-defined]
            waited = time.monotonic() - begun
            # An "unknown" is waited out too: Claude Code writes a new conversation's file
            # only once its first turn is answered, after inputs queued meanwhile.
            if receipt.state == "confirmed" or waited >= self.receipt_seconds:
                return receipt.state, waited
            self._sleep(0.2)

    def _confirm(
        self, record: SessionRecord, event: Event, conversation: str | None, mark: int, text: str
    ) -> bool:
        """`dispatch.confirmed` once the harness's file holds the text; else one re-paste,
        only when the file proves it absent and the text is not sitting in the input
        box; else `dispatch.unconfirmed`."""
        state, waited = self._await_receipt(conversation, mark, text)
        repasted = False
        if state == "absent" and not self._on_screen(record, text):
            mark = self.adapter.receipt_mark(conversation)  # type: ignore[attr-defined]
            if self._gated_deliver(record.tmux_name, text, event).ok:
                repasted = True
                state, more = self._await_receipt(conversation, mark, text)
                waited += more
        detail: dict[str, Any] = {
            "tmux_name": record.tmux_name,
            "conversation_id": conversation,
            "waited_seconds": round(waited, 3),
            "repasted": repasted,
        }
        if state == "confirmed":
            self._emit("dispatch.confirmed", event, record.work_item, **detail)
            return True
        self._emit(
            "dispatch.unconfirmed", event, record.work_item, "warning", receipt=state, **detail
        )
        return False

    def _on_screen(self, record: SessionRecord, text: str) -> bool:
        """Is the text's first line visible (left unsent in the input box)? Unknown = yes."""
        try:
            view = self.tmux.pane_view(record.tmux_name, capture=True)
        except TmuxUnavailable:
            return True
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")[:60]
        return view is None or view.screen is None or (bool(first) and first in view.screen)

    # -- 3./4. deliver into an active session ------------------------------------------------

    def _gated_deliver(self, name: str, text: str, event: Event) -> DeliverResult:
        """Every paste goes through here: inside a drain's attempt, one at a time from the
        paste to its delivery record (see pastegate.py), so a kill repeats at most one
        paste. The record is written at once, before any receipt is awaited."""
        gate = self.paste_gate
        if gate is not None and not gate.enter():
            return DeliverResult(
                ok=False,
                session_missing=False,
                error="another paste is being recorded (paste gate busy); retried",
            )
        try:
            # Checked as late as can be: a host whose lease ran out pastes nothing.
            refusal = gate.refusal() if gate is not None else None
            if refusal is not None:
                return DeliverResult(ok=False, session_missing=False, error=refusal)
            result = self.tmux.deliver(name, text)
            if result.ok:
                # A store that cannot record it now is retried by the attempt's settle.
                with contextlib.suppress(Exception):
                    self.store.deliveries.keep(event.delivery_id, "processed")
            return result
        finally:
            if gate is not None:
                gate.leave()

    def _own_spawn_holds_it(self, record: SessionRecord, event: Event) -> Outcome | None:
        """Just before a paste: is the live session the one an earlier attempt of this
        event spawned with it as prompt (tmux carried that spawn out since the check at
        the top)? Then it is adopted, not pasted into. One indexed lookup; tmux is asked
        only for an event that has such a spawn."""
        tokens = self.store.registry.tokens_carrying(event.work_item, event.delivery_id)
        if not tokens:
            return None
        token = self.tmux.session_token(record.tmux_name)  # TmuxUnavailable: transient
        if token not in tokens:
            return None
        return self._carried(event, record, record.tmux_name, token)

    def _deliver(self, record: SessionRecord, event: Event) -> Outcome:
        carried = self._own_spawn_holds_it(record, event)
        if carried is not None:
            return carried
        held = self._hold_back(record, event)
        if held is not None:
            return held
        result, confirm = self._paste(record, event)
        if result.ok:
            self._emit("dispatch.delivered", event, record.work_item, tmux_name=record.tmux_name)
            return _processed("delivered", confirmed=confirm())
        if not result.session_missing:
            return self._deliver_unanswered(event, result.error)
        return self._session_missing(record, event)

    def _deliver_unanswered(self, event: Event, error: str | None) -> Outcome:
        """AC2: silence from tmux is a transient fault, never a reason to respawn."""
        outcome = _failed("deliver_unavailable", _one_line(error))
        self._emit_failed(event, outcome)
        return outcome

    # -- 5. missing session: re-probe, then averted respawn or respawn ------------------------

    def _session_missing(self, record: SessionRecord, event: Event) -> Outcome:
        presence = self.tmux.probe(record.tmux_name)
        if presence is Presence.LIVE:
            return self._deliver_into_occupant(record, event, via="reprobe")
        if presence is Presence.UNKNOWN:
            outcome = _failed("probe_unknown", f"re-probe of {record.tmux_name} got no answer")
            self._emit_failed(event, outcome)
            return outcome
        return self._respawn(record, event, presence)

    def _deliver_into_occupant(self, record: SessionRecord, event: Event, *, via: str) -> Outcome:
        """AC6/AC7: the session is live after all: hand it the event instead of respawning."""
        carried = self._own_spawn_holds_it(record, event)
        if carried is not None:
            return carried
        held = self._hold_back(record, event)
        if held is not None:
            return held
        result, confirm = self._paste(record, event)
        if not result.ok:
            outcome = _failed("deliver_failed", _one_line(result.error))
            self._emit_failed(event, outcome)
            return outcome
        self._emit(
            "session.respawn_averted",
            event,
            record.work_item,
            tmux_name=record.tmux_name,
            via=via,
        )
        return _processed("respawn_averted", confirmed=confirm())

    def _respawn(self, record: SessionRecord, event: Event, presence: Presence) -> Outcome:
        if self.workspaces is not None:
            # The same worktree as before (its path is the item's): remade if it went.
            cwd = self._workspace(event)
            if isinstance(cwd, Outcome):
                return cwd
        prompt, cut = spawn_prompt(event)
        if not record.conversation_id and self._discover(
            record, _epoch(record.updated_at), wait=False
        ):
            record = self.store.registry.get(record.work_item) or record
        if not self.adapter.can_resume:
            self._resume_failed(event, record, "adapter_cannot_resume")
        elif not record.conversation_id:
            self._resume_failed(event, record, "no_recorded_conversation")
        elif not _capability(self.adapter, "resumable", lambda _c: True)(record.conversation_id):
            # Nothing saved under the id (killed before its first turn was written): a
            # resume would exit "No conversation found"; start fresh instead.
            self._resume_failed(event, record, "nothing_saved")
        else:
            outcome = self._respawn_resume(record, event, prompt, cut, presence)
            if outcome is not None:
                return outcome
        return self._respawn_fresh(record, event, prompt, cut, presence)

    def _respawn_resume(
        self, record: SessionRecord, event: Event, prompt: str, cut: int, presence: Presence
    ) -> Outcome | None:
        """Resume the recorded conversation; None means "fall back to a fresh one"."""
        argv = self.relauncher.resume_argv(self.adapter, record, prompt)
        assert argv is not None  # the caller checked it can resume
        result = self._spawn(record, argv, delivery_id=event.delivery_id)
        if result.outcome is not SpawnOutcome.SPAWNED:
            return self._respawn_spawn_refused(record, event, result)
        # None: tmux did not answer. The resume was spawned and carries the event as its
        # prompt; starting a second conversation on a guess would be worse than an
        # unverified resume.
        survived = self.relauncher.survived(record.tmux_name)
        if survived is False:
            self._resume_failed(event, record, "exited_within_survival_window")
            return None
        self._emit(
            "session.respawned",
            event,
            record.work_item,
            tmux_name=record.tmux_name,
            resumed=True,
            verified=survived is True,
            conversation_id=record.conversation_id,
            previous=presence.value,
            pid=result.pid,
            cut_chars=cut,
        )
        return _processed("respawned")

    def _respawn_fresh(
        self, record: SessionRecord, event: Event, prompt: str, cut: int, presence: Presence
    ) -> Outcome:
        conversation = self._new_conversation()
        started = time.time()
        argv = self.adapter.fresh_argv(prompt, conversation or "")
        result = self._spawn(record, argv, conversation, delivery_id=event.delivery_id)
        if result.outcome is not SpawnOutcome.SPAWNED:
            return self._respawn_spawn_refused(record, event, result)
        if self._exited_at_once(record):
            return self._harness_exited(event, record)
        self.relauncher.record_conversation(record.work_item, conversation)
        conversation = self._discover(record, started) or conversation
        self._emit(
            "session.respawned",
            event,
            record.work_item,
            tmux_name=record.tmux_name,
            resumed=False,
            conversation_id=conversation,
            previous=presence.value,
            pid=result.pid,
            cut_chars=cut,
        )
        return _processed("respawned_fresh")

    def _exited_at_once(self, record: SessionRecord) -> bool:
        """Did a freshly started harness die inside the survival window?

        Only a definite answer counts: a tmux that does not answer leaves the spawn
        standing (unverified) rather than failing an event that may be running.
        """
        return self.relauncher.survived(record.tmux_name) is False

    def _harness_exited(self, event: Event, record: SessionRecord) -> Outcome:
        """A harness that cannot start (bad flag, missing binary or env file) must not
        consume the event: retryable, so it is handled once the cause is fixed."""
        outcome = _failed(
            "harness_exited",
            f"the harness exited within {self.survival_delay:g}s of starting; its output "
            f"stays in tmux session {record.tmux_name} until the next attempt",
        )
        self._emit_failed(event, outcome, level="error")
        return outcome

    def _resume_failed(self, event: Event, record: SessionRecord, reason: str) -> None:
        self._emit(
            "session.resume_failed",
            event,
            record.work_item,
            "warning",
            tmux_name=record.tmux_name,
            reason=reason,
            conversation_id=record.conversation_id,
            harness=self.adapter.name,
        )

    # -- 6. a spawn on the respawn path did not spawn ---------------------------------------

    def _respawn_spawn_refused(
        self, record: SessionRecord, event: Event, result: SpawnResult
    ) -> Outcome:
        if result.outcome is SpawnOutcome.OCCUPIED_LIVE:
            return self._deliver_into_occupant(record, event, via="spawn")
        if result.outcome is SpawnOutcome.OCCUPIED_UNCLEARABLE:
            return self._skip_occupied(event, record, result, path="respawn")
        reason = "respawn_failed" if result.answered else "spawn_unanswered"
        outcome = _failed(reason, _one_line(result.error))
        self._emit_failed(event, outcome)
        return outcome

    def _skip_occupied(
        self, event: Event, record: SessionRecord, result: SpawnResult, *, path: str
    ) -> Outcome:
        """AC8: an occupant that is not live and cannot be cleared; retrying cannot help."""
        detail = (
            f"tmux session {record.tmux_name} is held by an occupant that cannot be cleared "
            f"({_one_line(result.error)}); remedy: `tmux kill-session -t {record.tmux_name}`"
        )
        self._emit(
            "dispatch.skipped",
            event,
            record.work_item,
            "warning",
            reason="session_occupied",
            tmux_name=record.tmux_name,
            path=path,
            error=detail,
        )
        return Outcome(OutcomeKind.SKIPPED, "session_occupied", detail)

    # -- 7. close ----------------------------------------------------------------------------

    def _close(
        self, ref: WorkItemRef, delivery_id: str | None, event: Event | None = None
    ) -> Outcome:
        """Close settles only once the harness is gone: a tmux that does not answer
        leaves the record active and the close retried (transient), so a close handled
        during a stall still ends the agent once tmux answers. A busy harness is left to
        finish its turn (`harness_busy`, transient) until `close_grace` runs out."""
        record = self.store.registry.get(ref)
        if record is None or not record.active:
            return _processed("no_active_session")
        terminated = None
        if self.kill_harness_on_close:
            # A ticket's close waits for the turn; the operator's `sessions stop` (no
            # event) ends the harness at once, as asked.
            waiting = (
                None if event is None else self._close_waits_for_idle(record, delivery_id, event)
            )
            if waiting is not None:
                return waiting
            gone = self._end_harness(record)
            if gone is not None:
                return self._close_failed(ref, delivery_id, gone)
            terminated = True
        waited = self._close_waits.pop(delivery_id or "", None)
        self.store.registry.close(ref)
        keep = event is not None and event.keep_workspace
        workspace = (
            self._keep_workspace(ref)
            if keep
            else self._release_workspace(ref, delivery_id, record.tmux_name)
        )
        self.events.emit(
            "session.closed",
            source=SOURCE,
            work_item=ref,
            delivery_id=delivery_id,
            detail={
                "tmux_name": record.tmux_name,
                "terminated": terminated,
                "harness_kept": not self.kill_harness_on_close,
                # who closed it: a login, "" when the ingress could not say
                "closed_by": None if event is None else _one_line(event.actor)[:100],
                "waited_seconds": None if waited is None else round(time.monotonic() - waited, 1),
                **workspace,
            },
        )
        return _processed("closed")

    def _keep_workspace(self, ref: WorkItemRef) -> dict[str, Any]:
        """A close by someone who is not an authorized actor leaves the worktree and its
        branch in place: a reopen and relabel resumes there."""
        if self.workspaces is None:
            return {}
        return {"workspace": str(self.workspaces.path_for(ref)), "workspace_kept": True}

    def _close_waits_for_idle(
        self, record: SessionRecord, delivery_id: str | None, event: Event | None
    ) -> Outcome | None:
        """None when the harness may be ended now (idle, gone, or the grace is over);
        else a transient `harness_busy`, so the inbox tries the close again later."""
        key = delivery_id or f"close:{record.work_item}"
        first = self._close_waits.get(key)
        if first is not None and time.monotonic() - first >= self.close_grace:
            return None
        if not self._harness_busy(record):
            return None
        if first is None:
            self._close_waits[key] = time.monotonic()
            self._emit(
                "session.close_deferred",
                event,
                record.work_item,
                tmux_name=record.tmux_name,
                closed_by=None if event is None else _one_line(event.actor)[:100],
                grace_seconds=self.close_grace,
            )
        return _failed(
            "harness_busy",
            f"{record.tmux_name} is mid-turn: it is closed at its next idle moment "
            f"(at most {self.close_grace:g}s after the close was first held back)",
        )

    def _harness_busy(self, record: SessionRecord) -> bool:
        """Is the harness mid-turn? The adapter's own reading of its screen when it has
        one (`activity(view)`: "busy", "idle" or "unknown"); otherwise a screen that
        changes within `close_quiet` seconds is a harness at work. No answer from tmux
        reads as not busy: the termination's own calls say what tmux can."""
        try:
            view = self.tmux.pane_view(record.tmux_name, capture=True)
        except TmuxUnavailable:
            return False
        if view is None or view.dead or view.screen is None:
            return False
        activity = _capability(self.adapter, "activity", lambda view: "unknown")(view)
        if activity in ("busy", "idle"):
            return bool(activity == "busy")
        self._sleep(self.close_quiet)
        try:
            later = self.tmux.pane_view(record.tmux_name, capture=True)
        except TmuxUnavailable:
            return False
        return later is not None and not later.dead and later.screen != view.screen

    def _release_workspace(
        self, ref: WorkItemRef, delivery_id: str | None, tmux_name: str
    ) -> dict[str, Any]:
        """Remove the item's worktree when that loses nothing and nothing runs there (a
        harness kept by `kill_harness_on_close=False`, a process inside it, a tmux that
        does not answer); else keep it, saying why (one event). Runs under the item's
        lock, so no spawn starts between the check and the removal. Never fails the
        close: the record is already closed."""
        if self.workspaces is None:
            return {}
        path = self.workspaces.path_for(ref)
        try:
            busy = in_use(path, self.tmux, tmux_name) if path.exists() else ""
            if busy:
                reason, kept = busy, True
            else:
                state = self.workspaces.release(ref)
                if not state.exists:
                    return {}
                reason, kept = state.why_kept(), not state.clean
        except WorkspaceError as exc:
            reason = _one_line(str(exc))
            kept = True
        self.events.emit(
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
        presence = self.tmux.probe(record.tmux_name)
        if presence is Presence.LIVE and self.tmux.terminate(
            record.tmux_name, self.terminate_grace
        ):
            return None
        if presence is Presence.LIVE:
            presence = self.tmux.probe(record.tmux_name)
        if presence is Presence.UNKNOWN:
            return _failed("tmux_unavailable", f"tmux did not answer about {record.tmux_name}")
        if presence is Presence.LIVE:
            return _failed("terminate_failed", f"a program in {record.tmux_name} outlived SIGKILL")
        return None

    def _close_failed(self, ref: WorkItemRef, delivery_id: str | None, outcome: Outcome) -> Outcome:
        self.events.emit(
            "dispatch.failed",
            level="warning",
            source=SOURCE,
            work_item=ref,
            delivery_id=delivery_id,
            detail={"reason": outcome.reason, "error": outcome.detail, "kind": "closed"},
        )
        return outcome
