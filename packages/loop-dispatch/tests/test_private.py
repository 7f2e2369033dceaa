"""Issue 21: state is private. The state dir 0700; the store (with -wal and -shm), the
event log, locks and their folders 0600/0700 under any umask; a looser existing mode is
tightened with one warning per path."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from loop_dispatch.eventlog import EventLog
from loop_dispatch.lock import item_lock
from loop_dispatch.model import WorkItemRef
from loop_dispatch.private import private_dir, private_file
from loop_dispatch.store import Store

REF = WorkItemRef.parse("local:proj#1")


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The usual umask of a login shell (022): files would be 0644 without care."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_store_lock_and_log_are_created_private(tmp_path: Path, open_umask: None) -> None:
    state = tmp_path / "deep" / "state"
    store = Store.open(state)
    try:
        store.registry.get(REF)  # a read: the WAL and its index exist while open
        assert _mode(state) == 0o700
        assert _mode(tmp_path / "deep") == 0o755  # a parent: made as `mkdir -p` makes it
        for name in ("state.db", "state.db-wal", "state.db-shm"):
            assert (state / name).exists(), name
            assert _mode(state / name) == 0o600, name
    finally:
        store.close()
    with item_lock(state / "locks", REF, timeout=1) as lock:
        assert _mode(lock.parent) == 0o700
        assert _mode(lock) == 0o600
    log = EventLog(state / "events.jsonl", max_bytes=4096, backups=1)
    for _ in range(40):  # past max_bytes: rotated, with its rotation lock
        log.emit("test.event", source="test", detail={"n": "x" * 100})
    for path in state.glob("events.jsonl*"):
        assert _mode(path) == 0o600, path


def test_a_looser_state_is_tightened_once_with_a_warning(
    tmp_path: Path, open_umask: None, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    Store.open(state).close()
    state.chmod(0o755)
    (state / "state.db").chmod(0o644)
    (state / "locks").mkdir(mode=0o777)
    (state / "locks").chmod(0o777)
    caplog.set_level(logging.WARNING, logger="loop_dispatch.private")
    Store.open(state).close()
    with item_lock(state / "locks", REF, timeout=1):
        pass
    Store.open(state).close()  # tight now: nothing more to say
    assert _mode(state) == 0o700
    assert _mode(state / "state.db") == 0o600
    assert _mode(state / "locks") == 0o700
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"{state} had mode 0755 (open to others); tightened to 0700",
        f"{state / 'state.db'} had mode 0644 (open to others); tightened to 0600",
        f"{state / 'locks'} had mode 0777 (open to others); tightened to 0700",
    ]


def test_private_file_never_truncates_nor_tightens_through_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    target.chmod(0o644)
    link = tmp_path / "link"
    link.symlink_to(target)
    private_file(link)
    assert target.read_text() == "keep"
    assert _mode(target) == 0o644  # a symlink is not tightened through
    made = private_dir(tmp_path / "a" / "b")
    assert _mode(made) == 0o700
