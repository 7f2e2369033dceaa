"""`sessions restart`: roll running sessions onto what the env file declares now.

The core returns one row per selected session and never prints. A relaunch replaces
the harness in its pane (`respawn-pane -k`, the session keeps its name and attached
clients), resuming the same conversation in the same cwd under the env-file launcher.
Nothing is touched until every check that can be made in advance has passed: a live
agent is never killed for a relaunch that cannot start.

A session is relaunched at a turn boundary (issue 25): each planned relaunch waits
until its harness is idle (`--wait-idle`, the adapter's activity signal: the harness's
own files first), and the item's lock is taken BEFORE the idle verdict that lets it go
and held until the relaunch is done, so no delivery can start a turn in between. A
session still mid-turn at the deadline is left running (`skipped-busy`) unless the
caller asked for it anyway (`busy="restart"`). At most `max_parallel` respawns are in
flight at once.

This module keeps only the planning and the environment verification. The relaunch
itself (item locks and the re-read under them, resume argv, launcher, respawn in place
run concurrently, ONE survival window) is loop_dispatch's `Relauncher`, the primitive
the dispatcher's respawn uses too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from loop_dispatch.launch import LaunchSpec
from loop_dispatch.relaunch import (
    Relaunch,
    Relauncher,
    RelaunchRegistry,
    RelaunchResult,
    RelaunchTmux,
    resume_refusal,
)
from loop_dispatch.store import StoreError
from loop_envstate import process_environ
from loop_tmux import TmuxUnavailable

from ..errors import UsageError
from ..interrupts import Interrupted
from .drift import DriftRow, DriftState, NameDrift, classify, environment_drift, live_pids

if TYPE_CHECKING:
    from loop_dispatch import SessionRecord, WorkItemRef
    from loop_envstate import EnvFile
    from loop_tmux import Pane

    from .launcher import EnvFileLauncher

EVENT_SOURCE = "sessions.restart"
AUTO_SOURCE = "env.autoRoll"
DEFAULT_WORKERS = 8
DEFAULT_WAIT_IDLE = 600.0
"""How long `sessions restart` waits for a busy session's turn to end (seconds)."""
IDLE_POLL = 0.5
"""How often a waiting rollout looks at the sessions still mid-turn (one tmux call)."""
QUIET_SECONDS = 3.0
"""An "unknown" session (no signal from its harness) counts as idle once its screen has
not changed for this long: a turn in progress redraws the screen."""
BUSY_CHOICES = ("skip", "restart")
SKIPPED_BUSY_EXIT = 3
"""The exit code of a rollout that left a session running because it stayed busy."""
DEFAULT_SURVIVAL_DELAY = 1.0
DEFAULT_VERIFY_TIMEOUT = 5.0
"""How long a relaunched pane may still show the launcher's inherited environment."""
VERIFY_POLL = 0.1
LAUNCHER_CHECK_TIMEOUT = 15.0
RESUME_PROMPT = (
    "the-loop relaunched this session to load a refreshed environment "
    "(sessions restart); continue where you left off."
)
"""The harness's prompt argument on a relaunch: there is no new comment to hand over."""


class Outcome(str, Enum):
    RESTARTED = "restarted"
    UP_TO_DATE = "up-to-date"
    WOULD_RESTART = "would-restart"  # --dry-run only
    SKIPPED_NOT_RUNNING = "skipped-not-running"
    SKIPPED_NOT_RESUMABLE = "skipped-not-resumable"
    SKIPPED_UNREGISTERED = "skipped-unregistered"
    SKIPPED_CLOSED = "skipped-closed"  # closed or changed between selection and its lock
    FAILED = "failed"
    VERIFIED_STALE = "verified-stale"
    UNVERIFIED = "unverified"
    INTERRUPTED = "interrupted"  # a signal stopped the run before this one was relaunched
    SKIPPED_BUSY = "skipped-busy"  # still mid-turn at the --wait-idle deadline: left running


FAILING = frozenset({Outcome.FAILED, Outcome.VERIFIED_STALE})


