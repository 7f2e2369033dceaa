"""`the-loop status` as data: services, the last poll cycle, sessions, paths.

`collect_status` returns a plain dict (JSON-ready, camelCase keys) and never prints;
`status_text.render_text` turns it into lines. `ok` is true only when every health check is
(health.py: daemons beat, recent poll cycles succeed, inbox events make progress, the
store and tmux answer); a store that cannot be read is a failing check, not a crash.
The env-rotation drift block never changes `ok` or fails the status. Status only
reads: before any daemon or command has created the state store it reports "no state
yet" instead of creating one.
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from . import heartbeat
from .activity import activities, live_views
from .activity import counts as activity_counts
from .fleet import ABSENT, DEAD, LIVE, UNKNOWN, Fleet, read_fleet
from .status_text import ENV_BLOCK
from .status_text import render_text as render_text  # its old home, still importable

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from loop_dispatch import SessionRecord
    from loop_tmux import PaneView

    from .runtime import Runtime

SERVICES = ("poller", "webhook")


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def collect_status(rt: Runtime, now: datetime | None = None) -> dict[str, Any]:
    """Everything status reports. `ok` is True iff every health check is ok."""
    from . import health
    from .errors import LoopError
    from .rotation.drift import status_block

    now = now or datetime.now(timezone.utc)
    cfg = rt.config
    enabled = {"poller": cfg.services.poller, "webhook": cfg.services.webhook}
    # A fleet's hosts each beat their own rows: the services here are this host's.
    host = rt.host_name if rt.fleet else None
    beats: dict[str, heartbeat.Heartbeat | None] = {}
    records: list[SessionRecord] = []
    quarantined: list[Any] = []
    inbox: dict[str, Any] | None = None
    oldest = None
    store_error = None
    if rt.has_state:
        try:
            beats = {n: heartbeat.read(rt.store, n, host) for n in SERVICES}
            records, quarantined = rt.store.registry.scan()
            inbox = rt.store.inbox.summary()
            oldest = rt.store.inbox.oldest_open()
        except LoopError:
            raise  # a config refusal (store.passwordEnv unset) stays exit 2
        except Exception as exc:  # unreachable, locked, deleted: a failing check
            store_error = _one_line(exc)
    services = [_service_row(name, enabled[name], beats.get(name), now) for name in SERVICES]
    on_disk = config_file_digest(rt)
    for row in services:
        config_row(row, beats.get(row["name"]), on_disk)
    if store_error is not None:
        for row in services:
            row["state"] = "unknown: the store cannot be read"
    poll_hb = beats.get("poller")
    fleet = read_fleet(rt.tmux)
    # Heartbeats live in the store: while it cannot be read, its own check says so.
    checks = [] if store_error else [c for c in map(health.service_check, services) if c]
    if store_error is None and (enabled["poller"] or poll_hb is not None):
        checks.append(
            health.cycles_check(
                poll_hb.detail if poll_hb else None, bool(poll_hb and poll_hb.running(now))
            )
        )
    if inbox is not None:
        waiting = inbox["pending"] + inbox["inFlight"]
        checks.append(health.inbox_check(oldest, waiting, cfg.polling.interval_seconds, now))
    if rt.has_state:
        backend = "postgresql" if cfg.store.url else "sqlite"
        checks.append(health.store_check(store_error, backend))
    checks.append(health.tmux_check(fleet.error, cfg.routing.tmux_socket))
    capacity = None
    if rt.has_state and store_error is None:
        from .capacity_view import capacity_block, memory_check

        with contextlib.suppress(Exception):  # the store check above already says why
            capacity = capacity_block(rt, records, fleet)
            checks.append(memory_check(capacity))
    status: dict[str, Any] = {
        "version": rt.version,
        "config": {
            "path": str(rt.loaded.path) if rt.loaded.path else None,
            "origin": rt.loaded.origin,
            "digest": on_disk,
            "problem": rt.loaded.problem or None,
        },
        "stateDir": str(rt.state_dir),
        "stateExists": rt.has_state,
        "stateReadOnly": rt.state_read_only(),
        "eventLog": str(cfg.event_log_path()),
        "tracker": "+".join(cfg.active_trackers()),
        "tmuxSocket": cfg.routing.tmux_socket,
        "services": services,
        "lastPollCycle": (poll_hb.detail.get("lastCycle") if poll_hb else None),
        "sessions": session_counts(records, fleet),
        "inbox": inbox,
        "quarantined": [q.line() for q in quarantined],
        "capacity": capacity,
        "health": checks,
        # A warning (memory) is said, never a stop of delivery: `ok` stays true.
        "ok": all(c["state"] != "failing" for c in checks),
    }
    if rt.fleet and rt.has_state and store_error is None:
        with contextlib.suppress(Exception):  # the store check above already says why
            status["hosts"] = hosts_block(rt, now)
    active = [r for r in records if r.active]
    # Every live pane in one batched tmux call: activity and dialogs both read it.
    views = live_views(rt.tmux, active, fleet, capture=rt.adapter.reads_screen)
    doing = activities(rt.adapter_of, active, views)
    status["sessions"]["activity"] = activity_counts(doing)
    status["activity"] = [
        {"workItem": str(r.work_item), "tmuxName": r.tmux_name, "activity": doing[str(r.work_item)]}
        for r in active
        if doing[str(r.work_item)] is not None
    ]
    reader = _environ_once()  # drift and exposure both read every pane's environment
    block = status_block(
        cfg, active, fleet, reader=reader, activity=doing, auto_roll=cfg.env.auto_roll
    )
    if block is not None:
        status[ENV_BLOCK] = block
    status["credentialExposure"] = credential_exposure(rt, fleet, reader=reader)
    blocked = blocked_sessions(rt, active, fleet, views)
    if blocked:
        status["blocked"] = blocked
    status["attention"] = attention_block(rt, records) if store_error is None else []
    return status


def attention_block(rt: Runtime, records: list[SessionRecord]) -> list[dict[str, Any]]:
    """What the poll daemon's detector raised and still holds (attention.py); empty
    before any daemon swept, and never a reason for status to fail."""
    from .attention import attention_list

    if not rt.has_state:
        return []
    names = {str(r.work_item): r.tmux_name for r in records}
    try:
        return attention_list(rt.store, tmux_names=names)
    except Exception:  # a store that cannot be read is the store check's to report
        return []


def _environ_once() -> Callable[[int], dict[str, str] | None]:
    """process_environ, each pid read at most once for this status."""
    from loop_envstate import process_environ

    seen: dict[int, dict[str, str] | None] = {}

    def read(pid: int) -> dict[str, str] | None:
        if pid not in seen:
            seen[pid] = process_environ(pid)
        return seen[pid]

    return read


def credential_exposure(
    rt: Runtime, fleet: Fleet, *, reader: Callable[[int], Mapping[str, str] | None] | None = None
) -> dict[str, Any]:
    """Where an agent can read a daemon credential (fingerprints only); never fails
    the status: a tmux that does not answer is reported as not checked."""
    from loop_tmux import TmuxUnavailable

    from .agent_env import exposure_summary, exposures

    if fleet.error is not None:
        return {"count": 0, "items": [], "error": fleet.error}
    try:
        glob = rt.tmux.global_environment()
    except TmuxUnavailable as exc:
        return {"count": 0, "items": [], "error": str(exc) or "tmux did not answer"}
    panes = [p for group in fleet.panes.values() for p in group]
    if reader is None:
        return exposure_summary(exposures(rt.config, glob, panes))
    return exposure_summary(exposures(rt.config, glob, panes, reader=reader))


def blocked_sessions(
    rt: Runtime,
    records: list[SessionRecord],
    fleet: Fleet,
    views: Mapping[str, PaneView | None] | None = None,
) -> list[dict[str, Any]]:
    """Live sessions whose harness sits on a dialog (read from the pane now), for
    adapters that can tell (claude-code, codex); nothing is typed into them. `views`:
    the panes already read for this status (else read here, in one batched call)."""
    adapter = rt.adapter
    if not adapter.reads_screen:
        return []
    live = [r for r in records if fleet.presence(r.tmux_name) == LIVE]
    if views is None:
        views = live_views(rt.tmux, live, fleet, capture=True)
    out = []
    for record in live:
        view = views.get(record.tmux_name)
        if view is None or view.dead:
            continue
        readiness = adapter.readiness(view)
        if readiness.dialog is not None:
            out.append(
                {
                    "workItem": str(record.work_item),
                    "tmuxName": record.tmux_name,
                    "dialog": readiness.dialog,
                }
            )
    return out


def hosts_block(rt: Runtime, now: datetime) -> dict[str, Any]:
    """The fleet on a shared store: one row per host (its lease and the state of its
    daemons, from their own heartbeats), hosts that run daemons but no worker, and the
    totals."""
    from loop_dispatch.hosts import HOSTS_MIGRATIONS, Hosts

    hosts = Hosts(rt.store)
    current = hosts.version >= len(HOSTS_MIGRATIONS)  # a reader may find no tables yet
    rows = [h.as_dict(now) for h in hosts.list()] if current else []
    beats = heartbeat.read_all(rt.store)
    for row in rows:
        row["services"] = _service_states(beats.pop(row["name"], {}), now)
    others = [{"name": n, "services": _service_states(b, now)} for n, b in beats.items()]
    live = [r for r in rows if r["live"]]
    return {
        "this": rt.host_name,
        "hosts": rows,
        "otherHosts": others,
        "totals": {
            "hosts": len(rows),
            "live": len(live),
            "placed": sum(r["placed"] for r in rows),
            "capacity": sum(r["maxSessions"] for r in live),
        },
    }


def _service_states(beats: dict[str, heartbeat.Heartbeat], now: datetime) -> dict[str, str]:
    """Service -> "running" / "stopped" / "stale" for one host's heartbeats."""
    return {name: _state(hb, hb.running(now)) for name, hb in sorted(beats.items())}


