"""The state store: versioned schemas and the views (inbox, registry, cursors, meta).

Two backends (`database.py`): the default, one SQLite file (`state.db`) in the state
directory; or a shared PostgreSQL database named by `store.url` (a fleet over several
hosts). Every state change is one transaction, so a process killed at any instant
leaves the store consistent. Schemas are versioned per namespace with forward-only
migrations, the same text on both backends; a store written by a newer schema is
refused rather than misread.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import StoreBusy, StoreError
from .sqlite_db import BUSY_TIMEOUT_MS
from .sqlite_db import run_script as _run_script  # noqa: F401 (kept importable here)
from .tables import utcnow_iso

if TYPE_CHECKING:
    from .controls import Controls
    from .database import Connection, Database
    from .deliveries import Deliveries
    from .inbox import Inbox
    from .registry import Registry

__all__ = [
    "BUSY_TIMEOUT_MS",
    "CORE_NAMESPACE",
    "Cursors",
    "Meta",
    "Store",
    "StoreBusy",
    "StoreError",
    "is_postgresql_url",
    "utcnow_iso",
]

CORE_NAMESPACE = "loop_dispatch"

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
        created_at      TEXT NOT NULL
    );
    CREATE INDEX spawn_tokens_by_item ON spawn_tokens (work_item);
    """,
    # v3: `armed_at` (NULL: received_at) starts the give-up horizon again on a re-arm; a
    # spawn token's `delivery_id` names the event its harness was started with as prompt
    # (so a retry of that event never pastes it into the harness holding it already).
    """
    ALTER TABLE inbox ADD COLUMN armed_at TEXT;
    ALTER TABLE spawn_tokens ADD COLUMN delivery_id TEXT;
    CREATE INDEX spawn_tokens_by_delivery ON spawn_tokens (delivery_id)
        WHERE delivery_id IS NOT NULL;
    """,
    # v4: GitHub refs are canonical lower case (issue 10). Case variants of one item or
    # one delivery (a poller that used the configured spelling, a webhook GitHub's) are
    # merged: the row that got furthest is kept. Stored slugs and tmux names are kept
    # (never re-derived), so a running session keeps its name. Plain SQL that SQLite and
    # PostgreSQL both run; a stored event's own copy of its delivery id is matched
    # case-insensitively when read (inbox._event).
    """
    DELETE FROM sessions WHERE work_item LIKE 'github:%' AND EXISTS (
        SELECT 1 FROM sessions o
        WHERE lower(o.work_item) = lower(sessions.work_item)
          AND o.work_item <> sessions.work_item
          AND ((o.status = 'active') > (sessions.status = 'active')
               OR ((o.status = 'active') = (sessions.status = 'active')
                   AND (o.updated_at > sessions.updated_at
                        OR (o.updated_at = sessions.updated_at
                            AND o.work_item > sessions.work_item)))));
    UPDATE sessions SET work_item = lower(work_item) WHERE work_item LIKE 'github:%';
    DELETE FROM deliveries WHERE EXISTS (
        SELECT 1 FROM deliveries o
        WHERE {canon_o} = {canon_d} AND o.delivery_id <> deliveries.delivery_id
          AND ({rank_o_deliveries} > {rank_d_deliveries}
               OR ({rank_o_deliveries} = {rank_d_deliveries}
                   AND o.delivery_id < deliveries.delivery_id)));
    UPDATE deliveries SET delivery_id = {canon_plain} WHERE delivery_id <> {canon_plain};
    DELETE FROM inbox WHERE EXISTS (
        SELECT 1 FROM inbox o
        WHERE {canon_o} = {canon_i} AND o.seq <> inbox.seq
          AND ({rank_o_inbox} > {rank_i_inbox}
               OR ({rank_o_inbox} = {rank_i_inbox} AND o.seq < inbox.seq)));
    UPDATE inbox SET delivery_id = {canon_plain} WHERE delivery_id <> {canon_plain};
    UPDATE inbox SET work_item = lower(work_item) WHERE work_item LIKE 'github:%';
    UPDATE spawn_tokens SET work_item = lower(work_item) WHERE work_item LIKE 'github:%';
    """,
    # v5: `started_at`, when the session's harness was last started (spawn, respawn,
    # rotation relaunch), shown by `sessions list` (issue 22); rows begin at created_at.
    """
    ALTER TABLE sessions ADD COLUMN started_at TEXT;
    UPDATE sessions SET started_at = created_at;
    """,
    # v6: a session's status may be `hibernated` (issue 25: its harness ended while idle,
    # its next event resumes it). A CHECK cannot be altered on SQLite: the table is
    # rebuilt, rows copied as they are (the same text on both backends).
    """
    CREATE TABLE sessions_v6 (
        work_item       TEXT PRIMARY KEY,
        slug            TEXT NOT NULL UNIQUE,
        tmux_name       TEXT NOT NULL UNIQUE,
        harness         TEXT NOT NULL,
        conversation_id TEXT,
        cwd             TEXT NOT NULL,
        status          TEXT NOT NULL CHECK (status IN ('active', 'hibernated', 'closed')),
        created_at      TEXT NOT NULL,
        updated_at      TEXT NOT NULL,
        started_at      TEXT
    );
    INSERT INTO sessions_v6 (work_item, slug, tmux_name, harness, conversation_id, cwd,
        status, created_at, updated_at, started_at)
    SELECT work_item, slug, tmux_name, harness, conversation_id, cwd, status, created_at,
        updated_at, started_at FROM sessions;
    DROP TABLE sessions;
    ALTER TABLE sessions_v6 RENAME TO sessions;
    """,
    # v7: control words (issue 24). An item's hold (`paused`, `stopped`) in `controls`;
    # an event that arrived under it waits in the inbox with `held_at` set (shown as
    # state `paused`), out of the item's queue, until `resume` or `start` releases it.
    """
    ALTER TABLE inbox ADD COLUMN held_at TEXT;
    CREATE TABLE controls (
        work_item  TEXT PRIMARY KEY,
        hold       TEXT NOT NULL CHECK (hold IN ('paused', 'stopped')),
        actor      TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    """,
]


