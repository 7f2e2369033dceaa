"""The poll daemon's loop: cycles at the interval, a heartbeat after each, clean stop.

`run_forever` never prints; it returns when `stop` is set (the command wires SIGTERM
and SIGINT to it). A cycle that raises is recorded (heartbeat and `poll.error`) and the
loop goes on: one bad cycle must not stop the daemon.
"""

from __future__ import annotations

import contextlib
import fcntl
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from . import heartbeat

if TYPE_CHECKING:
    from loop_dispatch import CycleReport
    from loop_dispatch.drain import DrainReport, Settlement

    from .attempts import Attempts
    from .late_ids import LateConversations
    from .live_config import LiveConfig
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
    from loop_dispatch.private import private_dir, private_file

    from .errors import OperationalError

    private_dir(rt.state_dir)
    private_dir(rt.lock_dir)
    with open(private_file(rt.lock_dir / DAEMON_LOCK), "a+") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            current = heartbeat.read(rt.store, SERVICE, rt.host_name)
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
    """One poll cycle: read each configured source and commit what it found to the inbox
    (raises on a store/config failure). Dispatch is the drain's. Several trackers: each
    commits its own batch and cursor; the report adds them up."""
    from loop_dispatch.poll import run_poll_cycle

    reports = [run_poll_cycle(rt.store, source, rt.event_log) for source in rt.sources()]
    return merged_report(reports)


def merged_report(reports: list[CycleReport]) -> CycleReport:
    """One report of several sources' cycles (`github+jira`); one source's as it is."""
    from loop_dispatch import CycleReport

    if len(reports) == 1:
        return reports[0]
    return CycleReport(
        source="+".join(r.source for r in reports),
        new=sum(r.new for r in reports),
        baselined=sum(r.baselined for r in reports),
        errors=[e for r in reports for e in r.errors],
    )


def drain_once(
    rt: Runtime,
    *,
    stop: threading.Event | None = None,
    on_settled: Callable[[Settlement], None] | None = None,
) -> DrainReport:
    """Dispatch everything due now, once (`poll --once`). A pane that could not start
    the harness (env file gone, program missing) would use up its event, so such a run
    dispatches nothing and raises ConfigError instead. `stop`: no new attempt after it
    is set (a signal); `on_settled` hears every attempt's end."""
    rt.check_launch()
    return rt.drain(on_settled=on_settled).run(stop, until_idle=True)


def cycle_summary(
    report: CycleReport | None,
    drained: DrainReport | None = None,
    error: str | None = None,
    *,
    attempts: Attempts | None = None,
) -> dict[str, Any]:
    """What the heartbeat keeps of a cycle (status shows it as "last poll"). With
    `attempts`, the drain's counts are of events (by their last attempt), not tries."""
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if report is None:
        return {"at": now, "result": "error", "error": error}
    data = report.as_dict()
    data.pop("errors", None)
    errors = report.errors
    result = "ok" if not errors else "source errors"
    summary = {"at": now, "result": result, "errors": len(errors), **data}
    if drained is not None:
        counts = drained.as_dict()
        counts.pop("errors", None)
        summary.update(counts)
    if attempts is not None:
        summary.update({k: 0 for k in ("rearmed",) if k not in summary})
        summary.update(attempts.counts())
    return summary


def find_conversations(rt: Runtime, late: LateConversations) -> int:
    """How many conversation ids this cycle found late (late_ids.py): a Codex that
    opened its rollout file after its spawn's bounded wait would otherwise stay
    "unknown" until its next delivery. A failure is recorded (`poll.error`), never fatal."""
    try:
        return late.sweep(rt)
    except Exception as exc:
        error = f"conversations: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        rt.event_log.emit("poll.error", level="error", source="poller", detail={"error": error})
        return 0


def hibernate_idle(rt: Runtime) -> int:
    """The cycle's hibernation sweep (issue 25): how many idle harnesses it ended.

    A sweep that fails is recorded (`poll.error`) and tried again next cycle; it never
    fails the poll cycle itself."""
    try:
        return len(rt.hibernator.sweep())
    except Exception as exc:
        error = f"hibernation: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        rt.event_log.emit("poll.error", level="error", source="poller", detail={"error": error})
        return 0


def failed_in_a_row(previous: int, summary: dict[str, Any] | None) -> int:
    """Failed cycles in a row after this one (status's `poll-cycles` health check)."""
    from .health import failed_cycle

    return previous + 1 if failed_cycle(summary) else 0


