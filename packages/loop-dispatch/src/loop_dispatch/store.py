"""The state store: one SQLite file (`state.db`) in the state directory.

WAL so readers (status, `sessions list`) never block the daemon; a busy timeout so
writers in other processes wait rather than fail; every state change is one
transaction, so a process killed at any instant leaves the file consistent. Schemas are
versioned per namespace with forward-only migrations; a file written by a newer schema
is refused rather than misread.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .deliveries import Deliveries
    from .inbox import Inbox
    from .registry import Registry

__all__ = ["CORE_NAMESPACE", "Cursors", "Meta", "Store", "StoreError", "utcnow_iso"]

CORE_NAMESPACE = "loop_dispatch"
BUSY_TIMEOUT_MS = 15_000

# Forward-only migrations of the core namespace; entry i brings the schema to version i+1.
# The core version is also mirrored into PRAGMA user_version so sqlite3 tools can see it.
CORE_MIGRATIONS: list[str] = [
    """
    CREATE TABLE sessions (
        work_item       TEXT PRIMARY KEY,
        slug            TEXT NOT NULL UNIQUE,
        tmux_name       TEXT NOT NULL UNIQUE,
        harness         TEXT NOT NULL,
        conversation_id TEXT,
        cwd             TEXT NOT NULL,
        status          TEXT NOT NULL CHECK (status IN ('active', 'closed')),
        created_at      TEXT NOT NULL,
        updated_at      TEXT NOT NULL
    );
    CREATE TABLE deliveries (
        delivery_id TEXT PRIMARY KEY,
        state       TEXT NOT NULL CHECK (state IN ('claimed', 'processed', 'skipped')),
        updated_at  TEXT NOT NULL
    );
    CREATE TABLE ledger (
        delivery_id     TEXT PRIMARY KEY,
        source          TEXT NOT NULL,
        work_item       TEXT NOT NULL,
        state           TEXT NOT NULL
                        CHECK (state IN ('pending', 'done', 'baseline', 'gave_up')),
        attempts        INTEGER NOT NULL DEFAULT 0,
        event           TEXT,
        last_outcome    TEXT,
        gave_up_version TEXT,
        rearm_count     INTEGER NOT NULL DEFAULT 0,
        first_seen      TEXT NOT NULL,
        last_seen       TEXT NOT NULL
    );
    CREATE INDEX ledger_by_state ON ledger (source, state);
    CREATE TABLE cursors (
        source     TEXT PRIMARY KEY,
        cursor     TEXT,
        updated_at TEXT NOT NULL
    );
    CREATE TABLE meta (
        key        TEXT PRIMARY KEY,
        value      TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    """,
    # v2: the inbox (every accepted event and all retry state, for every ingress) takes
    # over the poll ledger's rows; spawn tokens record the-loop's own tmux sessions.
    # `armed_at` (NULL: received_at) starts the give-up horizon again on a re-arm; a spawn
    # token's `delivery_id` names the event its harness was started with as prompt.
    """
    CREATE TABLE inbox (
        seq              INTEGER PRIMARY KEY AUTOINCREMENT,
        delivery_id      TEXT NOT NULL UNIQUE,
        work_item        TEXT NOT NULL,
        source           TEXT NOT NULL,
        state            TEXT NOT NULL
                         CHECK (state IN ('pending', 'claimed', 'done', 'given_up', 'baseline')),
        event            TEXT,
        attempts         INTEGER NOT NULL DEFAULT 0,
        tries            INTEGER NOT NULL DEFAULT 0,
        due_at           TEXT NOT NULL,
        lease_owner      TEXT,
        lease_until      TEXT,
        outcome          TEXT,
        last_reason      TEXT,
        last_error       TEXT,
        gave_up_versions TEXT,
        rearm_count      INTEGER NOT NULL DEFAULT 0,
        received_at      TEXT NOT NULL,
        armed_at         TEXT,
        settled_at       TEXT,
        updated_at       TEXT NOT NULL
    );
    CREATE INDEX inbox_open ON inbox (work_item, seq) WHERE state IN ('pending', 'claimed');
    CREATE INDEX inbox_due ON inbox (due_at) WHERE state = 'pending';
    CREATE INDEX inbox_given_up ON inbox (seq) WHERE state = 'given_up';
    CREATE INDEX inbox_claimed ON inbox (lease_owner) WHERE state = 'claimed';
    INSERT INTO inbox (delivery_id, work_item, source, state, event, attempts, tries, due_at,
                       outcome, last_reason, gave_up_versions, rearm_count, received_at,
                       settled_at, updated_at)
    SELECT delivery_id, work_item, source,
           CASE state WHEN 'gave_up' THEN 'given_up' ELSE state END,
           CASE WHEN state IN ('pending', 'gave_up') THEN event END,
           attempts, attempts, last_seen,
           CASE state WHEN 'done' THEN last_outcome END,
           last_outcome,
           CASE WHEN state = 'gave_up' AND gave_up_version IS NOT NULL
                THEN '{"loop-cli":"' || replace(gave_up_version, '"', '') || '"}' END,
           rearm_count, first_seen,
           CASE WHEN state IN ('done', 'gave_up') THEN last_seen END,
           last_seen
    FROM ledger ORDER BY rowid;
    DROP TABLE ledger;
    CREATE TABLE spawn_tokens (
        token           TEXT PRIMARY KEY,
        work_item       TEXT NOT NULL,
        conversation_id TEXT,
        harness         TEXT NOT NULL,
        cwd             TEXT NOT NULL,
        delivery_id     TEXT,
        created_at      TEXT NOT NULL
    );
    CREATE INDEX spawn_tokens_by_item ON spawn_tokens (work_item);
    CREATE INDEX spawn_tokens_by_delivery ON spawn_tokens (delivery_id)
        WHERE delivery_id IS NOT NULL;
    """,
]


class StoreError(Exception):
    """The state file cannot be used: corrupt, not SQLite, newer schema, unwritable.

    `str(err)` is one line naming the file and what is wrong.
    """

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"state store {path}: {reason}")
        self.path = path
        self.reason = reason


def utcnow_iso() -> str:
    """Timestamps are stored as ISO-8601 UTC text: sortable and readable by hand."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class Store:
    """An open `state.db`. Safe to share between threads (one connection, one lock)."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        self._lock = threading.RLock()
        self._depth = 0
        self._opening = True

    # -- opening -----------------------------------------------------------------

    @classmethod
    def open(cls, state_dir: str | Path) -> Store:
        """Open (creating if needed) `state_dir/state.db` and bring its schema up to date."""
        state_dir = Path(state_dir).expanduser()
        path = state_dir / "state.db"
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(path, f"cannot create the state directory: {_one_line(exc)}") from None
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
            raise StoreError(path, f"cannot open: {_one_line(exc)}") from None
        store = cls(path, conn)
        # Switching a new file to WAL takes a lock SQLite's busy handler does not wait
        # for, so processes opening one fresh store together retry here, bounded.
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                store._setup()
                store._opening = False
                return store
            except sqlite3.OperationalError as exc:
                if _is_busy(exc) and time.monotonic() < deadline:
                    time.sleep(0.02)
                    continue
                conn.close()
                if _is_busy(exc):
                    raise StoreError(path, f"stayed locked by another process ({exc})") from None
                raise StoreError(path, f"not a usable SQLite database ({_one_line(exc)})") from None
            except sqlite3.DatabaseError as exc:
                conn.close()
                raise StoreError(path, f"not a usable SQLite database ({_one_line(exc)})") from None
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
        self._migrate_core()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions --------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One state change: BEGIN IMMEDIATE ... COMMIT, rolled back on any exception.

        Nested use joins the outer transaction, so helpers compose into one change.
        """
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
                    raise  # Store.open retries
                raise StoreError(
                    self.path, f"cannot begin a transaction: {_one_line(exc)}"
                ) from None
            except sqlite3.DatabaseError as exc:
                raise StoreError(
                    self.path, f"cannot begin a transaction: {_one_line(exc)}"
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
                raise StoreError(self.path, f"cannot write: {_one_line(exc)}") from None
            except BaseException:
                self._depth = 0
                self._conn.execute("ROLLBACK")
                raise
            self._depth = 0
            try:
                self._conn.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                self._conn.execute("ROLLBACK")
                raise StoreError(self.path, f"cannot commit: {_one_line(exc)}") from None

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """A read (its own snapshot under WAL; never waits for a writer)."""
        with self._lock:
            try:
                cur = self._conn.execute(sql, params)
                cur.row_factory = sqlite3.Row
                return cur.fetchall()
            except sqlite3.DatabaseError as exc:  # a damaged page, a vanished file, ...
                raise StoreError(self.path, f"cannot read: {_one_line(exc)}") from None

    # -- schemas -------------------------------------------------------------------

    def _migrate_core(self) -> None:
        with self.transaction() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            known = len(CORE_MIGRATIONS)
            if version > known:
                raise StoreError(
                    self.path,
                    f"written by a newer the-loop (schema {CORE_NAMESPACE} v{version}, this "
                    f"loop-dispatch knows up to v{known}); upgrade the-loop or use another "
                    "state directory",
                )
            if version == 0:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_versions ("
                    "namespace TEXT PRIMARY KEY, version INTEGER NOT NULL)"
                )
            for target in range(version + 1, known + 1):
                _run_script(conn, CORE_MIGRATIONS[target - 1])
                conn.execute(f"PRAGMA user_version = {target}")
            conn.execute(
                "INSERT INTO schema_versions(namespace, version) VALUES (?, ?) "
                "ON CONFLICT(namespace) DO UPDATE SET version = excluded.version",
                (CORE_NAMESPACE, known),
            )

    def schema_version(self, namespace: str = CORE_NAMESPACE) -> int:
        rows = self.query("SELECT version FROM schema_versions WHERE namespace = ?", (namespace,))
        return int(rows[0][0]) if rows else 0

    def ensure_schema(self, namespace: str, migrations: list[str]) -> int:
        """Bring another package's tables (its own `namespace`) up to `len(migrations)`.

        Each entry is SQL (one or more statements) run in one transaction with the
        version bump, so a crash mid-migration leaves the previous version intact.
        Refuses a namespace written by a newer version. Returns the version now in force.
        """
        if namespace == CORE_NAMESPACE:
            raise ValueError(f"namespace {CORE_NAMESPACE!r} is reserved")
        with self.transaction() as conn:
            row = conn.execute(
                "SELECT version FROM schema_versions WHERE namespace = ?", (namespace,)
            ).fetchone()
            version = int(row[0]) if row else 0
            known = len(migrations)
            if version > known:
                raise StoreError(
                    self.path,
                    f"written by a newer the-loop (schema {namespace} v{version}, this "
                    f"version knows up to v{known}); upgrade the-loop or use another "
                    "state directory",
                )
            for target in range(version + 1, known + 1):
                _run_script(conn, migrations[target - 1])
            if known != version or row is None:
                conn.execute(
                    "INSERT INTO schema_versions(namespace, version) VALUES (?, ?) "
                    "ON CONFLICT(namespace) DO UPDATE SET version = excluded.version",
                    (namespace, known),
                )
            return known

    # -- views ---------------------------------------------------------------------

    @property
    def registry(self) -> Registry:
        from .registry import Registry

        return Registry(self)

    @property
    def deliveries(self) -> Deliveries:
        from .deliveries import Deliveries

        return Deliveries(self)

    @property
    def inbox(self) -> Inbox:
        from .inbox import Inbox

        return Inbox(self)

    @property
    def cursors(self) -> Cursors:
        return Cursors(self)

    @property
    def meta(self) -> Meta:
        return Meta(self)


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    """Run several statements inside the current transaction.

    `executescript` would COMMIT first, breaking the one-transaction migration, so the
    script is split with sqlite3.complete_statement instead.
    """
    buf = ""
    for piece in script.split(";"):
        buf += piece + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \t\r\n;"):
                conn.execute(buf)
            buf = ""
    if buf.strip(" \t\r\n;"):
        conn.execute(buf)


# (source, cursor, updated_at); also run by a poll cycle inside its inbox transaction.
UPSERT_CURSOR = (
    "INSERT INTO cursors(source, cursor, updated_at) VALUES (?, ?, ?) "
    "ON CONFLICT(source) DO UPDATE SET cursor = excluded.cursor, updated_at = excluded.updated_at"
)


class Cursors:
    """Where each source's next poll starts."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def get(self, source: str) -> str | None:
        rows = self._store.query("SELECT cursor FROM cursors WHERE source = ?", (source,))
        return rows[0][0] if rows else None

    def set(self, source: str, cursor: str | None) -> None:
        with self._store.transaction() as conn:
            conn.execute(UPSERT_CURSOR, (source, cursor, utcnow_iso()))


class Meta:
    """Small key/value rows (heartbeats and the like); values are plain text."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def get(self, key: str) -> str | None:
        rows = self._store.query("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def set(self, key: str, value: str) -> None:
        with self._store.transaction() as conn:
            conn.execute(
                "INSERT INTO meta(key, value, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value, "
                "updated_at = excluded.updated_at",
                (key, value, utcnow_iso()),
            )

    def items(self, prefix: str = "") -> dict[str, str]:
        rows = self._store.query(
            "SELECT key, value FROM meta WHERE substr(key, 1, ?) = ? ORDER BY key",
            (len(prefix), prefix),
        )
        return {r[0]: r[1] for r in rows}

    def delete(self, key: str) -> bool:
        with self._store.transaction() as conn:
            return conn.execute("DELETE FROM meta WHERE key = ?", (key,)).rowcount > 0
