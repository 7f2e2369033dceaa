"""What a store backend provides: transactions, reads, scripts and the core version.

Two backends implement it: the embedded SQLite file (`sqlite_db.py`, the default) and a
shared PostgreSQL database (`postgres_db.py`, for a fleet over several hosts). Every
store operation (inbox, registry, cursors, meta) is written once, in the SQL both
engines accept, with `?` placeholders; the PostgreSQL backend rewrites them.

Errors keep the DB-API classes of the standard library (`sqlite3.IntegrityError`,
`sqlite3.OperationalError`) on both backends, so callers catch one set of types.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

__all__ = ["Connection", "Cursor", "Database"]


class Cursor(Protocol):
    """The part of a DB-API cursor the store operations use."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What a transaction hands its body: statements with `?` placeholders."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Cursor: ...

    def executemany(self, sql: str, rows: Any, /) -> Cursor: ...


class Database(Protocol):
    """One open database; safe to share between the threads of a process."""

    kind: str  # "sqlite" or "postgresql"

    @property
    def location(self) -> Path | str:
        """What messages name: the SQLite file, or the PostgreSQL URL without secrets."""
        ...

    read_only: bool  # opened for reading only: transactions are refused
    snapshot: bool  # read-only and immutable (SQLite without a readable -shm)

    def transaction(self, *, timeout: float | None = None) -> AbstractContextManager[Connection]:
        """One state change, all or nothing; writers are serialized, readers never wait.
        Nested use joins the outer transaction. `timeout` bounds the wait for the write
        lock (StoreBusy past it, nothing done); None waits as the backend does."""
        ...

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """A read on its own snapshot; rows index by position and by column name."""
        ...

    # `conn` is the backend's own connection (what its `transaction()` yields): typed
    # Any here, since each backend takes only its own.
    def run_script(self, conn: Any, script: str) -> None:
        """Several statements (a migration) inside the current transaction."""
        ...

    def core_version(self, conn: Any) -> int:
        """The core schema version recorded in the database (0: a new database)."""
        ...

    def set_core_version(self, conn: Any, version: int) -> None: ...

    def close(self) -> None: ...
