"""A loopback TCP proxy a test can cut: the network between one host and its database.

`TcpProxy(target_port)` listens on 127.0.0.1 (an ephemeral port) and forwards every
connection to the target. `pause()` stops forwarding without closing anything: bytes
already sent wait in the proxy and new connections are accepted but go nowhere, as on
a network that silently drops packets (the client's calls hang, they do not fail).
`resume()` forwards again (held bytes first). `drop()` closes every open connection
and refuses new ones until `resume()`. `close()` ends it all.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

__all__ = ["TcpProxy"]


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._forwarding = threading.Event()
        self._forwarding.set()
        self._refusing = False
        self._closed = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def url(self, url: str) -> str:
        """`url` (postgresql://user@127.0.0.1:PORT/db) with this proxy's port."""
        return url.replace(f":{self.target[1]}/", f":{self.port}/", 1)

    def pause(self) -> None:
        self._forwarding.clear()

    def resume(self) -> None:
        self._refusing = False
        self._forwarding.set()

    def drop(self) -> None:
        self._refusing = True
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def close(self) -> None:
        self._closed = True
        self.drop()
        self._forwarding.set()
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._refusing:
                client.close()
                continue
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._forwarding.wait()
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._sockets += [client, upstream]
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self._forwarding.wait()
                if self._refusing:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
