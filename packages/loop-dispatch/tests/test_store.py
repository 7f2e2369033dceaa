"""The state store: WAL, versioned schemas, refusal of newer/corrupt files, crash safety."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from loop_dispatch.model import WorkItemRef
from loop_dispatch.store import CORE_MIGRATIONS, Store, StoreError


def test_open_creates_a_wal_store_with_the_current_schema(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "deep" / "state")
    assert store.path == tmp_path / "deep" / "state" / "state.db"
    assert store.query("PRAGMA journal_mode")[0][0] == "wal"
    assert store.query("PRAGMA user_version")[0][0] == len(CORE_MIGRATIONS)
    assert store.schema_version() == len(CORE_MIGRATIONS)
    assert int(store.query("PRAGMA busy_timeout")[0][0]) >= 1000
    store.close()


def test_reopen_keeps_data_and_does_not_remigrate(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        store.meta.set("k", "v")
    with Store.open(tmp_path) as store:
        assert store.meta.get("k") == "v"
        assert store.schema_version() == len(CORE_MIGRATIONS)


def test_newer_core_schema_is_refused_naming_the_file(tmp_path: Path) -> None:
    Store.open(tmp_path).close()
    conn = sqlite3.connect(tmp_path / "state.db")
    conn.execute(f"PRAGMA user_version = {len(CORE_MIGRATIONS) + 3}")
    conn.close()
    with pytest.raises(StoreError) as err:
        Store.open(tmp_path)
    message = str(err.value)
    assert str(tmp_path / "state.db") in message
    assert "newer" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "content", [b"this is not sqlite at all\n" * 200, b"SQLite format 3\x00" + b"\xff" * 5000]
)
def test_corrupt_file_is_a_store_error_naming_the_path(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "state.db").write_bytes(content)
    with pytest.raises(StoreError) as err:
        Store.open(tmp_path)
    assert str(tmp_path / "state.db") in str(err.value)


def test_state_db_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "state.db").mkdir()
    with pytest.raises(StoreError, match="directory"):
        Store.open(tmp_path)


def test_ensure_schema_migrates_forward_once_per_namespace(tmp_path: Path) -> None:
    v1 = ["CREATE TABLE cli_items (id INTEGER PRIMARY KEY, title TEXT); CREATE TABLE cli_x (a)"]
    v2 = [*v1, "ALTER TABLE cli_items ADD COLUMN state TEXT NOT NULL DEFAULT 'open'"]
    with Store.open(tmp_path) as store:
        assert store.ensure_schema("loop_cli", v1) == 1
        assert store.ensure_schema("loop_cli", v1) == 1  # idempotent
        with store.transaction() as conn:
            conn.execute("INSERT INTO cli_items(title) VALUES ('t')")
    with Store.open(tmp_path) as store:
        assert store.ensure_schema("loop_cli", v2) == 2
        assert store.query("SELECT title, state FROM cli_items")[0][:] == ("t", "open")
        # An older caller meets the newer namespace: refused, not misread.
        with pytest.raises(StoreError, match="loop_cli v2"):
            store.ensure_schema("loop_cli", v1)
        with pytest.raises(ValueError, match="reserved"):
            store.ensure_schema("loop_dispatch", v1)


def test_failed_migration_leaves_previous_version(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        store.ensure_schema("ns", ["CREATE TABLE ns_a (x)"])
        with pytest.raises(sqlite3.OperationalError):
            store.ensure_schema("ns", ["CREATE TABLE ns_a (x)", "CREATE TABLE ns_b (y); BOGUS SQL"])
        assert store.schema_version("ns") == 1
        assert not store.query("SELECT name FROM sqlite_master WHERE name = 'ns_b'")


def test_transaction_rolls_back_on_error(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        with pytest.raises(RuntimeError), store.transaction() as conn:  # noqa: PT012
            conn.execute("INSERT INTO meta(key, value, updated_at) VALUES ('a', 'b', 'c')")
            raise RuntimeError("boom")
        assert store.meta.get("a") is None


def test_an_open_reader_never_blocks_the_writer(tmp_path: Path) -> None:
    """`status` holding a read snapshot must not stall the daemon's commit (WAL). With a
    rollback journal the commit would wait for the reader's SHARED lock, then fail."""
    with Store.open(tmp_path) as writer:
        writer.meta.set("k", "old")
        reader = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
        try:
            reader.execute("BEGIN")
            assert reader.execute("SELECT value FROM meta WHERE key = 'k'").fetchone() == ("old",)
            writer.database._conn.execute("PRAGMA busy_timeout = 200")  # fail fast if it would wait
            writer.meta.set("k", "new")  # commits while the read transaction is open
            assert reader.execute("SELECT value FROM meta WHERE key = 'k'").fetchone() == ("old",)
            reader.execute("COMMIT")
            assert reader.execute("SELECT value FROM meta WHERE key = 'k'").fetchone() == ("new",)
        finally:
            reader.close()


