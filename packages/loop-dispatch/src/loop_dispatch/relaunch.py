"""The one relaunch primitive: lock, resume argv, respawn, survival check, record.

Two callers start a harness again in a session that already has a record: the
dispatcher, when a comment finds the session dead or gone (a new session under a spawn
token recorded first, so a late tmux is adopted), and env rotation (`sessions restart`),
which replaces a live harness in its pane (`respawn-pane -k`) to load a refreshed
environment. Both take every step here, so the two paths cannot drift apart:

- `lock` / `locked`: the work item's file lock, the record re-read under it;
- `resume_argv`: the recorded conversation resumed only when the adapter can;
- `spec`: the harness argv through the launcher (the env-file launcher, say);
- `spawn` (record the token, then new-session) or `respawn` (in place, concurrently);
- `survived` / `survivors`: ONE survival window for however many were started;
- `record_conversation`: the conversation a fresh start opened.

The caller keeps its decisions: the dispatcher its decision tree and events, rotation
its planning and environment verification.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from loop_tmux import RespawnResult, SpawnResult, TmuxUnavailable

from .launch import Launcher, LaunchSpec, default_launcher
from .lock import item_lock
from .model import WorkItemRef
from .registry import SessionRecord

__all__ = [
    "Held",
    "Relaunch",
    "RelaunchRegistry",
    "RelaunchResult",
    "RelaunchTmux",
    "Relauncher",
    "Resumable",
    "identity",
    "resume_refusal",
]

DEFAULT_WORKERS = 8


class Resumable(Protocol):
    """What resuming needs of a harness adapter (every HarnessAdapter has it)."""

    @property
    def can_resume(self) -> bool: ...

    def resume_argv(self, prompt: str, conversation_id: str) -> list[str]: ...


class RelaunchRegistry(Protocol):
    """What a relaunch needs of the registry."""

    def get(self, ref: WorkItemRef) -> SessionRecord | None: ...

    def issue_token(
        self,
        ref: WorkItemRef,
        *,
        harness: str,
        conversation_id: str | None,
        cwd: str | Path,
        delivery_id: str | None = None,
    ) -> str: ...

    def set_conversation(self, ref: WorkItemRef, conversation_id: str | None) -> bool: ...

    def mark_started(self, ref: WorkItemRef) -> bool: ...


class RelaunchTmux(Protocol):
    """What a relaunch needs of tmux (loop_tmux.Tmux)."""

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        cwd: str | Path,
        env: Mapping[str, str] | None = None,
        *,
        token: str | None = None,
    ) -> SpawnResult: ...

    def respawn(
        self, name: str, argv: Sequence[str], cwd: str | Path, env: Mapping[str, str] | None = None
    ) -> RespawnResult: ...

    def survivors(self, names: Iterable[str], delay: float = 1.0) -> dict[str, bool]: ...

    def survived(self, name: str, delay: float = 1.0) -> bool: ...


@dataclass(frozen=True, kw_only=True)
class Relaunch:
    """One session to start again in place: its record and what its pane runs."""

    record: SessionRecord
    spec: LaunchSpec


@dataclass(frozen=True, kw_only=True)
class RelaunchResult:
    """How one in-place relaunch went. `survived` is None when it was not checked
    (tmux refused the respawn) or tmux did not answer the check (`error` says which)."""

    record: SessionRecord
    started: bool
    survived: bool | None = None
    session_missing: bool = False
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class Held:
    """The records whose locks are held and unchanged, and the others: `busy` (ref ->
    why its lock could not be had) and `changed` (refs closed, respawned or
    re-registered since they were selected)."""

    records: list[SessionRecord]
    busy: dict[str, str]
    changed: list[str]


def identity(record: SessionRecord) -> tuple[object, ...]:
    """What makes a relaunch the one that was planned: still active, the same session and
    conversation (a session hibernated since is changed: nothing runs to relaunch). Other
    columns (timestamps) move with ordinary deliveries."""
    return (record.status, record.tmux_name, record.conversation_id, record.harness)


def resume_refusal(adapter: Resumable, record: SessionRecord) -> str | None:
    """Why `record`'s conversation cannot be resumed (a reason name), or None."""
    if not adapter.can_resume:
        return "adapter_cannot_resume"
    if not record.conversation_id:
        return "no_recorded_conversation"
    return None