def record_once(rt: Runtime, summary: dict[str, Any]) -> None:
    """A `poll --once` run: beat as "once", unless a live daemon owns the heartbeat."""
    current = heartbeat.read(rt.store, SERVICE, rt.host_name)
    if current is not None and current.state == "running" and current.running():
        return
    before = int(current.detail.get("failedCycles") or 0) if current is not None else 0
    now = datetime.now(timezone.utc)
    heartbeat.beat(
        rt.store,
        SERVICE,
        stale_after=stale_after(rt.config.polling.interval_seconds),
        started=now,
        detail={
            "lastCycle": summary,
            "mode": "once",
            "failedCycles": failed_in_a_row(before, summary),
        },
        state="once",
        host=rt.host_name,
    )


class _DrainThread:
    """The inbox drain on a thread of the daemon; its failure stops the daemon."""

    def __init__(self, rt: Runtime, stop: threading.Event, watch: Callable[[], str | None]):
        self.drain = rt.drain(watch=watch)
        self.stop = stop
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="the-loop-drain", daemon=True)

    def _run(self) -> None:
        try:
            self.drain.run(self.stop)
        except BaseException as exc:  # GroundLost, or a store gone for good
            self.error = exc
            self.stop.set()


def run_forever(
    rt: Runtime,
    stop: threading.Event,
    *,
    on_cycle: Callable[[dict[str, Any]], None] | None = None,
    on_started: Callable[[], None] | None = None,
    max_cycles: int | None = None,
    live: LiveConfig | None = None,
    hangup: threading.Event | None = None,
) -> int:
    """Poll every interval and drain the inbox until `stop` is set; returns the cycles.

    `on_started` runs once this worker holds its host's lease, so a refused second
    worker announces nothing before its one-line refusal.

    Raises GroundLost when the state directory or store is deleted or replaced under
    the daemon (the command exits non-zero so a supervisor restarts it on the real
    state). `live`: the config file is re-read before each cycle, and at once when
    `hangup` is set (SIGHUP); a changed one is swapped in whole between cycles.
    With `max_cycles` (tests), what is due after the last cycle is drained
    before returning.
    """
    from loop_dispatch.drain import GroundLost

    started = datetime.now(timezone.utc)
    fresh = stale_after(rt.config.polling.interval_seconds)
    ground = rt.ground()
    host = rt.host_name
    lease = rt.host_lease()
    # A live worker under this host name: refused here, at once. A lease that had
    # lapsed meanwhile: this host's agents of items that moved are ended first.
    if lease is not None and lease.beat(force=True):
        _end_stale_agents(rt)
    heartbeat.beat(
        rt.store, SERVICE, stale_after=fresh, started=started, detail={"mode": "daemon"}, host=host
    )
    if on_started is not None:
        on_started()
    keeper = rt.start_fence_keeper(rt.lock_dir / DAEMON_LOCK)
    if keeper is not None and lease is not None:
        keeper.extend(lease.fence.deadline)
    drainer = _DrainThread(rt, stop, ground.check)
    drainer.thread.start()
    from .autoroll import AutoRoll
    from .late_ids import LateConversations

    rolling = AutoRoll(rt)  # env.autoRoll: idle (issue 25)
    late = LateConversations()
    role = rt.store.role_lock("poller")  # one poller for a fleet; always ours on SQLite
    cycles = 0
    failed = 0  # cycles in a row that raised or could not read the source
    summary: dict[str, Any] | None = None
    lost: str | None = None
    try:
        while not stop.is_set():
            if live is not None:
                if hangup is not None:
                    hangup.clear()
                _reload(rt, live)
                fresh = stale_after(rt.config.polling.interval_seconds)
            lost = ground.check()
            if lost:
                rt.event_log.emit(
                    "daemon.state_lost", level="error", source="poller", detail={"problem": lost}
                )
                stop.set()
                break
            try:
                rt.check_launch()
                if role.try_hold():
                    summary = cycle_summary(run_cycle(rt))
                else:  # another host polls for the fleet; this one drains its items
                    summary = {
                        "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                        "result": "standby",
                        "reason": "another host of the fleet holds the poller role",
                    }
                drainer.drain.wake()
                find_conversations(rt, late)
                summary["hibernated"] = hibernate_idle(rt)
                rolling.maybe()
            except Exception as exc:  # recorded; the daemon keeps going
                error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                summary = cycle_summary(None, error=error)
                rt.event_log.emit(
                    "poll.error", level="error", source="poller", detail={"error": error}
                )
            attend(rt)
            cycles += 1
            failed = failed_in_a_row(failed, summary)
            heartbeat.beat(
                rt.store,
                SERVICE,
                stale_after=fresh,
                started=started,
                detail={
                    "mode": "daemon",
                    "lastCycle": summary,
                    "failedCycles": failed,
                    "inbox": _inbox(rt),
                    **({"config": live.state()} if live is not None else {}),
                },
                host=host,
            )
            if on_cycle is not None:
                on_cycle(summary)
            if max_cycles is not None and cycles >= max_cycles:
                break
            _wait_serving(rt, stop, rt.config.polling.interval_seconds, hangup)
    finally:
        stop.set()
        role.release()
        rolling.join(15)
        drainer.thread.join(drainer.drain.stop_grace + 15)
        if keeper is not None:
            keeper.close()
        if lost is None and max_cycles is not None and drainer.error is None:
            drainer.drain.run(until_idle=True)
        if lost is None and drainer.error is None:
            heartbeat.stopped(
                rt.store,
                SERVICE,
                started=started,
                detail={"mode": "daemon", "lastCycle": summary},
                host=host,
            )
    if lost is not None:
        raise GroundLost(lost)
    if drainer.error is not None:
        raise drainer.error
    return cycles


