"""The root of loop_dispatch's exceptions, and the one error a store raises when it
cannot be used (on either backend).

`except DispatchError` catches every exception of the package. This module imports
nothing of the package, so every module (the cheap model as much as the store) can
derive from it without an import circle.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DispatchError", "StoreBusy", "StoreError", "one_line"]


class DispatchError(Exception):
    """An expected failure of loop_dispatch (bad ref, lock, store, lost ground...)."""


class StoreError(DispatchError):
    """The store cannot be used: corrupt, not SQLite, newer schema, unreachable server.

    `str(err)` is one line naming the file (or the database URL, without any password)
    and what is wrong.
    """

    def __init__(self, path: Path | str, reason: str, *, gone: bool = False) -> None:
        super().__init__(f"state store {path}: {reason}")
        self.path = path
        self.reason = reason
        # The store is not merely unreachable but no longer exists (a dropped database):
        # waiting cannot bring it back, so a daemon stops instead of retrying.
        self.gone = gone


class StoreBusy(StoreError):
    """A transaction given a `timeout` did not get the write lock within it (another
    writer held it); nothing was done. The webhook receiver answers 503 on it."""


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
