"""A daemon's own output is its log: one line per decision, text or JSON lines.

The event log already records every decision (spawn, delivery, respawn, resume
fallback, give-up, failure and its reason, a move to another host) and hands each
record to the `loop.events` logger (loop_dispatch.eventlog). `poll start` and
`gh-webhook start` configure logging here: a handler on the-loop's own loggers
(`loop.*`, `loop_cli.*`), never the root one, so a library's debug output (an HTTP
client's, say) never reaches the daemon's log. Records are redacted before they are
logged (no body, no environment value, no token); the text form also neutralises
terminal control sequences.

Text: `TS LEVEL TYPE REF DELIVERY key=value ...`; a plain message (start, stop) is
`TS LEVEL LOGGER message`. JSON (`--log-format json`, for journald or a collector):
one object per line, an event record exactly as the event log holds it, a plain
message as `{ts, level, logger, message}`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import IO, Any

from .terminal import printable

__all__ = ["FORMATS", "LEVELS", "JsonFormatter", "TextFormatter", "configured", "daemon_logger"]

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")
OWN_LOGGERS = ("loop", "loop_cli")  # loop.events, loop.daemon; loop_cli.webhook...
DAEMON_LOGGER = "loop.daemon"
_VALUE_CHARS = 300  # one detail value in a text line, at most


def daemon_logger() -> logging.Logger:
    """The logger of a daemon's own lifecycle lines (started, stopped)."""
    return logging.getLogger(DAEMON_LOGGER)


def _ts(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, timezone.utc)
    return moment.isoformat(timespec="milliseconds")


def _value(value: Any) -> str:
    """One detail value as text: bare when it has no space or quote, else JSON-quoted."""
    if isinstance(value, str):
        text = value if value and not any(c in value for c in ' "=') else json.dumps(value)
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    if len(text) > _VALUE_CHARS:
        text = text[: _VALUE_CHARS - 1] + "…"
    return text


def detail_summary(detail: Mapping[str, Any]) -> str:
    """`key=value` pairs of an event's (already redacted) detail, in its order."""
    return " ".join(f"{key}={_value(value)}" for key, value in detail.items())


class TextFormatter(logging.Formatter):
    """`TS LEVEL TYPE REF DELIVERY detail` for events; `TS LEVEL LOGGER message` else."""

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, "loop_event", None)
        level = record.levelname
        if isinstance(event, Mapping):
            parts = [
                str(event.get("ts") or _ts(record)),
                level,
                str(event.get("type")),
                str(event.get("workItem") or "-"),
                str(event.get("deliveryId") or "-"),
            ]
            summary = detail_summary(event.get("detail") or {})
            line = " ".join(parts) + (f" {summary}" if summary else "")
        else:
            line = f"{_ts(record)} {level} {record.name} {record.getMessage()}"
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                line += f": {type(exc).__name__}: {' '.join(str(exc).split())}"
        return printable(line)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: the event record itself, or {ts, level, logger, message}."""

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, "loop_event", None)
        if isinstance(event, Mapping):
            data: dict[str, Any] = dict(event)
        else:
            data = {
                "ts": _ts(record),
                "level": record.levelname.lower(),
                "logger": record.name,
                "message": record.getMessage(),
            }
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                data["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)


@contextlib.contextmanager
def configured(
    level: str = "info", fmt: str = "text", stream: IO[str] | None = None
) -> Iterator[None]:
    """Log the-loop's records at `level` and above to `stream` (stderr) while the block
    runs; the loggers are as they were afterwards."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    number = logging.getLevelName(level.upper())
    saved = []
    for name in OWN_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level))
        logger.setLevel(number)
        logger.addHandler(handler)
    try:
        yield
    finally:
        for logger, was in saved:
            logger.removeHandler(handler)
            logger.setLevel(was)
        with contextlib.suppress(Exception):
            handler.flush()