def _canonical_id(col: str) -> str:
    """SQL (SQLite and PostgreSQL): a GitHub delivery id with OWNER/REPO lower-cased.
    Every part of a GitHub id is lower case but a closing's stamp (`...#N:20260101T
    000000Z`, 16 characters at the end), which is upper-cased back."""
    closing = f"({col} LIKE 'closed:github:%' OR {col} LIKE 'pr-closed:github:%')"
    return (
        f"(CASE WHEN {col} NOT LIKE '%:github:%' THEN {col} "
        f"WHEN {closing} AND {col} NOT LIKE '%:unknown' "
        f"THEN lower(substr({col}, 1, length({col}) - 16)) "
        f"|| upper(substr({col}, length({col}) - 15)) "
        f"ELSE lower({col}) END)"
    )


def _rank(table: str, order: tuple[str, ...]) -> str:
    """SQL: how far a row got (the later in `order`, the further), for merging."""
    whens = " ".join(f"WHEN '{state}' THEN {i + 1}" for i, state in enumerate(order))
    return f"(CASE {table}.state {whens} ELSE 0 END)"


_DELIVERY_ORDER = ("claimed", "skipped", "processed")
_INBOX_ORDER = ("pending", "claimed", "given_up", "baseline", "done")
CORE_MIGRATIONS[3] = CORE_MIGRATIONS[3].format(
    canon_o=_canonical_id("o.delivery_id"),
    canon_d=_canonical_id("deliveries.delivery_id"),
    canon_i=_canonical_id("inbox.delivery_id"),
    canon_plain=_canonical_id("delivery_id"),
    rank_o_deliveries=_rank("o", _DELIVERY_ORDER),
    rank_d_deliveries=_rank("deliveries", _DELIVERY_ORDER),
    rank_o_inbox=_rank("o", _INBOX_ORDER),
    rank_i_inbox=_rank("inbox", _INBOX_ORDER),
)


def is_postgresql_url(url: str | None) -> bool:
    """Whether `store.url` names a PostgreSQL database (absent: the SQLite file)."""
    return bool(url) and str(url).split("://", 1)[0] in ("postgresql", "postgres")


