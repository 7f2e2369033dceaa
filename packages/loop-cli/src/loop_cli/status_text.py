"""`the-loop status` as text: the lines a human reads, from the status's plain data.

Kept apart from status.py, which gathers the data (store, tmux, heartbeats), so the
status a running daemon answered (api/client.py) is rendered without importing any of
that: a `status` in a watch loop pays for rendering only.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing itself is not imported on `status`'s served path
if TYPE_CHECKING:
    from typing import Any

LIVE, DEAD, ABSENT, UNKNOWN = "live", "dead", "absent", "unknown"  # as fleet.py's
ENV_BLOCK = "sessionEnvironment"


def _services_text(services: dict[str, str]) -> str:
    return ", ".join(f"{name} {state}" for name, state in services.items()) or "no daemon beat"


def config_line(name: str, info: dict[str, Any] | None) -> str | None:
    """One line when a daemon does not run the config file as it is now."""
    if not info:
        return None
    if info.get("error") and info.get("differs"):
        return (
            f"config:    {name} runs {info['digest']}; the file ({info['fileDigest']}) "
            f"is refused: {info['error']}"
        )
    if info.get("differs"):
        return (
            f"config:    {name} runs {info['digest']}; the file is now {info['fileDigest']} "
            "(read at its next cycle, or at once on SIGHUP)"
        )
    if info.get("refused"):
        return (
            f"config:    {name} runs {info['digest']} except {', '.join(info['refused'])}: "
            "restart it to apply those keys"
        )
    return None


def host_lines(block: dict[str, Any]) -> list[str]:
    lines = []
    for row in block["hosts"]:
        mark = " (this host)" if row["name"] == block["this"] else ""
        lines.append(
            f"host:      {row['name']}{mark}: {'live' if row['live'] else 'EXPIRED'}, "
            f"{row['placed']}/{row['maxSessions']} items, lease age {row['leaseAgeSeconds']}s; "
            + _services_text(row.get("services", {}))
        )
    for row in block.get("otherHosts", []):
        mark = " (this host)" if row["name"] == block["this"] else ""
        lines.append(
            f"host:      {row['name']}{mark}: no worker; " + _services_text(row["services"])
        )
    t = block["totals"]
    lines.append(
        f"fleet:     {t['live']}/{t['hosts']} hosts live, {t['placed']} items placed, "
        f"capacity {t['capacity']}"
    )
    return lines


def render_output(status: dict[str, Any], fmt: str) -> str:
    """Exactly what `status -o FMT` prints (`text` or `json`). The plain entry path and
    the daemon's API both call it, so an answer the daemon rendered is byte for byte
    what this process would have printed."""
    if fmt == "json":
        import json

        return json.dumps(status, indent=2, sort_keys=False, default=str) + "\n"
    return render_text(status) + "\n"


def render_text(status: dict[str, Any]) -> str:
    """Human-readable status, one fact per line."""
    cfg = status["config"]
    lines = [
        f"the-loop {status['version']}",
        f"config:    {cfg['path'] or 'none (embedded defaults)'}"
        + (f" ({cfg['digest']})" if cfg.get("digest") else "")
        + (
            f"\nconfig:    INVALID: {cfg['problem']} (shown: its last valid version)"
            if cfg.get("problem")
            else ""
        ),
        f"state:     {status['stateDir']}"
        + ("" if status["stateExists"] else " (none yet: nothing has run)")
        + (f" (read-only: {status['stateReadOnly']})" if status.get("stateReadOnly") else ""),
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
            else svc["state"]
            if svc["state"].startswith("unknown")
            else f"NOT RUNNING ({svc['state']})"
        )
        extra = f" pid {svc['pid']}, last beat {svc['ageSeconds']}s ago" if svc["pid"] else ""
        info = svc.get("config")
        if info and info.get("digest"):
            extra += f", config {info['digest']}"
        lines.append(f"{svc['name']}:{' ' * (10 - len(svc['name']))}{mark}{extra}")
        line = config_line(svc["name"], info)
        if line:
            lines.append(line)
    cycle = status.get("lastPollCycle")
    if cycle and cycle.get("result") == "error":
        lines.append(f"last poll: {cycle.get('at', '?')} FAILED: {cycle.get('error')}")
    elif cycle:
        lines.append(
            f"last poll: {cycle.get('at', '?')} {cycle.get('result', '')}: "
            f"{cycle.get('new', 0)} new"
        )
    else:
        lines.append("last poll: never")
    s = status["sessions"]
    lines.append(
        f"sessions:  {s['registered']} registered: {s[LIVE]} live, {s[DEAD]} dead, "
        f"{s[ABSENT]} absent, {s[UNKNOWN]} unknown, {s.get('hibernated', 0)} hibernated "
        f"({s['closed']} closed)"
    )
    if s.get("tmuxError"):
        lines.append(f"tmux:      did not answer: {s['tmuxError']}")
    if status.get("capacity"):
        from .capacity_view import capacity_line

        lines.append(capacity_line(status["capacity"]))
    doing = s.get("activity") or {}
    if any(doing.values()):
        lines.append("activity:  " + ", ".join(f"{n} {name}" for name, n in doing.items()))
    if status.get("inbox"):
        line = inbox_line(status["inbox"])
        if line:
            lines.append(line)
    lines += [f"store:     {line}" for line in status.get("quarantined", [])]
    exposed = status.get("credentialExposure") or {}
    if exposed.get("count"):
        lines.append(
            f"WARNING:   {exposed['count']} daemon credential exposure(s) to agents: "
            "`the-loop env doctor` (restart the tmux server to clear; see docs/security.md)"
        )
    for row in status.get("blocked", []):
        lines.append(
            f"blocked:   {row['workItem']} ({row['tmuxName']}) waits on its {row['dialog']} "
            "dialog; deliveries wait (docs/harnesses.md)"
        )
    lines.extend(attention_lines(status.get("attention", [])))
    if status.get("hosts"):
        lines.extend(host_lines(status["hosts"]))
    block = status.get(ENV_BLOCK)
    if block is not None:
        if block.get("line"):
            lines.append(block["line"])
        elif block.get("error"):
            lines.append(f"env file:  drift not checked: {block['error']}")
    lines.extend(health_lines(status.get("health", [])))
    from .terminal import printable

    return printable("\n".join(lines), lines=True)


def attention_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per item needing a human (the detector's raised stalls) and its remedy."""
    lines = []
    for row in rows:
        lines.append(f"attention: {row['item']}: {row['why']} since {row['since']}")
        lines.append(f"    remedy: {row['remedy']}")
    return lines


