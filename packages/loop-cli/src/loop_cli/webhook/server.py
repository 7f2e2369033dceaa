"""Run the webhook app under uvicorn in the foreground, with a heartbeat.

uvicorn installs its own SIGTERM/SIGINT handlers on the main thread and shuts down
gracefully (the app's lifespan drains the worker); the heartbeat thread stops with it.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any

import uvicorn
from uvicorn._compat import asyncio_run

from .guard import Limits, guarded_protocol, loop_exception_handler, make_room, quiet_server_logs

__all__ = ["serve"]

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 64 * 1024  # GitHub's headers are a few KB


def serve(
    app: Any,
    host: str,
    port: int,
    *,
    heartbeat: Callable[[], str | None] | None = None,
    interval: float = 15.0,
    on_started: Callable[[int], None] | None = None,
    log_level: str = "warning",
    limits: Limits | None = None,
    on_limit: Callable[[str], None] | None = None,
) -> str | None:
    """Serve until SIGTERM/SIGINT, or until `heartbeat` reports the daemon's state lost
    (returned: one line). Raises OSError when the address cannot be bound.

    `limits` (see guard.py) bound how long a request may take to arrive and how many
    connections may be open; `on_limit(cause)` hears of each refused or cut one."""
    limits = limits or Limits()
    fitting = make_room(limits.max_connections)
    if fitting < limits.max_connections:
        log.warning(
            "webhook: the descriptor limit fits %d connections, not webhook.maxConnections=%d",
            fitting,
            limits.max_connections,
        )
        limits = Limits(limits.header_timeout, limits.body_timeout, limits.keep_alive, fitting)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: without it uvicorn's separate header and body
    # writes meet Nagle plus delayed ACK, and every answer waits ~40 ms.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    config = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        server_header=False,
        http=guarded_protocol(limits, on_limit),
        timeout_keep_alive=max(1, round(limits.keep_alive)),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )
    server = uvicorn.Server(config)
    done = threading.Event()
    lost: list[str] = []

    def beat() -> None:
        while not server.started:
            if done.wait(0.05):
                return
        if on_started is not None:
            on_started(sock.getsockname()[1])
        while True:
            if heartbeat is not None:
                try:
                    problem = heartbeat()
                except Exception as exc:  # a busy store must not stop the receiver
                    problem = None
                    log.warning(
                        "webhook heartbeat not written: %s: %s",
                        type(exc).__name__,
                        " ".join(str(exc).split())[:300],
                    )
                if problem:
                    lost.append(problem)
                    server.should_exit = True
                    return
            if done.wait(interval):
                return

    ticker = threading.Thread(target=beat, name="the-loop-webhook-heartbeat", daemon=True)
    ticker.start()
    previous = _absorb_stop_signals(server)
    undo_logs = quiet_server_logs()

    async def run() -> None:
        asyncio.get_running_loop().set_exception_handler(loop_exception_handler())
        await server.serve(sockets=[sock])

    try:
        asyncio_run(run(), loop_factory=config.get_loop_factory())
    finally:
        undo_logs()
        done.set()
        ticker.join(timeout=5)
        sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return lost[0] if lost else None


def _absorb_stop_signals(server: uvicorn.Server) -> dict[int, Any]:
    """Handlers that uvicorn restores after its graceful shutdown.

    uvicorn re-raises the SIGTERM/SIGINT it caught once it has shut down; with the
    default handlers that kills the process before the caller can record a clean stop.
    These handlers turn the re-raise into "exit" requests, so `serve` returns normally.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}

    def stop(signum: int, frame: Any) -> None:
        server.should_exit = True

    return {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
