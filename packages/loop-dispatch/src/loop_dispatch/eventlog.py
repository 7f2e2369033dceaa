"""The event log: what the-loop did, as JSON lines an operator can filter and follow.

One schema: `{ts, type, level, source, workItem, deliveryId, detail}`. Each record is
one `write()` on an O_APPEND descriptor, so records from several processes never
interleave. Rotation is by size, done under an fcntl lock on a side file so two
processes never rotate the same file twice. Bodies, environment values and tokens never
enter the log: detail keys that could carry them are stripped before writing.

Each record is also handed to the `logging` logger `loop.events` at its own level
(`extra={"loop_event": record}`), so a daemon that configures logging has one line per
decision on its own output without a log call at every site. The library adds only a
NullHandler: a process that configures nothing prints nothing.
"""

from __future__ import annotations

import fcntl
import fnmatch
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

from .model import WorkItemRef
from .private import FILE_MODE, private_dir, tighten

__all__ = ["EVENT_TYPES", "LEVELS", "LOGGER_NAME", "EventLog", "Record", "redact_detail"]

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}  # logging's own numbers

LOGGER_NAME = "loop.events"
_logger = logging.getLogger(LOGGER_NAME)
_logger.addHandler(logging.NullHandler())

# Every type this package emits (documented in docs/events.md).
EVENT_TYPES = frozenset(
    {
        "dispatch.delivered",
        "dispatch.failed",
        "dispatch.skipped",
        "dispatch.duplicate",
        "dispatch.held",
        "control.command",
        "control.rejected",
        "session.spawned",
        "session.respawned",
        "session.respawn_averted",
        "session.resume_failed",
        "session.closed",
        "session.adopted",
        "poll.cycle",
        "poll.error",
        "inbox.gave_up",
        "inbox.rearmed",
        "inbox.lease_lost",
        "inbox.error",
        "daemon.state_lost",
        "session.moved",
        "dispatch.not_taken_on",
        "session.close_deferred",
        "session.deferred",
        "session.hibernated",
        "dispatch.carried",
        "session.blocked",
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
        self._tightened = False

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
            if not self.path.parent.is_dir():
                private_dir(self.path.parent)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
            if not self._tightened:  # a log made looser by an older version or by hand
                self._tightened = True
                tighten(self.path, FILE_MODE)
            try:
                os.write(fd, line)
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            if size >= self.max_bytes:
                self._rotate()
        _log(record)
        return record

    def _rotate(self) -> None:
        fd = os.open(self._lock_path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
        tighten(self._lock_path, FILE_MODE)
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
        exclude_types: str | None = None,
    ) -> Matcher:
        min_level = LEVELS[level] if level else 0
        item = None if work_item is None else str(work_item)
        globs, excluded = type_globs(types_glob, exclude_types)
        if since is not None and since.tzinfo is None:
            since = since.replace(tzinfo=timezone.utc)

        def match(rec: Record) -> bool:
            kind = str(rec.get("type"))
            if globs and not any(fnmatch.fnmatchcase(kind, g) for g in globs):
                return False
            if any(fnmatch.fnmatchcase(kind, g) for g in excluded):
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
        exclude_types: str | None = None,
    ) -> list[Record]:
        """Matching records across rotated files, oldest first; `limit` keeps the newest.

        `types_glob`: fnmatch patterns, comma-separated (`session.*,dispatch.failed`); one
        starting with `!` excludes (`!poll.cycle`), as `exclude_types` does.
        `level`: minimum level. With `limit`, the files are read from their end, newest
        first, and reading stops at the `limit`th match: the cost follows `limit` (and
        how rare the matches are), not the size of the log.
        """
        match = self._matcher(types_glob, work_item, delivery_id, level, since, exclude_types)
        if limit is not None:
            return self._newest_matching(match, limit) if limit > 0 else []
        out: list[Record] = []
        for path in self.files():
            try:
                out += _matching(path.read_bytes() + b"\n", match)[0]
            except OSError:
                continue
        return _newest(out, limit)

    def _newest_matching(self, match: Matcher, limit: int) -> list[Record]:
        """The newest `limit` matching records, oldest first, read backwards from the
        end of the current file, then of each backup in turn. A file renamed by a
        rotation mid-read is the same inode under its next name: read once."""
        found: list[Record] = []
        seen: set[int] = set()
        for n in range(self.backups + 1):
            fh, inode = _open(self._rotated(n) if n else self.path)
            if fh is None or inode is None:
                continue
            with fh:
                if inode in seen:
                    continue
                seen.add(inode)
                for line in _lines_backwards(fh):
                    rec = _parse(line)
                    if rec is not None and match(rec):
                        found.append(rec)
                        if len(found) == limit:
                            return found[::-1]
        return found[::-1]

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
        exclude_types: str | None = None,
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
        match = self._matcher(types_glob, work_item, delivery_id, level, since, exclude_types)
        start = _position(self.path) or _position(self._rotated(1))
        return self._follow(match, start, from_start, limit, interval)

    def _follow(
        self,
        match: Matcher,
        start: tuple[int, int] | None,
        from_start: bool,
        limit: int | None,
        interval: float,
    ) -> Iterator[Record]:
        # `start` is (inode, offset) of where the log stood at the call: in the current
        # file, or at the end of the newest backup when there was no current file; None
        # when there was no file at all (then every file found later is new).
        # The current file is opened BEFORE the backups are read: a rotation from then on
        # renames a file we hold (read through `fh`, skipped among the backups), and every
        # file rotated before it is a backup by the time they are read.
        fh, inode = _open(self.path)
        try:
            backlog, fresh, buf, last = self._catch_up(match, start, from_start, fh, inode)
            if from_start:
                yield from _newest(backlog, limit)
            yield from fresh
            while True:
                if fh is None:
                    fh, inode = _open(self.path)
                    if fh is None:
                        time.sleep(interval)
                        continue
                    # Files created AND rotated while no current file was held (the
                    # follower slept, or looked between a rotation and the next write).
                    for data in _newer_than(last, self._backups(skip=inode, until=last)):
                        yield from _matching(data + b"\n", match)[0]
                chunk = fh.read()
                if chunk:
                    records, buf = _matching(buf + chunk, match)
                    yield from records
                    continue
                if _inode(self.path) == inode:
                    time.sleep(interval)
                    continue
                # Rotated: drain what landed before the rename; the next open reads every
                # file rotated after ours, then the new current file from its start.
                records, _torn = _matching(buf + fh.read(), match)
                yield from records
                buf = b""
                fh.close()
                fh, last = None, inode
        finally:
            if fh is not None:
                fh.close()

    def _catch_up(
        self,
        match: Matcher,
        start: tuple[int, int] | None,
        from_start: bool,
        fh: BinaryIO | None,
        inode: int | None,
    ) -> tuple[list[Record], list[Record], bytes, int | None]:
        """What a follow owes at its first look, given the current file `fh` (opened
        before this reads any backup): (backlog before `start`, records after it that
        are no longer in the current file, the torn tail of the replayed part of `fh`,
        the inode of the newest file consumed). `fh` is left where tailing resumes."""
        start_inode, offset = start if start is not None else (None, 0)
        backlog: list[Record] = []
        fresh: list[Record] = []
        buf = b""
        in_current = start_inode is not None and start_inode == inode and fh is not None
        if in_current and fh is not None and not from_start:
            fh.seek(offset)  # the usual case: no backup needs reading
            return backlog, fresh, buf, start_inode
        files = self._backups(skip=inode, until=None if from_start else start_inode)
        inodes = [ino for ino, _ in files]
        if start_inode in inodes:
            at = inodes.index(start_inode)
            head = files[at][1]
            for _, data in files[:at]:
                backlog += _matching(data + b"\n", match)[0]
            backlog += _matching(head[:offset], match)[0]
            for data in [head[offset:], *(data for _, data in files[at + 1 :])]:
                fresh += _matching(data + b"\n", match)[0]
        elif in_current and fh is not None:
            for _, data in files:
                backlog += _matching(data + b"\n", match)[0]
            replayed, buf = _matching(fh.read(offset), match)
            backlog += replayed
        else:
            # Nothing existed at the call, or its file has gone out of retention: every
            # backup is newer than the call.
            for _, data in files:
                fresh += _matching(data + b"\n", match)[0]
        return backlog, fresh, buf, files[-1][0] if files else start_inode

    def _backups(self, skip: int | None, until: int | None) -> list[tuple[int, bytes]]:
        """Rotated files OLDER than the held current file `skip`, as (inode, contents),
        oldest first, each read once even when rotations shift them mid-scan. A file found
        newer than `skip` (it rotated after being opened) is left for after `skip` is
        drained. `until`: stop at that file (it comes first in the list), when found."""
        newest_first: list[tuple[int, bytes]] = []
        seen: set[int] = set()
        for n in range(1, self.backups + 1):
            fh, found = _open(self._rotated(n))
            if fh is None or found is None:
                continue
            with fh:
                data = fh.read()
            if found in seen:
                continue
            seen.add(found)
            if found == skip:
                newest_first.clear()  # everything so far is newer than the held file
                continue
            newest_first.append((found, data))
            if until is not None and found == until:
                break
        return newest_first[::-1]


Matcher = Callable[[Record], bool]


def _log(record: Record) -> None:
    """Hand the (already redacted) record to `loop.events`; never raises: a broken
    handler must not be why a delivery fails."""
    level = LEVELS[record["level"]]
    if not _logger.isEnabledFor(level):
        return
    with suppress(Exception):
        _logger.log(level, "%s", record["type"], extra={"loop_event": record})


def type_globs(types_glob: str | None, exclude_types: str | None) -> tuple[list[str], list[str]]:
    """(include globs, exclude globs) of comma-separated `types_glob` (a `!glob` entry
    excludes) and `exclude_types`. No include glob: every type is included."""
    include: list[str] = []
    exclude: list[str] = []
    for text, negated in ((types_glob, False), (exclude_types, True)):
        for raw in (text or "").split(","):
            glob = raw.strip()
            if glob.startswith("!"):
                exclude.append(glob[1:].strip())
            elif glob:
                (exclude if negated else include).append(glob)
    return include, [g for g in exclude if g]


def _lines_backwards(fh: BinaryIO, block: int = 64 * 1024) -> Iterator[bytes]:
    """The non-blank lines of `fh` as it stands now, last first (a torn last line too:
    it fails to parse and is skipped, as a forward read skips it)."""
    pos = fh.seek(0, os.SEEK_END)
    rest = b""
    while pos > 0:
        step = min(block, pos)
        pos -= step
        fh.seek(pos)
        lines = (fh.read(step) + rest).split(b"\n")
        rest = lines[0]  # the start of a line that began in an earlier block
        for line in reversed(lines[1:]):
            if line.strip():
                yield line
    if rest.strip():
        yield rest


def _newer_than(inode: int | None, files: list[tuple[int, bytes]]) -> list[bytes]:
    """Contents of the files after file `inode`; all of them when it is not among them
    (gone out of retention, or None: nothing had been read yet)."""
    inodes = [ino for ino, _ in files]
    at = inodes.index(inode) + 1 if inode in inodes else 0
    return [data for _, data in files[at:]]


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