@dataclass(frozen=True)
class Row:
    """One selected session's outcome; `stale` lists differing names, fingerprints only."""

    ref: str
    tmux_name: str | None
    outcome: Outcome
    detail: str
    stale: tuple[NameDrift, ...] = ()
    activity: str | None = None  # what the harness was doing when it was decided

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "tmuxName": self.tmux_name,
            "outcome": self.outcome.value,
            "detail": self.detail,
            "activity": self.activity,
            "stale": [n.to_dict() for n in self.stale],
        }


def exit_code(rows: Iterable[Row]) -> int:
    """1 when any row failed or was verified stale; else 3 when a session was left
    running mid-turn (skipped-busy); unverified alone never fails."""
    rows = list(rows)
    if any(r.outcome in FAILING for r in rows):
        return 1
    return SKIPPED_BUSY_EXIT if any(r.outcome is Outcome.SKIPPED_BUSY for r in rows) else 0


@dataclass(frozen=True)
class Look:
    """One session's activity now ("idle", "busy", "blocked", "unknown"; None when its
    pane is not live) and its screen, for the quiet-screen fallback of "unknown"."""

    activity: str | None
    screen: str | None = None


ActivityReader = Callable[[Sequence["SessionRecord"]], Mapping[str, Look]]
"""Reads the activity of these sessions now, in one batched tmux call (ref -> Look)."""


@dataclass(frozen=True)
class Rollout:
    """How a restart treats sessions mid-turn: wait up to `wait_idle` seconds for each
    to go idle; at the deadline skip it (`busy="skip"`) or relaunch it anyway
    (`busy="restart"`); at most `max_parallel` respawns in flight at once (the sessions
    relaunched in one round share one survival window). `auto`: the poll
    daemon's `env.autoRoll` (its records say so; a session it leaves is not recorded)."""

    wait_idle: float = DEFAULT_WAIT_IDLE
    busy: str = "skip"
    max_parallel: int = DEFAULT_WORKERS
    auto: bool = False

    def __post_init__(self) -> None:
        if self.busy not in BUSY_CHOICES:
            raise UsageError(f"--busy must be one of {', '.join(BUSY_CHOICES)}, not {self.busy!r}")
        if self.max_parallel < 1:
            raise UsageError("--max-parallel must be at least 1")
        if self.wait_idle < 0:
            raise UsageError("--wait-idle must be 0 or more seconds")


@dataclass(frozen=True)
class Selection:
    """`--all`, or the named refs (in the order given, duplicates dropped)."""

    all: bool
    refs: tuple[WorkItemRef, ...] = ()


def select(all_: bool, refs: Sequence[str]) -> Selection:
    """Validate the command line's selection; refuses neither or both."""
    from loop_dispatch import WorkItemRef

    if all_ and refs:
        raise UsageError("give either --all or one or more work item refs, not both")
    if not all_ and not refs:
        raise UsageError(
            "nothing selected: give --all to restart every running session, "
            "or one or more work item refs (e.g. github:OWNER/REPO#12)"
        )
    parsed: list[WorkItemRef] = []
    for text in refs:
        ref = WorkItemRef.parse(text)
        if ref not in parsed:
            parsed.append(ref)
    return Selection(all_, tuple(parsed))


class RegistryLike(RelaunchRegistry, Protocol):
    """The registry as restart reads it, plus what the relauncher records."""

    def list(self, status: Any = None) -> list[SessionRecord]: ...


class TmuxLike(RelaunchTmux, Protocol):
    """The tmux calls restart and its relauncher make."""

    def panes(self) -> list[Pane]: ...


class AdapterLike(Protocol):
    @property
    def can_resume(self) -> bool: ...
    def resume_argv(self, prompt: Any, conversation_id: str) -> list[str]: ...


class EventSink(Protocol):
    def emit(self, type: str, **kw: Any) -> Any: ...


