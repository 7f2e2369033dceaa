"""A session's `started_at`: moved by every spawn, respawn and rotation relaunch, never by
an ordinary delivery (issue 22: `sessions list` showed creation time after relaunches)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from loop_dispatch.launch import LaunchSpec
from loop_dispatch.model import WorkItemRef
from loop_dispatch.relaunch import Relaunch, Relauncher
from loop_dispatch.store import Store
from loop_tmux import Tmux

REF = WorkItemRef.parse("local:started#1")


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _tick() -> None:
    time.sleep(0.02)  # stored times have microseconds: two calls never share one


def test_every_spawn_moves_started_at_and_created_at_stays(store: Store, tmp_path: Path) -> None:
    first = store.registry.register(REF, harness="generic", conversation_id="c-1", cwd=tmp_path)
    assert first.started_at == first.created_at
    starts = [first.started_at]
    for _ in range(3):  # three relaunches: each issues a spawn token before tmux is asked
        _tick()
        store.registry.issue_token(REF, harness="generic", conversation_id="c-1", cwd=tmp_path)
        now = store.registry.get(REF)
        assert now is not None
        starts.append(now.started_at)
    assert starts == sorted(starts)
    assert len(set(starts)) == 4
    assert now.created_at == first.created_at
    _tick()
    store.registry.set_conversation(REF, "c-2")  # not a start
    after = store.registry.get(REF)
    assert after is not None
    assert after.started_at == starts[-1]


@pytest.mark.tmux
@pytest.mark.parametrize("backend", ["sqlite"])
def test_rotation_relaunch_in_place_moves_started_at(
    store: Store, real_tmux: Tmux, tmp_path: Path
) -> None:
    record = store.registry.register(REF, harness="generic", conversation_id="c", cwd=tmp_path)
    assert real_tmux.spawn(record.tmux_name, ["sleep", "600"], str(tmp_path)).ok
    _tick()
    relauncher = Relauncher(registry=store.registry, tmux=real_tmux, survival_delay=0.3)
    result = relauncher.respawn([Relaunch(record=record, spec=LaunchSpec(["sleep", "601"]))])
    assert result[str(REF)].started
    after = store.registry.get(REF)
    assert after is not None
    assert after.started_at is not None
    assert record.started_at is not None
    assert after.started_at > record.started_at
    assert after.created_at == record.created_at


def test_a_v4_store_gains_started_at_from_created_at(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "state")
    store.registry.register(REF, harness="generic", conversation_id=None, cwd=tmp_path)
    created = store.registry.get(REF)
    store.close()
    assert created is not None
    db = sqlite3.connect(tmp_path / "state" / "state.db")
    with db:  # the store as loop-dispatch v4 left it
        db.execute("ALTER TABLE sessions DROP COLUMN started_at")
        db.execute("ALTER TABLE inbox DROP COLUMN held_at")  # v7's, as the later ones
        db.execute("DROP TABLE controls")
        db.execute("UPDATE schema_versions SET version = 4 WHERE namespace = 'loop_dispatch'")
        db.execute("PRAGMA user_version = 4")
    db.close()
    reader = Store.open(tmp_path / "state", read_only=True)  # an older store is migrated once
    try:
        migrated = reader.registry.get(REF)
        assert migrated is not None
        assert migrated.started_at == created.created_at
    finally:
        reader.close()
