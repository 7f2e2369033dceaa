"""Session registry and delivery de-duplication."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from loop_dispatch.model import WorkItemRef
from loop_dispatch.store import Store

# The columns every schema version has (later versions add more).
_SESSION_COLUMNS = (
    "work_item, slug, tmux_name, harness, conversation_id, cwd, status, created_at, updated_at"
)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """These tests run on both store backends (PostgreSQL: a private cluster)."""
    return str(request.param)


A = WorkItemRef.parse("github:a-b/c#1")
B = WorkItemRef.parse("github:a/b-c#1")


def test_register_get_list_close_reset(store: Store) -> None:
    reg = store.registry
    assert reg.get(A) is None
    rec = reg.register(A, harness="claude-code", conversation_id="c1", cwd="/work")
    assert (rec.work_item, rec.slug, rec.tmux_name) == (A, A.slug(), A.tmux_name())
    assert rec.status == "active"
    assert rec.cwd == Path("/work")
    assert rec.conversation_id == "c1"
    assert rec.created_at.tzinfo is not None
    reg.register(B, harness="codex", conversation_id=None, cwd="/w2")
    assert [r.work_item for r in reg.list()] == sorted([A, B], key=str)
    assert reg.set_conversation(A, "c2")
    assert reg.get(A).conversation_id == "c2"
    assert reg.close(A)
    assert reg.get(A).status == "closed"
    assert [r.work_item for r in reg.list("active")] == [B]
    assert [r.work_item for r in reg.list("closed")] == [A]
    assert reg.reset(A) is True
    assert reg.reset(A) is False
    assert reg.get(A) is None
    assert reg.close(A) is False


def test_lookalike_refs_never_share_a_record(store: Store) -> None:
    store.registry.register(A, harness="h", conversation_id="ca", cwd="/a")
    store.registry.register(B, harness="h", conversation_id="cb", cwd="/b")
    assert store.registry.get(A).conversation_id == "ca"
    assert store.registry.get(B).conversation_id == "cb"
    assert store.registry.get(A).tmux_name != store.registry.get(B).tmux_name


def test_stored_name_is_read_back_not_rederived(store: Store) -> None:
    store.registry.register(A, harness="h", conversation_id="c", cwd="/a")
    with store.transaction() as conn:
        conn.execute(
            "UPDATE sessions SET slug = 'legacy', tmux_name = 'loop-legacy' WHERE work_item = ?",
            (str(A),),
        )
    assert store.registry.get(A).tmux_name == "loop-legacy"
    assert store.registry.by_tmux_name("loop-legacy").work_item == A


def test_hand_edited_bad_ref_is_quarantined(store: Store) -> None:
    store.registry.register(A, harness="h", conversation_id="c", cwd="/a")
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO sessions("
            + _SESSION_COLUMNS
            + ") VALUES ('nonsense', 's', 'loop-s', 'h', NULL, '/', 'active', "
            "'2026-01-01T00:00:00+00:00', '2026-01-01T00:00:00+00:00')"
        )
    # The other rows still load; the bad one is named, with its remedy.
    assert [r.work_item for r in store.registry.list()] == [A]
    (bad,) = store.registry.quarantined()
    assert bad.key == "nonsense"
    assert "sessions reset 'nonsense'" in bad.line()


def test_status_is_constrained(store: Store) -> None:
    store.registry.register(A, harness="h", conversation_id="c", cwd="/a")
    with pytest.raises(sqlite3.IntegrityError), store.transaction() as conn:
        conn.execute("UPDATE sessions SET status = 'zombie'")


def test_reregistering_a_closed_item_makes_it_active_again(store: Store) -> None:
    store.registry.register(A, harness="h", conversation_id="c1", cwd="/a")
    store.registry.close(A)
    rec = store.registry.register(A, harness="h", conversation_id="c2", cwd="/a")
    assert rec.status == "active"
    assert rec.conversation_id == "c2"


def test_delivery_claim_release_keep(store: Store) -> None:
    d = store.deliveries
    assert d.claim("x") is True
    assert d.claim("x") is False  # in flight elsewhere
    d.release("x")  # failed: retryable
    assert d.state("x") is None
    assert d.claim("x") is True
    d.keep("x", "processed")
    assert d.claim("x") is False
    assert d.claim("x", reclaim_in_flight=True) is False  # kept ids are never reclaimed
    d.release("x")  # releasing a kept id does nothing
    assert d.state("x") == "processed"
    assert d.claim("y")
    d.keep("y", "skipped")
    assert d.state("y") == "skipped"
    assert d.claim("y") is False


def test_in_flight_claim_of_a_dead_holder_is_reclaimed_under_the_lock(store: Store) -> None:
    assert store.deliveries.claim("z")
    assert store.deliveries.claim("z", reclaim_in_flight=True) is True