@dataclass
class RestartDeps:
    """Everything restart touches, injected so each piece can be modelled in tests."""

    registry: RegistryLike
    tmux: TmuxLike
    launcher: EnvFileLauncher
    adapter_for: Callable[[SessionRecord], AdapterLike | None]
    events: EventSink | None = None
    lock: Callable[[WorkItemRef], AbstractContextManager[Any]] | None = None
    which: Callable[..., str | None] = shutil.which
    reader: Callable[[int], Mapping[str, str] | None] = process_environ
    launcher_check: Callable[[], str | None] | None = None
    survival_delay: float = DEFAULT_SURVIVAL_DELAY
    verify_timeout: float = DEFAULT_VERIFY_TIMEOUT
    sleep: Callable[[float], None] = time.sleep
    max_workers: int = DEFAULT_WORKERS
    resume_prompt: str = RESUME_PROMPT
    activity: ActivityReader | None = None  # None: no signal, every session counts idle
    # The record with a conversation id its spawn missed, found now (Codex, late_ids.py):
    # looked for before a session is planned, so it is resumed rather than left running.
    conversation: Callable[[SessionRecord], SessionRecord] | None = None
    clock: Callable[[], float] = time.monotonic
    idle_poll: float = IDLE_POLL
    quiet_seconds: float = QUIET_SECONDS
    _launcher_reason: list[str | None] = field(default_factory=list)

    def look(self, records: Sequence[SessionRecord]) -> dict[str, Look]:
        """Each record's activity now (idle for all without a reader)."""
        if not records:
            return {}
        if self.activity is None:
            return {str(r.work_item): Look("idle") for r in records}
        try:
            found = self.activity(records)
        except TmuxUnavailable:
            found = {}
        return {str(r.work_item): found.get(str(r.work_item), Look("unknown")) for r in records}

    def known(self, record: SessionRecord | None) -> SessionRecord | None:
        """`record` with its conversation id found late when it had none; as it is when
        tmux or the store cannot say (then it is planned as it stands)."""
        if record is None or record.conversation_id or self.conversation is None:
            return record
        try:
            return self.conversation(record)
        except (TmuxUnavailable, StoreError):
            return record

    def relauncher(self) -> Relauncher:
        """loop_dispatch's relaunch primitive over these collaborators."""
        return Relauncher(
            registry=self.registry,
            tmux=self.tmux,
            launcher=self.launcher,
            lock=self.lock,
            survival_delay=self.survival_delay,
            max_workers=self.max_workers,
        )

    def launcher_problem(self) -> str | None:
        """Why the launcher cannot run (checked once per restart), or None."""
        if not self._launcher_reason:
            check = self.launcher_check or (lambda: check_launcher(self.launcher))
            self._launcher_reason.append(check())
        return self._launcher_reason[0]


def check_launcher(launcher: EnvFileLauncher) -> str | None:
    """Run `loop-envstate exec FILE -- true` once: proves the script resolves and reads
    the file, without starting anything that matters. None when it ran."""
    true = shutil.which("true") or "/bin/true"
    argv = launcher.argv({}, [true])
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=LAUNCHER_CHECK_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"the launcher ({argv[0]}) did not finish within {LAUNCHER_CHECK_TIMEOUT:g}s"
    except OSError as err:
        return f"the launcher ({argv[0]}) cannot run: {err.strerror or err}"
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        said = f": {lines[-1]}" if lines else ""
        return f"the launcher ({argv[0]}) exited {done.returncode}{said}"
    return None


def launcher_resolves(launcher: EnvFileLauncher) -> str | None:
    """The dry run's launcher check, without starting a process: its program is an
    executable file. (The env file itself was read for this run already.)"""
    program = launcher.argv({}, ["true"])[0]
    if not (os.path.isfile(program) and os.access(program, os.X_OK)):
        return f"the launcher ({program}) is not an executable file"
    try:  # a script whose interpreter went (a venv whose Python was removed) cannot run
        with open(program, "rb") as handle:
            first = handle.readline(512)
    except OSError as err:
        return f"the launcher ({program}) cannot be read: {err.strerror or err}"
    if first.startswith(b"#!"):
        words = first[2:].split()
        interpreter = os.fsdecode(words[0]) if words else ""
        if not (os.path.isfile(interpreter) and os.access(interpreter, os.X_OK)):
            return f"the launcher ({program}) names an interpreter that is gone: {interpreter}"
    return None


