"""Copy a whole store into another (SQLite state directory -> shared PostgreSQL).

The target is brought to the same schema versions first (the same migrations, so the
same tables), then every table's rows are copied in one transaction, keeping their
keys (`seq` of the inbox, of tracker activity) so arrival order and references hold;
identity sequences are moved past the copied keys. The target must hold no rows yet:
merging two histories is refused, never guessed.

`copy_store` runs inside one write transaction of the source as well (on SQLite, its
write lock), so nothing is accepted into the source between the copy and its check:
a receiver still running meanwhile cannot commit (it answers 503 and the sender
redelivers), and `verify_copy` then finds every row of the source in the target.
A database that holds another application's tables is refused before anything is
created in it (`foreign_tables`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .errors import StoreError
from .postgres_db import PostgresDatabase
from .store import CORE_NAMESPACE, Store

__all__ = ["copy_store", "foreign_tables", "verify_copy"]

_SKIP = {"schema_versions", "sqlite_sequence"}


def _tables(store: Store) -> list[str]:
    if store.backend == "postgresql":
        sql = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1"
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY 1"
    return [r[0] for r in store.query(sql) if r[0] not in _SKIP]


def _columns(store: Store, table: str) -> list[str]:
    if store.backend == "postgresql":
        rows = store.query(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
            "AND table_schema = current_schema() ORDER BY ordinal_position",
            (table,),
        )
        return [r[0] for r in rows]
    return [r[1] for r in store.query(f'PRAGMA table_info("{table}")')]


def copy_store(
    source: Store, target: Store, namespaces: Mapping[str, Sequence[str]] | None = None
) -> dict[str, int]:
    """Copy every row of `source` into the empty `target`; returns rows per table.

    `namespaces`: the migrations of the other packages' namespaces (name -> scripts),
    applied to the target before the copy. A namespace in the source that is not given
    is refused (its tables could not be created the same way). The source's write
    transaction is held from the first read to the check after the target's commit;
    raises StoreError when the check finds anything of the source missing.
    """
    with source.transaction():
        copied = _copy(source, target, namespaces)
        problems = verify_copy(source, target)
    if problems:
        raise StoreError(target.path, "the copy is incomplete: " + "; ".join(problems))
    return copied


def _copy(
    source: Store, target: Store, namespaces: Mapping[str, Sequence[str]] | None
) -> dict[str, int]:
    given = dict(namespaces or {})
    for row in source.query("SELECT namespace, version FROM schema_versions"):
        name, version = row[0], int(row[1])
        if name == CORE_NAMESPACE:
            continue
        if name not in given:
            raise StoreError(source.path, f"namespace {name} has no known migrations to copy")
        if version > len(given[name]):
            raise StoreError(source.path, f"namespace {name} v{version} is newer than this tool")
        target.ensure_schema(name, list(given[name])[:version])
    tables = _tables(source)
    present = set(_tables(target))
    missing = [t for t in tables if t not in present]
    if missing:
        raise StoreError(target.path, f"has no table {missing[0]} to copy into")
    copied: dict[str, int] = {}
    with target.transaction() as conn:
        for table in tables:
            if conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]:  # noqa: S608
                raise StoreError(
                    target.path,
                    f"table {table} already holds rows; migrate only into a new database",
                )
        for table in tables:
            columns = [c for c in _columns(source, table) if c in set(_columns(target, table))]
            names = ", ".join(f'"{c}"' for c in columns)
            rows = source.query(f'SELECT {names} FROM "{table}"')  # noqa: S608
            marks = ", ".join("?" * len(columns))
            conn.executemany(
                f'INSERT INTO "{table}" ({names}) VALUES ({marks})',  # noqa: S608
                [tuple(r) for r in rows],
            )
            copied[table] = len(rows)
        if target.backend == "postgresql":
            _advance_identities(conn, tables)
    return copied


def _advance_identities(conn: object, tables: list[str]) -> None:
    """Identity columns continue after the copied keys."""
    for table in tables:
        rows = conn.execute(  # type: ignore[attr-defined]
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
            "AND table_schema = current_schema() AND is_identity = 'YES'",
            (table,),
        ).fetchall()
        for (column,) in rows:
            nxt = f'(SELECT COALESCE(max("{column}"), 0) + 1 FROM "{table}")'  # noqa: S608
            conn.execute(  # type: ignore[attr-defined]
                f"SELECT setval(pg_get_serial_sequence(?, ?), {nxt}, false)", (table, column)
            )


def foreign_tables(url: str, password: str | None) -> list[str]:
    """The tables of the database at `url` when they are not the-loop's (it has tables
    but no `schema_versions`): another application's, never to be written into.
    Nothing is created there to find out. Raises StoreError when it cannot connect."""
    db = PostgresDatabase.open(url, password=password, migrate=lambda _db: None)
    try:
        tables = [
            r[0]
            for r in db.query(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1"
            )
        ]
    finally:
        db.close()
    return [] if not tables or "schema_versions" in tables else tables


def verify_copy(source: Store, target: Store) -> list[str]:
    """What of the source the target lacks (one line per table): every table's row
    count, and every inbox row by its key and delivery id. [] when the copy is whole."""
    problems = []
    target_tables = set(_tables(target))
    for table in _tables(source):
        if table not in target_tables:
            problems.append(f"table {table} is missing from the target")
            continue
        count = f'SELECT count(*) FROM "{table}"'  # noqa: S608 (a table name we listed)
        have, want = target.query(count)[0][0], source.query(count)[0][0]
        if int(have) != int(want):
            problems.append(f"table {table}: {want} row(s) in the source, {have} in the target")
    if "inbox" in target_tables:
        sql = "SELECT seq, delivery_id FROM inbox"
        missing = {tuple(r) for r in source.query(sql)} - {tuple(r) for r in target.query(sql)}
        if missing:
            problems.append(f"inbox: {len(missing)} accepted event(s) are not in the target")
    return problems
