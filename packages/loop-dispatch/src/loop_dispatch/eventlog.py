"""The event log: what the-loop did, as JSON lines an operator can filter and follow.

One schema: `{ts, type, level, source, workItem, deliveryId, detail}`. Each record is
one `write()` on an O_APPEND descriptor, so records from several processes never
interleave. Rotation is by size, done under an fcntl lock on a side file so two
processes never rotate the same file twice. Bodies, environment values and tokens never
enter the log: detail keys that could carry them are stripped before writing.
"""

from __future__ import annotations

import fcntl
import fnmatch
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

from .model import WorkItemRef

__all__ = ["EVENT_TYPES", "LEVELS", "EventLog", "Record", "redact_detail"]

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}

# Every type this package emits (documented in docs/events.md).
EVENT_TYPES = frozenset(
    {
        "dispatch.delivered",
        "dispatch.failed",
        "dispatch.skipped",
        "dispatch.duplicate",
        "session.spawned",
        "session.respawned",
        "session.respawn_averted",
        "session.resume_failed",
        "session.closed",
        "poll.cycle",
        "poll.gave_up",
        "poll.rearmed",
        "poll.error",
    }
)

# A detail key naming any of these (case-insensitive, as a word of the key) is stripped:
# these are the names under which bodies, secrets and environment values travel.
_FORBIDDEN_WORDS = frozenset(
    {
        "body",
        "text",
        "prompt",
        "token",
        "secret",
        "password",
        "passwd",
        "value",
        "values",
        "env",
        "environ",
        "environment",
        "authorization",
        "cookie",
        "key",
        "credential",
        "credentials",
        "signature",
        "payload",
    }
)

Record = dict[str, Any]


def _key_words(key: str) -> list[str]:
    out: list[str] = []
    word = ""
    for ch in key:
        if ch.isupper() and word and not word[-1].isupper():
            out.append(word.lower())
            word = ch
        elif ch in "_-. ":
            if word:
                out.append(word.lower())
            word = ""
        else:
            word += ch
    if word:
        out.append(word.lower())
    return out


def _forbidden(key: str) -> bool:
    return any(w in _FORBIDDEN_WORDS for w in _key_words(str(key)))


