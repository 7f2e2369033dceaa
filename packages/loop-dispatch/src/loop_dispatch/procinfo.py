"""A process's start time: with its pid, what tells a live claimer from a reused pid."""

from __future__ import annotations

__all__ = ["proc_start"]


def proc_start(pid: int) -> str:
    """The process's start time in clock ticks since boot ('' where /proc cannot say)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return ""
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else ""