def harness_problem(
    program: str,
    declared: Mapping[str, str],
    which: Callable[..., str | None],
    cwd: Path | None = None,
) -> str | None:
    """Why `program` would not start, or None. A bare name is looked up on the PATH the
    launcher's exec will use (the file's PATH when it declares one, else this
    process's); a relative path is taken from the pane's cwd, where it will run."""
    if os.sep in program:
        where = Path(program) if cwd is None else Path(cwd) / program
        if where.is_file() and os.access(where, os.X_OK):
            return None
        return f"harness binary {program} does not exist or is not executable"
    path = declared.get("PATH", os.environ.get("PATH", os.defpath))
    if which(program, path=path):
        return None
    return f"harness binary {program!r} is not found on PATH"


@dataclass
class _Progress:
    """How far a run got, so a signal can stop it and still leave a record: what was
    decided, which relaunches were handed to tmux, their results, the rows known, and
    which rows' events are written."""

    decided: list[Row | _Plan] | None = None
    submitted: set[str] = field(default_factory=set)
    results: dict[str, RelaunchResult] = field(default_factory=dict)
    rows: dict[str, Row] = field(default_factory=dict)
    emitted: set[str] = field(default_factory=set)
    auto: bool = False
    activity: dict[str, str | None] = field(default_factory=dict)


@dataclass
class _Plan:
    """A session chosen for relaunch: its record, drift row and full launch argv."""

    record: SessionRecord
    drift: DriftRow
    argv: list[str]
    env: dict[str, str]


def _records(
    selection: Selection, registry: RegistryLike
) -> list[tuple[str, SessionRecord | None]]:
    if selection.all:
        return [(str(r.work_item), r) for r in registry.list("active")]
    out: list[tuple[str, SessionRecord | None]] = []
    for ref in selection.refs:
        record = registry.get(ref)
        live = record is not None and record.status == "active"  # hibernated: nothing runs
        out.append((str(ref), record if live else None))
    return out


def _why_relaunch(row: DriftRow, force: bool) -> str:
    if row.state is DriftState.STALE:
        return "environment differs from the file: " + ", ".join(n.name for n in row.stale)
    if row.state is DriftState.UNREADABLE:
        return "environment cannot be read, relaunching to be sure"
    return "--force: relaunching although up to date"


def _plan_one(
    record: SessionRecord, row: DriftRow, declared: EnvFile, force: bool, deps: RestartDeps
) -> Row | _Plan:
    """Decide one session without touching it: a final row, or a plan to relaunch."""
    ref, name = str(record.work_item), record.tmux_name
    if row.state is DriftState.NOT_RUNNING:
        return Row(ref, name, Outcome.SKIPPED_NOT_RUNNING, "no live pane; not started")
    if row.state is DriftState.CURRENT and not force:
        return Row(ref, name, Outcome.UP_TO_DATE, "environment matches the file")
    adapter = deps.adapter_for(record)
    if adapter is None:
        why = (
            f"started by harness {record.harness!r}, which is not the configured one; left running"
        )
        return Row(ref, name, Outcome.SKIPPED_NOT_RESUMABLE, why, row.stale)
    relauncher = deps.relauncher()
    harness_argv = relauncher.resume_argv(adapter, record, deps.resume_prompt)
    if harness_argv is None:
        why = (
            f"harness {record.harness!r} cannot resume a conversation; left running"
            if resume_refusal(adapter, record) == "adapter_cannot_resume"
            else "no recorded conversation to resume; left running"
        )
        return Row(ref, name, Outcome.SKIPPED_NOT_RESUMABLE, why, row.stale)
    problems = [
        p
        for p in (
            harness_problem(harness_argv[0], declared.values, deps.which, Path(record.cwd)),
            deps.launcher_problem(),
            None if Path(record.cwd).is_dir() else f"working directory {record.cwd} is gone",
        )
        if p
    ]
    if problems:
        why = "cannot relaunch, left running: " + "; ".join(problems)
        return Row(ref, name, Outcome.FAILED, why, row.stale)
    spec = relauncher.spec(record, harness_argv)
    return _Plan(record, row, list(spec.argv), dict(spec.env))


