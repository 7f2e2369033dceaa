"""The API's unix socket: bound owner-only from the first instant, never over a live one.

Safety rules (docs/security.md): the socket is created under a 0177 umask, so no other
user can ever connect to it, not even in the instant between bind and chmod; a stale
socket of ours (no one answers on it) is replaced; a live one (another daemon answers),
anything that is not a socket, or a socket owned by someone else is refused with a
one-line reason, never unlinked.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

from ..errors import OperationalError

SOCKET_NAME = "api.sock"
_CONNECT_PROBE_SECONDS = 0.5
_SUN_PATH_MAX = 100  # sockaddr_un.sun_path is 108 bytes with its NUL on Linux


def socket_path(state_dir: Path) -> Path:
    return state_dir / SOCKET_NAME


def bind_private(path: Path) -> socket.socket:
    """A listening AF_UNIX socket at `path`, mode 0600, owned by this user."""
    _clear_stale(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        with reachable(path) as address:
            sock.bind(address)
    except OSError as exc:
        sock.close()
        raise OperationalError(f"cannot bind the API socket {path}: {exc.strerror}") from None
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(128)
    return sock


def _clear_stale(path: Path) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise OperationalError(f"{path} exists and is not a socket; move it away first")
    if info.st_uid != os.getuid():
        raise OperationalError(
            f"{path} belongs to another user (uid {info.st_uid}); refusing to replace it"
        )
    if answers(path):
        raise OperationalError(f"another process already serves the API on {path}")
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


@contextlib.contextmanager
def reachable(path: Path) -> Iterator[str]:
    """An address for `path` that fits AF_UNIX's ~107 bytes: the path itself, or (a deep
    state directory) the same file through `/proc/self/fd/N` of its folder, on Linux."""
    text = str(path)
    if len(os.fsencode(text)) <= _SUN_PATH_MAX or not os.path.isdir("/proc/self/fd"):
        yield text
        return
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{folder}/{path.name}"
    finally:
        os.close(folder)


def answers(path: Path) -> bool:
    """Does something accept connections on this socket?"""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(_CONNECT_PROBE_SECONDS)
    try:
        with reachable(path) as address:
            probe.connect(address)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def inode(path: Path) -> int | None:
    try:
        return os.lstat(path).st_ino
    except OSError:
        return None


def remove_if_ours(path: Path, bound: int | None) -> None:
    """Unlink the socket at shutdown, unless another one replaced it meanwhile."""
    if bound is not None and inode(path) == bound:
        with contextlib.suppress(OSError):
            path.unlink()
