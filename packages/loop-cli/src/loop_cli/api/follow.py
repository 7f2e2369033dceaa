"""Follow the event log: the records appended since the last read, across rotations.

The log is rotated by renaming it (`events.jsonl` -> `events.jsonl.1`): the open handle
still reads the renamed file, so its last lines are read before the new file is opened
from its start. A partial last line (a writer mid-append) waits for the next read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

MAX_LINE = 1024 * 1024  # a record is a few hundred bytes; anything longer is skipped


class LogFollower:
    """Reads each record once, starting at the end of the log as it is now."""

    def __init__(self, path: Path, *, from_start: bool = False) -> None:
        self.path = path
        self._handle: IO[bytes] | None = None
        self._inode: int | None = None
        self._partial = b""
        self._open(at_end=not from_start)

    def _open(self, *, at_end: bool) -> None:
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 (kept open across reads)
        except OSError:
            self._handle, self._inode = None, None
            return
        self._handle, self._inode = handle, os.fstat(handle.fileno()).st_ino
        if at_end:
            handle.seek(0, os.SEEK_END)

    def read(self) -> list[dict[str, Any]]:
        """The complete records appended since the last call (oldest first)."""
        out = self._drain()
        try:
            now = os.stat(self.path).st_ino
        except OSError:
            now = None
        if now is not None and now != self._inode:  # rotated (or created): the new file
            self.close()
            self._open(at_end=False)
            out += self._drain()
        return out

    def _drain(self) -> list[dict[str, Any]]:
        if self._handle is None:
            return []
        data = self._partial + self._handle.read()
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_LINE:
            self._partial = b""
        return [rec for rec in map(_record, lines) if rec is not None]

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
        self._handle, self._partial = None, b""


def _record(line: bytes) -> dict[str, Any] | None:
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def last_records(path: Path, limit: int, chunk: int = 256 * 1024) -> list[dict[str, Any]]:
    """The last `limit` records of the log (oldest first), reading only its tail."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            start = max(0, size - chunk)
            while True:
                handle.seek(start)
                lines = handle.read(size - start).split(b"\n")
                if start > 0:
                    lines = lines[1:]  # the first may be cut
                records = [r for r in map(_record, lines) if r is not None]
                if len(records) >= limit or start == 0:
                    return records[-limit:] if limit else []
                start = max(0, start - 4 * chunk)
    except OSError:
        return []
