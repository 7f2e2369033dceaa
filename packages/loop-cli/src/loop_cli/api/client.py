"""Ask the running daemon over its unix socket, cheaply: a raw HTTP/1.0 GET.

`status` runs in watch loops, so this path imports nothing beyond the standard
library's _socket: the daemon answers `status` already rendered (`?render=text|json`),
so not even json is imported. A daemon that is not there (no socket, nobody listening)
answers in microseconds: the connect is refused at once, and a daemon that accepts but
stays silent is given `CONNECT_SECONDS`; a slow answer `READ_SECONDS`. Any failure is
None: the caller computes the answer itself.
"""

from __future__ import annotations

import _socket  # socket.py's own import (enum, selectors) is most of this path's cost
import os

from .. import __version__

TYPE_CHECKING = False  # typing itself is not imported on this path
if TYPE_CHECKING:
    from typing import Any

CONNECT_SECONDS = 0.25
READ_SECONDS = 20.0
CONFIG_HEADER = "x-the-loop-config"  # the config file the daemon runs
OK_HEADER = "x-the-loop-ok"  # "1" or "0": `status`'s exit code, 0 or 1
VERSION_HEADER = "x-the-loop-version"  # the daemon's loop-cli: its rendering is ours
RENDERS = ("text", "json")
DISABLE_ENV = "THE_LOOP_STATUS_LOCAL"  # "1": `status` computes itself, never asks
_MAX_ANSWER = 64 * 1024 * 1024


def get_json(path: os.PathLike[str] | str, target: str) -> Any | None:
    """The JSON of `GET target` on the unix socket `path`, or None."""
    answer = get(path, target)
    return None if answer is None else answer[1]


def get(path: os.PathLike[str] | str, target: str) -> tuple[dict[str, str], Any] | None:
    """(headers, JSON) of `GET target` on the unix socket `path`, or None."""
    answer = exchange(path, target)
    if answer is None:
        return None
    import json

    try:
        return answer[0], json.loads(answer[1])
    except ValueError:
        return None


def exchange(path: os.PathLike[str] | str, target: str) -> tuple[dict[str, str], bytes] | None:
    """(headers, body) of a 200 answer to `GET target` on the unix socket `path`, or None."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_SECONDS)
        _connect(sock, path)
        sock.settimeout(READ_SECONDS)
        sock.sendall(f"GET {target} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
        chunks = []
        size = 0
        while size <= _MAX_ANSWER:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        sock.close()
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split(b" ")
    if len(status) < 2 or status[1] != b"200":
        return None
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers, body


def _connect(sock: _socket.socket, path: os.PathLike[str] | str) -> None:
    text = os.fspath(path)
    if len(os.fsencode(text)) <= 100:
        sock.connect(text)
        return
    head, name = os.path.split(text)
    folder = os.open(head, os.O_RDONLY | os.O_DIRECTORY)  # a deep state dir
    try:
        sock.connect(f"/proc/self/fd/{folder}/{name}")
    finally:
        os.close(folder)


def daemon_status(
    state_dir: os.PathLike[str] | str, config_path: os.PathLike[str] | str | None
) -> dict[str, Any] | None:
    """The status the daemon on this state dir computes, when one answers and it runs
    on the same config file (else None: another config would be another status) with
    this very loop-cli (another version's fields may not be the ones rendered here)."""
    if os.environ.get(DISABLE_ENV) == "1":
        return None
    answer = get(os.path.join(state_dir, "api.sock"), "/api/status")
    if answer is None:
        return None
    headers, data = answer
    mine = os.path.realpath(config_path) if config_path else ""
    if headers.get(CONFIG_HEADER) != mine or headers.get(VERSION_HEADER) != __version__:
        return None
    if not isinstance(data, dict) or "ok" not in data:
        return None
    return data


def daemon_output(
    state_dir: os.PathLike[str] | str, config_path: os.PathLike[str] | str | None, fmt: str
) -> tuple[str, bool] | None:
    """(what `status -o FMT` prints, ok) as the daemon on this state dir rendered it,
    when one answers on the same config file with this very loop-cli (another version
    might render otherwise); else None."""
    if os.environ.get(DISABLE_ENV) == "1" or fmt not in RENDERS:
        return None
    answer = exchange(os.path.join(state_dir, "api.sock"), f"/api/status?render={fmt}")
    if answer is None:
        return None
    headers, body = answer
    mine = os.path.realpath(config_path) if config_path else ""
    ok = headers.get(OK_HEADER)
    if headers.get(CONFIG_HEADER) != mine or headers.get(VERSION_HEADER) != __version__:
        return None
    if ok not in ("0", "1"):
        return None
    try:
        return body.decode("utf-8"), ok == "1"
    except UnicodeDecodeError:
        return None
