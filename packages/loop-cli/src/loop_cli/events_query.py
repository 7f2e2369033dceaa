"""Parsing for `the-loop events` filters, and its table rendering."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

from .errors import UsageError

_RELATIVE = re.compile(r"(\d+)\s*([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


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


def table_line(rec: dict[str, Any]) -> str:
    """One event as a table line, control sequences neutralised."""
    from .terminal import printable

    return printable(_table_line(rec))


def _table_line(rec: dict[str, Any]) -> str:
    detail = json.dumps(rec.get("detail") or {}, separators=(",", ":"), ensure_ascii=False)
    if len(detail) > 120:
        detail = detail[:117] + "..."
    return (
        f"{str(rec.get('ts', ''))[:23]:23}  {rec.get('level', '')!s:7}  "
        f"{rec.get('type', '')!s:24}  {rec.get('workItem') or '-':24}  "
        f"{rec.get('deliveryId') or '-':28}  {detail}"
    )


TABLE_HEADER = f"{'TS':23}  {'LEVEL':7}  {'TYPE':24}  {'WORK ITEM':24}  {'DELIVERY':28}  DETAIL"
