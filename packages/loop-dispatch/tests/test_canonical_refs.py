"""Issue 10: canonical GitHub refs, a ref that is written reads back, quarantined rows."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

import pytest

from loop_dispatch import WorkItemRef
from loop_dispatch.model import MAX_NUMBER, RefError
from loop_dispatch.store import CORE_MIGRATIONS, Store, _run_script

# The columns every schema version has (later versions add more).
_SESSION_COLUMNS = (
    "work_item, slug, tmux_name, harness, conversation_id, cwd, status, created_at, updated_at"
)


def test_github_refs_are_canonical_lower_case_whichever_spelling() -> None:
    a = WorkItemRef("github", "Acme/Widgets", 7)
    b = WorkItemRef.parse("github:acme/widgets#7")
    assert a == b
    assert str(a) == "github:acme/widgets#7"
    assert a.slug() == b.slug() == "gh_acme_widgets_7"
    assert a.tmux_name() == "loop-gh_acme_widgets_7"
    assert str(WorkItemRef("local", "Proj", 1)) == "local:Proj#1"  # local keeps its case


@pytest.mark.parametrize("number", [0, -1, MAX_NUMBER + 1, 10**19])
def test_a_number_that_cannot_be_read_back_is_refused_when_written(number: int) -> None:
    with pytest.raises(RefError):
        WorkItemRef("github", "acme/widgets", number)


def test_every_writable_ref_reads_back() -> None:
    for number in (1, 42, MAX_NUMBER):
        ref = WorkItemRef("github", "Acme/Widgets", number)
        assert WorkItemRef.parse(str(ref)) == ref
    with pytest.raises(RefError, match=r"1\.\.2147483647"):
        WorkItemRef.parse("github:acme/widgets#" + "9" * 20)


def _v2_store(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path / "state.db")
    conn.execute("CREATE TABLE schema_versions (namespace TEXT PRIMARY KEY, version INTEGER)")
    conn.execute("INSERT INTO schema_versions VALUES ('loop_dispatch', 2)")
    _run_script(conn, CORE_MIGRATIONS[0])
    _run_script(conn, CORE_MIGRATIONS[1])
    conn.execute("PRAGMA user_version = 2")
    return conn


def _event(delivery: str, item: str) -> str:
    return json.dumps(
        {
            "deliveryId": delivery,
            "workItem": item,
            "kind": "comment",
            "actor": "alice",
            "body": "b",
            "url": "u",
            "createdAt": "2026-01-01T00:00:00+00:00",
            "commentId": "9",
        }
    )


def test_migration_merges_case_variants_of_one_item_and_one_delivery(tmp_path: Path) -> None:
    """A v2 store where the poller wrote `Acme/Widgets` and the webhook `acme/widgets`
    (and a closing stamp whose T/Z must survive) opens as v3 with one of each."""
    conn = _v2_store(tmp_path)
    old, new = "2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00"
    sessions = [
        ("github:Acme/Widgets#1", "gh_Acme_Widgets_1", "active", old),
        ("github:acme/widgets#1", "gh_acme_widgets_1", "closed", new),
        ("github:Acme/Widgets#2", "gh_Acme_Widgets_2", "active", old),
        ("local:Proj#3", "local_Proj_3", "active", old),
    ]
    for item, slug, status, at in sessions:
        conn.execute(
            "INSERT INTO sessions(" + _SESSION_COLUMNS + ") VALUES (?,?,?,?,?,?,?,?,?)",
            (item, slug, "loop-" + slug, "generic", None, "/tmp", status, at, at),
        )
    inbox = [
        ("comment:github:Acme/Widgets:9", "github:Acme/Widgets#1", "pending"),
        ("comment:github:acme/widgets:9", "github:acme/widgets#1", "done"),
        ("closed:github:Acme/Widgets#2:20260101T000000Z", "github:Acme/Widgets#2", "pending"),
    ]
    for delivery, item, state in inbox:
        conn.execute(
            "INSERT INTO inbox (delivery_id, work_item, source, state, event, due_at, "
            "received_at, updated_at) VALUES (?,?,?,?,?,?,?,?)",
            (delivery, item, "github", state, _event(delivery, item), old, old, old),
        )
    conn.execute(
        "INSERT INTO spawn_tokens (token, work_item, conversation_id, harness, cwd, created_at)"
        " VALUES ('t1', 'github:Acme/Widgets#2', NULL, 'g', '/', ?)",
        (old,),
    )
    conn.commit()
    conn.close()

    with Store.open(tmp_path) as store:
        assert store.schema_version() == len(CORE_MIGRATIONS) >= 4
        records = {str(r.work_item): r for r in store.registry.list()}
        assert sorted(records) == ["github:acme/widgets#1", "github:acme/widgets#2", "local:Proj#3"]
        # the active variant wins; the running session keeps its stored name
        assert records["github:acme/widgets#1"].status == "active"
        assert records["github:acme/widgets#1"].tmux_name == "loop-gh_Acme_Widgets_1"
        assert store.registry.quarantined() == []
        entries = {e.delivery_id: e for e in store.inbox.entries(("pending", "done"))}
        assert sorted(entries) == [
            "closed:github:acme/widgets#2:20260101T000000Z",
            "comment:github:acme/widgets:9",
        ]
        assert entries["comment:github:acme/widgets:9"].state == "done"
        closing = entries["closed:github:acme/widgets#2:20260101T000000Z"]
        assert closing.event is not None
        assert str(closing.event.work_item) == "github:acme/widgets#2"
        rows = store.query("SELECT work_item FROM spawn_tokens")
        assert [r[0] for r in rows] == ["github:acme/widgets#2"]


def test_a_poisoned_registry_row_is_quarantined_not_fatal(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        store.registry.register(
            WorkItemRef("local", "p", 1), harness="generic", conversation_id=None, cwd="/"
        )
        now = datetime.now(timezone.utc).isoformat()
        with store.transaction() as conn:
            conn.execute(
                "INSERT INTO sessions(" + _SESSION_COLUMNS + ") VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    "github:acme/widgets#" + "9" * 20,
                    "gh_x",
                    "loop-gh_x",
                    "generic",
                    None,
                    "/",
                    "active",
                    now,
                    now,
                ),
            )
        good, bad = store.registry.scan()
        assert [str(r.work_item) for r in good] == ["local:p#1"]
        assert len(bad) == 1
        line = bad[0].line()
        assert "\n" not in line
        assert "the-loop sessions reset" in line
        assert [str(r.work_item) for r in store.registry.list()] == ["local:p#1"]
        assert store.registry.reset_key(bad[0].key)
        assert store.registry.quarantined() == []
