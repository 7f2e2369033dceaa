"""The one error a store raises when it cannot be used, on either backend."""

from __future__ import annotations

from pathlib import Path

__all__ = ["StoreError", "one_line"]


class StoreError(Exception):
    """The store cannot be used: corrupt, not SQLite, newer schema, unreachable server.

    `str(err)` is one line naming the file (or the database URL, without any password)
    and what is wrong.
    """

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"state store {path}: {reason}")
        self.path = path
        self.reason = reason


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
