"""The embedded backend: one SQLite file (`state.db`) in the state directory.

WAL so readers (status, `sessions list`) never block the daemon; a busy timeout so
writers in other processes wait rather than fail; the directory is 0700 and the file
(with its -wal and -shm) 0600, since the inbox holds ticket bodies and comments; every
state change is one transaction (BEGIN IMMEDIATE: one writer at a time), so a process
killed at any instant leaves the file consistent. The core version is mirrored into PRAGMA
user_version so sqlite3 tools can see it.

Readers open the file read-only (`open_reader`): no migration, no transaction, so they
never wait for the write lock another process holds, and they work on a file this user
may not write. A write through one is refused in one line saying "read-only". A
transaction may be given a `timeout` (the webhook receiver's): the wait for this
process's connection and for the file's write lock together stay within it.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from .errors import StoreBusy, StoreError, one_line
from .private import FILE_MODE, private_dir, private_file, tighten

__all__ = ["BUSY_TIMEOUT_MS", "SqliteDatabase", "read_only_reason", "run_script"]

BUSY_TIMEOUT_MS = 15_000


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _is_read_only(exc: sqlite3.Error) -> bool:
    return "readonly" in str(exc).lower() or "read-only" in str(exc).lower()


def _unusable(path: Path, exc: sqlite3.Error) -> StoreError:
    """Why a file cannot be opened for writing: read-only (said so), or not SQLite."""
    if _is_read_only(exc):
        why = read_only_reason(path) or one_line(exc)
        return StoreError(
            path,
            f"is read-only ({why}): commands that change state cannot run; "
            "`status`, `sessions list` and `inbox list` still read it",
        )
    return StoreError(path, f"not a usable SQLite database ({one_line(exc)})")


def read_only_reason(path: Path) -> str:
    """Why this process may not write the state file ("" when it may): SQLite needs the
    file and its folder (for the -wal and -shm files) writable."""
    import os

    if path.exists() and not os.access(path, os.W_OK):
        return f"{path.name} is not writable by this user"
    if not os.access(path.parent, os.W_OK):
        return f"its folder {path.parent} is not writable by this user"
    return ""


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

    def __init__(self, path: Path, conn: sqlite3.Connection, *, read_only: bool = False) -> None:
        self.path = path
        self._conn = conn
        self._lock = threading.RLock()
        self._depth = 0
        self._opening = True
        self.read_only = read_only  # opened by open_reader: reads only
        self.snapshot = False  # read-only and immutable: no -shm could be made or read

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
            private_dir(state_dir)
        except OSError as exc:
            raise StoreError(path, f"cannot create the state directory: {one_line(exc)}") from None
        if path.is_dir():
            raise StoreError(path, "is a directory, expected an SQLite file")
        try:
            # Made 0600 before SQLite opens it: SQLite gives -wal and -shm its mode.
            private_file(path)
        except OSError as exc:
            raise StoreError(path, f"cannot create: {one_line(exc)}") from None
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
                for extra in ("-wal", "-shm"):  # made looser by an older version
                    tighten(f"{path}{extra}", FILE_MODE)
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
                raise _unusable(path, exc) from None
            except sqlite3.DatabaseError as exc:
                conn.close()
                raise _unusable(path, exc) from None
            except StoreError:
                conn.close()
                raise

    @classmethod
    def open_reader(cls, state_dir: str | Path) -> SqliteDatabase:
        """Open an existing `state_dir/state.db` read-only: no migration, no write lock.

        Reading a WAL file needs its -shm; where this user can neither find nor make one
        (a read-only folder, no daemon running) and no -wal holds pending pages, the
        file is read as immutable: the whole state is in it. `core_version` says
        whether its schema is the one this code reads."""
        path = Path(state_dir).expanduser() / "state.db"
        if not path.is_file():
            raise StoreError(path, "does not exist")
        uri = path.resolve().as_uri()
        try:
            db = cls(path, cls._connect_ro(f"{uri}?mode=ro"), read_only=True)
            try:
                db._conn.execute("PRAGMA user_version").fetchone()
                db._conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.OperationalError as exc:
                wal = path.with_name(path.name + "-wal")
                has_wal = wal.exists() and wal.stat().st_size > 0
                if has_wal or not (_is_read_only(exc) or "unable to open" in str(exc).lower()):
                    raise
                db._conn.close()
                db = cls(path, cls._connect_ro(f"{uri}?immutable=1"), read_only=True)
                db.snapshot = True
                db._conn.execute("PRAGMA user_version").fetchone()
        except sqlite3.DatabaseError as exc:
            raise _unusable(path, exc) from None
        db._opening = False
        return db

    @staticmethod
    def _connect_ro(uri: str) -> sqlite3.Connection:
        conn = sqlite3.connect(
            uri,
            uri=True,
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        return conn

    def user_version(self) -> int:
        """The core schema version recorded in the file (PRAGMA user_version)."""
        return int(self.query("PRAGMA user_version")[0][0])

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
    def transaction(self, *, timeout: float | None = None) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception; nested use joins.

        `timeout` bounds the wait for this process's connection (another thread's
        transaction) and for the write lock (another process's) together: past it,
        StoreBusy, and nothing was done."""
        if self.read_only:
            raise StoreError(self.path, "opened read-only: this command cannot change state")
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._lock.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
            raise StoreBusy(self.path, f"busy: another writer held it for {timeout:g}s")
        try:
            if self._depth:
                self._depth += 1
                try:
                    yield self._conn
                finally:
                    self._depth -= 1
                return
            yield from self._outer(deadline)
        finally:
            self._lock.release()

    def _begin(self, deadline: float | None) -> None:
        """BEGIN IMMEDIATE, waiting for the write lock no later than `deadline`."""
        if deadline is not None:
            left = max(1, int((deadline - time.monotonic()) * 1000))
            self._conn.execute(f"PRAGMA busy_timeout = {left}")
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if self._opening and _is_busy(exc):
                raise  # open() retries
            if deadline is not None and _is_busy(exc):
                raise StoreBusy(
                    self.path, f"busy: another process held the write lock ({one_line(exc)})"
                ) from None
            if _is_read_only(exc):
                why = read_only_reason(self.path) or one_line(exc)
                raise StoreError(self.path, f"is read-only ({why})") from None
            raise StoreError(self.path, f"cannot begin a transaction: {one_line(exc)}") from None
        except sqlite3.DatabaseError as exc:
            raise StoreError(self.path, f"cannot begin a transaction: {one_line(exc)}") from None
        finally:
            if deadline is not None:
                self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")

    def _outer(self, deadline: float | None) -> Iterator[sqlite3.Connection]:
        """The outermost transaction (the connection's lock is held): begin, the body,
        commit; rolled back on any exception."""
        self._begin(deadline)
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
