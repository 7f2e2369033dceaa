"""`the-loop status` as data: services, the last poll cycle, sessions, paths.

`collect_status` returns a plain dict (JSON-ready, camelCase keys) and never prints;
`render_text` turns it into lines. Extensions (the env-rotation drift block) hook in
through `EXTENSIONS` and never change `ok` or fail the status.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from . import heartbeat
from .fleet import ABSENT, DEAD, LIVE, UNKNOWN, Fleet, read_fleet

if TYPE_CHECKING:
    from .runtime import Runtime

SERVICES = ("poller", "webhook")

# Optional blocks added by other parts of loop-cli: (status key, "module:function").
# The function is called as fn(runtime, fleet) -> dict | None; a dict may carry "line",
# a one-line notice printed by render_text. Any exception leaves the block out.
EXTENSIONS: list[tuple[str, str]] = [
    ("sessionEnvironment", "loop_cli.rotation.drift:status_block"),
]


def collect_status(rt: Runtime, now: datetime | None = None) -> dict[str, Any]:
    """Everything status reports. `ok` is True iff every enabled service runs."""
    now = now or datetime.now(timezone.utc)
    cfg = rt.config
    services = []
    enabled = {"poller": cfg.services.poller, "webhook": cfg.services.webhook}
    for name in SERVICES:
        hb = heartbeat.read(rt.store, name)
        services.append(_service_row(name, enabled[name], hb, now))
    poll_hb = heartbeat.read(rt.store, "poller")
    fleet = read_fleet(rt.tmux)
    status: dict[str, Any] = {
        "version": rt.version,
        "config": {
            "path": str(rt.loaded.path) if rt.loaded.path else None,
            "origin": rt.loaded.origin,
        },
        "stateDir": str(rt.state_dir),
        "eventLog": str(cfg.event_log_path()),
        "tracker": cfg.tracker,
        "tmuxSocket": cfg.routing.tmux_socket,
        "services": services,
        "lastPollCycle": (poll_hb.detail.get("lastCycle") if poll_hb else None),
        "sessions": session_counts(rt, fleet),
        "ok": all(s["running"] for s in services if s["enabled"]),
    }
    for key, target in EXTENSIONS:
        block = _extension(target, rt, fleet)
        if block is not None:
            status[key] = block
    return status


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
            state=(
                ("running" if hb.state == "running" else "fresh --once runs")
                if running
                else ("stopped" if hb.state == "stopped" else "stale")
            ),
            pid=hb.pid,
            lastBeat=hb.beat.isoformat(),
            ageSeconds=round(hb.age(now), 1),
        )
    return row


def session_counts(rt: Runtime, fleet: Fleet) -> dict[str, Any]:
    """Registered (active) sessions by presence, from the one fleet read."""
    counts = {"registered": 0, LIVE: 0, DEAD: 0, ABSENT: 0, UNKNOWN: 0, "closed": 0}
    for record in rt.store.registry.list():
        if not record.active:
            counts["closed"] += 1
            continue
        counts["registered"] += 1
        counts[fleet.presence(record.tmux_name)] += 1
    counts["tmuxError"] = fleet.error
    return counts


def _extension(target: str, rt: Runtime, fleet: Fleet) -> dict[str, Any] | None:
    module_name, _, attr = target.partition(":")
    try:
        if importlib.util.find_spec(module_name) is None:
            return None
    except ImportError:
        return None
    with contextlib.suppress(Exception):
        block = getattr(importlib.import_module(module_name), attr)(rt, fleet)
        return block if isinstance(block, dict) else None
    return None


def render_text(status: dict[str, Any]) -> str:
    """Human-readable status, one fact per line."""
    cfg = status["config"]
    lines = [
        f"the-loop {status['version']}",
        f"config:    {cfg['path'] or 'none (embedded defaults)'}",
        f"state:     {status['stateDir']}",
        f"events:    {status['eventLog']}",
        f"tracker:   {status['tracker']}"
        + (f"   tmux socket: {status['tmuxSocket']}" if status["tmuxSocket"] else ""),
    ]
    for svc in status["services"]:
        if not svc["enabled"]:
            lines.append(f"{svc['name']}:{' ' * (10 - len(svc['name']))}disabled")
            continue
        mark = (
            ("running" if svc["state"] == "running" else f"running ({svc['state']})")
            if svc["running"]
            else f"NOT RUNNING ({svc['state']})"
        )
        extra = f" pid {svc['pid']}, last beat {svc['ageSeconds']}s ago" if svc["pid"] else ""
        lines.append(f"{svc['name']}:{' ' * (10 - len(svc['name']))}{mark}{extra}")
    cycle = status.get("lastPollCycle")
    if cycle:
        lines.append(
            f"last poll: {cycle.get('at', '?')} {cycle.get('result', '')}: "
            f"{cycle.get('new', 0)} new, {cycle.get('processed', 0)} processed, "
            f"{cycle.get('failed', 0)} failed"
        )
    else:
        lines.append("last poll: never")
    s = status["sessions"]
    lines.append(
        f"sessions:  {s['registered']} registered: {s[LIVE]} live, {s[DEAD]} dead, "
        f"{s[ABSENT]} absent, {s[UNKNOWN]} unknown ({s['closed']} closed)"
    )
    if s.get("tmuxError"):
        lines.append(f"tmux:      did not answer: {s['tmuxError']}")
    for key, _ in EXTENSIONS:
        block = status.get(key)
        if isinstance(block, dict) and block.get("line"):
            lines.append(str(block["line"]))
    return "\n".join(lines)