def _service_row(
    name: str, enabled: bool, hb: heartbeat.Heartbeat | None, now: datetime
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": name,
        "enabled": enabled,
        "running": False,
        "state": "never started",
        "pid": None,
        "lastBeat": None,
        "ageSeconds": None,
    }
    if hb is not None:
        running = hb.running(now)
        row.update(
            running=running,
            state=_state(hb, running),
            pid=hb.pid,
            lastBeat=hb.beat.isoformat(),
            ageSeconds=round(hb.age(now), 1),
        )
    return row


def config_file_digest(rt: Runtime) -> str | None:
    """The digest of the config file as it is now (None: embedded defaults)."""
    from .live_config import file_digest

    if rt.loaded.path is None:
        return None
    try:
        return file_digest(rt.loaded.path.read_bytes())
    except OSError:
        return "unreadable"


def config_row(row: dict[str, Any], hb: heartbeat.Heartbeat | None, on_disk: str | None) -> None:
    """`row["config"]`: the config digest a running daemon applied (from its heartbeat),
    the file's digest now, and why they differ (a reload refused or failed, or the
    daemon has not re-read it yet: its next cycle or SIGHUP does)."""
    state = hb.detail.get("config") if hb is not None and row["running"] else None
    if not isinstance(state, dict):
        row["config"] = None
        return
    runs = state.get("digest")
    differs = on_disk is not None and runs != on_disk
    refused = [str(k) for k in state.get("refused") or []]
    info: dict[str, Any] = {"digest": runs, "fileDigest": on_disk, "differs": differs}
    if refused:
        info["refused"] = refused
    if state.get("error"):
        info["error"] = str(state["error"])
    row["config"] = info


def _state(hb: heartbeat.Heartbeat, running: bool) -> str:
    if running:
        return "running" if hb.state == "running" else "fresh --once runs"
    return "stopped" if hb.state == "stopped" else "stale"


def session_counts(records: list[SessionRecord], fleet: Fleet) -> dict[str, Any]:
    """Registered (active) sessions by presence, from the one fleet read."""
    counts: dict[str, Any] = {
        "registered": 0,
        LIVE: 0,
        DEAD: 0,
        ABSENT: 0,
        UNKNOWN: 0,
        "closed": 0,
        "hibernated": 0,
    }
    for record in records:
        if not record.active:
            counts["closed"] += 1
            continue
        counts["registered"] += 1
        # A hibernated harness was ended on purpose: not a dead one (issue 25).
        counts["hibernated" if record.hibernated else fleet.presence(record.tmux_name)] += 1
    counts["tmuxError"] = fleet.error
    return counts
