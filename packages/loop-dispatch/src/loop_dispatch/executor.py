"""The executor: performs the one action `decide` chose and returns the facts with what
that action saw. It decides nothing: every branch lives in decision.py.

Per attempt it keeps a scratch `Attempt` (the record, the pid a spawn got, the text for
an event's detail); the decision-relevant part is the immutable `Facts`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from loop_tmux import (
    DeliverResult,
    Observation,
    Presence,
    SpawnOutcome,
    SpawnResult,
    Tmux,
    TmuxUnavailable,
)

from .adapters import HarnessAdapter, Readiness, new_conversation_id
from .capacity import Capacity, Slot
from .control import Verb, parse_control
from .controlling import CONTROL_PROMPT, Controller, effect_text, refusal_text
from .decision import (
    Action,
    Adopt,
    ApplyControl,
    CheckSurvival,
    Deliver,
    DoSpawn,
    Facts,
    Observe,
    Owner,
    Paste,
    PrepareRespawn,
    Ready,
    Reopen,
    Seen,
    Settle,
    SlotVerdict,
    Spawn,
    Start,
    Survival,
    TakeSlot,
    control_refusal,
)
from .eventlog import EventLog
from .framing import frame, spawn_prompt
from .lock import LockTimeout, LockUnavailable, file_lock, item_lock
from .model import Event, EventKind, WorkItemRef
from .pastegate import PasteGate
from .reasons import Outcome, OutcomeKind, Reason
from .registry import SessionRecord
from .relaunch import Relauncher
from .store import Store
from .workspace import WorkspaceError, Workspaces

__all__ = ["Attempt", "Executor", "Host", "one_line"]


class Host(Protocol):
    """What the executor and the closer use of their dispatcher: its collaborators, its
    settings and its event emitters."""

    store: Store
    events: EventLog
    tmux: Tmux
    adapter: HarnessAdapter
    relauncher: Relauncher
    workspaces: Workspaces | None
    paste_gate: PasteGate | None
    capacity: Capacity
    cwd_for: Callable[[WorkItemRef], Path]
    sleep: Callable[[float], None]
    lock_dir: Path
    receipt_seconds: float
    survival_delay: float
    terminate_grace: float
    kill_harness_on_close: bool
    close_grace: float
    close_quiet: float
    closer: Any  # closing.Closer (the closer imports this module's Host)
    require_start: bool
    env_state: Callable[[str], str] | None

    def emit(
        self, type_: str, event: Event | None, ref: WorkItemRef, level: str = ..., **detail: Any
    ) -> None: ...

    def first_deferral(self, delivery_id: str) -> bool: ...


# The host's lock over finding and recording a conversation id (harnesses that pick
# their own): the ids other items hold are read and the new one written under it.
DISCOVERY_LOCK = "conversation-discovery.lock"


def one_line(text: str | None) -> str:
    return " ".join((text or "").split())[:500]


def _since(moment: datetime) -> float | None:
    """Seconds from `moment` (an event's creation) to now: the comment-to-paste latency
    of `dispatch.delivered`; None for a time without a zone (it cannot be compared)."""
    if moment.tzinfo is None:
        return None
    return round(max(0.0, (datetime.now(timezone.utc) - moment).total_seconds()), 3)


def _same_start(now: SessionRecord, record: SessionRecord) -> bool:
    """Is the registry's record (`now`) still the active start `record` was read from?"""
    return (
        now.status == "active"
        and now.tmux_name == record.tmux_name
        and now.started_at == record.started_at
    )


def _epoch(moment: datetime) -> float:
    return moment.timestamp() if moment.tzinfo else moment.replace(tzinfo=timezone.utc).timestamp()


_SPAWNS = {
    SpawnOutcome.SPAWNED: Spawn.SPAWNED,
    SpawnOutcome.OCCUPIED_LIVE: Spawn.OCCUPIED_LIVE,
    SpawnOutcome.OCCUPIED_UNCLEARABLE: Spawn.UNCLEARABLE,
}
_READY = {"ready": Ready.READY, "not_ready": Ready.NOT_READY, "blocked": Ready.BLOCKED}


@dataclass
class Attempt:
    """One attempt's scratch: what the events and the outcome's detail are made of."""

    event: Event
    record: SessionRecord | None
    own_tokens: frozenset[str]
    previous: SessionRecord | None = None  # the record before a first spawn registered
    token: str | None = None  # the last look's spawn token
    error: str = ""  # the last failing call's text
    readiness: Readiness | None = None
    result: SpawnResult | None = None
    cut: int = 0
    conversation: str | None = None
    started: float = 0.0
    previous_presence: Presence = Presence.ABSENT
    confirm: Callable[[], bool] = field(default=lambda: False)
    slot: Slot | None = None  # a granted slot, its lock held until the record is active
    woke: bool = False  # this attempt made a hibernated record active again
    word: str = ""  # a control word's verb as written

    def release_slot(self) -> None:
        if self.slot is not None:
            self.slot.release()

    @property
    def name(self) -> str:
        return self.record.tmux_name if self.record else self.event.work_item.tmux_name()


class Executor:
    """Performs actions with the dispatcher's collaborators (store, tmux, adapter)."""

    def __init__(self, dispatcher: Host) -> None:
        self.d = dispatcher

    # -- facts --------------------------------------------------------------------------

    def facts(self, event: Event) -> tuple[Facts, Attempt]:
        """The facts an attempt starts from: the record, and whether this event has a
        spawn of its own on record (one indexed lookup; tmux is asked only then)."""
        registry = self.d.store.registry
        record = registry.get(event.work_item)
        if event.kind is EventKind.CONTROL and record is not None and self._found_late(record):
            record = registry.get(event.work_item)  # `restart` can resume it now
        own = frozenset(registry.tokens_carrying(event.work_item, event.delivery_id))
        active = record is not None and record.active
        control = parse_control(event.body) if event.kind is EventKind.CONTROL else None
        verb = control.verb if control is not None else None
        refused = event.refused or (control.problem if control is not None else "") or None
        if event.kind is EventKind.CONTROL and control is None:
            refused = refused or "unknown_verb"  # a stored body no longer a command
        starts = event.kind is EventKind.MANUAL or verb in (Verb.START, Verb.RESUME)
        facts = Facts(
            spawns=event.spawns,
            may_start=event.kind is not EventKind.SAY,
            active=active,
            own_spawn=bool(own),
            reads_screen=self.d.adapter.reads_screen,
            capped=self.d.capacity.capped,
            hibernated=record is not None and record.hibernated,
            reopen=not active and starts and self._resumable(record),
            hold=self.d.store.controls.get(event.work_item),
            awaits_start=self.d.require_start
            and record is None
            and event.kind in (EventKind.OPENED, EventKind.COMMENT),
            control=verb,
            refused=refused,
            resumable=active and self._resumable(record),
        )
        attempt = Attempt(event, record if active else None, own, previous=record)
        if event.kind is EventKind.CONTROL:
            # A spawn a command makes carries the operator's words, never the comment.
            word = control.word if control is not None else ""
            attempt.word = word
            attempt.event = replace(
                event, kind=EventKind.MANUAL, body=CONTROL_PROMPT.format(verb=word.rstrip("e"))
            )
        return facts, attempt

    def _found_late(self, record: SessionRecord) -> bool:
        """A control word (`restart`) meets a running Codex whose id its spawn missed:
        look for it now (the attempt holds the item's lock, so the daemon's look
        cannot). False when there was nothing to find or tmux did not answer."""
        if record.conversation_id:
            return False
        return self._discover_held(record) is not None

    def _resumable(self, record: SessionRecord | None) -> bool:
        """A closed record whose conversation this adapter can resume."""
        return (
            record is not None
            and bool(record.conversation_id)
            and record.harness == self.d.adapter.name
            and self.d.adapter.can_resume
        )

    def perform(self, action: Action, f: Facts, a: Attempt) -> Facts:
        if isinstance(action, Observe):
            return self._observe(action, f, a)
        if isinstance(action, Paste):
            return self._paste(f, a)
        if isinstance(action, Adopt):
            return self._adopt(action, f, a)
        if isinstance(action, DoSpawn):
            return self._spawn(action, f, a)
        if isinstance(action, CheckSurvival):
            return self._check_survival(f, a)
        if isinstance(action, PrepareRespawn):
            return self._prepare_respawn(f, a)
        if isinstance(action, Reopen):
            return self._reopen(f, a)
        if isinstance(action, TakeSlot):
            return self._take_slot(f, a)
        if isinstance(action, ApplyControl):
            return Controller(self.d).apply(action.verb, f, a)
        raise TypeError(f"the executor does not perform {action!r}")  # Close, Settle

    # -- looking ------------------------------------------------------------------------

    def _observe(self, action: Observe, f: Facts, a: Attempt) -> Facts:
        seen = self.d.tmux.observe(a.name, capture=action.screen)
        a.token = seen.token
        a.error = seen.error or ""
        facts = replace(f, seen=self._seen(seen, action.screen, f, a), looked=action.gating)
        if not action.reprobe:
            return facts
        if seen.presence is Presence.LIVE:  # AC6: live after all, deliver into it
            if f.hibernated and a.record is not None:
                # A harness runs under a hibernated record (a wake set back while its
                # spawn went on): active again, so it is counted and swept.
                self.d.store.registry.wake(a.record.work_item)
                facts = replace(facts, hibernated=False)
            return replace(facts, missing_then=seen.presence, via="reprobe", pasted=None)
        a.previous_presence = seen.presence
        return replace(facts, missing_then=seen.presence)

    def _seen(self, seen: Observation, screen: bool, f: Facts, a: Attempt) -> Seen:
        ready = None
        if screen and seen.presence is not Presence.UNKNOWN:
            ready = Ready.READY  # nothing to read: the paste's own answer decides
            if seen.presence is Presence.LIVE and seen.view is not None and not seen.view.dead:
                a.readiness = self.d.adapter.readiness(seen.view)
                ready = _READY.get(a.readiness.state, Ready.NOT_READY)
        return Seen(seen.presence, self._owner(seen.token, f, a), ready)

    def _owner(self, token: str | None, f: Facts, a: Attempt) -> Owner:
        """THIS_EVENT: a token recorded for a spawn of this very event; NOBODY: no token
        of this item's (asked of the store only where the table needs it)."""
        ref = a.event.work_item
        if token and token in a.own_tokens:
            if self.d.store.registry.token_spawn(ref, token) is not None:
                return Owner.THIS_EVENT
            return Owner.NOBODY  # its row went with a reset
        if f.start is Start.FIRST:
            if token and self.d.store.registry.token_spawn(ref, token) is not None:
                return Owner.THIS_ITEM
            return Owner.NOBODY
        return Owner.THIS_ITEM

    # -- adopting -----------------------------------------------------------------------

    def _adopt(self, action: Adopt, f: Facts, a: Attempt) -> Facts:
        """Re-register the item from the occupant's token row."""
        ref = a.event.work_item
        spawned = self.d.store.registry.token_spawn(ref, a.token or "")
        if spawned is None:  # gone since the look: a stranger now
            return replace(f, seen=replace(f.seen or Seen(Presence.LIVE), owner=Owner.NOBODY))
        record = a.record
        stale = record is None or record.conversation_id != spawned.conversation_id
        if stale or not action.carried:
            a.record = self.d.store.registry.register(
                ref,
                harness=spawned.harness,
                conversation_id=spawned.conversation_id,
                cwd=spawned.cwd,
            )
            if action.carried:
                self._emit_adopted(a)
        return replace(f, carried=action.carried, adopted=True, active=True)

    def _emit_adopted(self, a: Attempt) -> None:
        record = a.record
        assert record is not None
        self.d.emit(
            "session.adopted",
            a.event,
            record.work_item,
            tmux_name=record.tmux_name,
            conversation_id=record.conversation_id,
            harness=record.harness,
            carried=True,
        )

    def _emit_resume_failed(self, a: Attempt, why: str) -> None:
        record = a.record
        assert record is not None
        self.d.emit(
            "session.resume_failed",
            a.event,
            record.work_item,
            "warning",
            tmux_name=record.tmux_name,
            reason=why,
            conversation_id=record.conversation_id,
            harness=self.d.adapter.name,
        )

    # -- pasting ------------------------------------------------------------------------

    def _paste(self, f: Facts, a: Attempt) -> Facts:
        assert a.record is not None
        result, a.confirm = self.paste(a.record, a.event)
        a.error = one_line(result.error)
        if result.ok:
            answer = Deliver.OK
        else:
            answer = Deliver.MISSING if result.session_missing else Deliver.UNANSWERED
        return replace(f, pasted=answer, seen=None, looked=False)

    def paste(
        self, record: SessionRecord, event: Event
    ) -> tuple[DeliverResult, Callable[[], bool]]:
        """Paste the framed event. The callable returned confirms it (adapters with
        receipts), called once the caller has logged the delivery."""
        text = frame(event)
        adapter = self.d.adapter
        if not adapter.has_receipts:
            return self.gated_deliver(record.tmux_name, text, event), lambda: False
        conversation = record.conversation_id or self._discover_held(record)
        mark = adapter.receipt_mark(conversation)
        result = self.gated_deliver(record.tmux_name, text, event)
        return result, lambda: self._confirm(record, event, conversation, mark, text)

    def gated_deliver(self, name: str, text: str, event: Event) -> DeliverResult:
        """Every paste goes through here: inside a drain's attempt, one at a time from the
        paste to its delivery record (see pastegate.py), so a kill repeats at most one
        paste. The record is written at once, before any receipt is awaited."""
        gate = self.d.paste_gate
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
            result = self.d.tmux.deliver(name, text)
            if result.ok:
                # A store that cannot record it now is retried by the attempt's settle.
                with contextlib.suppress(Exception):
                    self.d.store.deliveries.keep(event.delivery_id, "processed")
            return result
        finally:
            if gate is not None:
                gate.leave()

    def _await_receipt(self, conversation: str | None, mark: int, text: str) -> tuple[str, float]:
        begun = time.monotonic()
        while True:
            receipt = self.d.adapter.receipt(conversation, mark, text)
            waited = time.monotonic() - begun
            # An "unknown" is waited out too: Claude Code writes a new conversation's file
            # only once its first turn is answered, after inputs queued meanwhile.
            if receipt.state == "confirmed" or waited >= self.d.receipt_seconds:
                return receipt.state, waited
            self.d.sleep(0.2)

    def _confirm(
        self, record: SessionRecord, event: Event, conversation: str | None, mark: int, text: str
    ) -> bool:
        """`dispatch.confirmed` once the harness's file holds the text; else one re-paste,
        only when the file proves it absent and the text is not sitting in the input
        box; else `dispatch.unconfirmed`."""
        state, waited = self._await_receipt(conversation, mark, text)
        repasted = False
        if state == "absent" and not self._on_screen(record, text):
            mark = self.d.adapter.receipt_mark(conversation)
            if self.gated_deliver(record.tmux_name, text, event).ok:
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
            self.d.emit("dispatch.confirmed", event, record.work_item, **detail)
            return True
        self.d.emit(
            "dispatch.unconfirmed", event, record.work_item, "warning", receipt=state, **detail
        )
        return False

    def _on_screen(self, record: SessionRecord, text: str) -> bool:
        """Is the text's first line visible (left unsent in the input box)? Unknown = yes."""
        seen = self.d.tmux.observe(record.tmux_name, capture=True)
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")[:60]
        screen = None if seen.view is None else seen.view.screen
        return screen is None or (bool(first) and first in screen)

    # -- spawning -----------------------------------------------------------------------

    def _spawn(self, action: DoSpawn, f: Facts, a: Attempt) -> Facts:
        f = replace(f, start=action.start, seen=None, looked=False, pasted=None, survival=None)
        if action.why_fresh is not None:
            self._emit_resume_failed(a, action.why_fresh)
        if action.start is Start.FIRST:
            return self._first_spawn(f, a)
        assert a.record is not None
        prompt, a.cut = spawn_prompt(a.event)
        if action.start is Start.RESUME:
            argv = self.d.relauncher.resume_argv(self.d.adapter, a.record, prompt)
            assert argv is not None  # PrepareRespawn checked it can resume
            a.result = self.spawn_under_token(a.record, argv, delivery_id=a.event.delivery_id)
        else:
            a.conversation = self.new_conversation()
            a.started = time.time()
            argv = self.d.adapter.fresh_argv(prompt, a.conversation or "")
            a.result = self.spawn_under_token(
                a.record, argv, a.conversation, delivery_id=a.event.delivery_id
            )
        return replace(f, spawned=self._spawned(a.result))

    def _first_spawn(self, f: Facts, a: Attempt) -> Facts:
        """Register first, then spawn: a crash in between heals as a respawn next time."""
        ref = a.event.work_item
        cwd = self.workspace(a)
        if cwd is None:
            return replace(f, spawned=Spawn.NO_WORKSPACE)
        a.conversation = self.new_conversation()
        a.started = time.time()
        a.record = self.d.store.registry.register(
            ref, harness=self.d.adapter.name, conversation_id=a.conversation, cwd=cwd
        )
        a.release_slot()  # the active record holds the slot now
        prompt, a.cut = spawn_prompt(a.event)
        argv = self.d.adapter.fresh_argv(prompt, a.conversation or "")
        a.result = self.spawn_under_token(a.record, argv, delivery_id=a.event.delivery_id)
        if a.result.outcome is not SpawnOutcome.SPAWNED:
            self.undo_register(a)  # a first spawn that did not stand leaves no record
        return replace(f, spawned=self._spawned(a.result))

    def _spawned(self, result: SpawnResult) -> Spawn:
        if result.outcome in _SPAWNS:
            return _SPAWNS[result.outcome]
        return Spawn.FAILED if result.answered else Spawn.UNANSWERED

    def undo_register(self, a: Attempt) -> None:
        ref = a.event.work_item
        if a.previous is None:
            self.d.store.registry.reset(ref)
        else:
            self.d.store.registry.restore(a.previous)

    def _check_survival(self, f: Facts, a: Attempt) -> Facts:
        """Only a definite death counts: a silent tmux leaves the spawn standing."""
        survived = self.d.relauncher.survived(a.name)
        if survived is False:
            if f.start is Start.FIRST:
                self.undo_register(a)
            return replace(f, survival=Survival.EXITED)
        if f.start is Start.FRESH and a.record is not None:
            self.d.relauncher.record_conversation(a.record.work_item, a.conversation)
        if a.record is not None and f.start is not Start.RESUME:
            a.conversation = self.discover(a.record, a.started) or a.conversation
        return replace(f, survival=Survival.SURVIVED if survived else Survival.UNKNOWN)

    def _reopen(self, f: Facts, a: Attempt) -> Facts:
        """The closed record is active again under its conversation; the respawn rows
        follow (undone at settle unless the attempt is processed)."""
        previous = a.previous
        assert previous is not None
        assert f.seen is not None
        a.previous_presence = f.seen.presence
        f = replace(f, reopened=True, missing_then=f.seen.presence)
        cwd = self.workspace(a)
        if cwd is None:
            return replace(f, prepared=True, spawned=Spawn.NO_WORKSPACE)
        a.record = self.d.store.registry.register(
            a.event.work_item,
            harness=previous.harness,
            conversation_id=previous.conversation_id,
            cwd=cwd,
        )
        a.release_slot()  # the active record holds the slot now
        return replace(f, active=True)

    def _take_slot(self, f: Facts, a: Attempt) -> Facts:
        """Ask the host's capacity; a granted slot's lock is held until the record is
        active (a woken record: at once)."""
        entry = self.d.store.inbox.by_delivery(a.event.delivery_id)
        try:
            slot = self.d.capacity.take(a.event.work_item, None if entry is None else entry.seq)
        except LockTimeout:
            # Other items are taking slots (the lock is held through a worktree's
            # making): a wait like a full host, never a failure counted or given up.
            return replace(f, slot=SlotVerdict.FULL)
        a.slot = slot
        if not slot.granted:
            return replace(f, slot=SlotVerdict.FULL)
        if f.hibernated:
            self._wake(a)
        return replace(f, slot=SlotVerdict.GRANTED)

    def _wake(self, a: Attempt) -> None:
        """A hibernated record is active again (holding its slot): undone at settle
        unless the respawn is processed."""
        if not a.woke and a.record is not None:
            a.woke = self.d.store.registry.wake(a.record.work_item)
        a.release_slot()

    def _prepare_respawn(self, f: Facts, a: Attempt) -> Facts:
        """The worktree (the same path as before: remade if it went), a conversation id
        found late, and whether the recorded conversation can be resumed."""
        f = replace(f, prepared=True)
        assert a.record is not None
        if f.hibernated:
            self._wake(a)
        if self.d.workspaces is not None and self.workspace(a) is None:
            return replace(f, spawned=Spawn.NO_WORKSPACE)
        record = a.record
        if not record.conversation_id and self._discover_held(record):
            a.record = record = self.d.store.registry.get(record.work_item) or record
        adapter = self.d.adapter
        if not adapter.can_resume:
            return replace(f, no_resume="adapter_cannot_resume")
        if not record.conversation_id:
            return replace(f, no_resume="no_recorded_conversation")
        if not adapter.resumable(record.conversation_id):
            # Nothing saved under the id (killed before its first turn was written): a
            # resume would exit "No conversation found"; start fresh instead.
            return replace(f, no_resume="nothing_saved")
        return f

    def spawn_under_token(
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
        gate = self.d.paste_gate
        refusal = gate.refusal() if gate is not None else None
        if refusal is not None:
            return SpawnResult(outcome=SpawnOutcome.FAILED, error=refusal, answered=False)
        return self.d.relauncher.spawn(
            record,
            harness_argv,
            conversation,
            delivery_id=delivery_id,
            extra_env=self.d.adapter.launch_env(),
        )

    def workspace(self, a: Attempt) -> Path | None:
        """Where the item's harness runs: its worktree (made now if needed, trust seeded
        where the adapter knows how) or, in shared mode, the configured cwd. None when
        the worktree cannot be made (`a.error` says why)."""
        ref = a.event.work_item
        if self.d.workspaces is None:
            return self.d.cwd_for(ref)
        try:
            path = self.d.workspaces.ensure(ref)
        except WorkspaceError as exc:
            a.error = one_line(str(exc))
            return None
        try:
            self.d.adapter.prepare_workspace(path)
        except Exception as exc:  # trust not seeded: the agent may stop at a dialog
            self.d.emit(
                "workspace.trust_failed",
                a.event,
                ref,
                "warning",
                path=str(path),
                error=one_line(str(exc)),
            )
        return path

    # -- the harness's own word: conversation ids ---------------------------------------

    def new_conversation(self) -> str | None:
        """Our id for a new conversation, or None for a harness that picks its own."""
        return new_conversation_id() if self.d.adapter.assigns_conversation_id else None

    def discover(self, record: SessionRecord, started: float, *, wait: bool = True) -> str | None:
        """Codex: read the id of the conversation this spawn started from the harness's
        own files (bounded wait) and record it; None while unknown (not resumable).
        The pane's processes tell its own file from a sibling's started in the same
        cwd at the same moment; the claim is made under the host's discovery lock,
        the ids other items hold read inside it, so two spawns finding ids at once
        never both take one."""
        adapter = self.d.adapter
        if adapter.assigns_conversation_id:
            return None
        try:
            pids = self.d.tmux.pane_pids(record.tmux_name)
        except TmuxUnavailable:
            pids = []
        deadline = time.monotonic() + self.d.receipt_seconds
        while True:
            found = self._claim(record, started, pids)
            if found is not None:
                return found
            if not wait or time.monotonic() >= deadline:
                return None
            self.d.sleep(0.2)

    def discover_late(self, record: SessionRecord) -> SessionRecord:
        """`record` with its conversation id, looked for once more (no wait) when a
        harness that picks its own ids (Codex) has none recorded: on a loaded host it may
        open its rollout file after the spawn's bounded wait, and without an id its
        activity reads "unknown" and a rollout cannot resume it.

        Under the item's lock, taken without waiting (when another holds it, this look
        is skipped: a delivery and a control word look for themselves, and the next
        look comes), so no start can change in between; only for the registry's
        current start of this record; and only from the file the live pane's processes
        hold (never a guess by cwd and start time). Unknown when tmux does not answer."""
        if self.d.adapter.assigns_conversation_id or record.conversation_id:
            return record
        if record.status != "active":
            return record
        try:
            with item_lock(self.d.lock_dir, record.work_item, timeout=0):
                found = self._discover_held(record)
        except (LockTimeout, LockUnavailable):
            return record
        return record if found is None else replace(record, conversation_id=found)

    def _discover_held(self, record: SessionRecord) -> str | None:
        """The id of `record`'s current start from the file its live pane holds, found
        and recorded now (the caller holds the item's lock); None while unknown. After
        the spawn's own look nothing is guessed by cwd and start time: a guess could
        take a sibling's id, and resume another item's conversation."""
        if self.d.adapter.assigns_conversation_id:
            return None
        now = self.d.store.registry.get(record.work_item)
        if now is None or not _same_start(now, record):
            return None
        if now.conversation_id:  # found since `record` was read
            return now.conversation_id
        try:
            pids = self.d.tmux.pane_pids(record.tmux_name)
        except TmuxUnavailable:
            return None
        if not pids:
            return None
        started = _epoch(record.started_at or record.updated_at)
        return self._claim(record, started, pids, guess=False)

    def _claim(
        self, record: SessionRecord, started: float, pids: list[int], *, guess: bool = True
    ) -> str | None:
        """Find and record the id under the host's discovery lock (the ids other items
        hold are read inside it, so two looks never take one)."""
        try:
            with file_lock(self.d.lock_dir / DISCOVERY_LOCK, "conversation discovery", 10.0):
                others = self.d.store.registry.conversations_of_others(record.work_item)
                found = self.d.adapter.discover_conversation(
                    record.cwd, started, others, pids, guess=guess
                )
                if found is not None:
                    self.d.store.registry.set_conversation(record.work_item, found)
        except (LockTimeout, LockUnavailable):
            return None
        return None if found is None else str(found)

    # -- settling: the reason's event, with its fields ----------------------------------

    def settle(self, action: Settle, f: Facts, a: Attempt) -> Outcome:
        reason = action.reason
        detail = self._detail(reason, f, a)
        if reason is Reason.HARNESS_BLOCKED:
            self.d.emit(
                "session.blocked",
                a.event,
                a.event.work_item,
                "warning",
                tmux_name=a.name,
                harness=self.d.adapter.name,
                dialog=a.readiness.dialog if a.readiness else None,
            )
        outcome = Outcome.of(reason, detail)
        a.release_slot()
        if f.reopened and reason.kind is not OutcomeKind.PROCESSED:
            self.undo_register(a)  # a reopen that did not take leaves the closed record
        if a.woke and reason.kind is not OutcomeKind.PROCESSED and a.record is not None:
            self.d.store.registry.hibernate(a.record.work_item)  # still asleep: no slot
        if reason is Reason.CONTROL_EXECUTED and f.spawned is Spawn.SPAWNED:
            started = {Start.FIRST: Reason.SPAWNED, Start.RESUME: Reason.RESPAWNED}
            self._announce(started.get(f.start, Reason.RESPAWNED_FRESH), f, a, outcome)  # type: ignore[arg-type]
        self._announce(reason, f, a, outcome)
        if reason in (Reason.DELIVERED, Reason.RESPAWN_AVERTED, Reason.ADOPTED):
            outcome = replace(outcome, confirmed=a.confirm())
        return outcome

    def _detail(self, reason: Reason, f: Facts, a: Attempt) -> str:
        name = a.name
        ref = a.event.work_item
        texts = {
            Reason.NOT_TAKEN_ON: "the item has no active session",
            Reason.HARNESS_EXITED: (
                f"the harness exited within {self.d.survival_delay:g}s of starting; its "
                f"output stays in tmux session {name} until the next attempt"
            ),
            Reason.OCCUPIED_UNREGISTERED: (
                f"tmux session {name} is live but no active session is registered for {ref} "
                "and it carries no spawn token of this item; it was not touched. Remedy: "
                f"`tmux kill-session -t {name}` or `the-loop sessions reset {ref}`"
            ),
            Reason.SESSION_OCCUPIED: (
                f"tmux session {name} is held by an occupant that cannot be cleared "
                f"({one_line(a.result.error if a.result else '')}); remedy: "
                f"`tmux kill-session -t {name}`"
            ),
            Reason.PROBE_UNKNOWN: f"re-probe of {name} got no answer",
            Reason.CAPACITY_FULL: _full(a.slot),
            Reason.TMUX_UNAVAILABLE: one_line(a.error)
            or f"tmux did not answer whether {name} is live",
        }
        if reason is Reason.HARNESS_BLOCKED and a.readiness is not None:
            return (
                f"{a.readiness.detail}; nothing was typed into it. Answer it once "
                f"(`tmux attach -t {name}`) or settle it in the harness's settings "
                "(docs/harnesses.md)"
            )
        if reason is Reason.HARNESS_NOT_READY and a.readiness is not None:
            return a.readiness.detail
        if reason in (Reason.SPAWN_FAILED, Reason.RESPAWN_FAILED, Reason.SPAWN_UNANSWERED):
            return one_line(a.result.error if a.result else a.error)
        if reason is Reason.CONTROL_EXECUTED and f.control is not None:
            return effect_text(f.control, f, a.error)
        if reason is Reason.CONTROL_REJECTED:
            why = control_refusal(f) or "refused"
            return refusal_text(why, a.event.actor, a.word)
        return texts.get(reason, a.error if reason.kind.value == "failed" else "")

    def _announce(self, reason: Reason, f: Facts, a: Attempt, outcome: Outcome) -> None:
        """The reason's own event (`reason.event`, at `reason.level`): one writer per
        event type, so each type's fields are built in one place."""
        writer = getattr(self, "_event_" + reason.event.replace(".", "_"), None)
        if writer is not None:
            writer(reason, f, a, outcome)

    def _event_dispatch_failed(self, r: Reason, f: Facts, a: Attempt, o: Outcome) -> None:
        kind = a.event.kind.value
        self.d.emit("dispatch.failed", a.event, a.event.work_item, r.level, **_failed(r, o, kind))

    def _event_dispatch_skipped(self, r: Reason, f: Facts, a: Attempt, o: Outcome) -> None:
        path = "first_spawn" if f.start is Start.FIRST else "respawn"
        self.d.emit(
            "dispatch.skipped",
            a.event,
            a.event.work_item,
            r.level,
            reason=r.value,
            tmux_name=a.name,
            path=path,
            error=o.detail,
        )

    def _event_session_deferred(self, r: Reason, f: Facts, a: Attempt, o: Outcome) -> None:
        """Once per event per process: a wait's retries are not news."""
        if not self.d.first_deferral(a.event.delivery_id):
            return
        slot = a.slot
        self.d.emit(
            "session.deferred",
            a.event,
            a.event.work_item,
            r.level,
            reason=r.value,
            tmux_name=a.name,
            path="wake" if f.hibernated else ("reopen" if f.reopen else "first_spawn"),
            live=None if slot is None else slot.live,
            max_live=None if slot is None else slot.max_live,
            waiting_ahead=None if slot is None else slot.ahead,
        )

    def _event_dispatch_not_taken_on(self, r: Reason, f: Facts, a: Attempt, o: Outcome) -> None:
        self.d.emit(
            "dispatch.not_taken_on", a.event, a.event.work_item, r.level, kind=a.event.kind.value
        )

    def _event_control_command(self, r: Reason, f: Facts, a: Attempt, o: Outcome) -> None:
        verb = f.control.value if f.control is not None else a.word
        self.d.emit(
            "control.command",
            a.event,
            a.event.work_item,
            r.level,
            verb=verb,
            actor=one_line(a.event.actor)[:100],
            effect=o.detail,
        )

    def _event_control_rejected(self, r: Reason, f: Facts, a: Attempt, o: Outcome) -> None:
        self.d.emit(
            "control.rejected",
            a.event,
            a.event.work_item,
            r.level,
            verb=a.word[:40],
            actor=one_line(a.event.actor)[:100],
            reason=control_refusal(f) or "refused",
        )

    def _event_dispatch_held(self, r: Reason, f: Facts, a: Attempt, o: Outcome) -> None:
        why = f.hold.value if f.hold is not None else "awaiting_start"
        self.d.emit(
            "dispatch.held",
            a.event,
            a.event.work_item,
            r.level,
            kind=a.event.kind.value,
            hold=why,
        )

    def _event_dispatch_delivered(self, r: Reason, f: Facts, a: Attempt, o: Outcome) -> None:
        self.d.emit(
            "dispatch.delivered",
            a.event,
            a.event.work_item,
            r.level,
            tmux_name=a.name,
            latency_seconds=_since(a.event.created_at),
        )

    def _event_session_respawn_averted(self, r: Reason, f: Facts, a: Attempt, o: Outcome) -> None:
        self.d.emit(
            "session.respawn_averted",
            a.event,
            a.event.work_item,
            r.level,
            tmux_name=a.name,
            via=f.via or "spawn",
        )

    def _event_dispatch_carried(self, r: Reason, f: Facts, a: Attempt, o: Outcome) -> None:
        self.d.emit(
            "dispatch.carried",
            a.event,
            a.event.work_item,
            r.level,
            tmux_name=a.name,
            token_matched=True,
        )

    def _event_session_adopted(self, r: Reason, f: Facts, a: Attempt, o: Outcome) -> None:
        record = a.record
        assert record is not None
        self.d.emit(
            "session.adopted",
            a.event,
            record.work_item,
            r.level,
            tmux_name=record.tmux_name,
            conversation_id=record.conversation_id,
            harness=record.harness,
        )

    def _event_session_spawned(self, r: Reason, f: Facts, a: Attempt, o: Outcome) -> None:
        record = a.record
        assert record is not None
        self.d.emit(
            "session.spawned",
            a.event,
            record.work_item,
            r.level,
            tmux_name=record.tmux_name,
            harness=record.harness,
            conversation_id=a.conversation,
            cwd=str(record.cwd),
            pid=a.result.pid if a.result else None,
            cut_chars=a.cut,
        )

    def _event_session_respawned(self, r: Reason, f: Facts, a: Attempt, o: Outcome) -> None:
        record = a.record
        assert record is not None
        resumed = r is Reason.RESPAWNED
        fields: dict[str, Any] = {"tmux_name": record.tmux_name, "resumed": resumed}
        if resumed:
            fields["verified"] = f.survival is Survival.SURVIVED
        fields.update(
            conversation_id=record.conversation_id if resumed else a.conversation,
            previous=a.previous_presence.value,
            pid=a.result.pid if a.result else None,
            cut_chars=a.cut,
        )
        self.d.emit("session.respawned", a.event, record.work_item, r.level, **fields)


def _full(slot: Slot | None) -> str:
    if slot is None:
        return "the host is at host.maxLive"
    return (
        f"{slot.live}/{slot.max_live} live, {slot.ahead} older item(s) waiting: it waits "
        "in the inbox for a slot (host.maxLive)"
    )


def _failed(reason: Reason, outcome: Outcome, kind: str) -> dict[str, Any]:
    return {"reason": reason.value, "error": outcome.detail, "kind": kind}
