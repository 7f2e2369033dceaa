"""Is a harness mid-turn? Read from the tail of its own conversation file.

Both CLIs append one JSON line per event of a conversation, and a conversation can grow
to megabytes: each reading looks only at the file's last `TAIL` bytes (a larger window
once when that holds no record that decides), walking back from the newest record to the
first one that says whether a turn is open. What decides is the adapter's `verdict`
(a record -> "idle", "busy" or None for metadata that says neither).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["BUSY", "IDLE", "UNKNOWN", "from_tail", "tail_records"]

IDLE = "idle"
BUSY = "busy"
UNKNOWN = "unknown"
BLOCKED = "blocked"
TAIL = 64 * 1024
WIDE_TAIL = 1024 * 1024

Verdict = Callable[[dict[str, Any]], str | None]


def tail_records(path: Path, size: int) -> tuple[list[dict[str, Any]], bool] | None:
    """The whole JSON lines in the last `size` bytes (oldest first), and whether they
    reach back to the file's start; None when it cannot be read. A line cut by the
    window's start and a half-written last line are left out."""
    try:
        with path.open("rb") as handle:
            end = handle.seek(0, 2)
            start = max(0, end - size)
            handle.seek(start)
            data = handle.read(end - start)
    except OSError:
        return None
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # begins mid-line
    records = []
    for line in lines[:-1]:  # the last piece is "" or a line still being written
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records, start == 0


def from_tail(path: Path | None, verdict: Verdict) -> str:
    """The newest deciding record's verdict; "unknown" with no file or none decides."""
    if path is None:
        return UNKNOWN
    for size in (TAIL, WIDE_TAIL):
        read = tail_records(path, size)
        if read is None:
            return UNKNOWN
        records, whole = read
        for record in reversed(records):
            said = verdict(record)
            if said is not None:
                return said
        if whole:
            break
    return UNKNOWN