def plan(
    selection: Selection, declared: EnvFile, deps: RestartDeps, *, force: bool
) -> list[Row | _Plan]:
    """Every selected session decided from one fleet read: final rows or relaunch plans."""
    chosen = _records(selection, deps.registry)
    report = environment_drift(
        [r for _, r in chosen if r is not None], declared, deps.tmux.panes(), reader=deps.reader
    )
    out: list[Row | _Plan] = []
    for ref, record in chosen:
        if record is None:
            out.append(Row(ref, None, Outcome.SKIPPED_UNREGISTERED, "no active session registered"))
            continue
        row = report.row(ref)
        assert row is not None
        if force or row.state in (DriftState.STALE, DriftState.UNREADABLE):
            record = deps.known(record)  # only a session it would relaunch
            assert record is not None
        out.append(_plan_one(record, row, declared, force, deps))
    return out


def _emit(deps: RestartDeps, row: Row, level: str, names: Sequence[str], auto: bool) -> None:
    """One event per relaunch (or refused relaunch): names only, never a value."""
    if deps.events is None:
        return
    deps.events.emit(
        "session.env_restart",
        level=level,
        source=AUTO_SOURCE if auto else EVENT_SOURCE,
        work_item=row.ref,
        detail={
            "tmux_name": row.tmux_name,
            "outcome": row.outcome.value,
            "reason": row.detail,
            "stale_names": list(names),
            "activity": row.activity,
            "auto": auto,
        },
    )


def _verify(item: _Plan, pids: tuple[int, ...], declared: EnvFile, deps: RestartDeps) -> Row:
    ref, name = str(item.record.work_item), item.record.tmux_name
    state, stale = classify(declared.values, (deps.reader(pid) for pid in pids))
    if state is DriftState.CURRENT:
        was = ", ".join(n.name for n in item.drift.stale)
        detail = "resumed; holds the file's values" + (f" (was stale: {was})" if was else "")
        return Row(ref, name, Outcome.RESTARTED, detail)
    if state is DriftState.STALE:
        why = "relaunched but still differs: " + ", ".join(n.name for n in stale)
        return Row(ref, name, Outcome.VERIFIED_STALE, why, stale)
    if state is DriftState.UNREADABLE:
        return Row(ref, name, Outcome.UNVERIFIED, "relaunched; its environment cannot be read")
    return Row(ref, name, Outcome.FAILED, "the relaunched harness exited before it was verified")


def relaunch(
    plans: Sequence[_Plan],
    declared: EnvFile,
    deps: RestartDeps,
    progress: _Progress | None = None,
    gate: Callable[[list[_Plan]], list[_Plan]] | None = None,
) -> dict[str, Row]:
    """Relaunch every plan with loop_dispatch's relauncher (locks and the re-read under
    them, respawn in place concurrently, ONE survival window), then verify each
    survivor by its environment. `progress` follows it step by step.

    `gate` (a rollout's) runs under the locks and keeps the plans that may go now
    (still idle); the others get no row: the caller looks at them again later."""
    progress = progress if progress is not None else _Progress()
    rows = progress.rows
    if not plans:
        return rows
    relauncher = deps.relauncher()
    by_ref = {str(p.record.work_item): p for p in plans}
    with relauncher.locked([p.record for p in plans]) as held:
        for ref, err in held.busy.items():
            item = by_ref[ref]
            why = f"work item is busy ({err}); left running"
            rows[ref] = Row(ref, item.record.tmux_name, Outcome.FAILED, why, item.drift.stale)
        for ref in held.changed:
            # Closed (or respawned, re-registered) while the selection waited for the
            # lock: relaunching would bring a closed item's agent back. Left alone.
            why = "closed or changed since it was selected; left alone"
            rows[ref] = Row(ref, by_ref[ref].record.tmux_name, Outcome.SKIPPED_CLOSED, why)
        ready = [by_ref[str(r.work_item)] for r in held.records]
        if gate is not None:
            ready = gate(ready)
        progress.submitted.update(str(p.record.work_item) for p in ready)
        results = relauncher.respawn(
            [Relaunch(record=p.record, spec=LaunchSpec(p.argv, p.env)) for p in ready]
        )
        progress.results.update(results)
        alive = []
        for item in ready:
            row = _relaunched(item, results[str(item.record.work_item)], deps)
            if row is None:
                alive.append(item)
            else:
                rows[row.ref] = row
        _survey(alive, declared, deps, rows)
    return rows


