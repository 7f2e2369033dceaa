"""The store's contract on both backends: the SQLite file and a PostgreSQL database
(a private cluster started by the session fixture)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from loop_dispatch.model import WorkItemRef
from loop_dispatch.pgcluster import Cluster
from loop_dispatch.store import CORE_MIGRATIONS, Store, StoreBusy, StoreError

Opener = Callable[[], Store]


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def target(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, str]:
    """Where one store lives, as the argv/env a child process needs to open it."""
    if backend == "postgresql":
        cluster: Cluster = request.getfixturevalue("pg_cluster")
        return {"url": cluster.create_database(), "password": cluster.password}
    return {"dir": str(tmp_path / "state")}


def _open(target: dict[str, str]) -> Store:
    if "url" in target:
        return Store.open(url=target["url"], password=target["password"])
    return Store.open(target["dir"])


def _tables(store: Store) -> set[str]:
    if store.backend == "postgresql":
        sql = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
    return {r[0] for r in store.query(sql)}


def test_open_creates_the_current_schema_and_reopen_keeps_data(target) -> None:
    with _open(target) as store:
        assert store.schema_version() == len(CORE_MIGRATIONS)
        assert {"sessions", "inbox", "cursors", "meta", "spawn_tokens"} <= _tables(store)
        store.meta.set("k", "v")
    with _open(target) as store:
        assert store.meta.get("k") == "v"
        assert store.schema_version() == len(CORE_MIGRATIONS)


def test_a_newer_core_schema_is_refused_naming_the_store(target) -> None:
    with _open(target) as store:
        newer = len(CORE_MIGRATIONS) + 3
        with store.transaction() as conn:
            conn.execute(
                "UPDATE schema_versions SET version = ? WHERE namespace = 'loop_dispatch'",
                (newer,),
            )
            if store.backend == "sqlite":
                conn.execute(f"PRAGMA user_version = {newer}")
        where = str(store.path)
    with pytest.raises(StoreError) as err:
        _open(target)
    message = str(err.value)
    assert where in message
    assert "newer" in message
    assert "\n" not in message
    assert target.get("password", "\0") not in message


def test_ensure_schema_migrates_forward_once_and_refuses_an_older_caller(target) -> None:
    v1 = [
        "CREATE TABLE cli_items (id INTEGER PRIMARY KEY, title TEXT); CREATE TABLE cli_x (a TEXT)"
    ]
    v2 = [*v1, "ALTER TABLE cli_items ADD COLUMN state TEXT NOT NULL DEFAULT 'open'"]
    with _open(target) as store:
        assert store.ensure_schema("loop_cli", v1) == 1
        assert store.ensure_schema("loop_cli", v1) == 1
        with store.transaction() as conn:
            conn.execute("INSERT INTO cli_items(title) VALUES ('t')")
            conn.execute("INSERT INTO cli_items(title) VALUES ('u')")
    with _open(target) as store:
        assert store.ensure_schema("loop_cli", v2) == 2
        rows = store.query("SELECT id, title, state FROM cli_items ORDER BY id")
        assert [tuple(r) for r in rows] == [(1, "t", "open"), (2, "u", "open")]
        assert rows[0]["title"] == "t"  # rows answer by name on both backends
        with pytest.raises(StoreError, match="loop_cli v2"):
            store.ensure_schema("loop_cli", v1)


def test_a_failed_migration_leaves_the_previous_version(target) -> None:
    with _open(target) as store:
        store.ensure_schema("ns", ["CREATE TABLE ns_a (x TEXT)"])
        with pytest.raises((sqlite3.OperationalError, StoreError)):
            store.ensure_schema(
                "ns", ["CREATE TABLE ns_a (x TEXT)", "CREATE TABLE ns_b (y TEXT); BOGUS SQL"]
            )
        assert store.schema_version("ns") == 1
        assert "ns_b" not in _tables(store)


def test_a_transaction_rolls_back_on_error_and_constraints_hold(target) -> None:
    with _open(target) as store:
        with pytest.raises(RuntimeError), store.transaction() as conn:  # noqa: PT012
            conn.execute("INSERT INTO meta(key, value, updated_at) VALUES ('a', 'b', 'c')")
            raise RuntimeError("boom")
        assert store.meta.get("a") is None
        store.registry.register(
            WorkItemRef.parse("local:p#1"), harness="h", conversation_id="c", cwd="/"
        )
        with pytest.raises(sqlite3.IntegrityError), store.transaction() as conn:
            conn.execute("UPDATE sessions SET status = 'zombie'")
        assert store.registry.get(WorkItemRef.parse("local:p#1")).status == "active"
        # The store is usable after a refused statement.
        store.meta.set("after", "yes")
        assert store.meta.get("after") == "yes"


OPENER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from loop_dispatch.store import Store
    go = Path(sys.argv[1])
    while not go.exists():
        time.sleep(0.001)
    if os.environ.get("T_URL"):
        store = Store.open(url=os.environ["T_URL"], password=os.environ["T_PASSWORD"])
    else:
        store = Store.open(os.environ["T_DIR"])
    store.meta.set("opened-" + sys.argv[2], "yes")
    print("ok", flush=True)
    """
)