def redact_detail(detail: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Copy of `detail` without keys that could carry bodies or secrets (recursively).

    Returns (clean, stripped key paths). Fingerprints pass (`fingerprint`, `env_fp`
    ending in `fp`/`fingerprint` words are allowed because they are not values).
    """
    stripped: list[str] = []

    def clean(obj: Any, path: str) -> Any:
        if isinstance(obj, Mapping):
            out = {}
            for k, v in obj.items():
                kp = f"{path}.{k}" if path else str(k)
                words = _key_words(str(k))
                is_fp = bool(words) and words[-1] in {"fp", "fingerprint", "fingerprints"}
                if _forbidden(str(k)) and not is_fp:
                    stripped.append(kp)
                    continue
                out[str(k)] = clean(v, kp)
            return out
        if isinstance(obj, (list, tuple)):
            return [clean(v, path) for v in obj]
        if isinstance(obj, (str, int, float, bool)) or obj is None:
            return obj
        return str(obj)

    return clean(detail, ""), stripped


class EventLog:
    """Append-only JSON-lines log at `path`, rotated to `path.1` ... `path.<backups>`."""

    def __init__(
        self, path: str | Path, max_bytes: int = 10 * 1024 * 1024, backups: int = 5
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = max(1, backups)
        self._lock_path = self.path.with_name(self.path.name + ".lock")

    # -- writing -------------------------------------------------------------------

    def emit(
        self,
        type: str,
        *,
        level: str = "info",
        source: str,
        work_item: WorkItemRef | str | None = None,
        delivery_id: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> Record:
        """Append one record and return it. Never raises for an unwritable log (OSError
        is swallowed: the log must never be why a delivery fails)."""
        if level not in LEVELS:
            raise ValueError(f"unknown level {level!r}; expected one of {', '.join(LEVELS)}")
        clean, stripped = redact_detail(detail or {})
        if stripped:
            clean["redacted"] = sorted(stripped)
        record: Record = {
            "ts": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
            "type": type,
            "level": level,
            "source": source,
            "workItem": None if work_item is None else str(work_item),
            "deliveryId": delivery_id,
            "detail": clean,
        }
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        # A lone surrogate (only ever inside a JSON string) is written as its JSON escape,
        # so the line stays valid UTF-8 and valid JSON, and emit never raises for it.
        line = text.encode("utf-8", "backslashreplace")
        with suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            if size >= self.max_bytes:
                self._rotate()
        return record

    def _rotate(self) -> None:
        fd = os.open(self._lock_path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                # Another process may have rotated while we waited for the lock.
                if not self.path.exists() or self.path.stat().st_size < self.max_bytes:
                    return
                for n in range(self.backups - 1, 0, -1):
                    older = self._rotated(n)
                    if older.exists():
                        os.replace(older, self._rotated(n + 1))
                os.replace(self.path, self._rotated(1))
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _rotated(self, n: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{n}")

    # -- reading -------------------------------------------------------------------

    def files(self) -> list[Path]:
        """Existing log files, oldest first."""
        older = [self._rotated(n) for n in range(self.backups, 0, -1)]
        return [p for p in [*older, self.path] if p.exists()]

    @staticmethod
    def _matcher(
        types_glob: str | None,
        work_item: WorkItemRef | str | None,
        delivery_id: str | None,
        level: str | None,
        since: datetime | None,
    ) -> Matcher:
        min_level = LEVELS[level] if level else 0
        item = None if work_item is None else str(work_item)
        globs = [g.strip() for g in types_glob.split(",")] if types_glob else None
        if since is not None and since.tzinfo is None:
            since = since.replace(tzinfo=timezone.utc)

        def match(rec: Record) -> bool:
            if globs and not any(fnmatch.fnmatchcase(str(rec.get("type")), g) for g in globs):
                return False
            if item is not None and rec.get("workItem") != item:
                return False
            if delivery_id is not None and rec.get("deliveryId") != delivery_id:
                return False
            if LEVELS.get(str(rec.get("level")), 0) < min_level:
                return False
            if since is not None:
                try:
                    if datetime.fromisoformat(str(rec.get("ts"))) < since:
                        return False
                except ValueError:
                    return False
            return True

        return match

    def read(
        self,
        types_glob: str | None = None,
        work_item: WorkItemRef | str | None = None,
        delivery_id: str | None = None,
        level: str | None = None,
        since: datetime | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        """Matching records across rotated files, oldest first; `limit` keeps the newest.

        `types_glob`: fnmatch patterns, comma-separated (`session.*,dispatch.failed`).
        `level`: minimum level.
        """
        match = self._matcher(types_glob, work_item, delivery_id, level, since)
        out: list[Record] = []
        for path in self.files():
            try:
                out += _matching(path.read_bytes() + b"\n", match)[0]
            except OSError:
                continue
        return _newest(out, limit)

    def follow(
        self,
        types_glob: str | None = None,
        work_item: WorkItemRef | str | None = None,
        delivery_id: str | None = None,
        level: str | None = None,
        since: datetime | None = None,
        *,
        from_start: bool = False,
        limit: int | None = None,
        interval: float = 0.2,
    ) -> Iterator[Record]:
        """Matching records as they are appended, across rotations (forever).

        The position is taken when `follow` is CALLED, not at the first `next()`.
        Without `from_start`: the records appended after the call. With `from_start`:
        first the matching records the log held at the call, rotated files included
        (with `limit`, only the newest `limit` of them), then the new ones: one stream,
        no gap, no record twice (`read(..., limit=limit)` then tailing, without the race
        between the two).
        """
        if limit is not None and not from_start:
            raise ValueError("follow(limit=...) applies to the replayed records: pass from_start")
        match = self._matcher(types_glob, work_item, delivery_id, level, since)
        start = _position(self.path)
        return self._follow(match, start, from_start, limit, interval)

    def _follow(
        self,
        match: Matcher,
        start: tuple[int, int] | None,
        from_start: bool,
        limit: int | None,
        interval: float,
    ) -> Iterator[Record]:
        # The current file is opened first: a rotation from here on renames a file we
        # hold, which is then read through `fh` and skipped among the backups.
        fh, inode = _open(self.path)
        start_inode, offset = start if start is not None else (None, 0)
        buf = b""
        try:
            backlog: list[Record] = []
            fresh: list[Record] = []
            if from_start:
                backlog = self._backups_matching(match, skip={inode, start_inode})
            if start_inode is not None and start_inode != inode:
                # Rotated between the call and now: the file we started in is a backup.
                first, *newer = self._rotated_since(start_inode, skip=inode)
                if from_start:
                    backlog += _matching(first[:offset], match)[0]
                for data in [first[offset:], *newer]:
                    fresh += _matching(data + b"\n", match)[0]
            elif start_inode is not None and fh is not None:
                if from_start:
                    backlog_part, buf = _matching(fh.read(offset), match)
                    backlog += backlog_part
                else:
                    fh.seek(offset)
            yield from _newest(backlog, limit)
            yield from fresh
            while True:
                if fh is None:
                    fh, inode = _open(self.path)
                    if fh is None:
                        time.sleep(interval)
                        continue
                chunk = fh.read()
                if chunk:
                    records, buf = _matching(buf + chunk, match)
                    yield from records
                    continue
                if _inode(self.path) == inode:
                    time.sleep(interval)
                    continue
                # Rotated: drain what landed before the rename, then every file rotated
                # after ours (several rotations can pass between two looks), then the
                # new current file from its start.
                records, _torn = _matching(buf + fh.read(), match)
                yield from records
                held = inode
                fh.close()
                fh, inode = _open(self.path)
                buf = b""
                for data in self._rotated_since(held, skip=inode)[1:]:
                    yield from _matching(data + b"\n", match)[0]
        finally:
            if fh is not None:
                fh.close()

    def _backups_matching(self, match: Matcher, skip: set[int | None]) -> list[Record]:
        out: list[Record] = []
        for path in self.files():
            if path == self.path:
                continue
            fh, inode = _open(path)
            if fh is None:
                continue
            with fh:
                if inode not in skip:
                    out += _matching(fh.read() + b"\n", match)[0]
        return out

    def _rotated_since(self, inode: int | None, skip: int | None) -> list[bytes]:
        """Contents of the backup that is file `inode` and of every backup rotated after
        it, oldest first (`skip`: the current file's inode, read elsewhere). When that
        file has already been rotated out of retention, every backup is newer than it:
        b"" stands for it, followed by all backups."""
        newer: list[bytes] = []
        seen = {inode, skip}
        for n in range(1, self.backups + 1):
            fh, found = _open(self._rotated(n))
            if fh is None:
                continue
            with fh:
                data = fh.read()
            if found == inode:
                return [data, *reversed(newer)]
            if found not in seen:
                seen.add(found)
                newer.append(data)
        return [b"", *reversed(newer)]


Matcher = Callable[[Record], bool]


def _parse(line: bytes) -> Record | None:
    try:
        rec = json.loads(line)
    except ValueError:
        return None  # a torn or hand-edited line is skipped, never fatal
    return rec if isinstance(rec, dict) else None


def _matching(data: bytes, match: Matcher) -> tuple[list[Record], bytes]:
    """Matching records of the complete lines in `data`, and the incomplete rest."""
    *lines, rest = data.split(b"\n")
    records = [rec for line in lines if line.strip() and (rec := _parse(line)) is not None]
    return [rec for rec in records if match(rec)], rest


def _newest(records: list[Record], limit: int | None) -> list[Record]:
    if limit is None:
        return records
    return records[-limit:] if limit > 0 else []


def _open(path: Path) -> tuple[BinaryIO | None, int | None]:
    try:
        fh = path.open("rb")
    except OSError:
        return None, None
    return fh, os.fstat(fh.fileno()).st_ino


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _position(path: Path) -> tuple[int, int] | None:
    """(inode, size) of the file now: where a follow that starts now begins."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size
