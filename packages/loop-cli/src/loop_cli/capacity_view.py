"""What `status` and `sessions list` show of capacity (issue 25): live harnesses against
`host.maxLive`, items waiting for a slot, hibernated sessions, and memory (the RSS of
each live session's pane process tree, one pass over the process table for all)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .fleet import LIVE

if TYPE_CHECKING:
    from loop_dispatch import SessionRecord

    from .fleet import Fleet
    from .runtime import Runtime

__all__ = ["capacity_block", "capacity_line", "memory_check", "session_memory"]


def session_memory(records: Sequence[SessionRecord], fleet: Fleet) -> dict[str, int]:
    """RSS in bytes per tmux name of each live session (from the one fleet read)."""
    from loop_dispatch.memory import tree_rss

    roots = {
        r.tmux_name: fleet.live_pids(r.tmux_name)
        for r in records
        if fleet.presence(r.tmux_name) == LIVE
    }
    return tree_rss(roots) if roots else {}


def capacity_block(rt: Runtime, records: Sequence[SessionRecord], fleet: Fleet) -> dict[str, Any]:
    """`status`'s `capacity` field: counts from the store, memory from the processes."""
    from loop_dispatch.capacity import live_count, waiting_for_slot
    from loop_dispatch.memory import available_bytes

    host = rt.host_name if rt.fleet else None
    store = rt.store
    memory = session_memory([r for r in records if r.active], fleet)
    host_memory = available_bytes()
    total = sum(memory.values())
    return {
        "live": live_count(store, host),
        "maxLive": rt.config.host.max_live,
        "waiting": len({item for _, item in waiting_for_slot(store, host)}),
        "hibernated": sum(1 for r in records if r.hibernated),
        "hibernateAfterSeconds": rt.config.sessions.hibernate_after_seconds,
        "memory": {
            "totalBytes": total,
            "sessions": [{"tmuxName": n, "rssBytes": b} for n, b in sorted(memory.items())],
            "availableBytes": None if host_memory is None else host_memory.available,
            "hostTotalBytes": None if host_memory is None else host_memory.total,
            "warnShare": rt.config.host.memory_warn_share,
        },
    }


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB"
    return f"{n / (1 << 20):.0f} MiB"


def capacity_line(block: dict[str, Any]) -> str:
    """`capacity: N/M live, K waiting for a slot, H hibernated; memory X (of Y available)`."""
    cap = "" if block["maxLive"] is None else f"/{block['maxLive']}"
    memory = block["memory"]
    return (
        f"capacity:  {block['live']}{cap} live, {block['waiting']} waiting for a slot, "
        f"{block['hibernated']} hibernated; harness memory {_size(memory['totalBytes'])} "
        f"({_size(memory['availableBytes'])} available)"
    )


def memory_check(block: dict[str, Any]) -> dict[str, str]:
    """Warn when the harnesses hold more than `host.memoryWarnShare` of the memory they
    could have: their own RSS plus what the host still has available."""
    from .health import check

    memory = block["memory"]
    total, available = memory["totalBytes"], memory["availableBytes"]
    if available is None:
        return check("memory", "ok", "the host does not say how much memory is available")
    budget = total + available
    share = total / budget if budget else 0.0
    said = f"harnesses hold {_size(total)}, {share:.0%} of {_size(budget)} (theirs + available)"
    if share <= memory["warnShare"]:
        return check("memory", "ok", said)
    remedy = (
        "lower host.maxLive or sessions.hibernateAfterSeconds (idle sessions then give "
        "their memory back), or add memory; `the-loop sessions list` shows each one's"
    )
    return check("memory", "warning", f"{said}, above host.memoryWarnShare", remedy)
