"""Per-work-item exclusion across processes: an flock on a file named from the slug.

The OS drops the lock when its holder dies, so a crashed poller never wedges an item;
each item has its own file, so items never wait on each other.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import DispatchError
from .model import WorkItemRef
from .private import FILE_MODE, private_dir, tighten

__all__ = ["LockTimeout", "LockUnavailable", "file_lock", "item_lock", "lock_path"]


class LockTimeout(DispatchError):
    """The item stayed locked by another process past the timeout."""


class LockUnavailable(DispatchError):
    """The lock file cannot be made or opened (the lock dir is a file, unwritable, ...).

    `str(err)` is one line naming the path and the OS's reason.
    """


def lock_path(lock_dir: str | Path, ref: WorkItemRef) -> Path:
    return Path(lock_dir) / f"{ref.slug()}.lock"


@contextmanager
def item_lock(
    lock_dir: str | Path, ref: WorkItemRef, timeout: float | None = None
) -> Iterator[Path]:
    """Hold `ref`'s lock for the block. `timeout=None` waits as long as it takes."""
    with file_lock(lock_path(lock_dir, ref), f"work item {ref}", timeout) as path:
        yield path


@contextmanager
def file_lock(path: Path, what: str, timeout: float | None = None) -> Iterator[Path]:
    """Hold the flock on `path` (named `what` in errors) for the block."""
    try:
        private_dir(path.parent)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        tighten(path, FILE_MODE)
    except OSError as exc:
        raise LockUnavailable(
            f"cannot open the lock of {what} at {path}: {exc.strerror or exc}"
        ) from None
    try:
        if timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LockTimeout(f"{what} is locked by another process") from None
                    time.sleep(0.02)
        try:
            yield path
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