class Store:
    """An open state store on one backend (SQLite file or PostgreSQL database).

    Safe to share between threads. Every operation is written once, against the
    `Database` protocol; the backend decides how transactions are serialized.
    """

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- opening -----------------------------------------------------------------

    @classmethod
    def open(
        cls,
        state_dir: str | Path | None = None,
        *,
        url: str | None = None,
        password: str | None = None,
        read_only: bool = False,
    ) -> Store:
        """Open the store and bring its schema up to date.

        Without `url`: `state_dir/state.db` (created if needed). With a
        `postgresql://` url: that shared database (`password`, when given, comes from
        the environment variable the config names; it is never part of the url).

        `read_only`: a reader (status, listings). It never migrates, never takes the
        write lock (another process holding it for a minute does not hold it up), and
        works on a file this user may not write; a transaction through it is refused.
        A store whose schema is older than this code is opened for writing once, to
        migrate it, when this user may.
        """
        if is_postgresql_url(url):
            from .postgres_db import PostgresDatabase

            if read_only:
                reader = cls(PostgresDatabase.open(str(url), password=password, migrate=None))
                if reader._current():
                    return reader
                reader.close()
            db: Database = PostgresDatabase.open(str(url), password=password, migrate=_migrate)
            return cls(db)
        if url:
            raise StoreError(str(url), "store.url must be a postgresql:// URL (or absent)")
        if state_dir is None:
            raise ValueError("a state directory or a store url is needed")
        from .sqlite_db import SqliteDatabase

        if read_only:
            reader = cls(SqliteDatabase.open_reader(state_dir))
            if reader._current():
                return reader
            reader.close()
        return cls(SqliteDatabase.open(state_dir, migrate=_migrate))

    def _current(self) -> bool:
        """Whether the core schema is the one this code reads (a newer one is refused
        here, as the migrating open refuses it)."""
        try:
            rows = self.query(
                "SELECT version FROM schema_versions WHERE namespace = ?", (CORE_NAMESPACE,)
            )
        except StoreError:
            return False  # no schema table yet: a new store
        version = int(rows[0][0]) if rows else 0
        known = len(CORE_MIGRATIONS)
        if version > known:
            raise StoreError(
                self._db.location,
                f"written by a newer the-loop (schema {CORE_NAMESPACE} v{version}, this "
                f"loop-dispatch knows up to v{known}); upgrade the-loop or use another "
                "state directory",
            )
        return version == known

    @property
    def read_only(self) -> bool:
        """Opened for reading only (`Store.open(read_only=True)`)."""
        return self._db.read_only

    @property
    def snapshot(self) -> bool:
        """Read as an immutable file: no -shm could be read or made (read-only folder)."""
        return self._db.snapshot

    @property
    def backend(self) -> str:
        """ "sqlite" or "postgresql"."""
        return self._db.kind

    @property
    def path(self) -> Path | str:
        """The SQLite file, or the PostgreSQL URL without its password."""
        return self._db.location

    @property
    def database(self) -> Database:
        return self._db

    def role_lock(self, role: str) -> Any:
        """A cluster role (`"poller"`) one process of the fleet holds at a time. On the
        SQLite file there is one host, so the role is always this process's (the
        poller's own state-dir lock keeps a second daemon out)."""
        if self._db.kind == "postgresql":
            from .postgres_db import PostgresDatabase, RoleLock

            assert isinstance(self._db, PostgresDatabase)
            return RoleLock(self._db, role)
        return _LocalRole()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions --------------------------------------------------------------

    def transaction(self, *, timeout: float | None = None) -> AbstractContextManager[Connection]:
        """One state change, rolled back on any exception.

        Nested use joins the outer transaction, so helpers compose into one change.
        `timeout`: give up (StoreBusy, nothing done) when the write lock is not had
        within it; the webhook receiver answers 503 then, well within GitHub's 10 s.
        """
        return self._db.transaction(timeout=timeout)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """A read (its own snapshot; never waits for a writer)."""
        return self._db.query(sql, params)

    # -- schemas -------------------------------------------------------------------

    def schema_version_if_any(self, namespace: str) -> int:
        """The namespace's recorded version; 0 when it has none or no table records any."""
        try:
            return self.schema_version(namespace)
        except StoreError:
            return 0

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
        if self.read_only:  # a reader never writes: the version in force, tables as found
            version = self.schema_version_if_any(namespace)
            if version > len(migrations):
                raise StoreError(
                    self._db.location,
                    f"written by a newer the-loop (schema {namespace} v{version}, this "
                    f"version knows up to v{len(migrations)}); upgrade the-loop",
                )
            return version
        with self.transaction() as conn:
            row = conn.execute(
                "SELECT version FROM schema_versions WHERE namespace = ?", (namespace,)
            ).fetchone()
            version = int(row[0]) if row else 0
            known = len(migrations)
            if version > known:
                raise StoreError(
                    self._db.location,
                    f"written by a newer the-loop (schema {namespace} v{version}, this "
                    f"version knows up to v{known}); upgrade the-loop or use another "
                    "state directory",
                )
            for target in range(version + 1, known + 1):
                self._db.run_script(conn, migrations[target - 1])
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
    def controls(self) -> Controls:
        from .controls import Controls

        return Controls(self)

    @property
    def cursors(self) -> Cursors:
        return Cursors(self)

    @property
    def meta(self) -> Meta:
        return Meta(self)


def _migrate(db: Database) -> None:
    """Bring the core namespace up to date, in one transaction (refusing a newer one)."""
    with db.transaction() as conn:
        version = db.core_version(conn)
        known = len(CORE_MIGRATIONS)
        if version > known:
            raise StoreError(
                db.location,
                f"written by a newer the-loop (schema {CORE_NAMESPACE} v{version}, this "
                f"loop-dispatch knows up to v{known}); upgrade the-loop or use another "
                "state directory",
            )
        for target in range(version + 1, known + 1):
            db.run_script(conn, CORE_MIGRATIONS[target - 1])
            db.set_core_version(conn, target)
        conn.execute(
            "INSERT INTO schema_versions(namespace, version) VALUES (?, ?) "
            "ON CONFLICT(namespace) DO UPDATE SET version = excluded.version",
            (CORE_NAMESPACE, known),
        )


# (source, cursor, updated_at); also run by a poll cycle inside its inbox transaction.
UPSERT_CURSOR = (
    "INSERT INTO cursors(source, cursor, updated_at) VALUES (?, ?, ?) "
    "ON CONFLICT(source) DO UPDATE SET cursor = excluded.cursor, updated_at = excluded.updated_at"
)


class _LocalRole:
    """The role on a single-host store: always held."""

    def try_hold(self) -> bool:
        return True

    def release(self) -> None:
        """Nothing to release."""


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
