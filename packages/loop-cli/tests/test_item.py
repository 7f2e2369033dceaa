"""The local tracker: `the-loop item ...` and LocalSource."""

from __future__ import annotations

import json

from loop_cli.tracker import LocalSource, LocalTracker
from loop_dispatch import EventKind, WorkItemRef
from loop_dispatch.store import Store


def test_item_lifecycle_through_the_cli(run_cli, write_config) -> None:
    write_config()
    opened = run_cli("item", "open", "Fix the build", "--body", "It is red.")
    assert opened.exit_code == 0, opened.output
    assert opened.output.strip() == "local:loop#1"
    assert run_cli("item", "open", "Second", "--project", "web").output.strip() == "local:web#1"
    commented = run_cli("item", "comment", "local:loop#1", "try again", "--author", "alice")
    assert commented.exit_code == 0
    assert commented.output.startswith("comment ")
    listing = json.loads(run_cli("item", "list", "--format", "json").output)
    assert [(i["ref"], i["state"], i["comments"]) for i in listing] == [
        ("local:loop#1", "open", 1),
        ("local:web#1", "open", 0),
    ]
    assert run_cli("item", "close", "local:loop#1").output.strip() == "closed local:loop#1"
    again = run_cli("item", "close", "local:loop#1")
    assert again.exit_code == 0
    assert "already closed" in again.output
    table = run_cli("item", "list", "--state", "closed")
    assert "local:loop#1" in table.output
    assert "local:web#1" not in table.output


def test_item_errors(run_cli, write_config) -> None:
    write_config()
    run_cli("item", "open", "One")
    run_cli("item", "close", "local:loop#1")
    closed = run_cli("item", "comment", "local:loop#1", "hello")
    assert closed.exit_code == 1
    assert closed.output == (
        "Error: local:loop#1 is closed; reopen it with: the-loop item reopen local:loop#1\n"
    )
    missing = run_cli("item", "comment", "local:loop#9", "hello")
    assert missing.exit_code == 2
    assert "no local item local:loop#9" in missing.output
    bad = run_cli("item", "comment", "loop#1", "hello")
    assert bad.exit_code == 2
    assert bad.output.startswith("Error: invalid work item ref")
    github = run_cli("item", "close", "github:o/r#1")
    assert github.exit_code == 2
    assert "is not a local item" in github.output
    empty = run_cli("item", "open", "   ")
    assert empty.exit_code == 2
    assert "non-empty title" in empty.output
    bad_project = run_cli("item", "open", "x", "--project", "a/b")
    assert bad_project.exit_code == 2


def test_local_source_feeds_activity_after_the_cursor(tmp_path) -> None:
    store = Store.open(tmp_path)
    tracker = LocalTracker(store)
    ref = tracker.open("Title", "Body", author="bob")
    source = LocalSource(store)
    first = source.poll(None)
    assert [e.kind for e in first.events] == [EventKind.OPENED]
    opened = first.events[0]
    assert opened.work_item == ref
    assert opened.actor == "bob"
    assert opened.body == "Title\n\nBody"
    assert first.cursor == "1"
    assert not first.baseline
    assert not first.errors

    number = tracker.comment(ref, "more", author="carol")
    assert number == 1  # its number on the item; the delivery id keeps the global seq
    cid = 2
    tracker.close(ref)
    second = source.poll(first.cursor)
    assert [e.kind for e in second.events] == [EventKind.COMMENT, EventKind.CLOSED]
    assert second.events[0].delivery_id == f"comment:local:{cid}"
    assert second.events[0].comment_id == str(cid)
    assert second.cursor == "3"
    idle = source.poll(second.cursor)
    assert idle.events == []
    assert idle.cursor == "3"
    # Delivery ids are stable: polling the same range again yields the same ids.
    assert [e.delivery_id for e in source.poll(None).events] == [
        "opened:local:1",
        f"comment:local:{cid}",
        "closed:local:3",
    ]
    broken = source.poll("not-a-number")
    assert broken.errors
    assert broken.cursor == "not-a-number"
    store.close()


def test_tracker_schema_survives_reopen(tmp_path) -> None:
    store = Store.open(tmp_path)
    LocalTracker(store).open("kept")
    store.close()
    store = Store.open(tmp_path)
    assert [i.ref for i in LocalTracker(store).list()] == [WorkItemRef("local", "loop", 1)]
    assert store.schema_version("loop_cli.tracker") == 2
    store.close()
