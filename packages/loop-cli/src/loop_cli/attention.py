"""The stalled-agent detector and the attention list (issue 26, points 1 and 2).

Once per poll cycle the daemon `sweep`s: it observes every open item's session (one
fleet read, one batch of screens, the harness's own files, the receipts in the event
log), then `plan` (pure) compares what holds now with what the store kept. A condition
that has held past its threshold is raised once (`session.stalled`); one that stops
holding is cleared (`session.stall_cleared`). The rows live in the store
(attention_store.py), so a restarted daemon raises nothing twice and keeps `since`.

`attention_list` is what `status`, `sessions list --attention` and the local API show:
the raised rows, each with why, since when, and the command that helps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .attention_store import AttentionStore, Mark, Stall
from .fleet import ABSENT, DEAD, LIVE, Fleet, read_fleet

if TYPE_CHECKING:
    from loop_dispatch import SessionRecord
    from loop_dispatch.eventlog import EventLog

    from .config import AttentionConfig
    from .runtime import Runtime

__all__ = [
    "BLOCKED",
    "DEAD_OPEN",
    "NO_PROGRESS",
    "REASONS",
    "UNCONFIRMED",
    "Plan",
    "Seen",
    "SweepReport",
    "attention_list",
    "plan",
    "remedy",
    "sweep",
]

DEAD_OPEN = "dead-with-open-item"
BLOCKED = "blocked-dialog"
NO_PROGRESS = "no-progress"
UNCONFIRMED = "unconfirmed"
REASONS = (DEAD_OPEN, BLOCKED, NO_PROGRESS, UNCONFIRMED)
SOURCE = "attention"
_RECEIPTS = "dispatch.confirmed,dispatch.unconfirmed"
_RECEIPT_WINDOW = 500  # receipts read per sweep, newest first


@dataclass(frozen=True)
class Seen:
    """A condition that holds for an item now. `since`: when it began, when the
    observation can tell (no-progress: the conversation file's last growth); else the
    first sweep that saw it is its start. Raised once held `threshold` seconds."""

    work_item: str
    reason: str
    threshold: float
    since: datetime | None = None
    note: str = ""


@dataclass(frozen=True)
class Plan:
    put: list[Stall] = field(default_factory=list)  # rows to write (new, or now raised)
    raise_: list[Stall] = field(default_factory=list)  # of those, the ones to report
    clear: list[Stall] = field(default_factory=list)  # rows that no longer hold


@dataclass(frozen=True)
class SweepReport:
    raised: list[Stall]
    cleared: list[Stall]


def plan(seen: Iterable[Seen], held: Iterable[Stall], now: datetime) -> Plan:
    """What to write, raise and clear: pure, so every transition is a table test."""
    kept = {(s.work_item, s.reason): s for s in held}
    out = Plan()
    current: set[tuple[str, str]] = set()
    for obs in seen:
        key = (obs.work_item, obs.reason)
        current.add(key)
        old = kept.get(key)
        # A condition that knows its start (no-progress) keeps it; else the first sweep
        # that saw it is its start, kept across sweeps and daemon restarts.
        since = obs.since or (old.since if old is not None else now)
        raised_at = old.raised_at if old is not None else None
        due = (now - since).total_seconds() >= obs.threshold
        if raised_at is None and due:
            row = Stall(obs.work_item, obs.reason, since, obs.note, now)
            out.put.append(row)
            out.raise_.append(row)
        elif old is None or old.note != obs.note:
            out.put.append(Stall(obs.work_item, obs.reason, since, obs.note, raised_at))
    out.clear.extend(s for key, s in kept.items() if key not in current)
    return out


def remedy(reason: str, item: str, note: str = "") -> str:
    """The command an operator runs first for this reason."""
    if reason == DEAD_OPEN:
        return f"the-loop sessions start {item}"
    if reason == BLOCKED:
        what = f"its {note} dialog" if note else "its dialog"
        return f"the-loop sessions attach {item}  (answer {what})"
    if reason == NO_PROGRESS:
        return f"the-loop sessions attach {item}  (look; stop it with Esc if it loops)"
    return f"the-loop events --work-item {item} --type 'dispatch.*'"


def _why(stall: Stall) -> str:
    return f"{stall.reason} ({stall.note})" if stall.note else stall.reason


def attention_list(
    store: Any, *, tmux_names: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """The raised stalls as rows `{item, why, reason, since, remedy}` (oldest first):
    the `attention` block of `status -o json` and of the local API. Reads only."""
    rows = []
    for stall in AttentionStore(store).raised():
        row: dict[str, Any] = {
            "item": stall.work_item,
            "why": _why(stall),
            "reason": stall.reason,
            "since": stall.since.isoformat(timespec="seconds"),
            "remedy": remedy(stall.reason, stall.work_item, stall.note),
        }
        if tmux_names is not None and stall.work_item in tmux_names:
            row["tmuxName"] = tmux_names[stall.work_item]
        rows.append(row)
    return rows


# -- observing ----------------------------------------------------------------------


def _receipt_streaks(
    log: EventLog, marks: dict[str, Mark], scanned_to: str | None
) -> tuple[dict[str, int], str | None]:
    """Each item's deliveries in a row without a receipt, after the receipts written
    since the last sweep (`scanned_to`: the last one's timestamp). The log is read from
    its end and at most the newest `_RECEIPT_WINDOW` receipts, so a sweep's cost follows
    one cycle's deliveries, not the log's size."""
    streaks = {item: m.streak for item, m in marks.items()}
    records = log.read(_RECEIPTS, limit=_RECEIPT_WINDOW)
    if scanned_to is not None:
        records = [r for r in records if str(r.get("ts")) > scanned_to]
    last = scanned_to
    for rec in records:
        item = rec.get("workItem")
        if isinstance(item, str):
            confirmed = rec.get("type") == "dispatch.confirmed"
            streaks[item] = 0 if confirmed else streaks.get(item, 0) + 1
        last = str(rec.get("ts"))
    return streaks, last


def _screens(rt: Runtime, live: Sequence[SessionRecord]) -> dict[str, Any]:
    from loop_tmux import TmuxUnavailable

    if not live or not rt.adapter.reads_screen:
        return {}
    try:
        return rt.tmux.pane_views([r.tmux_name for r in live], capture=True)
    except TmuxUnavailable:
        return {}


def _observe_live(
    rt: Runtime,
    record: SessionRecord,
    view: Any,
    mark: Mark,
    cfg: AttentionConfig,
    now: datetime,
) -> tuple[list[Seen], Mark]:
    """blocked-dialog and no-progress for one live session, and its new mark."""
    item = str(record.work_item)
    adapter = rt.adapter
    conversation = record.conversation_id
    seen: list[Seen] = []
    activity = "unknown"
    if view is not None and not view.dead:
        dialog = adapter.readiness(view).dialog
        activity = adapter.activity(view, conversation)
        if dialog is not None or activity == "blocked":
            seen.append(Seen(item, BLOCKED, cfg.blocked_seconds, note=dialog or ""))
    size = adapter.receipt_mark(conversation) if conversation else None
    grown_at = mark.grown_at
    if activity != "busy" or size != mark.conv_size or grown_at is None:
        grown_at = now  # the quiet clock runs only while busy and not growing
    if activity == "busy" and not seen and grown_at < now:
        seen.append(Seen(item, NO_PROGRESS, cfg.quiet_seconds, since=grown_at))
    return seen, Mark(item, size, grown_at, mark.streak)


def observe(
    rt: Runtime,
    records: Sequence[SessionRecord],
    fleet: Fleet,
    marks: dict[str, Mark],
    streaks: Mapping[str, int],
    now: datetime,
) -> tuple[list[Seen], dict[str, Mark]]:
    """Every condition holding now for the open items, and the marks to keep."""
    cfg = rt.config.attention
    seen: list[Seen] = []
    new_marks: dict[str, Mark] = {}
    # A hibernated session's harness was ended on purpose (issue 25): not a dead agent.
    active = [r for r in records if r.active and not r.hibernated]
    live = [r for r in active if fleet.presence(r.tmux_name) == LIVE]
    views = _screens(rt, live)
    for record in active:
        item = str(record.work_item)
        mark = marks.get(item, Mark(item))
        mark = Mark(item, mark.conv_size, mark.grown_at, streaks.get(item, mark.streak))
        presence = fleet.presence(record.tmux_name)
        if presence in (DEAD, ABSENT) and record.started_at is not None:
            seen.append(Seen(item, DEAD_OPEN, cfg.dead_seconds, note=presence))
        elif presence == LIVE:
            found, mark = _observe_live(rt, record, views.get(record.tmux_name), mark, cfg, now)
            seen += found
        if mark.streak >= cfg.unconfirmed_count:
            seen.append(Seen(item, UNCONFIRMED, 0.0, note=f"{mark.streak} in a row"))
        new_marks[item] = mark
    return seen, new_marks


def sweep(rt: Runtime, now: datetime | None = None) -> SweepReport:
    """One detector pass of the poll daemon: observe, plan, write, report. A tmux that
    does not answer changes nothing (no condition is raised or cleared on silence)."""
    now = now or datetime.now(timezone.utc)
    fleet = read_fleet(rt.tmux)
    if fleet.error is not None:
        return SweepReport([], [])
    table = AttentionStore(rt.store)
    records = _mine(rt, rt.store.registry.list())
    marks = table.marks()
    streaks: dict[str, int] = {}
    scanned = None
    if rt.adapter.has_receipts:  # an adapter without receipts writes none to count
        streaks, scanned = _receipt_streaks(rt.event_log, marks, table.scanned_to())
    seen, new_marks = observe(rt, records, fleet, marks, streaks, now)
    for mark in new_marks.values():
        if mark != marks.get(mark.work_item):
            table.put_mark(mark)
    if scanned is not None and scanned != table.scanned_to():
        table.set_scanned_to(scanned)
    todo = plan(seen, table.stalls(), now)
    for row in todo.put:
        table.put(row)
    for row in todo.raise_:
        _emit_raised(rt.event_log, row)
    for row in todo.clear:
        table.drop(row.work_item, row.reason)
        if row.raised_at is not None:
            _emit_cleared(rt.event_log, row, now)
    return SweepReport(todo.raise_, [r for r in todo.clear if r.raised_at is not None])


def _mine(rt: Runtime, records: list[SessionRecord]) -> list[SessionRecord]:
    """On a fleet's shared store, the items placed on this host (its tmux is the one
    read); on SQLite, every item."""
    if not rt.fleet:
        return records
    from loop_dispatch.hosts import Hosts

    here = set(Hosts(rt.store).placed_on(rt.host_name))
    return [r for r in records if str(r.work_item) in here]


def _emit_raised(log: EventLog, row: Stall) -> None:
    log.emit(
        "session.stalled",
        level="warning",
        source=SOURCE,
        work_item=row.work_item,
        detail={
            "reason": row.reason,
            "since": row.since.isoformat(timespec="seconds"),
            "note": row.note,
            "remedy": remedy(row.reason, row.work_item, row.note),
        },
    )


def _emit_cleared(log: EventLog, row: Stall, now: datetime) -> None:
    log.emit(
        "session.stall_cleared",
        source=SOURCE,
        work_item=row.work_item,
        detail={
            "reason": row.reason,
            "since": row.since.isoformat(timespec="seconds"),
            "stalledSeconds": round((now - row.since).total_seconds(), 1),
        },
    )


def sweep_quietly(rt: Runtime) -> SweepReport | None:
    """`sweep` for the daemon's cycle: a failure is a `poll.error`, never a stop."""
    try:
        return sweep(rt)
    except Exception as exc:
        error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        with contextlib.suppress(Exception):
            rt.event_log.emit(
                "poll.error",
                level="error",
                source="poller",
                detail={"error": error, "during": "attention"},
            )
        return None
