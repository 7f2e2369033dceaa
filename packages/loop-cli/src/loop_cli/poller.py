"""The poll daemon's loop: cycles at the interval, a heartbeat after each, clean stop.

`run_forever` never prints; it returns when `stop` is set (the command wires SIGTERM
and SIGINT to it). A cycle that raises is recorded (heartbeat and `poll.error`) and the
loop goes on: one bad cycle must not stop the daemon.
"""

from __future__ import annotations

import contextlib
import fcntl
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from . import heartbeat

if TYPE_CHECKING:
    from loop_dispatch import CycleReport

    from .runtime import Runtime

SERVICE = "poller"
DAEMON_LOCK = "_poller.daemon"  # in the lock dir; item locks are <slug>.lock


@contextlib.contextmanager
def daemon_lock(rt: Runtime) -> Iterator[None]:
    """Hold the one-poller-per-state-dir lock for the daemon's life.

    Two daemons on one state dir would share one heartbeat (the first to stop marks the
    other "stopped" while it runs), so the second refuses. flock is released by the
    kernel when the process dies, so a crash never leaves a stale lock.
    """
    from .errors import OperationalError

    rt.lock_dir.mkdir(parents=True, exist_ok=True)
    with open(rt.lock_dir / DAEMON_LOCK, "a+") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            current = heartbeat.read(rt.store, SERVICE)
            pid = f" (pid {current.pid})" if current and current.state == "running" else ""
            raise OperationalError(
                f"a poller daemon is already running on state dir {rt.state_dir}{pid};"
                " stop it first (one poller per state dir)"
            ) from None
        yield


def stale_after(interval: float) -> float:
    """How long a poller heartbeat stays fresh: two missed cycles plus slack."""
    return 2 * interval + 60


def run_cycle(rt: Runtime) -> CycleReport:
    """One poll cycle over the configured source (raises on a store/config failure).

    A pane that could not start the harness (env file gone, program missing) would use
    up its event, so such a cycle dispatches nothing and raises ConfigError instead.
    """
    rt.check_launch()
    from loop_dispatch.poll import run_poll_cycle

    return run_poll_cycle(
        rt.store,
        rt.source(),
        rt.dispatcher,
        rt.event_log,
        version=rt.version,
        max_retries=rt.config.polling.max_retries,
    )


def cycle_summary(report: CycleReport | None, error: str | None = None) -> dict[str, Any]:
    """What the heartbeat keeps of a cycle (status shows it as "last poll")."""
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if report is None:
        return {"at": now, "result": "error", "error": error}
    data = report.as_dict()
    errors = data.pop("errors", [])
    result = "ok" if not errors else "source errors"
    return {"at": now, "result": result, "errors": len(errors), **data}


def record_once(rt: Runtime, summary: dict[str, Any]) -> None:
    """A `poll --once` run: beat as "once", unless a live daemon owns the heartbeat."""
    current = heartbeat.read(rt.store, SERVICE)
    if current is not None and current.state == "running" and current.running():
        return
    now = datetime.now(timezone.utc)
    heartbeat.beat(
        rt.store,
        SERVICE,
        stale_after=stale_after(rt.config.polling.interval_seconds),
        started=now,
        detail={"lastCycle": summary, "mode": "once"},
        state="once",
    )


def run_forever(
    rt: Runtime,
    stop: threading.Event,
    *,
    on_cycle: Callable[[dict[str, Any]], None] | None = None,
    max_cycles: int | None = None,
) -> int:
    """Cycle until `stop` is set; returns the number of cycles run."""
    interval = rt.config.polling.interval_seconds
    started = datetime.now(timezone.utc)
    fresh = stale_after(interval)
    heartbeat.beat(rt.store, SERVICE, stale_after=fresh, started=started, detail={"mode": "daemon"})
    cycles = 0
    summary: dict[str, Any] | None = None
    try:
        while not stop.is_set():
            try:
                summary = cycle_summary(run_cycle(rt))
            except Exception as exc:  # recorded; the daemon keeps going
                error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                summary = cycle_summary(None, error)
                rt.event_log.emit(
                    "poll.error", level="error", source="poller", detail={"error": error}
                )
            cycles += 1
            heartbeat.beat(
                rt.store,
                SERVICE,
                stale_after=fresh,
                started=started,
                detail={"mode": "daemon", "lastCycle": summary},
            )
            if on_cycle is not None:
                on_cycle(summary)
            if max_cycles is not None and cycles >= max_cycles:
                break
            stop.wait(interval)
    finally:
        heartbeat.stopped(
            rt.store, SERVICE, started=started, detail={"mode": "daemon", "lastCycle": summary}
        )
    return cycles
