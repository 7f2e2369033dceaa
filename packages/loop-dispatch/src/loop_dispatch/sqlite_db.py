"""The embedded backend: one SQLite file (`state.db`) in the state directory.

WAL so readers (status, `sessions list`) never block the daemon; a busy timeout so
writers in other processes wait rather than fail; every state change is one
transaction (BEGIN IMMEDIATE: one writer at a time), so a process killed at any
instant leaves the file consistent. The core version is mirrored into PRAGMA
user_version so sqlite3 tools can see it.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from .errors import StoreError, one_line

__all__ = ["BUSY_TIMEOUT_MS", "SqliteDatabase", "run_script"]

BUSY_TIMEOUT_MS = 15_000


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def run_script(conn: sqlite3.Connection, script: str) -> None:
    """Run several statements inside the current transaction.

    `executescript` would COMMIT first, breaking the one-transaction migration, so the
    script is split with sqlite3.complete_statement instead.
    """
    for statement in split_script(script):
        conn.execute(statement)


def split_script(script: str) -> list[str]:
    """The statements of a migration script, in order (empty ones dropped)."""
    out: list[str] = []
    buf = ""
    for piece in script.split(";"):
        buf += piece + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \t\r\n;"):
                out.append(buf)
            buf = ""
    if buf.strip(" \t\r\n;"):
        out.append(buf)
    return out


class SqliteDatabase:
    """An open `state.db`. Safe to share between threads (one connection, one lock)."""

    kind = "sqlite"

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        self._lock = threading.RLock()
        self._depth = 0
        self._opening = True

    @property
    def location(self) -> Path:
        return self.path

    @classmethod
    def open(cls, state_dir: str | Path, migrate: Any) -> SqliteDatabase:
        """Open (creating if needed) `state_dir/state.db`; `migrate(db)` brings its schema
        up to date (retried while another process is switching a fresh file to WAL)."""
        state_dir = Path(state_dir).expanduser()
        path = state_dir / "state.db"
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(path, f"cannot create the state directory: {one_line(exc)}") from None
        if path.is_dir():
            raise StoreError(path, "is a directory, expected an SQLite file")
        try:
            conn = sqlite3.connect(
                str(path),
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise StoreError(path, f"cannot open: {one_line(exc)}") from None
        db = cls(path, conn)
        # Switching a new file to WAL takes a lock SQLite's busy handler does not wait
        # for, so processes opening one fresh store together retry here, bounded.
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                db._setup()
                migrate(db)
                db._opening = False
                return db
            except sqlite3.OperationalError as exc:
                if _is_busy(exc) and time.monotonic() < deadline:
                    time.sleep(0.02)
                    continue
                conn.close()
                if _is_busy(exc):
                    raise StoreError(path, f"stayed locked by another process ({exc})") from None
                raise StoreError(path, f"not a usable SQLite database ({one_line(exc)})") from None
            except sqlite3.DatabaseError as exc:
                conn.close()
                raise StoreError(path, f"not a usable SQLite database ({one_line(exc)})") from None
            except StoreError:
                conn.close()
                raise

    def _setup(self) -> None:
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(self.path, f"cannot switch to WAL journal mode (got {mode})")
        conn.execute("PRAGMA synchronous = NORMAL")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception; nested use joins."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self._conn
                finally:
                    self._depth -= 1
                return
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if self._opening and _is_busy(exc):
                    raise  # open() retries
                raise StoreError(
                    self.path, f"cannot begin a transaction: {one_line(exc)}"
                ) from None
            except sqlite3.DatabaseError as exc:
                raise StoreError(
                    self.path, f"cannot begin a transaction: {one_line(exc)}"
                ) from None
            self._depth = 1
            try:
                yield self._conn
            except sqlite3.DatabaseError as exc:
                self._depth = 0
                with suppress(sqlite3.Error):  # a damaged file may refuse even this
                    self._conn.execute("ROLLBACK")
                if isinstance(exc, (sqlite3.IntegrityError, sqlite3.OperationalError)):
                    raise  # a broken constraint, a busy file, bad SQL: the caller's case
                raise StoreError(self.path, f"cannot write: {one_line(exc)}") from None
            except BaseException:
                self._depth = 0
                self._conn.execute("ROLLBACK")
                raise
            self._depth = 0
            try:
                self._conn.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                self._conn.execute("ROLLBACK")
                raise StoreError(self.path, f"cannot commit: {one_line(exc)}") from None

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """A read (its own snapshot under WAL; never waits for a writer)."""
        with self._lock:
            try:
                cur = self._conn.execute(sql, params)
                cur.row_factory = sqlite3.Row
                return cur.fetchall()
            except sqlite3.DatabaseError as exc:  # a damaged page, a vanished file, ...
                raise StoreError(self.path, f"cannot read: {one_line(exc)}") from None

    def run_script(self, conn: sqlite3.Connection, script: str) -> None:
        run_script(conn, script)

    def core_version(self, conn: sqlite3.Connection) -> int:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version == 0:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_versions ("
                "namespace TEXT PRIMARY KEY, version INTEGER NOT NULL)"
            )
        return version

    def set_core_version(self, conn: sqlite3.Connection, version: int) -> None:
        conn.execute(f"PRAGMA user_version = {int(version)}")
