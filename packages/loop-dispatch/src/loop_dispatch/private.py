"""State is private: directories 0700, files 0600, created so and tightened when looser.

The state directory holds ticket bodies and comments (the inbox), the event log, locks
and caches. Every creator goes through `private_dir` / `private_file`, so nothing is ever
readable by another user, whatever the umask. A path found looser (made by an older
version, or by hand) is tightened, with one warning per path on the `loop_dispatch.private`
logger (its text names the path and both modes, nothing else).
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

__all__ = ["DIR_MODE", "FILE_MODE", "private_dir", "private_file", "tighten"]

DIR_MODE = 0o700
FILE_MODE = 0o600

_warned: set[str] = set()
_warned_lock = threading.Lock()


def tighten(path: str | os.PathLike[str], mode: int) -> bool:
    """Remove every permission bit of `path` beyond `mode`; True when it was looser.

    A path of another user, a symlink or one that is gone is left alone (never followed,
    never raises): the caller's own open reports what matters.
    """
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.getuid():
        return False
    have = stat.S_IMODE(st.st_mode)
    if not have & ~mode:
        return False
    try:
        os.chmod(path, have & mode)
    except OSError:
        return False
    _warn_once(os.fspath(path), have, have & mode)
    return True


def _warn_once(path: str, was: int, now: int) -> None:
    with _warned_lock:
        if path in _warned:
            return
        _warned.add(path)
    import logging  # only when there is something to say

    logging.getLogger(__name__).warning(
        "%s had mode %04o (open to others); tightened to %04o", path, was, now
    )


def private_dir(path: str | os.PathLike[str]) -> Path:
    """`path` as a directory of ours only: made 0700 when missing (its missing parents
    as `mkdir -p` makes them), tightened to 0700, with a warning, when found looser.
    OSError from mkdir propagates (callers word it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=DIR_MODE)
    except FileExistsError:
        tighten(path, DIR_MODE)
    else:
        os.chmod(path, DIR_MODE)  # exactly 0700, whatever the umask took away
    return path


def private_file(path: str | os.PathLike[str], mode: int = FILE_MODE) -> Path:
    """`path` as a file only we can read: created empty with `mode` when missing, an
    existing one never opened (nor truncated) but tightened when looser. OSError from
    the creation propagates."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        tighten(path, mode)
    else:
        os.close(fd)
    return path
