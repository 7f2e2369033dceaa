"""The drain: takes due events from the inbox and dispatches them, for every ingress.

Concurrent across work items (`concurrency` worker threads), one at a time and in
arrival order within an item (the inbox hands out only queue heads). Each claim carries
a lease, renewed while the dispatch runs; a process killed mid-dispatch leaves claims
that come back by themselves (at once for a dead process of this host, after the lease
otherwise).

Failures are settled by kind: a transient one (`Outcome.transient`) is retried with
exponential backoff and jitter and never counts against `max_attempts`; a definite one
counts. Either gives up once `give_up_after` seconds have passed since the event was
accepted. A give-up records the versions of the packages that decide a delivery, and
is re-armed once when those versions change (seed 002 AC11).

Delivery is at-least-once: the one window that can paste an event twice is a crash
between the paste and its settle (the dispatcher's own delivery record narrows it to
the instant between the paste and that record's commit).
"""

from __future__ import annotations

import contextlib
import queue
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from loop_tmux import kill_clients

from .errors import DispatchError
from .hosts import HostConflict, HostLease
from .inbox import InboxEntry, Retry, local_owner, owner_alive, versions_key
from .pastegate import PasteGate

if TYPE_CHECKING:
    from .dispatcher import Outcome
    from .eventlog import EventLog
    from .model import Event
    from .store import Store

__all__ = ["Drain", "DrainReport", "GroundLost", "RetryPolicy", "Settlement"]

SOURCE = "inbox"
CAPACITY_FULL = "capacity_full"  # Reason.CAPACITY_FULL's token
# After the stop grace, how long attempts whose tmux clients were killed get to settle.
KILLED_CLIENTS_GRACE = 1.5
# How often a running drain forgets settled inbox rows older than a month.
PRUNE_EVERY_SECONDS = 3600.0


class GroundLost(DispatchError):
    """The state the drain works on was deleted or replaced under it: stop, loudly."""


class _Dispatches(Protocol):
    def dispatch(self, event: Event) -> Outcome: ...