def _idle(
    ref: str, look: Look, seen: dict[str, tuple[str, float]], now: float, quiet: float
) -> bool:
    """May this session be relaunched now without cutting a turn? Idle, or its pane is
    not live (nothing to cut), or "unknown" with a screen unchanged for `quiet`
    seconds (`seen` keeps each screen and since when it is unchanged)."""
    if look.activity is None or look.activity == "idle":
        return True
    if look.activity != "unknown" or look.screen is None:
        seen.pop(ref, None)
        return False
    was = seen.get(ref)
    if was is None or was[0] != look.screen:
        seen[ref] = (look.screen, now)
        return False
    return now - was[1] >= quiet


def rollout(
    plans: Sequence[_Plan],
    declared: EnvFile,
    deps: RestartDeps,
    how: Rollout,
    progress: _Progress | None = None,
) -> dict[str, Row]:
    """Relaunch each plan at its harness's next idle moment (see the module's doc).

    Each round reads the activity of every session still waiting in one tmux call,
    locks the idle ones, looks again under the locks (a delivery may have started a
    turn since) and relaunches those still idle: at most `max_parallel` respawns in
    flight at once, ONE survival window for the round. At the deadline the rest are
    skipped-busy, or relaunched anyway with `busy="restart"`."""
    progress = progress if progress is not None else _Progress()
    rows = progress.rows
    deps = replace(deps, max_workers=how.max_parallel)
    pending = list(plans)
    seen: dict[str, tuple[str, float]] = {}
    deadline = deps.clock() + how.wait_idle

    def still_idle(ready: list[_Plan]) -> list[_Plan]:
        looks = deps.look([p.record for p in ready])
        now = deps.clock()
        keep = []
        for plan_ in ready:
            ref = str(plan_.record.work_item)
            progress.activity[ref] = looks[ref].activity
            if _idle(ref, looks[ref], seen, now, deps.quiet_seconds):
                keep.append(plan_)
        return keep

    while pending:
        looks = deps.look([p.record for p in pending])
        now = deps.clock()
        idle = []
        for plan_ in pending:
            ref = str(plan_.record.work_item)
            progress.activity[ref] = looks[ref].activity
            if _idle(ref, looks[ref], seen, now, deps.quiet_seconds):
                idle.append(plan_)
        if idle:
            relaunch(idle, declared, deps, progress, gate=still_idle)
            before = len(pending)
            pending = [p for p in pending if str(p.record.work_item) not in rows]
            if len(pending) < before:
                continue  # more may be idle already: no pause between batches
        if deps.clock() >= deadline:
            break
        deps.sleep(max(0.0, min(deps.idle_poll, deadline - deps.clock())))
    if pending and how.busy == "restart":
        relaunch(pending, declared, deps, progress)
        for plan_ in pending:
            ref = str(plan_.record.work_item)
            if ref in rows and rows[ref].outcome is Outcome.RESTARTED:
                was = progress.activity.get(ref)
                detail = f"{rows[ref].detail}; relaunched while {was} (--busy=restart)"
                rows[ref] = replace(rows[ref], detail=detail)
    elif pending:
        for plan_ in pending:
            ref = str(plan_.record.work_item)
            was = progress.activity.get(ref) or "unknown"
            why = (
                f"still {was} after waiting {how.wait_idle:g}s for its turn to end; left "
                "running (--busy=restart relaunches it anyway)"
            )
            rows[ref] = Row(
                ref, plan_.record.tmux_name, Outcome.SKIPPED_BUSY, why, plan_.drift.stale
            )
    for ref, row in list(rows.items()):
        if row.activity is None and ref in progress.activity:
            rows[ref] = replace(row, activity=progress.activity[ref])
    return rows


