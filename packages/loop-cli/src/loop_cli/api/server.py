"""Serve the API inside the poll daemon: a thread running uvicorn on the unix socket
(owner only, no token) and, with `api.listen`, on loopback TCP (bearer token).

The daemon's own loop stays on the main thread; this thread has its own event loop.
Request limits are the webhook receiver's (webhook/guard.py: header and body deadlines,
a connection cap), and uvicorn's request lines are never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, OperationalError
from . import unixsock

if TYPE_CHECKING:
    from pathlib import Path

    from ..runtime import Runtime

MAX_CONNECTIONS = 256  # dashboards, scrapers and `status`: far below the webhook's
MIN_TOKEN_CHARS = 16
START_SECONDS = 10.0


def api_token(rt: Runtime) -> str | None:
    """The TCP listener's token (None without `api.listen`); refuses (exit 2) when the
    variable is unset or too short to guard anything."""
    cfg = rt.config.api
    if cfg.listen is None:
        return None
    from ..envnames import shown

    token = os.environ.get(cfg.token_env, "")
    where = rt.loaded.path or "config"
    if not token:
        raise ConfigError(
            [
                f"{where}: api.listen is set but {shown(cfg.token_env)} (api.tokenEnv), the token "
                "that guards it, is not set in the environment"
            ]
        )
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            [
                f"{where}: the token in {shown(cfg.token_env)} (api.tokenEnv) is shorter than "
                f"{MIN_TOKEN_CHARS} characters (not shown)"
            ]
        )
    return token


class ApiServer:
    """The API's listeners and the thread serving them."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.token = api_token(rt)
        self.path: Path | None = None
        self.port: int | None = None
        self._inode: int | None = None
        self._socks: list[tuple[socket.socket, str | None]] = []
        self._stop = threading.Event()
        self._servers: list[Any] = []
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    def bind(self) -> None:
        """Take the socket(s) now, so a refusal stops the daemon before it polls."""
        cfg = self.rt.config.api
        if cfg.socket:
            self.path = unixsock.socket_path(self.rt.state_dir)
            unix = unixsock.bind_private(self.path)
            self._inode = unixsock.inode(self.path)
            self._socks.append((unix, None))
        if cfg.listen is not None:
            from ..config import parse_listen

            host, port = parse_listen(cfg.listen)
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            tcp = socket.socket(family, socket.SOCK_STREAM)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                tcp.bind((host, port))
            except OSError as exc:
                tcp.close()
                self.close()
                raise OperationalError(f"api.listen {cfg.listen}: {exc.strerror}") from None
            tcp.listen(128)
            self.port = tcp.getsockname()[1]
            self._socks.append((tcp, self.token))

    def start(self) -> None:
        if not self._socks:
            return
        if self.path is not None:  # `status` finds this socket without loading the config
            from .hint import remember

            remember(self.rt.loaded.path, self.rt.state_dir)
        self._thread = threading.Thread(target=self._run, name="the-loop-api", daemon=True)
        self._thread.start()
        self._started.wait(START_SECONDS)
        if self._error is not None:
            raise OperationalError(f"the API could not start: {self._error}")

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by start(); the daemon goes on without
            self._error = exc
            self._started.set()

    async def _serve(self) -> None:
        import uvicorn

        from ..webhook.guard import (
            Limits,
            guarded_protocol,
            loop_exception_handler,
            quiet_server_logs,
        )
        from .app import create_app
        from .metrics import Metrics
        from .views import Views

        cfg = self.rt.config
        limits = Limits(
            cfg.webhook.header_timeout_seconds,
            cfg.webhook.body_timeout_seconds,
            cfg.webhook.keep_alive_seconds,
            MAX_CONNECTIONS,
        )
        asyncio.get_running_loop().set_exception_handler(loop_exception_handler())
        undo_logs = quiet_server_logs()  # one line per cause per minute, no traceback
        views = Views(self.rt.loaded)
        metrics = Metrics(views, cfg.event_log_path())
        metrics.start()
        try:
            for _, token in self._socks:
                config = uvicorn.Config(
                    create_app(views, metrics, self._stop, token=token),
                    log_level="warning",
                    log_config=None,
                    access_log=False,
                    lifespan="off",
                    server_header=False,
                    http=guarded_protocol(limits),
                    timeout_keep_alive=max(1, round(limits.keep_alive)),
                    timeout_graceful_shutdown=2,
                )
                self._servers.append(uvicorn.Server(config))
            tasks = [
                asyncio.ensure_future(server.serve(sockets=[sock]))
                for server, (sock, _) in zip(self._servers, self._socks, strict=True)
            ]
            while not all(s.started for s in self._servers):
                if any(t.done() for t in tasks):
                    break
                await asyncio.sleep(0.02)
            self._started.set()
            watcher = asyncio.ensure_future(self._exit_on_stop())
            await asyncio.gather(*tasks)
            watcher.cancel()
        finally:
            metrics.stop()
            views.close()
            undo_logs()

    def where(self) -> str:
        """Where it serves, for the daemon's start line ("" when nowhere)."""
        places = [str(self.path)] if self.path is not None else []
        if self.port is not None:
            places.append(f"http on {self.rt.config.api.listen} (bearer token)")
        return ", ".join(places)

    async def _exit_on_stop(self) -> None:
        """Stop serving once `stop()` is called, even if that came while starting."""
        while not self._stop.is_set():
            await asyncio.sleep(0.1)
        for server in self._servers:
            server.should_exit = True

    def stop(self) -> None:
        self._stop.set()
        for server in self._servers:
            server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.close()

    def close(self) -> None:
        for sock, _ in self._socks:
            with contextlib.suppress(OSError):
                sock.close()
        if self.path is not None:
            unixsock.remove_if_ours(self.path, self._inode)
        self._socks = []


@contextlib.contextmanager
def serving(rt: Runtime) -> Iterator[ApiServer]:
    """The API for the life of the `with` block (the poll daemon's)."""
    server = ApiServer(rt)
    server.bind()
    try:
        server.start()
        yield server
    finally:
        server.stop()
