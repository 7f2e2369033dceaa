"""Readers never need the write lock (issue 20, point 12).

`status`, `sessions list` and `inbox list` open the SQLite state read-only: another
process holding the write lock (a real one, `BEGIN IMMEDIATE` in a child process) does
not hold them up, and a state file this user may not write is read, and said to be
read-only, instead of being called "not a usable SQLite database". A command that must
write says "read-only" in one line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from other_user import nobody_prefix

HOLD_WRITE_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


@pytest.fixture
def held(isolated: Path) -> Iterator[object]:
    """Start a process holding `state.db`'s write lock; killed at teardown."""
    procs: list[subprocess.Popen[str]] = []

    def hold(db: Path, seconds: float = 60.0) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLD_WRITE_LOCK, str(db), str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        return proc

    yield hold
    for proc in procs:
        proc.kill()
        proc.wait()


def test_readers_answer_while_another_process_holds_the_write_lock(
    run_cli, loop_config, isolated, held
):
    from loop_dispatch.store import Store

    assert run_cli("item", "open", "a task").exit_code == 0
    writer = Store.open(isolated / "state")  # opened (migrated) before the lock is taken
    held(isolated / "state" / "state.db")
    for args in (("status",), ("sessions", "list"), ("inbox", "list")):
        started = time.monotonic()
        result = run_cli(*args)
        elapsed = time.monotonic() - started
        assert "locked" not in result.output, (args, result.output)
        assert "Error" not in result.output, (args, result.output)
        assert elapsed < 10.0, (args, elapsed)  # 15 s and an error before
    assert "1 pending" in run_cli("status").output
    assert "opened:local:1" in run_cli("inbox", "list").output
    # A reader refuses to write; a writer waits for the lock, within its timeout.
    from loop_dispatch.store import StoreBusy, StoreError

    reader = Store.open(isolated / "state", read_only=True)
    try:
        with pytest.raises(StoreError, match="opened read-only"), reader.transaction():
            pass
    finally:
        reader.close()
    try:
        started = time.monotonic()
        with pytest.raises(StoreBusy), writer.transaction(timeout=0.5):
            pass
        assert time.monotonic() - started < 5.0
    finally:
        writer.close()


def _reader_prefix() -> list[str]:
    """Run as a user who may not write the state: `nobody` when we are root."""
    if os.geteuid() != 0:
        return []
    return nobody_prefix()


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder another user can read (pytest's tmp_path is private to its owner)."""
    path = Path(tempfile.mkdtemp(prefix="loop-ro-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _share(state: Path, db: Path) -> None:
    """Let other users read the state, on purpose: the-loop makes it private (0700/0600)
    and tightens it whenever its owner opens it for writing."""
    state.chmod(0o755)
    db.chmod(0o644)


def test_a_state_this_user_may_not_write_is_read_and_said_read_only(shared_tmp, held):
    from loop_cli.tracker import LocalTracker
    from loop_dispatch.store import Store

    state = shared_tmp / "state"
    store = Store.open(state)
    LocalTracker(store).open("a task")
    store.close()
    config = shared_tmp / "config.yaml"
    config.write_text(
        yaml.safe_dump({"stateDir": str(state), "routing": {"tmuxSocket": "loop-ro-none"}})
    )
    config.chmod(0o644)
    db = state / "state.db"
    _share(state, db)
    prefix = _reader_prefix()
    if not prefix:  # not root: take the write permission away from ourselves
        db.chmod(0o444)
        state.chmod(0o555)
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE", "THE_LOOP_CONFIG")}
    env.update(HOME=str(shared_tmp), XDG_CACHE_HOME=str(shared_tmp / "cache"))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*prefix, sys.executable, "-m", "loop_cli.main", "--config", str(config), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
            cwd=shared_tmp,
        )

    try:
        # No daemon ran: no -wal or -shm, and the folder does not let this user make one.
        status = run("status")
        assert "not a usable" not in status.stderr
        assert "(read-only: " in status.stdout, status.stdout + status.stderr
        assert "1 pending" in status.stdout
        assert run("sessions", "list").returncode == 0
        assert "opened:local:1" in run("inbox", "list").stdout
        refused = run("item", "open", "another")
        assert refused.returncode == 1
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1
        assert "is read-only" in lines[0]
        assert "not a usable" not in lines[0]
        if prefix:
            # A daemon (this user) writes and holds the lock: the reader still reads the
            # live file, the committed rows included.
            writer = Store.open(state)
            LocalTracker(writer).open("a second task")
            writer.close()
            _share(state, db)  # the writer made it private again
            held(db)
            status = run("status")
            assert "2 pending" in status.stdout, status.stdout + status.stderr
    finally:
        state.chmod(0o755)
        db.chmod(0o644)