def _relaunched(item: _Plan, result: RelaunchResult, deps: RestartDeps) -> Row | None:
    """The row of a relaunch that failed or cannot be verified; None when it survived."""
    ref, name = str(item.record.work_item), item.record.tmux_name
    if not result.started:
        return Row(ref, name, Outcome.FAILED, result.error or "not relaunched", item.drift.stale)
    if result.survived is None:
        return Row(ref, name, Outcome.UNVERIFIED, f"relaunched; {result.error}")
    if not result.survived:
        why = f"the relaunched harness exited within {deps.survival_delay:g}s"
        return Row(ref, name, Outcome.FAILED, why)
    return None


def _survey(
    alive: Sequence[_Plan], declared: EnvFile, deps: RestartDeps, rows: dict[str, Row]
) -> dict[str, Row]:
    """Verify each survivor by its environment, one pane read per round.

    A pane pid is the launcher until it execs the harness, and the launcher still holds
    the inherited (old) environment: a stale reading is re-read, fleet-wide, until
    `verify_timeout`, and only a reading still stale then is "verified-stale".
    Rows are added to `rows` as each is known.
    """
    pending = list(alive)
    deadline = time.monotonic() + deps.verify_timeout
    while pending:
        try:
            pids = live_pids(deps.tmux.panes())
        except TmuxUnavailable as err:
            rows.update(_unverified(pending, f"tmux did not answer ({err})"))
            break
        still = []
        for item in pending:
            row = _verify(item, pids.get(item.record.tmux_name, ()), declared, deps)
            if row.outcome is Outcome.VERIFIED_STALE and time.monotonic() < deadline:
                still.append(item)
            else:
                rows[row.ref] = row
        pending = still
        if pending:
            deps.sleep(VERIFY_POLL)
    return rows


def _unverified(items: Sequence[_Plan], why: str) -> dict[str, Row]:
    return {
        str(p.record.work_item): Row(
            str(p.record.work_item), p.record.tmux_name, Outcome.UNVERIFIED, f"relaunched; {why}"
        )
        for p in items
    }


def restart_sessions(
    selection: Selection,
    declared: EnvFile,
    deps: RestartDeps,
    *,
    dry_run: bool = False,
    force: bool = False,
    how: Rollout | None = None,
) -> list[Row]:
    """One row per selected session, in selection order (registry order for --all).

    `declared` is the file as read for this run. Only stale or unreadable sessions are
    relaunched unless `force`, each at its harness's next idle moment (`how`, see
    `Rollout`); `dry_run` decides everything, reads each one's activity once, and
    touches no session (it may record a Codex conversation id found late: a fact
    about the session, `RestartDeps.known`).

    A stop signal (`Interrupted`, raised by the command's handler) ends the run where it
    stands: every session acted on gets its row and its `session.env_restart` record
    (a relaunch not yet verified is `unverified`, one not yet started `interrupted`),
    and Interrupted is raised again carrying those rows (`partial`).
    """
    how = how if how is not None else Rollout()
    progress = _Progress(auto=how.auto)
    try:
        return _restart(selection, declared, deps, progress, how, dry_run=dry_run, force=force)
    except Interrupted as stop:
        raise Interrupted(stop.signum, _partial(progress, deps, stop, dry_run)) from None