WRITER = textwrap.dedent(
    """
    import sys
    from loop_dispatch.store import Store
    from loop_dispatch.model import WorkItemRef, Event, EventKind
    from datetime import datetime, timezone
    store, tag = Store.open(sys.argv[1]), sys.argv[2]
    print("ready", flush=True)
    i = 0
    while True:
        i += 1
        ref = WorkItemRef("local", "crash", i % 50 + 1)
        with store.transaction():
            store.registry.register(ref, harness="h", conversation_id=f"{tag}-c{i}", cwd="/tmp")
            store.deliveries.keep(f"{tag}-d{i}")
            store.meta.set("counter", f"{tag}:{i}")
        events = [Event(f"{tag}-e{i}-{k}", ref, EventKind.COMMENT, "a", "b" * 200, "",
                        datetime.now(timezone.utc)) for k in range(20)]
        store.ledger.record("crash", events, cursor=f"{tag}:{i}")
    """
)


def test_sigkilled_writer_always_leaves_a_consistent_store(tmp_path: Path) -> None:
    """Kill a busy writer with SIGKILL at varied instants; every reopen is consistent."""
    state = tmp_path / "state"
    for round_ in range(8):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(state), f"r{round_}"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.05 + 0.04 * round_)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        proc.stdout.close()
        with Store.open(state) as store:
            assert store.query("PRAGMA integrity_check")[0][0] == "ok"
            counter = store.meta.get("counter")
            # The three writes of one transaction are all there or none are.
            if counter is not None:
                tag, n = counter.split(":")
                record = store.registry.get(WorkItemRef("local", "crash", int(n) % 50 + 1))
                assert record.conversation_id == f"{tag}-c{n}"
                assert store.deliveries.state(f"{tag}-d{n}") == "processed"
                assert store.deliveries.state(f"{tag}-d{int(n) + 1}") is None
            # A ledger batch and its cursor land together.
            cursor = store.cursors.get("crash")
            if cursor is not None:
                tag, n = cursor.split(":")
                assert store.ledger.get(f"{tag}-e{n}-19") is not None
                assert store.ledger.get(f"{tag}-e{int(n) + 1}-0") is None


OPENER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from loop_dispatch.store import Store
    go = Path(sys.argv[2])
    while not go.exists():
        time.sleep(0.001)
    store = Store.open(sys.argv[1])
    store.meta.set("opened-" + sys.argv[3], "yes")
    print("ok", flush=True)
    """
)


def test_processes_opening_one_fresh_store_together_all_succeed(tmp_path: Path) -> None:
    """A fresh file's switch to WAL is not covered by the busy timeout: open retries."""
    for round_ in range(3):
        state, go = tmp_path / f"s{round_}", tmp_path / f"go{round_}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", OPENER, str(state), str(go), str(n)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(4)
        ]
        time.sleep(0.5)
        go.touch()
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert out.strip() == "ok", err
        with Store.open(state) as store:
            assert len(store.meta.items("opened-")) == 4


def _store_with_a_damaged_data_page(tmp_path: Path) -> Path:
    """A store that opens (schema pages intact) but whose session rows are garbage."""
    with Store.open(tmp_path / "st") as store:
        for n in range(1, 300):
            store.registry.register(
                WorkItemRef.parse(f"local:p#{n}"), harness="h" * 200, conversation_id="c", cwd="/"
            )
    path = tmp_path / "st" / "state.db"
    with path.open("r+b") as f:
        f.seek(path.stat().st_size // 2)
        f.write(b"\xff" * 4096)
    return path


def test_a_damaged_page_found_by_a_read_is_a_store_error_naming_the_file(tmp_path: Path) -> None:
    path = _store_with_a_damaged_data_page(tmp_path)
    with Store.open(tmp_path / "st") as store:
        with pytest.raises(StoreError, match=str(path)) as err:
            store.registry.list()
        assert "\n" not in str(err.value)
        with pytest.raises(StoreError, match=str(path)), store.transaction() as conn:
            conn.execute("DELETE FROM sessions")
