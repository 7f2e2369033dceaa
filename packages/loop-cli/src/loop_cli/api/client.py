"""Ask the running daemon over its unix socket, cheaply: a raw HTTP/1.0 GET.

`status` runs in watch loops, so this path imports nothing beyond the standard
library's _socket: the daemon answers `status` already rendered (`?render=text|json`),
so not even json is imported. A daemon that is not there (no socket, nobody listening)
answers in microseconds: the connect is refused at once, and a daemon that accepts but
stays silent is given `CONNECT_SECONDS`; a slow answer `READ_SECONDS`. Any failure is
None: the caller computes the answer itself.

Only an answer from our own user (or root), whole (as long as its content-length
says), from a daemon on the same config file and the same build of loop-cli is taken:
a socket planted in a state directory others can write to, a daemon killed mid-answer
or one still running the code from before an upgrade is no answer.
"""

from __future__ import annotations

import _socket  # socket.py's own import (enum, selectors) is most of this path's cost
import os
import sys

from .. import __version__

TYPE_CHECKING = False  # typing itself is not imported on this path
if TYPE_CHECKING:
    from typing import Any

CONNECT_SECONDS = 0.25
READ_SECONDS = 20.0
CONFIG_HEADER = "x-the-loop-config"  # the config file the daemon runs, UTF-8 in hex
OK_HEADER = "x-the-loop-ok"  # "1" or "0": `status`'s exit code, 0 or 1
VERSION_HEADER = "x-the-loop-version"  # the daemon's loop-cli build: see `build()`
RENDERS = ("text", "json")
DISABLE_ENV = "THE_LOOP_STATUS_LOCAL"  # "1": `status` computes itself, never asks
_MAX_ANSWER = 64 * 1024 * 1024
# The modules whose code decides what `status` shows: a change to any is another build.
_STATUS_CODE = ("status.py", "status_text.py", "capacity_view.py", "terminal.py", "health.py")


def build() -> str:
    """This loop-cli's version and the size and mtime of the code that makes `status`
    (the version alone stays the same across a checkout's edits): equal on both sides
    only when the daemon would print what this process would. A few stat calls."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    stamps = [__version__]
    for name in _STATUS_CODE:
        try:
            info = os.stat(os.path.join(here, name))
        except OSError:
            stamps.append("-")
            continue
        stamps.append(f"{info.st_size}.{info.st_mtime_ns}")
    return " ".join(stamps)


def config_id(path: os.PathLike[str] | str | None) -> str:
    """How the config file travels in a header: its real path's bytes in hex (a header
    is Latin-1; a path may be anything)."""
    if not path:
        return ""
    return os.fsencode(os.path.realpath(path)).hex()


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
    """(headers, body) of a whole 200 answer to `GET target` from a daemon of our own
    user (or root) on the unix socket `path`, or None."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_SECONDS)
        _connect(sock, path)
        if not _trusted_peer(sock):
            return None
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
    length = headers.get("content-length", "")
    if not length.isdigit() or int(length) != len(body):
        return None  # cut short (a daemon killed mid-answer) or longer than it said
    return headers, body


def _trusted_peer(sock: _socket.socket) -> bool:
    """Whether the process listening is of our user or root (Linux's SO_PEERCRED: pid,
    uid, gid). Elsewhere, whether the socket file is ours or root's."""
    option = getattr(_socket, "SO_PEERCRED", None)
    if option is None:
        return True  # checked on the socket file before connecting (`_connect`)
    credentials = sock.getsockopt(_socket.SOL_SOCKET, option, 12)
    uid = int.from_bytes(credentials[4:8], sys.byteorder)  # struct ucred, native order
    return uid in (os.geteuid(), 0)


def _connect(sock: _socket.socket, path: os.PathLike[str] | str) -> None:
    text = os.fspath(path)
    if getattr(_socket, "SO_PEERCRED", None) is None:
        owner = os.stat(text).st_uid  # no peer credentials here: the file's owner
        if owner not in (os.geteuid(), 0):
            raise PermissionError(f"{text} is another user's")
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
    this very build of loop-cli (another build's fields may not be the ones rendered
    here)."""
    if os.environ.get(DISABLE_ENV) == "1":
        return None
    answer = get(os.path.join(state_dir, "api.sock"), "/api/status")
    if answer is None:
        return None
    headers, data = answer
    if not _ours(headers, config_path):
        return None
    if not isinstance(data, dict) or "ok" not in data:
        return None
    return data


def daemon_output(
    state_dir: os.PathLike[str] | str, config_path: os.PathLike[str] | str | None, fmt: str
) -> tuple[str, bool] | None:
    """(what `status -o FMT` prints, ok) as the daemon on this state dir rendered it,
    when one answers on the same config file with this very build of loop-cli; else
    None. Text with a control character other than a newline or tab is no answer (our
    rendering shows every one of them escaped)."""
    if os.environ.get(DISABLE_ENV) == "1" or fmt not in RENDERS:
        return None
    answer = exchange(os.path.join(state_dir, "api.sock"), f"/api/status?render={fmt}")
    if answer is None:
        return None
    headers, body = answer
    ok = headers.get(OK_HEADER)
    if not _ours(headers, config_path) or ok not in ("0", "1"):
        return None
    if len(body.translate(None, _CONTROLS)) != len(body):
        return None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if any("\x80" <= ch <= "\x9f" for ch in text):  # C1 controls, once decoded
        return None
    return text, ok == "1"


_CONTROLS = bytes([c for c in (*range(0x20), 0x7F) if c not in (0x09, 0x0A)])


def _ours(headers: dict[str, str], config_path: os.PathLike[str] | str | None) -> bool:
    """Same config file, same build."""
    return (
        headers.get(CONFIG_HEADER) == config_id(config_path)
        and headers.get(VERSION_HEADER) == build()
    )
