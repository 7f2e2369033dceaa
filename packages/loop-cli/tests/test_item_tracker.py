"""The local tracker as a real tracker (issue 22): bodies from stdin or a file, per-item
comment numbers, reopen, and no silent local items under `tracker: github`."""

from __future__ import annotations

import json
import sqlite3

from loop_cli.tracker import LocalSource, LocalTracker
from loop_dispatch import EventKind, WorkItemRef
from loop_dispatch.store import Store

BODY = "line one\n  indented `code` $HOME\nlast line\n"


def _activity(run_cli, ref: str) -> list[dict]:
    shown = run_cli("item", "show", ref, "--format", "json")
    assert shown.exit_code == 0, shown.output
    return json.loads(shown.output)["activity"]


def test_comment_dash_reads_stdin_through_the_console_script(write_config, console, run_cli):
    write_config()
    ref = console("item", "open", "Piped").stdout.strip()
    posted = console("item", "comment", ref, "-", input=BODY)
    assert posted.returncode == 0, posted.stderr
    assert posted.stdout == f"comment 1 on {ref}\n"
    from_file = console("item", "comment", ref, "--body-file", "-", input="via body-file\n")
    assert from_file.returncode == 0, from_file.stderr
    comments = [a for a in _activity(run_cli, ref) if a["kind"] == "comment"]
    assert [c["body"] for c in comments] == [BODY, "via body-file\n"]
    assert [c["number"] for c in comments] == [1, 2]


def test_body_file_and_its_refusals(write_config, run_cli, isolated):
    write_config()
    note = isolated / "note.md"
    note.write_text("from a file\nsecond line", encoding="utf-8")
    opened = run_cli("item", "open", "Filed", "--body-file", str(note))
    assert opened.exit_code == 0, opened.output
    ref = opened.output.strip()
    assert _activity(run_cli, ref)[0]["body"] == "Filed\n\nfrom a file\nsecond line"
    assert run_cli("item", "comment", ref, "--body-file", str(note)).exit_code == 0
    assert _activity(run_cli, ref)[-1]["body"] == "from a file\nsecond line"

    both = run_cli("item", "comment", ref, "text", "--body-file", str(note))
    assert both.exit_code == 2
    assert "not both" in both.output
    missing = run_cli("item", "comment", ref, "--body-file", str(isolated / "nope.md"))
    assert missing.exit_code == 2
    assert missing.output.startswith(f"Error: --body-file {isolated / 'nope.md'}: cannot read")
    assert "Traceback" not in missing.output
    nothing = run_cli("item", "comment", ref)
    assert nothing.exit_code == 2
    empty = run_cli("item", "comment", ref, "-", input="  \n")
    assert empty.exit_code == 2
    assert "needs some text" in empty.output
    assert len([a for a in _activity(run_cli, ref) if a["kind"] == "comment"]) == 1


def test_comments_are_numbered_per_item_and_delivery_ids_stay_unique(
    write_config, run_cli, isolated
):
    write_config()
    one = run_cli("item", "open", "One").output.strip()
    two = run_cli("item", "open", "Two").output.strip()
    printed = [
        run_cli("item", "comment", ref, f"c{n}").output.strip()
        for n, ref in enumerate([one, two, one, two, two])
    ]
    assert printed == [
        f"comment 1 on {one}",
        f"comment 1 on {two}",
        f"comment 2 on {one}",
        f"comment 2 on {two}",
        f"comment 3 on {two}",
    ]
    text = run_cli("item", "show", two).output
    assert [line.split(" by ")[0] for line in text.splitlines() if line.startswith("---")] == [
        "--- opened",
        "--- comment #1",
        "--- comment #2",
        "--- comment #3",
    ]
    store = Store.open(isolated / "state")
    try:
        ids = [e.delivery_id for e in LocalSource(store).poll(None).events]
    finally:
        store.close()
    assert len(ids) == len(set(ids)) == 7


def test_a_v1_tracker_gets_its_comments_numbered_in_order(tmp_path):
    store = Store.open(tmp_path)
    tracker = LocalTracker(store)
    a, b = tracker.open("A"), tracker.open("B")
    for ref in (a, b, b, a, b):
        tracker.comment(ref, "x")
    store.close()
    db = sqlite3.connect(tmp_path / "state.db")
    with db:  # the tables as v1 left them: no per-item numbers
        db.execute("DROP INDEX loop_cli_item_comment_number")
        db.execute("ALTER TABLE loop_cli_item_activity DROP COLUMN comment_number")
        db.execute("UPDATE schema_versions SET version = 1 WHERE namespace = 'loop_cli.tracker'")
    db.close()
    store = Store.open(tmp_path)
    try:
        tracker = LocalTracker(store)
        assert [x.number for x in tracker.activity(a) if x.kind == "comment"] == [1, 2]
        assert [x.number for x in tracker.activity(b) if x.kind == "comment"] == [1, 2, 3]
        assert tracker.comment(a, "next") == 3
    finally:
        store.close()


def test_reopen_is_a_new_opening(write_config, run_cli, console, isolated):
    write_config()
    ref = run_cli("item", "open", "Again").output.strip()
    assert console("item", "reopen", ref).stdout == f"{ref} was already open\n"
    assert run_cli("item", "close", ref).exit_code == 0
    reopened = console("item", "reopen", ref)
    assert reopened.returncode == 0, reopened.stderr
    assert reopened.stdout == f"reopened {ref}\n"
    listed = json.loads(run_cli("item", "list", "--format", "json").output)
    assert [i["state"] for i in listed] == ["open"]
    assert [a["kind"] for a in _activity(run_cli, ref)] == ["opened", "closed", "reopened"]
    assert run_cli("item", "comment", ref, "still here").exit_code == 0
    store = Store.open(isolated / "state")
    try:
        events = LocalSource(store).poll(None).events
    finally:
        store.close()
    assert [e.kind for e in events] == [
        EventKind.OPENED,
        EventKind.CLOSED,
        EventKind.OPENED,
        EventKind.COMMENT,
    ]
    assert events[2].delivery_id != events[0].delivery_id  # delivered, not deduplicated
    assert events[2].work_item == WorkItemRef.parse(ref)
    assert events[2].body == "Again"
    assert run_cli("item", "reopen", "local:loop#9").exit_code == 2


def test_item_writes_are_refused_under_the_github_tracker(write_config, console, run_cli):
    path = write_config({"tracker": "github", "github": {"repositories": ["acme/widgets"]}})
    opened = console("item", "open", "Lost?")
    assert opened.returncode == 2
    assert opened.stderr.strip().startswith(f"Error: tracker is github in {path}")
    assert "Traceback" not in opened.stderr
    assert opened.stdout == ""
    for args in (["comment", "local:loop#1", "hi"], ["reopen", "local:loop#1"]):
        refused = run_cli("item", *args)
        assert refused.exit_code == 2
        assert "tracker is github" in refused.output
    assert json.loads(run_cli("item", "list", "--format", "json").output) == []
