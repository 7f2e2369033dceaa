"""Drift, read-only: which running sessions hold an environment other than the file's.

One function, no side effects: `status` and `sessions restart` (whose `--dry-run` shows
just this decision) are renderings of its answer. The fleet's panes come from ONE tmux
call; each pane pid is the harness itself (the launcher execs it), so its environment
is read directly. An environment that cannot be read is reported as such and never
counted as drift: "cannot tell" must not send an operator to restart healthy sessions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from loop_envstate import compare, fingerprint, process_environ

if TYPE_CHECKING:
    from loop_dispatch import SessionRecord
    from loop_envstate import EnvFile
    from loop_tmux import Pane

    from ..config import Config
    from ..fleet import Fleet

EnvironReader = Callable[[int], "Mapping[str, str] | None"]


class DriftState(str, Enum):
    CURRENT = "current"
    STALE = "stale"
    UNREADABLE = "unreadable"
    NOT_RUNNING = "not-running"


@dataclass(frozen=True)
class NameDrift:
    """One differing name: the file's fingerprint and the process's (None: not set)."""

    name: str
    file: str
    process: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "file": self.file, "process": self.process}

    def describe(self) -> str:
        return f"{self.name} (file {self.file}, process {self.process or 'unset'})"


@dataclass(frozen=True)
class DriftRow:
    """One registered session: its live pane pids and how they compare with the file."""

    ref: str
    tmux_name: str
    state: DriftState
    pids: tuple[int, ...] = ()
    stale: tuple[NameDrift, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "tmuxName": self.tmux_name,
            "state": self.state.value,
            "pids": list(self.pids),
            "stale": [n.to_dict() for n in self.stale],
        }


@dataclass(frozen=True)
class DriftReport:
    """Every row, plus the counts `status` prints (running = has a live pane)."""

    rows: tuple[DriftRow, ...]
    malformed: tuple[int, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def running(self) -> int:
        return sum(1 for r in self.rows if r.state is not DriftState.NOT_RUNNING)

    @property
    def stale(self) -> int:
        return self.counts.get(DriftState.STALE.value, 0)

    def row(self, ref: str) -> DriftRow | None:
        return next((r for r in self.rows if r.ref == ref), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "registered": len(self.rows),
            "running": self.running,
            "counts": dict(self.counts),
            "malformedLines": list(self.malformed),
            "sessions": [r.to_dict() for r in self.rows],
        }


def _name_drift(declared: Mapping[str, str], held: Mapping[str, str]) -> tuple[NameDrift, ...]:
    return tuple(
        NameDrift(
            name,
            fingerprint(declared[name]),
            fingerprint(held[name]) if name in held else None,
        )
        for name in compare(declared, held)
    )


def classify(
    declared: Mapping[str, str], environments: Iterable[Mapping[str, str] | None]
) -> tuple[DriftState, tuple[NameDrift, ...]]:
    """A session's state from what its live pids hold (pure; the heart of drift).

    Any readable pid that differs makes it stale (the differing names merged); else any
    unreadable pid makes it unreadable; no pid at all means not running.
    """
    envs = list(environments)
    if not envs:
        return DriftState.NOT_RUNNING, ()
    differing: dict[str, NameDrift] = {}
    unreadable = False
    for env in envs:
        if env is None:
            unreadable = True
            continue
        for item in _name_drift(declared, env):
            differing.setdefault(item.name, item)
    if differing:
        return DriftState.STALE, tuple(differing[n] for n in sorted(differing))
    if unreadable:
        return DriftState.UNREADABLE, ()
    return DriftState.CURRENT, ()


def live_pids(panes: Iterable[Pane]) -> dict[str, tuple[int, ...]]:
    """Live pane pids by session name, from one `panes()` answer."""
    out: dict[str, list[int]] = {}
    for pane in panes:
        if not pane.dead and pane.pid > 0:
            out.setdefault(pane.session, []).append(pane.pid)
    return {name: tuple(pids) for name, pids in out.items()}


def environment_drift(
    records: Iterable[SessionRecord],
    declared: EnvFile,
    panes: Iterable[Pane],
    *,
    reader: EnvironReader = process_environ,
) -> DriftReport:
    """For every given (active) session: live pids, what they hold, how it compares.

    `panes` is one `Tmux.panes()` answer for the whole fleet (the caller reads it once;
    a tmux that did not answer must not be passed as "no panes"). Reads only: one
    environment read per live pid.
    """
    by_session = live_pids(panes)
    rows: list[DriftRow] = []
    for record in records:
        pids = by_session.get(record.tmux_name, ())
        state, stale = classify(declared.values, (reader(pid) for pid in pids))
        rows.append(DriftRow(str(record.work_item), record.tmux_name, state, pids, stale))
    counts = {s.value: 0 for s in DriftState}
    for row in rows:
        counts[row.state.value] += 1
    return DriftReport(tuple(rows), tuple(declared.malformed), counts)


def waiting_for_idle(report: DriftReport, activity: Mapping[str, str | None]) -> int:
    """How many stale sessions are not idle now (a rollout waits for their turn's end)."""
    return sum(
        1
        for row in report.rows
        if row.state is DriftState.STALE and activity.get(row.ref) != "idle"
    )


def drift_line(
    report: DriftReport,
    activity: Mapping[str, str | None] | None = None,
    auto_roll: str = "off",
) -> str | None:
    """The one status line, only when some session is stale: how many, and (activity
    known) how many of them wait for their turn to end before they can be rolled."""
    if report.stale == 0:
        return None
    line = f"sessions: {report.stale} of {report.running} running with a stale environment"
    waiting = None if activity is None else waiting_for_idle(report, activity)
    if auto_roll == "idle":
        return line + f", {waiting or 0} waiting for idle (env.autoRoll: idle rolls them)"
    line += " - run: the-loop sessions restart --all"
    if waiting:
        line += f" ({waiting} not idle now: it waits for their turns to end)"
    return line


def status_block(
    config: Config,
    records: Iterable[SessionRecord],
    fleet: Fleet,
    *,
    reader: EnvironReader = process_environ,
    activity: Mapping[str, str | None] | None = None,
    auto_roll: str = "off",
) -> dict[str, Any] | None:
    """`status`'s sessionEnvironment block for the active `records` (None when no
    env.file is configured). `activity` (ref -> idle/busy/...) adds how many stale
    sessions wait for idle (`waitingForIdle`).

    Uses the fleet status already read (no second tmux call). Every failure becomes an
    `error` in the block and never a drift line: a status that cannot read the file,
    tmux or /proc is still a status, and its exit code is never touched.
    """
    from loop_envstate import EnvFileError, declared

    from .launcher import env_file_path

    path = env_file_path(config)
    if path is None:
        return None
    if fleet.error is not None:
        return {"file": str(path), "error": f"tmux did not answer: {fleet.error}"}
    try:
        env = declared(path)
    except EnvFileError as err:
        return {"file": str(path), "error": str(err)}
    assert env is not None
    panes = [pane for group in fleet.panes.values() for pane in group]
    report = environment_drift(records, env, panes, reader=reader)
    block: dict[str, Any] = {"file": str(path), "error": None, **report.to_dict()}
    if activity is not None:
        block["waitingForIdle"] = waiting_for_idle(report, activity)
    block["autoRoll"] = auto_roll
    line = drift_line(report, activity, auto_roll)
    if line is not None:
        block["line"] = line
    return block


def session_env_state(
    config: Config, tmux_pids: Iterable[int], *, reader: EnvironReader = process_environ
) -> str:
    """A few words on one session's environment against env.file, for the ticket's
    `the-loop status` reply: `up to date`, `stale (NAME, NAME)` (names only, never a
    value or fingerprint on a ticket), `unreadable`, `not running`, `no env.file`, or
    why the file could not be read."""
    from loop_envstate import EnvFileError, declared

    from .launcher import env_file_path

    path = env_file_path(config)
    if path is None:
        return "no env.file"
    try:
        env = declared(path)
    except EnvFileError:
        return "env.file unreadable"
    assert env is not None
    state, stale = classify(env.values, (reader(pid) for pid in tmux_pids))
    if state is DriftState.STALE:
        return f"stale ({', '.join(n.name for n in stale)})"
    return {DriftState.CURRENT: "up to date", DriftState.UNREADABLE: "unreadable"}.get(
        state, "not running"
    )