def attend(rt: Runtime) -> None:
    """The cycle's attention pass: the stalled-agent detector, then the notification
    outbox (each records its own failure and never stops the daemon)."""
    from .attention import sweep_quietly
    from .notify import flush_quietly

    sweep_quietly(rt)
    flush_quietly(lambda: rt.store, rt.config, rt.event_log)


def _end_stale_agents(rt: Runtime) -> None:
    try:
        rt.end_stale_agents()
    except Exception as exc:  # the drain's next lapse notice tries again
        error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        rt.event_log.emit(
            "poll.error", level="error", source="poller", detail={"error": error, "during": "start"}
        )


def _reload(rt: Runtime, live: LiveConfig) -> None:
    """Re-read the config file between cycles; a failure to even try is noted and the
    daemon goes on with the config it has."""
    try:
        live.check()
    except Exception as exc:
        error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        rt.event_log.emit(
            "poll.error",
            level="error",
            source="poller",
            detail={"error": error, "during": "reload"},
        )


HANGUP_POLL_SECONDS = 0.25  # how soon a SIGHUP ends the wait for the next cycle


def _wait_serving(
    rt: Runtime, stop: threading.Event, interval: float, hangup: threading.Event | None = None
) -> None:
    """Wait for the next cycle (sooner on SIGHUP: `hangup` set); on a fleet's shared
    store, take this host's restart requests now and every third of a lease meanwhile
    (`sessions restart --host` waits about two leases for the answer, whatever the poll
    interval)."""
    deadline = time.monotonic() + interval
    step = max(0.5, rt.config.host.lease_seconds / 3) if rt.fleet else interval
    served = -step
    while not stop.is_set() and not (hangup is not None and hangup.is_set()):
        now = time.monotonic()
        if rt.fleet and now - served >= step:
            served = now
            if rt.fence is None or rt.fence.refusal() is None:  # not while fenced out
                _serve_in_background(rt)
        left = deadline - time.monotonic()
        if left <= 0:
            return
        wait = min(left, step)
        if hangup is not None:
            wait = min(wait, HANGUP_POLL_SECONDS)
        stop.wait(wait)


_serving: dict[int, threading.Thread] = {}


def _serve_in_background(rt: Runtime) -> None:
    """Serve this host's restart requests in a thread of their own, one at a time: a
    rollout may wait minutes for sessions to go idle (`--wait-idle`), and the poll
    cycle and its heartbeat must go on meanwhile."""
    running = _serving.get(id(rt))
    if running is not None and running.is_alive():
        return
    thread = threading.Thread(
        target=serve_restart_requests, args=(rt,), name="the-loop-restarts", daemon=True
    )
    _serving[id(rt)] = thread
    thread.start()


def serve_restart_requests(rt: Runtime) -> None:
    """Restart requests for this host (see host_restart.py); a failure to read them
    (the database away) is noted and tried again at the next step."""
    from .host_restart import serve_requests

    try:
        serve_requests(rt)
    except Exception as exc:
        error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        rt.event_log.emit(
            "poll.error",
            level="error",
            source="poller",
            detail={"error": error, "during": "restart requests"},
        )


def _inbox(rt: Runtime) -> dict[str, Any] | None:
    try:
        summary: dict[str, Any] = rt.store.inbox.summary()
    except Exception:
        return None
    return summary