def _child_env(target: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env["T_URL"] = target.get("url", "")
    env["T_PASSWORD"] = target.get("password", "")
    env["T_DIR"] = target.get("dir", "")
    return env


def test_processes_opening_one_fresh_store_together_all_succeed(target, tmp_path) -> None:
    """Hosts starting together on a new database migrate it once, none failing."""
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, str(go), str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_child_env(target),
        )
        for n in range(4)
    ]
    time.sleep(0.5)
    go.touch()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert out.strip() == "ok", err
    with _open(target) as store:
        assert len(store.meta.items("opened-")) == 4
        assert store.schema_version() == len(CORE_MIGRATIONS)


WRITER = textwrap.dedent(
    """
    import os, sys
    from loop_dispatch.store import Store
    from loop_dispatch.model import WorkItemRef, Event, EventKind
    from datetime import datetime, timezone
    if os.environ.get("T_URL"):
        store = Store.open(url=os.environ["T_URL"], password=os.environ["T_PASSWORD"])
    else:
        store = Store.open(os.environ["T_DIR"])
    tag = sys.argv[1]
    print("ready", flush=True)
    i = 0
    while True:
        i += 1
        ref = WorkItemRef("local", "crash", i % 50 + 1)
        events = [Event(f"{tag}-e{i}-{k}", ref, EventKind.COMMENT, "a", "b" * 200, "",
                        datetime.now(timezone.utc)) for k in range(20)]
        with store.transaction() as conn:
            store.registry.register(ref, harness="h", conversation_id=f"{tag}-c{i}", cwd="/tmp")
            store.deliveries.keep(f"{tag}-d{i}")
            store.inbox.accept("crash", events, conn=conn)
            store.meta.set("counter", f"{tag}:{i}")
    """
)


def test_a_sigkilled_writer_leaves_every_transaction_whole(target) -> None:
    for round_ in range(4):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, f"r{round_}"],
            stdout=subprocess.PIPE,
            text=True,
            env=_child_env(target),
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.1 + 0.07 * round_)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        proc.stdout.close()
        with _open(target) as store:
            counter = store.meta.get("counter")
            if counter is None:
                continue
            tag, n = counter.split(":")
            record = store.registry.get(WorkItemRef("local", "crash", int(n) % 50 + 1))
            assert record.conversation_id == f"{tag}-c{n}"
            assert store.deliveries.state(f"{tag}-d{n}") == "processed"
            assert store.deliveries.state(f"{tag}-d{int(n) + 1}") is None
            assert store.inbox.by_delivery(f"{tag}-e{n}-19") is not None
            assert store.inbox.by_delivery(f"{tag}-e{int(n) + 1}-0") is None


HOLDER = textwrap.dedent(
    """
    import os, time
    from loop_dispatch.store import Store
    if os.environ.get("T_URL"):
        store = Store.open(url=os.environ["T_URL"], password=os.environ["T_PASSWORD"])
    else:
        store = Store.open(os.environ["T_DIR"])
    with store.transaction() as conn:  # the write lock, held as a stalled writer holds it
        conn.execute("UPDATE meta SET value = 'held' WHERE key = 'k'")
        print("held", flush=True)
        time.sleep(60)
    """
)


