"""The receiver's guard against slow, half-open and too many connections.

uvicorn (h11) bounds a header's size and an idle keep-alive, but not how long a client
may take to send its headers or its body: a client that trickles bytes holds a
connection (and a file descriptor) forever, and ~1,000 of them exhaust the default
descriptor limit, after which every accept fails and is logged with a traceback. The
guard gives each request a header deadline and a body deadline (from its first byte,
not reset by trickling), caps concurrent connections with an immediate 503, raises the
soft descriptor limit to make room for the cap, and rate-limits the server's error
logging to one line per cause per interval.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "Limits",
    "RateLimitFilter",
    "guarded_protocol",
    "loop_exception_handler",
    "make_room",
    "quiet_server_logs",
]

log = logging.getLogger(__name__)

_FULL_BODY = b'{"status":"busy","reason":"too many connections"}'
_FULL = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"content-length: " + str(len(_FULL_BODY)).encode() + b"\r\nconnection: close\r\n\r\n"
) + _FULL_BODY
_FD_HEADROOM = 128  # the store, the event log, tmux pipes, the listening socket ...


@dataclass(frozen=True)
class Limits:
    """How long a request may take to arrive, and how many connections may be open."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keep_alive: float = 5.0
    max_connections: int = 2048


def guarded_protocol(
    limits: Limits, on_limit: Callable[[str], None] | None = None
) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the deadlines and the connection cap of `limits`.

    `on_limit(cause)` is called (on the event loop) when a connection is refused or cut:
    "connections", "header timeout" or "body timeout"."""

    def report(cause: str) -> None:
        if on_limit is not None:
            try:
                on_limit(cause)
            except Exception as exc:  # reporting must never break serving
                log.warning("webhook guard: could not report %s: %s", cause, type(exc).__name__)

    class GuardedProtocol(H11Protocol):
        _timer: asyncio.TimerHandle | None = None
        _phase: str | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                report("connections")
                transport.write(_FULL)
                transport.close()
                return
            self._arm("header", limits.header_timeout)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._follow()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._follow()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _follow(self) -> None:
            """Deadlines follow the request: headers pending, body pending, or none."""
            state = self.conn.their_state
            if state is h11.IDLE:
                # Waiting for a request. Idle keep-alive is uvicorn's timer; bytes of a
                # request that has not finished its headers are ours (armed once, so
                # trickling never extends it).
                buffered = bool(getattr(self.conn, "trailing_data", (b"",))[0])
                if buffered and self._phase != "header":
                    self._arm("header", limits.header_timeout)
                elif not buffered and self._phase == "header" and self.cycle is not None:
                    self._disarm()
            elif state is h11.SEND_BODY:
                if self._phase != "body":
                    self._arm("body", limits.body_timeout)
            else:
                self._disarm()

        def _arm(self, phase: str, seconds: float) -> None:
            self._disarm()
            self._phase = phase
            self._timer = self.loop.call_later(seconds, self._expire)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._phase = None, None

        def _expire(self) -> None:
            phase = self._phase or "header"
            self._timer, self._phase = None, None
            if self.transport is not None and not self.transport.is_closing():
                report(f"{phase} timeout")
                self.transport.close()

    return GuardedProtocol


def make_room(max_connections: int) -> int:
    """Raise the soft descriptor limit (up to the hard one) so `max_connections` fit;
    returns the connection cap that does fit (lower when the hard limit is too low)."""
    want = max_connections + _FD_HEADROOM
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < want:
            target = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    except (OSError, ValueError):
        return max_connections
    if soft == resource.RLIM_INFINITY:
        return max_connections
    return max(1, min(max_connections, soft - _FD_HEADROOM))


class RateLimitFilter(logging.Filter):
    """One record per (logger, message) per `interval` seconds, never a traceback.

    The next record let through after a quiet spell says how many were suppressed."""

    def __init__(self, interval: float = 60.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.interval = interval
        self._clock = clock
        self._last: dict[tuple[str, str], float] = {}
        self._dropped: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        cause = (record.name, str(record.msg)[:200])
        now = self._clock()
        with self._lock:
            last = self._last.get(cause)
            if last is not None and now - last < self.interval:
                self._dropped[cause] = self._dropped.get(cause, 0) + 1
                return False
            self._last[cause] = now
            dropped = self._dropped.pop(cause, 0)
        if record.exc_info:
            exc = record.exc_info[1]
            record.msg = f"{record.getMessage()}: {type(exc).__name__}: {exc}"
            record.args = None
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        if dropped:
            record.msg = f"{record.getMessage()} ({dropped} similar suppressed)"
            record.args = None
        return True


_QUIET = ("asyncio", "uvicorn.error", "loop_cli.webhook")


def quiet_server_logs(interval: float = 60.0) -> Callable[[], None]:
    """Rate-limit the server's loggers; returns the undo (for tests and shutdown)."""
    flt = RateLimitFilter(interval)
    loggers = [logging.getLogger(name) for name in _QUIET]
    for logger in loggers:
        logger.addFilter(flt)

    def undo() -> None:
        for logger in loggers:
            logger.removeFilter(flt)

    return undo


def loop_exception_handler(interval: float = 60.0) -> Callable[[Any, dict[str, Any]], None]:
    """An asyncio exception handler: one line per message per interval, no traceback
    (asyncio's default prints one per failed accept when descriptors run out)."""
    flt = RateLimitFilter(interval)
    logger = logging.getLogger("asyncio")

    def handle(loop: Any, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        message = str(context.get("message") or "event loop error")
        record = logger.makeRecord("asyncio", logging.ERROR, __file__, 0, message, (), None)
        if not flt.filter(record):
            return
        if exc is not None:
            record.msg = f"{record.getMessage()}: {type(exc).__name__}: {exc}"
            record.args = None
        logger.handle(record)

    return handle
