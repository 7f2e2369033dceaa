"""Parsing for `the-loop events` filters, and its table rendering."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from .errors import UsageError

_RELATIVE = re.compile(r"(\d+)\s*([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}

DEFAULT_LIMIT = 50
# Types hidden unless a --type glob names them: one per poll, they drown the rest.
QUIET_TYPES = ("poll.cycle",)


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """`15m`, `2h`, `1d`, `30s`, `1w`, or an ISO-8601 time (UTC when no offset)."""
    now = now or datetime.now(timezone.utc)
    m = _RELATIVE.fullmatch(text.strip())
    if m:
        return now - timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--since {text!r}: expected a duration like 15m, 2h, 1d or an ISO-8601 time"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def excluded_types(types_glob: str | None, exclude: Sequence[str]) -> str | None:
    """The exclusions to apply: `--exclude-type` values, plus the quiet types unless an
    including `--type` glob names them (`--type poll.cycle`, `--type 'poll.*'`)."""
    from loop_dispatch.eventlog import type_globs

    include, _ = type_globs(types_glob, None)
    quiet = [t for t in QUIET_TYPES if not any(fnmatch.fnmatchcase(t, glob) for glob in include)]
    parts = [*exclude, *quiet]
    return ",".join(parts) if parts else None


def local_time(ts: Any) -> str:
    """A record's UTC time in the local zone, its offset shown (`... 21:36:01+01:00`)."""
    try:
        when = datetime.fromisoformat(str(ts))
    except ValueError:
        return str(ts)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone().isoformat(sep=" ", timespec="seconds")


# (header, widest a column gets, narrowest it may be squeezed to); DETAIL takes the rest.
_COLUMNS = (
    ("TIME", 25, 25),
    ("LEVEL", 7, 5),
    ("TYPE", 28, 12),
    ("WORK ITEM", 28, 9),
    ("DELIVERY", 32, 8),
)
_DETAIL_MAX = 120
_DETAIL_MIN = 20
_GAP = "  "


class EventTable:
    """The events table, sized to the records it shows and to `width` (the terminal's;
    None: not a terminal, nothing is cut but DETAIL, at 120 characters)."""

    def __init__(self, records: Sequence[dict[str, Any]], width: int | None) -> None:
        self.width = width
        rows = [self._cells(r) for r in records]
        self.widths = [
            max([len(header), *(len(row[i]) for row in rows)]) if rows else widest
            for i, (header, widest, _) in enumerate(_COLUMNS)
        ]
        self.widths = [
            min(w, widest) for w, (_, widest, _) in zip(self.widths, _COLUMNS, strict=True)
        ]
        if width is not None:
            self._squeeze(width)

    def _squeeze(self, width: int) -> None:
        """Narrow the columns, right to left, until DETAIL has room in `width`."""
        for i in reversed(range(len(_COLUMNS))):
            spare = width - self._fixed() - _DETAIL_MIN
            if spare >= 0:
                return
            narrowest = _COLUMNS[i][2]
            self.widths[i] = max(narrowest, self.widths[i] + spare)

    def _fixed(self) -> int:
        return sum(self.widths) + len(_GAP) * len(self.widths)

    @staticmethod
    def _cells(rec: dict[str, Any]) -> list[str]:
        from .terminal import printable

        return [
            printable(str(x))
            for x in (
                local_time(rec.get("ts", "")),
                rec.get("level", ""),
                rec.get("type", ""),
                rec.get("workItem") or "-",
                rec.get("deliveryId") or "-",
            )
        ]

    def header(self) -> str:
        return self._join([h for h, _, _ in _COLUMNS], "DETAIL")

    def line(self, rec: dict[str, Any]) -> str:
        """One event as a table line, control sequences neutralised."""
        from .terminal import printable

        detail = json.dumps(rec.get("detail") or {}, separators=(",", ":"), ensure_ascii=False)
        return self._join(self._cells(rec), printable(detail))

    def _join(self, cells: list[str], detail: str) -> str:
        room = _DETAIL_MAX if self.width is None else max(1, self.width - self._fixed())
        fitted = [_fit(c, w) for c, w in zip(cells, self.widths, strict=True)]
        text = _GAP.join(fitted) + _GAP + _cut(detail, room)
        return text if self.width is None else text[: self.width].rstrip()


def _fit(text: str, width: int) -> str:
    return _cut(text, width).ljust(width)


def _cut(text: str, width: int) -> str:
    """`text` in `width` characters, a cut one ending in `…`."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"