class Relauncher:
    """The steps of a relaunch over one registry, tmux server and launcher."""

    def __init__(
        self,
        *,
        registry: RelaunchRegistry,
        tmux: RelaunchTmux,
        launcher: Launcher = default_launcher,
        lock: Callable[[WorkItemRef], AbstractContextManager[Any]] | None = None,
        survival_delay: float = 1.0,
        max_workers: int = DEFAULT_WORKERS,
    ) -> None:
        self.registry = registry
        self.tmux = tmux
        self.launcher = launcher
        self._lock = lock
        self.survival_delay = survival_delay
        self.max_workers = max_workers

    @classmethod
    def with_item_locks(
        cls, *, lock_dir: Path, lock_timeout: float | None, **kw: Any
    ) -> Relauncher:
        """A relauncher whose `lock` is the item's file lock under `lock_dir`."""
        return cls(lock=lambda ref: item_lock(lock_dir, ref, lock_timeout), **kw)

    # -- lock ----------------------------------------------------------------------------

    def lock(self, ref: WorkItemRef) -> AbstractContextManager[Any]:
        """The item's lock (LockTimeout / LockUnavailable when it cannot be had)."""
        return nullcontext() if self._lock is None else self._lock(ref)

    @contextmanager
    def locked(self, records: Sequence[SessionRecord]) -> Iterator[Held]:
        """Hold the lock of each record's item for the block, re-reading the record under
        it: one closed or changed since selection is left alone (relaunching it would
        act on stale facts, or bring a closed item's agent back). A busy item is
        reported, never waited on beyond the lock's own timeout."""
        held = Held(records=[], busy={}, changed=[])
        with ExitStack() as stack:
            for record in records:
                if self._lock is None:
                    held.records.append(record)
                    continue
                try:
                    stack.enter_context(self._lock(record.work_item))
                except Exception as err:  # reported per item, never raised for the lot
                    held.busy[str(record.work_item)] = str(err)
                    continue
                current = self.registry.get(record.work_item)
                if current is None or identity(current) != identity(record):
                    held.changed.append(str(record.work_item))
                    continue
                held.records.append(record)
            yield held

    # -- what runs -----------------------------------------------------------------------

    def resume_argv(
        self, adapter: Resumable, record: SessionRecord, prompt: str
    ) -> list[str] | None:
        """The adapter's argv resuming the recorded conversation; None when it cannot."""
        if resume_refusal(adapter, record) is not None or record.conversation_id is None:
            return None
        return adapter.resume_argv(prompt, record.conversation_id)

    def spec(self, record: SessionRecord, harness_argv: list[str]) -> LaunchSpec:
        """What the pane runs: the harness argv through the launcher."""
        return self.launcher(record, harness_argv)

    # -- start it --------------------------------------------------------------------------

    def spawn(
        self,
        record: SessionRecord,
        harness_argv: list[str],
        conversation: str | None = None,
        *,
        delivery_id: str | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> SpawnResult:
        """A new session under a fresh token, recorded in the store before tmux is asked
        (naming `delivery_id`, the event the harness starts with as its prompt).
        `extra_env` (the adapter's own, non-secret names) joins the launcher's env."""
        spec = self.spec(record, harness_argv)
        token = self.registry.issue_token(
            record.work_item,
            harness=record.harness,
            conversation_id=conversation or record.conversation_id,
            cwd=record.cwd,
            delivery_id=delivery_id,
        )
        env = {**spec.env, **(extra_env or {})}
        return self.tmux.spawn(record.tmux_name, spec.argv, str(record.cwd), env, token=token)

    def respawn(self, items: Sequence[Relaunch]) -> dict[str, RelaunchResult]:
        """Replace each pane's program in place, concurrently (bounded), then ONE shared
        survival window for all that started. Keyed by the item's ref."""
        if not items:
            return {}
        workers = max(1, min(self.max_workers, len(items)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="relaunch") as pool:
            answers = list(pool.map(self._respawn_one, items))
        results: dict[str, RelaunchResult] = {}
        started: list[Relaunch] = []
        for item, answer in zip(items, answers, strict=True):
            if isinstance(answer, RelaunchResult):
                results[str(item.record.work_item)] = answer
            else:
                started.append(item)
                self.registry.mark_started(item.record.work_item)
        if not started:
            return results
        try:
            alive = self.survivors([i.record.tmux_name for i in started])
        except TmuxUnavailable as err:
            why = f"tmux did not answer the survival check ({err})"
            for item in started:
                results[str(item.record.work_item)] = RelaunchResult(
                    record=item.record, started=True, error=why
                )
            return results
        for item in started:
            results[str(item.record.work_item)] = RelaunchResult(
                record=item.record, started=True, survived=alive.get(item.record.tmux_name, False)
            )
        return results

    def _respawn_one(self, item: Relaunch) -> RelaunchResult | None:
        """None when tmux carried it out; else the result saying why not."""
        record = item.record
        try:
            answer = self.tmux.respawn(record.tmux_name, item.spec.argv, record.cwd, item.spec.env)
        except Exception as err:  # a worker thread must hand back a result, never lose one
            why = f"the relaunch could not be attempted: {type(err).__name__}: {err}"
            return RelaunchResult(record=record, started=False, error=why)
        if answer.ok:
            return None
        if answer.session_missing:
            return RelaunchResult(
                record=record,
                started=False,
                session_missing=True,
                error="the session disappeared before the relaunch",
            )
        return RelaunchResult(
            record=record, started=False, error=f"tmux refused the relaunch: {answer.error}"
        )

    # -- did it stay up ----------------------------------------------------------------------

    def survivors(self, names: Sequence[str]) -> dict[str, bool]:
        """After ONE survival window: which of these sessions still run a program.
        Raises TmuxUnavailable when tmux does not answer."""
        return self.tmux.survivors(names, self.survival_delay)

    def survived(self, name: str) -> bool | None:
        """One session's survival check; None when tmux did not answer."""
        try:
            return self.tmux.survived(name, self.survival_delay)
        except TmuxUnavailable:
            return None

    # -- record ------------------------------------------------------------------------------

    def record_conversation(self, ref: WorkItemRef, conversation_id: str | None) -> None:
        """The conversation a fresh start opened becomes the one a later relaunch resumes."""
        self.registry.set_conversation(ref, conversation_id)