def failing(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in checks if c.get("state") not in ("ok", "warning")]


def health_lines(checks: list[dict[str, Any]]) -> list[str]:
    """`health: ok`, or one NOT OK line per failing check with its reason and remedy."""
    bad = failing(checks)
    warned = [c for c in checks if c.get("state") == "warning"]
    if not bad:
        lines = ["health:    ok (" + ", ".join(c["check"] for c in checks) + ")"]
    else:
        lines = [f"health:    NOT OK: {len(bad)} of {len(checks)} check(s) failing"]
    for c in warned:
        lines.append(f"WARNING:   {c['check']}: {c['reason']}")
        if c.get("remedy"):
            lines.append(f"    remedy: {c['remedy']}")
    for c in bad:
        lines.append(f"  {c['check']}: {c['reason']}")
        if c.get("remedy"):
            lines.append(f"    remedy: {c['remedy']}")
    return lines


def inbox_line(summary: dict[str, Any]) -> str | None:
    """The one status line about the inbox; None when nothing waits."""
    pending, given_up = summary["pending"] + summary["inFlight"], summary["givenUp"]
    paused = summary.get("paused", 0)
    if not pending and not given_up and not paused:
        return None
    parts = []
    if pending:
        age = summary.get("oldestPendingSeconds") or 0
        parts.append(f"{pending} pending (oldest {int(age)}s)")
    if given_up:
        parts.append(f"{given_up} given up — `the-loop inbox list --state given-up`")
    if paused:  # held while their items are paused or stopped (issue 24)
        parts.append(f"{paused} paused — `the-loop inbox list --state paused`")
    return "inbox:     " + ", ".join(parts)
