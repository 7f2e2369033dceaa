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
from collections.abc import Iterator, Mapping
from contextlib import suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

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
        line = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
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
    ):
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

    @staticmethod
    def _parse(line: bytes) -> Record | None:
        try:
            rec = json.loads(line)
        except ValueError:
            return None  # a torn or hand-edited line is skipped, never fatal
        return rec if isinstance(rec, dict) else None

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
                with path.open("rb") as fh:
                    for line in fh:
                        rec = self._parse(line)
                        if rec is not None and match(rec):
                            out.append(rec)
            except OSError:
                continue
        if limit is not None:
            out = out[-limit:] if limit > 0 else []
        return out

    def follow(
        self,
        types_glob: str | None = None,
        work_item: WorkItemRef | str | None = None,
        delivery_id: str | None = None,
        level: str | None = None,
        since: datetime | None = None,
        *,
        from_start: bool = False,
        interval: float = 0.2,
    ) -> Iterator[Record]:
        """Yield matching records as they are appended, across rotations (forever).

        Starts at the end of the current file unless `from_start`. A rotation is noticed
        by the inode changing; the rest of the rotated file is read before moving on.
        """
        match = self._matcher(types_glob, work_item, delivery_id, level, since)
        if from_start:
            yield from (r for r in self.read() if match(r))
        fh = None
        inode = None
        buf = b""
        try:
            while True:
                if fh is None:
                    try:
                        fh = self.path.open("rb")
                        inode = os.fstat(fh.fileno()).st_ino
                        if not from_start:
                            fh.seek(0, os.SEEK_END)
                        from_start = True  # later (re)opens start at the beginning
                    except OSError:
                        time.sleep(interval)
                        continue
                chunk = fh.read()
                if chunk:
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        rec = self._parse(line)
                        if rec is not None and match(rec):
                            yield rec
                    continue
                try:
                    rotated = os.stat(self.path).st_ino != inode
                except OSError:
                    rotated = True
                if rotated:
                    fh.close()
                    fh = None
                    buf = b""
                    continue
                time.sleep(interval)
        finally:
            if fh is not None:
                fh.close()