def _restart(
    selection: Selection,
    declared: EnvFile,
    deps: RestartDeps,
    progress: _Progress,
    how: Rollout,
    *,
    dry_run: bool,
    force: bool,
) -> list[Row]:
    if dry_run and deps.launcher_check is None:
        # A plan that starts nothing: the launcher is resolved, not run (a Python
        # start-up per dry run would be most of its cost). The real run runs it.
        launcher = deps.launcher
        deps = replace(
            deps, launcher_check=lambda: launcher_resolves(launcher), _launcher_reason=[]
        )
    decided = plan(selection, declared, deps, force=force)
    progress.decided = decided
    plans = [d for d in decided if isinstance(d, _Plan)]
    if dry_run:
        looks = deps.look([p.record for p in plans])
        done = {
            str(p.record.work_item): Row(
                str(p.record.work_item),
                p.record.tmux_name,
                Outcome.WOULD_RESTART,
                _why_relaunch(p.drift, force) + _verdict(looks[str(p.record.work_item)], how),
                p.drift.stale,
                looks[str(p.record.work_item)].activity,
            )
            for p in plans
        }
    else:
        done = rollout(plans, declared, deps, how, progress)
    rows: list[Row] = []
    for item in decided:
        row = done[str(item.record.work_item)] if isinstance(item, _Plan) else item
        if not dry_run:
            _record(deps, item, row, progress)
        rows.append(row)
    return rows


def _verdict(look: Look, how: Rollout) -> str:
    """The dry run's word on a session's activity: now, and what the run would do."""
    if look.activity is None or look.activity == "idle":
        return "; idle now: would relaunch at once"
    later = "relaunch it anyway" if how.busy == "restart" else "leave it running (skipped-busy)"
    return (
        f"; {look.activity} now: would wait up to {how.wait_idle:g}s for its turn to end, "
        f"then {later}"
    )


def _record(deps: RestartDeps, item: Row | _Plan, row: Row, progress: _Progress) -> None:
    """The session's `session.env_restart`, once: every relaunch (or attempt), every
    refused one (failed before it started), and every one left busy by `sessions
    restart` (the daemon's env.autoRoll looks again next cycle: not recorded)."""
    if row.ref in progress.emitted:
        return
    if isinstance(item, _Plan):
        if row.outcome is Outcome.INTERRUPTED:
            return  # not acted on: left as it was
        if row.outcome is Outcome.SKIPPED_BUSY and progress.auto:
            return  # tried again at the next idle moment
        names = [n.name for n in (row.stale or item.drift.stale)]
        level = (
            "error"
            if row.outcome in FAILING
            else "warning"
            if row.outcome is Outcome.SKIPPED_BUSY
            else "info"
        )
        _emit(deps, row, level, names, progress.auto)
    elif row.outcome is Outcome.FAILED:
        _emit(deps, row, "error", [n.name for n in row.stale], progress.auto)
    progress.emitted.add(row.ref)


def _partial(progress: _Progress, deps: RestartDeps, stop: Interrupted, dry_run: bool) -> list[Row]:
    """The rows of an interrupted run, each session's record written (see restart_sessions)."""
    if progress.decided is None:
        return []  # stopped while deciding: nothing was touched
    why = f"interrupted ({stop})"
    rows: list[Row] = []
    for item in progress.decided:
        if not isinstance(item, _Plan):
            row = item
        else:
            row = progress.rows.get(str(item.record.work_item)) or _unfinished(item, progress, why)
        if not dry_run:
            with contextlib.suppress(Exception):  # the record must not stop the summary
                _record(deps, item, row, progress)
        rows.append(row)
    return rows


def _unfinished(item: _Plan, progress: _Progress, why: str) -> Row:
    """What a signal left of one planned relaunch without a final row."""
    ref, name = str(item.record.work_item), item.record.tmux_name
    result = progress.results.get(ref)
    if result is not None and not result.started:
        return Row(ref, name, Outcome.FAILED, result.error or "not relaunched", item.drift.stale)
    if result is not None and result.survived:
        detail = f"relaunched and survived; {why} before its environment was verified"
        return Row(ref, name, Outcome.UNVERIFIED, detail)
    if result is not None and result.survived is False:
        return Row(
            ref, name, Outcome.FAILED, "the relaunched harness exited in its survival window"
        )
    if ref in progress.submitted:
        return Row(ref, name, Outcome.UNVERIFIED, f"relaunched; {why} before its survival check")
    detail = f"{why} before its relaunch; left running as it was"
    return Row(ref, name, Outcome.INTERRUPTED, detail, item.drift.stale)
