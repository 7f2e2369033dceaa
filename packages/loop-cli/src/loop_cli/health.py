"""Is work actually flowing? `status`'s health checks, each with its reason and remedy.

`status` is `ok` only when every check is: the enabled daemons beat (fresh heartbeat,
live pid), the poller's recent cycles succeed, open inbox events make progress, the
state store answers and tmux answers. A monitor can rely on the exit code alone
(0 ok, 1 not), so each check must say "failing" only for a real stop of delivery and
always name what to do. Pure functions over what `collect_status` read.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loop_dispatch.inbox import InboxEntry

__all__ = [
    "FAILED_CYCLES",
    "STALL_CYCLES",
    "STALL_FLOOR_SECONDS",
    "check",
    "cycles_check",
    "failed_cycle",
    "inbox_check",
    "service_check",
    "stall_seconds",
    "store_check",
    "tmux_check",
]

OK, FAILING = "ok", "failing"
FAILED_CYCLES = 2  # this many failed poll cycles in a row: "recent cycles failed"
STALL_CYCLES = 3  # an open event not delivered within this many poll intervals...
STALL_FLOOR_SECONDS = 120.0  # ...and this long (a slow harness start is not a stall)


def check(name: str, state: str, reason: str = "", remedy: str = "") -> dict[str, str]:
    return {"check": name, "state": state, "reason": reason, "remedy": remedy}


def _age(seconds: float) -> str:
    seconds = int(max(0, seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


_START = {
    "poller": "start it: `the-loop poll start` (or `systemctl --user start the-loop-poller`)",
    "webhook": "start it: `the-loop gh-webhook start --route` (or its systemd unit)",
}


def service_check(row: Mapping[str, Any]) -> dict[str, str] | None:
    """An enabled daemon runs (fresh heartbeat, live pid); None for a disabled one."""
    name = str(row["name"])
    if not row["enabled"]:
        return None
    if row["running"]:
        return check(name, OK, f"{row['state']}, pid {row['pid']}")
    state = row["state"]
    if state == "stale":
        reason = (
            f"heartbeat stale: last beat {row['ageSeconds']}s ago (pid {row['pid']}); "
            "the daemon is hung or gone"
        )
        remedy = "restart it (`systemctl --user restart the-loop-poller`) and read its log"
        if name == "webhook":
            remedy = "restart it (its systemd unit) and read its log"
    elif state == "stopped":
        reason, remedy = "stopped", _START.get(name, "start it")
    else:
        reason, remedy = state, _START.get(name, "start it")
    return check(name, FAILING, f"{name} not running: {reason}", remedy)


def failed_cycle(summary: Mapping[str, Any] | None) -> bool:
    """Whether a poll cycle's summary (heartbeat `lastCycle`) is a failure: it raised,
    or the source could not be read."""
    if not summary:
        return False
    return summary.get("result") in ("error", "source errors")


def cycles_check(detail: Mapping[str, Any] | None, running: bool) -> dict[str, str]:
    """The poller's last cycles succeed (`failedCycles` in a row from its heartbeat)."""
    detail = detail or {}
    cycle = detail.get("lastCycle")
    if not isinstance(cycle, Mapping):
        return check("poll-cycles", OK, "no cycle recorded yet")
    failed = int(detail.get("failedCycles") or (1 if failed_cycle(cycle) else 0))
    if not running or not failed_cycle(cycle) or failed < FAILED_CYCLES:
        tail = f" ({failed} failed in a row)" if failed and running else ""
        return check("poll-cycles", OK, f"last cycle {cycle.get('result')}{tail}")
    if cycle.get("result") == "error":
        why = str(cycle.get("error") or "the cycle raised")
        remedy = (
            "fix what the error names (a missing env.file or harness program, an "
            "unreachable store); `the-loop events --type poll.error` shows each"
        )
    else:
        why = f"{cycle.get('errors', '?')} source error(s) reading the tracker"
        remedy = "check the tracker's reachability and token; `the-loop events --type poll.error`"
    return check("poll-cycles", FAILING, f"the last {failed} poll cycles failed: {why}", remedy)


def stall_seconds(interval: float) -> float:
    """How long an open inbox event may wait before it counts as stalled."""
    return max(STALL_CYCLES * interval, STALL_FLOOR_SECONDS)


def inbox_check(
    oldest: tuple[InboxEntry, datetime] | None, open_count: int, interval: float, now: datetime
) -> dict[str, str]:
    """Open inbox events make progress: none has waited (since it was armed) longer than
    a few poll cycles."""
    if oldest is None:
        return check("inbox", OK, "nothing waiting")
    entry, armed = oldest
    waited = (now - armed).total_seconds()
    limit = stall_seconds(interval)
    if waited <= limit:
        return check("inbox", OK, f"{open_count} waiting, the oldest for {_age(waited)}")
    if entry.last_reason == "capacity_full":  # by design: it gets the next free slot
        return check(
            "inbox",
            OK,
            f"{open_count} waiting, the oldest for {_age(waited)} for a slot (host.maxLive)",
        )
    last = entry.last_reason or "never attempted"
    if entry.last_error:
        last += f": {' '.join(entry.last_error.split())[:200]}"
    reason = (
        f"no progress: {open_count} event(s) waiting, the oldest ({entry.work_item} "
        f"{entry.delivery_id}) for {_age(waited)} after {entry.tries} tries; last: {last}"
    )
    remedy = (
        "`the-loop inbox list` shows each event's last reason; fix it (or a running "
        "`poll start` if none tried); `the-loop inbox drop ID --reason ...` to give one up"
    )
    return check("inbox", FAILING, reason, remedy)


def store_check(error: str | None, backend: str) -> dict[str, str]:
    if error is None:
        return check("store", OK, f"{backend} answers")
    remedy = (
        "check that the database server runs and answers at store.url"
        if backend == "postgresql"
        else "check the state directory (exists, writable by this user, disk not full)"
    )
    return check("store", FAILING, f"the state store cannot be read: {error}", remedy)


def tmux_check(error: str | None, socket: str | None) -> dict[str, str]:
    if error is None:
        return check("tmux", OK, "answers")
    where = f"-L {socket} " if socket else ""
    remedy = (
        f"is tmux installed and its server responsive? try `tmux {where}list-sessions`; "
        "a server stopped with SIGSTOP or swapped out delays every delivery"
    )
    return check("tmux", FAILING, f"tmux did not answer: {error}", remedy)