def _jitter() -> float:
    return random.uniform(0.5, 1.0)


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Backoff doubles per try from `backoff` up to `max_backoff`, times a jitter in
    [0.5, 1.0); definite failures give up at `max_attempts`, all at `give_up_after`."""

    max_attempts: int = 3
    give_up_after: float = 86400.0
    backoff: float = 1.0
    max_backoff: float = 60.0
    jitter: Callable[[], float] = _jitter
    # An event waiting for a slot (`capacity_full`) is looked at again this often, and
    # never given up: a slot frees when a session closes or hibernates.
    capacity_backoff: float = 2.0

    def delay(self, tries: int, attempts: int) -> float:
        step = min(self.max_backoff, self.backoff * float(2 ** min(max(0, tries - 1), 30)))
        return step * self.jitter()


@dataclass(frozen=True, kw_only=True)
class Settlement:
    """What became of one claimed event (handed to `on_settled`)."""

    entry: InboxEntry
    outcome: Outcome | None  # None: the stored event could not be read
    # "done", "held" (its item is paused or stopped), "retry", "given_up", "lost"
    # (another claimer owns it now)
    state: str
    retry: Retry | None = None


@dataclass(kw_only=True)
class DrainReport:
    """Counts over one run of the drain."""

    processed: int = 0
    skipped: int = 0
    duplicate: int = 0
    held: int = 0
    retried: int = 0
    gave_up: int = 0
    rearmed: int = 0
    lost: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Drain:
    """Dispatches the inbox of one store. `run` until stopped; `run(until_idle=True)`
    until nothing is due now (`poll --once`)."""

    def __init__(
        self,
        store: Store,
        dispatcher: _Dispatches,
        events: EventLog,
        *,
        versions: Mapping[str, str],
        policy: RetryPolicy | None = None,
        concurrency: int = 4,
        lease_seconds: float = 60.0,
        owner: str | None = None,
        idle: float = 0.25,
        stop_grace: float = 2.0,
        on_settled: Callable[[Settlement], None] | None = None,
        watch: Callable[[], str | None] | None = None,
        alive: Callable[[str], bool] = owner_alive,
        paste_gate: PasteGate | None = None,
        host: HostLease | None = None,
        on_lapsed: Callable[[], None] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.store = store
        self.inbox = store.inbox
        self.dispatcher = dispatcher
        self.events = events
        self.versions = versions_key(versions)
        self.policy = policy or RetryPolicy()
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        # With a host (a fleet sharing one store): claims are this host's items only,
        # under its lease; `on_lapsed` runs when the lease had run out (stale agents).
        self.host = host
        self.on_lapsed = on_lapsed
        self.owner = owner or (host.owner if host is not None else local_owner())
        self.idle = idle
        self.stop_grace = stop_grace
        self.on_settled = on_settled
        self.watch = watch
        self.alive = alive
        # Shared with the dispatcher (its `paste_gate`): one paste in its window at a time.
        self.paste_gate = paste_gate or PasteGate()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        # While `run` runs: its work queue, stop flag and worker threads (configure
        # starts more workers there).
        self._running: (
            tuple[queue.Queue[InboxEntry | None], threading.Event, list[threading.Thread]] | None
        ) = None
        self._in_flight: set[int] = set()
        self._epochs: dict[int, int] = {}  # claimed seq -> the fence epoch of its claim
        self._pruned = -PRUNE_EVERY_SECONDS  # a daemon prunes once as it starts
        self._report = DrainReport()

    def wake(self) -> None:
        """Look at the inbox now (an ingress in this process just accepted something)."""
        self._wake.set()

    # -- the loop -------------------------------------------------------------------

    def rearm(self) -> int:
        """Re-arm give-ups recorded under other versions (once each); emits each."""
        entries = self.inbox.rearm(self.versions)
        for entry in entries:
            self.events.emit(
                "inbox.rearmed",
                source=SOURCE,
                work_item=entry.work_item or None,
                delivery_id=entry.delivery_id,
                detail={
                    "gave_up_versions": entry.gave_up_versions,
                    "running_versions": self.versions,
                    "attempts_before": entry.attempts,
                },
            )
        return len(entries)

    def run(self, stop: threading.Event | None = None, *, until_idle: bool = False) -> DrainReport:
        """Claim and dispatch until `stop` is set (or, `until_idle`, nothing is due).

        After `stop`, no new attempt starts; attempts under way get `stop_grace`
        seconds, then their tmux clients are killed (a stalled tmux never carries them
        out after this drain is gone) and they settle as unanswered, or are left to
        their leases (the next drain takes them over).
        Raises GroundLost when `watch` reports the state gone or replaced.
        """
        stop = stop or threading.Event()
        self._report = DrainReport()
        self._report.rearmed = self.rearm()
        work: queue.Queue[InboxEntry | None] = queue.Queue()
        threads: list[threading.Thread] = []
        self._running = (work, stop, threads)
        self._add_workers()
        renewed = time.monotonic()
        try:
            while not stop.is_set():
                self._check_ground()
                self._beat()
                claimed = self._claim()
                for entry in claimed:
                    work.put(entry)
                if until_idle and not claimed and not self._busy():
                    break
                if time.monotonic() - self._pruned > PRUNE_EVERY_SECONDS:
                    self._prune()
                if time.monotonic() - renewed > self.lease_seconds / 3:
                    self._renew()
                    renewed = time.monotonic()
                if not claimed or self._busy() >= self.concurrency:
                    self._wake.wait(self.idle)
                    self._wake.clear()
        finally:
            with self._lock:
                self._running = None
            for _ in threads:
                work.put(None)
            self._wait_idle(self.stop_grace)
            if self._busy():
                # Attempts still wait on a stalled tmux: end their clients, so none of
                # them is carried out at the thaw after this drain is gone (its rows go
                # to the next drain). They then settle as unanswered, in moments.
                deadline = time.monotonic() + KILLED_CLIENTS_GRACE
                while self._busy() and time.monotonic() < deadline:
                    kill_clients()  # again: an attempt may ask tmux once more
                    self._wait_idle(0.1)
        return self._report

    def configure(self, *, policy: RetryPolicy, concurrency: int, lease_seconds: float) -> None:
        """New delivery settings (a config reload), taken at the next claim; a higher
        concurrency starts its extra workers now (a lower one claims less: the extra
        workers idle)."""
        self.policy = policy
        self.lease_seconds = lease_seconds
        self.concurrency = concurrency
        self._add_workers()
        self._wake.set()

    def _add_workers(self) -> None:
        with self._lock:
            if self._running is None:
                return
            work, stop, threads = self._running
            for n in range(len(threads), self.concurrency):
                thread = threading.Thread(
                    target=self._worker, args=(work, stop), name=f"the-loop-drain-{n}", daemon=True
                )
                threads.append(thread)
                thread.start()

    def _wait_idle(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self._busy() and time.monotonic() < deadline:
            self._wake.wait(0.05)
            self._wake.clear()

    def _prune(self) -> None:
        self._pruned = time.monotonic()
        try:
            self.inbox.prune()
        except Exception as exc:  # a busy store: tried again next time
            self._note_error("prune", exc)

    def _check_ground(self) -> None:
        problem = self.watch() if self.watch is not None else None
        if problem:
            self.events.emit(
                "daemon.state_lost", level="error", source=SOURCE, detail={"problem": problem}
            )
            raise GroundLost(problem)

    def _beat(self) -> None:
        if self.host is None:
            return
        try:
            lapsed = self.host.beat()
        except HostConflict:
            raise
        except Exception as exc:  # the database is away: claims wait, the beat retries
            self._note_error("heartbeat", exc)
            return
        if lapsed and self.on_lapsed is not None:
            self.on_lapsed()

    def _busy(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def _claim(self) -> list[InboxEntry]:
        free = self.concurrency - self._busy()
        if free <= 0:
            return []
        epoch = None
        if self.host is not None:
            # Stamped before the claim: an attempt whose claim predates a lapse of the
            # lease never pastes (its item may have moved meanwhile; see fence.py).
            fence = self.host.fence
            epoch = fence.epoch
            if fence.refusal(epoch) is not None:
                return []
        try:
            if self.host is not None:
                claimed = self.host.hosts.claim(
                    self.host.name,
                    self.owner,
                    limit=free,
                    lease_seconds=self.lease_seconds,
                    alive=self.alive,
                )
            else:
                claimed = self.inbox.claim(
                    self.owner, limit=free, lease_seconds=self.lease_seconds, alive=self.alive
                )
        except Exception as exc:  # a busy or vanished store: noted, tried again
            self._note_error("claim", exc)
            return []
        with self._lock:
            self._in_flight.update(e.seq for e in claimed)
            if epoch is not None:
                self._epochs.update((e.seq, epoch) for e in claimed)
        return claimed

    def _renew(self) -> None:
        with self._lock:
            seqs = sorted(self._in_flight)
        with contextlib.suppress(Exception):
            if self.host is not None:  # a fleet: on the database's clock, as claimed
                self.host.hosts.renew(self.owner, seqs, self.lease_seconds)
            else:
                self.inbox.renew(self.owner, seqs, self.lease_seconds)

    def _worker(self, work: queue.Queue[InboxEntry | None], stop: threading.Event) -> None:
        while True:
            entry = work.get()
            if entry is None:
                return
            try:
                if stop.is_set():  # no new attempt after the signal
                    self.inbox.release(self.owner, [entry.seq])
                else:
                    self._handle(entry)
            except Exception as exc:  # the row keeps its lease; it comes back by itself
                self._note_error("settle", exc)
            finally:
                with self._lock:
                    self._in_flight.discard(entry.seq)
                    self._epochs.pop(entry.seq, None)
                self._wake.set()

    # -- one event --------------------------------------------------------------------

    def _dispatch(self, event: Event) -> Outcome:
        """The dispatcher settles its own faults; anything escaping it is a definite
        failure of this attempt, never the end of the drain."""
        from .dispatcher import Outcome, OutcomeKind

        try:
            return self.dispatcher.dispatch(event)
        except Exception as exc:
            message = " ".join(str(exc).split())[:300]
            return Outcome(OutcomeKind.FAILED, "dispatch_error", f"{type(exc).__name__}: {message}")

    def _take_move(self, event: Event) -> None:
        """An item moved here from a host that died: its conversation stayed there, so
        the record is closed (the dispatcher starts a fresh one) and the move is said."""
        assert self.host is not None
        if not self.store.query(  # no move (the common case): no transaction at all
            "SELECT 1 FROM placements WHERE work_item = ? AND moved_from IS NOT NULL",
            (str(event.work_item),),
        ):
            return
        with self.store.transaction():
            move = self.host.hosts.take_move(str(event.work_item), self.host.name)
            if move is None:
                return
            record = self.store.registry.get(event.work_item)
            if record is not None and record.active:
                self.store.registry.close(event.work_item)
        self.events.emit(
            "session.moved",
            level="warning",
            source=SOURCE,
            work_item=str(event.work_item),
            delivery_id=event.delivery_id,
            detail={
                "from_host": move.from_host,
                "to_host": self.host.name,
                "reason": move.reason,
                "previous_conversation_id": None if record is None else record.conversation_id,
            },
        )

    def _handle(self, entry: InboxEntry) -> None:
        from .dispatcher import OutcomeKind

        if entry.event is None:
            retry = self._fail(entry, "unreadable_stored_event", "", definite=True, max_attempts=1)
            self._settled(Settlement(entry=entry, outcome=None, state=_state(retry), retry=retry))
            return
        if self.host is not None:
            self._take_move(entry.event)
        with self._lock:
            epoch = self._epochs.get(entry.seq)
        # Gates this attempt's pastes (see pastegate.py) and, on a fleet, fences them
        # by the epoch of its claim.
        with self.paste_gate.window(epoch):
            outcome = self._dispatch(entry.event)
            if outcome.kind is OutcomeKind.FAILED:
                retry = self._fail(
                    entry,
                    outcome.reason,
                    outcome.detail,
                    definite=not outcome.transient,
                    waits=outcome.reason == CAPACITY_FULL,
                )
            elif outcome.kind is OutcomeKind.HELD:
                kept = self.inbox.hold(entry.seq, self.owner)
            else:
                kept = self.inbox.done(entry.seq, self.owner, outcome.kind.value, outcome.reason)
        if outcome.kind is OutcomeKind.FAILED:
            self._settled(
                Settlement(entry=entry, outcome=outcome, state=_state(retry), retry=retry)
            )
            return
        with self._lock:
            counter = outcome.kind.value
            setattr(self._report, counter, getattr(self._report, counter) + 1)
        state = ("held" if outcome.kind is OutcomeKind.HELD else "done") if kept else "lost"
        self._settled(Settlement(entry=entry, outcome=outcome, state=state))

    def _fail(
        self,
        entry: InboxEntry,
        reason: str,
        error: str,
        *,
        definite: bool,
        max_attempts: int | None = None,
        waits: bool = False,
    ) -> Retry | None:
        policy = self.policy
        retry = self.inbox.fail(
            entry.seq,
            self.owner,
            reason=reason,
            error=error,
            definite=definite,
            max_attempts=max_attempts or policy.max_attempts,
            # A wait for a slot is not a failure growing old: no horizon, a short step.
            give_up_after=float("inf") if waits else policy.give_up_after,
            delay=(lambda _t, _a: policy.capacity_backoff * policy.jitter())
            if waits
            else policy.delay,
            versions=self.versions,
        )
        with self._lock:
            if retry is None:
                self._report.lost += 1
            elif retry.given_up:
                self._report.gave_up += 1
            else:
                self._report.retried += 1
        if retry is not None and retry.given_up:
            self.events.emit(
                "inbox.gave_up",
                level="error",
                source=SOURCE,
                work_item=entry.work_item or None,
                delivery_id=entry.delivery_id,
                detail={
                    "reason": reason,
                    "why": retry.why,
                    "attempts": retry.attempts,
                    "tries": retry.tries,
                    "versions": self.versions,
                    "remedy": f"the-loop inbox retry {entry.seq}",
                },
            )
        return retry

    def _settled(self, settlement: Settlement) -> None:
        if settlement.state == "lost":
            self.events.emit(
                "inbox.lease_lost",
                level="warning",
                source=SOURCE,
                work_item=settlement.entry.work_item or None,
                delivery_id=settlement.entry.delivery_id,
                detail={"owner": self.owner},
            )
        if self.on_settled is not None:
            with contextlib.suppress(Exception):  # an observer never blocks a settle
                self.on_settled(settlement)

    def _note_error(self, where: str, exc: BaseException) -> None:
        text = f"{where}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        with self._lock:
            self._report.errors.append(text)
        with contextlib.suppress(Exception):
            self.events.emit("inbox.error", level="error", source=SOURCE, detail={"error": text})


def _state(retry: Retry | None) -> str:
    if retry is None:
        return "lost"
    return "given_up" if retry.given_up else "retry"