def test_readers_never_wait_for_a_writer_and_bounded_writers_give_up(target) -> None:
    """Issue 20, points 12 and 13: another process holds the write lock. A read-only
    store opens and reads at once (SQLite: a read-only connection; PostgreSQL: no
    migration, so no writer lock); a transaction with a timeout gives up within it."""
    with _open(target) as store:
        store.meta.set("k", "v")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True, env=_child_env(target)
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        if "url" in target:
            reader = Store.open(url=target["url"], password=target["password"], read_only=True)
        else:
            reader = Store.open(target["dir"], read_only=True)
        with reader:
            assert reader.read_only
            assert reader.meta.get("k") == "v"  # the committed value, not the held one
            assert reader.registry.list() == []
            with pytest.raises(StoreError, match="read-only"), reader.transaction():
                pass
        assert time.monotonic() - started < 5.0  # no wait for the lock at all
        with _open_unmigrated(target) as writer:
            started = time.monotonic()
            with pytest.raises(StoreBusy), writer.transaction(timeout=1.0):
                pass
            waited = time.monotonic() - started
            assert 0.9 <= waited < 5.0
    finally:
        holder.kill()
        holder.wait()
    with _open(target) as store:  # the holder's transaction never committed
        assert store.meta.get("k") == "v"


def _open_unmigrated(target: dict[str, str]) -> Store:
    """A writable store opened without waiting for the held lock (its schema is current:
    opened as a reader's database, upgraded to writable)."""
    if "url" in target:
        from loop_dispatch.postgres_db import PostgresDatabase

        db = PostgresDatabase.open(target["url"], password=target["password"], migrate=None)
        db.read_only = False
        return Store(db)
    import sqlite3 as _sqlite3

    from loop_dispatch.sqlite_db import SqliteDatabase

    conn = _sqlite3.connect(
        str(Path(target["dir"]) / "state.db"), isolation_level=None, check_same_thread=False
    )
    db = SqliteDatabase(Path(target["dir"]) / "state.db", conn)
    db._opening = False
    return Store(db)


# -- PostgreSQL only: the url, the password, the server going away ----------------------


def test_a_password_in_the_url_is_refused_without_showing_it() -> None:
    with pytest.raises(StoreError) as err:
        Store.open(url="postgresql://loop:s3cr3t-value@db.invalid:5432/loop")
    assert "s3cr3t-value" not in str(err.value)
    assert "store.passwordEnv" in str(err.value)
    with pytest.raises(StoreError) as err:
        Store.open(url="postgresql://loop@db.invalid/loop?password=s3cr3t-value")
    assert "s3cr3t-value" not in str(err.value)


def test_a_url_of_another_kind_is_refused() -> None:
    with pytest.raises(StoreError, match="postgresql://"):
        Store.open(url="mysql://db/loop")


def test_a_wrong_password_is_one_line_naming_the_database(pg_cluster: Cluster) -> None:
    url = pg_cluster.create_database()
    with pytest.raises(StoreError) as err:
        Store.open(url=url, password="not-the-password-4711")
    message = str(err.value)
    assert url in message
    assert "cannot connect" in message
    assert "not-the-password-4711" not in message
    assert "\n" not in message


def test_no_server_is_one_line_naming_the_database() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://loop@127.0.0.1:{port}/loop"
    pytest.importorskip("psycopg")
    with pytest.raises(StoreError) as err:
        Store.open(url=url, password="x")
    assert url in str(err.value)
    assert "\n" not in str(err.value)


def test_a_dropped_connection_is_reconnected_on_the_next_operation(pg_cluster: Cluster) -> None:
    """A server-side disconnect (restart, failover, idle kill) is met by reconnecting:
    reads and new transactions go on, and committed data is there."""
    url = pg_cluster.create_database()
    with Store.open(url=url, password=pg_cluster.password) as store:
        store.meta.set("k", "before")
        admin_kill(url, pg_cluster.password)
        assert store.meta.get("k") == "before"
        admin_kill(url, pg_cluster.password)
        store.meta.set("k", "after")
        assert store.meta.get("k") == "after"


def admin_kill(url: str, password: str) -> None:
    """End the-loop's server connections to this database (as a restart would)."""
    import psycopg

    with psycopg.connect(url, password=password, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = 'the-loop' AND datname = current_database()"
        ).fetchone()
    assert killed is not None
    assert killed[0] >= 1
