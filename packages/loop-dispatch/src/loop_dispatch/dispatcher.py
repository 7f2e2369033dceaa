"""The dispatcher: one event in, one outcome out, never a live agent destroyed.

It holds the work item's file lock, claims the delivery id, then runs one attempt as a
loop: `decide(facts)` (decision.py, a pure table: seed 002's AC2, AC6-AC12 and every race
fixed since) picks one action, the executor (executor.py) performs it and returns the
facts with what it saw, until the table settles on a `Reason` (reasons.py), whose own
metadata says the outcome kind, whether it is transient, and the event reporting it.
Closes are closing.py's. docs/dispatch.md shows the table.

A failed outcome is transient (`Reason.transient`: retried by the inbox without using up
an attempt) or definite (counted against the attempt budget). Everything runs under the
work item's file lock, so two processes never act on one item at once.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from loop_tmux import Tmux, TmuxUnavailable

from .adapters import HarnessAdapter
from .capacity import Capacity
from .closing import Closer
from .decision import Close, Settle, decide
from .eventlog import EventLog
from .executor import Executor, one_line
from .launch import Launcher, default_launcher
from .lock import LockTimeout, LockUnavailable
from .model import Event, EventKind, WorkItemRef
from .pastegate import PasteGate
from .reasons import Outcome, OutcomeKind, Reason
from .registry import SessionRecord
from .relaunch import Relauncher
from .store import Store, StoreError
from .workspace import Workspaces

__all__ = ["Dispatcher", "Outcome", "OutcomeKind", "Reason"]

SOURCE = "dispatcher"
# A bound no attempt reaches (the longest path takes about a dozen actions): a table
# that loops is a bug, reported as `internal_error` rather than spinning.
MAX_STEPS = 64


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
        max_live: int | None = None,
        host: str | None = None,
        require_start: bool = False,
        env_state: Callable[[str], str] | None = None,
    ) -> None:
        self.store = store
        # How a session's environment compares with the env file (tmux name -> a few
        # words), for the `status` control word's reply; None: not told.
        self.env_state = env_state
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
        self.sleep = sleep
        self.workspaces = workspaces
        self.paste_gate = paste_gate
        # A close waits for the harness's idle moment at most `close_grace` seconds,
        # counted from the first time this dispatcher found it busy (monotonic clock);
        # `close_quiet`: how long a screen must stay still to read as idle when the
        # adapter cannot tell (closing.py).
        self.close_grace = close_grace
        self.close_quiet = close_quiet
        # host.maxLive (capacity.py): spawns and wakes beyond it wait in the inbox.
        self.capacity = Capacity(
            store, self.lock_dir, max_live, host=host, lock_timeout=lock_timeout or 30.0
        )
        self._deferred: set[str] = set()
        self._deferred_lock = threading.Lock()
        # `github.requireStartCommand`: an item never started waits for `the-loop start`
        # (its events held) instead of starting on its label (issue 24).
        self.require_start = require_start
        self.executor = Executor(self)
        self.closer = Closer(self)

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
            return self._failed(event, Reason.ITEM_LOCKED, str(exc))
        except LockUnavailable as exc:
            return self._failed(event, Reason.LOCK_UNAVAILABLE, str(exc))

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
                return self.closer.close(ref, delivery_id)
        except LockUnavailable as exc:
            return Outcome.of(Reason.LOCK_UNAVAILABLE, one_line(str(exc)))

    def with_conversation(self, record: SessionRecord) -> SessionRecord:
        """`record` with its harness's conversation id, found late if need be: the poll
        daemon's cycle and `sessions restart`'s plan call it, so a Codex whose rollout
        file came after its spawn's wait is not "unknown" for ever, and is resumed by a
        rollout (Executor.discover_late)."""
        return self.executor.discover_late(record)

    # -- lock held: claim, run the attempt, settle ------------------------------------

    def _dispatch_locked(self, event: Event) -> Outcome:
        try:
            claimed = self.store.deliveries.claim(event.delivery_id, reclaim_in_flight=True)
        except (sqlite3.Error, StoreError) as exc:
            # Nothing was claimed and nothing done: an ordinary retryable failure.
            return self._failed(event, Reason.STORE_UNAVAILABLE, str(exc))
        if not claimed:
            self.emit(
                "dispatch.duplicate",
                event,
                event.work_item,
                "debug",
                state=self.store.deliveries.state(event.delivery_id),
            )
            return Outcome.of(Reason.DUPLICATE_DELIVERY)
        try:
            outcome = self._run(event)
        except StoreError as exc:  # a hand-edited or damaged row: named, never guessed at
            outcome = self._failed(event, Reason.STORE_UNAVAILABLE, str(exc))
        except TmuxUnavailable as exc:
            outcome = self._failed(event, Reason.TMUX_UNAVAILABLE, str(exc))
        except Exception as exc:  # an unexpected fault must not strand the claim
            error = f"{type(exc).__name__}: {one_line(str(exc))}"
            outcome = self._failed(event, Reason.INTERNAL_ERROR, error)
        try:
            self._settle(event, outcome)
        except Exception as exc:
            # The work is done (a paste may have landed): report the outcome anyway, so
            # the caller settles its own record rather than pasting again.
            self.emit(
                "dispatch.settle_failed",
                event,
                event.work_item,
                "error",
                reason=outcome.reason,
                error=f"{type(exc).__name__}: {one_line(str(exc))}",
            )
        return outcome

    def _run(self, event: Event) -> Outcome:
        """The attempt: facts, then decide/execute until the table settles."""
        if event.kind is EventKind.CLOSED:
            return self.closer.close(event.work_item, event.delivery_id, event)
        facts, attempt = self.executor.facts(event)
        try:
            for _ in range(MAX_STEPS):
                action = decide(facts)
                if isinstance(action, Settle):
                    return self.executor.settle(action, facts, attempt)
                if isinstance(action, Close):  # not reached: closes are settled above
                    return self.closer.close(event.work_item, event.delivery_id, event)
                facts = self.executor.perform(action, facts, attempt)
        finally:
            attempt.release_slot()  # never a capacity lock left held by a fault
        raise RuntimeError(f"the decision table did not settle in {MAX_STEPS} steps: {facts}")

    def first_deferral(self, delivery_id: str) -> bool:
        """True the first time this process defers `delivery_id` for a slot."""
        with self._deferred_lock:
            if delivery_id in self._deferred:
                return False
            if len(self._deferred) > 10000:  # bounded: an old wait may report again
                self._deferred.clear()
            self._deferred.add(delivery_id)
            return True

    def _settle(self, event: Event, outcome: Outcome) -> None:
        deliveries = self.store.deliveries
        if outcome.kind in (OutcomeKind.FAILED, OutcomeKind.HELD):  # held: it comes back
            deliveries.release(event.delivery_id)
        elif outcome.kind is OutcomeKind.SKIPPED:
            deliveries.keep(event.delivery_id, "skipped")
        else:
            deliveries.keep(event.delivery_id, "processed")

    # -- events ------------------------------------------------------------------------

    def _failed(self, event: Event, reason: Reason, error: str) -> Outcome:
        outcome = Outcome.of(reason, one_line(error))
        detail = {"reason": reason.value, "error": outcome.detail, "kind": event.kind.value}
        self.emit("dispatch.failed", event, event.work_item, reason.level, **detail)
        return outcome

    def emit(
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
