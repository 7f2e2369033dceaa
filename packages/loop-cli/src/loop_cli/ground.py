"""The daemon watches its ground: its state directory and store deleted or replaced.

A daemon that keeps working on a deleted database loses every event it accepts, and a
second daemon started on the new state is then accepted beside it. So each daemon notes
the identity (device, inode) of its state directory and state file when it starts, and
every loop compares: a change is reported, and the daemon exits non-zero so a
supervisor restarts it on the real state.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["Ground"]


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class Ground:
    """The identity of a state directory and its store file, noted at construction."""

    def __init__(self, state_dir: Path, store_file: Path) -> None:
        self.paths = (state_dir, store_file)
        self.noted = tuple(_identity(p) for p in self.paths)

    def check(self) -> str | None:
        """None while both are the ones noted; else one line saying which changed."""
        for path, noted in zip(self.paths, self.noted, strict=True):
            now = _identity(path)
            if noted is None:
                continue
            if now is None:
                return f"{path} was deleted under the running daemon"
            if now != noted:
                return f"{path} was replaced under the running daemon (device/inode changed)"
        return None
