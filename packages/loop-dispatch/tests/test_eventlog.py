"""Event log: schema, filters, redaction, rotation, several writer processes, follow."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from loop_dispatch import eventlog
from loop_dispatch.eventlog import EventLog, redact_detail
from loop_dispatch.model import WorkItemRef

REF = WorkItemRef.parse("github:acme/widgets#7")


def test_record_schema(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "e.jsonl")
    log.emit(
        "dispatch.delivered",
        source="dispatcher",
        work_item=REF,
        delivery_id="d1",
        detail={"tmux_name": "loop-x"},
    )
    line = (tmp_path / "e.jsonl").read_text().splitlines()[0]
    rec = json.loads(line)
    assert list(rec) == ["ts", "type", "level", "source", "workItem", "deliveryId", "detail"]
    assert rec["workItem"] == "github:acme/widgets#7"
    assert rec["level"] == "info"
    assert datetime.fromisoformat(rec["ts"]).tzinfo is not None


@pytest.mark.parametrize(
    "key",
    [
        "body",
        "Body",
        "comment_body",
        "token",
        "githubToken",
        "GITHUB_TOKEN",
        "secret",
        "password",
        "value",
        "env",
        "env_values",
        "text",
        "prompt",
        "authorization",
        "api_key",
    ],
)
def test_detail_keys_that_could_carry_secrets_or_bodies_are_stripped(tmp_path, key) -> None:
    log = EventLog(tmp_path / "e.jsonl")
    log.emit(
        "x.y",
        source="t",
        detail={key: "SENSITIVE-123", "reason": "ok", "nested": {key: "SENSITIVE-456"}},
    )
    raw = (tmp_path / "e.jsonl").read_text()
    assert "SENSITIVE" not in raw
    rec = json.loads(raw)
    assert rec["detail"]["reason"] == "ok"
    assert key in rec["detail"]["redacted"]


def test_fingerprints_pass_redaction() -> None:
    clean, stripped = redact_detail({"env_fp": {"A": "abc"}, "token_fingerprint": "f00"})
    assert clean == {"env_fp": {"A": "abc"}, "token_fingerprint": "f00"}
    assert stripped == []


def test_unknown_level_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="level"):
        EventLog(tmp_path / "e").emit("x", level="loud", source="t")


def test_filters(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "e.jsonl")
    other = WorkItemRef.parse("local:demo#1")
    log.emit("dispatch.delivered", source="d", work_item=REF, delivery_id="d1")
    log.emit("dispatch.duplicate", level="debug", source="d", work_item=REF, delivery_id="d1")
    log.emit("session.spawned", source="d", work_item=other, delivery_id="d2")
    log.emit("dispatch.failed", level="warning", source="d", work_item=other, delivery_id="d3")
    assert [r["type"] for r in log.read("dispatch.*")] == [
        "dispatch.delivered",
        "dispatch.duplicate",
        "dispatch.failed",
    ]
    assert [r["type"] for r in log.read("session.*,dispatch.failed")] == [
        "session.spawned",
        "dispatch.failed",
    ]
    assert [r["deliveryId"] for r in log.read(work_item=other)] == ["d2", "d3"]
    assert [r["type"] for r in log.read(delivery_id="d1")] == [
        "dispatch.delivered",
        "dispatch.duplicate",
    ]
    assert [r["type"] for r in log.read(level="warning")] == ["dispatch.failed"]
    assert len(log.read(level="info")) == 3
    assert [r["deliveryId"] for r in log.read(limit=2)] == ["d2", "d3"]
    future = datetime.now(timezone.utc) + timedelta(minutes=1)
    assert log.read(since=future) == []
    assert len(log.read(since=datetime.now(timezone.utc) - timedelta(minutes=1))) == 4


def test_torn_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    log = EventLog(path)
    log.emit("a.b", source="t")
    with path.open("a") as fh:
        fh.write('{"type": "half')
        fh.write("\n[1, 2]\n")
    log.emit("a.c", source="t")
    assert [r["type"] for r in log.read()] == ["a.b", "a.c"]


def test_rotation_keeps_backups_and_read_spans_them(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    log = EventLog(path, max_bytes=2000, backups=3)
    for i in range(60):
        log.emit("n.x", source="t", detail={"i": i})
    files = log.files()
    assert path.with_name("e.jsonl.1") in files
    assert not path.with_name("e.jsonl.4").exists()
    seen = [r["detail"]["i"] for r in log.read()]
    assert seen == sorted(seen)  # oldest first across files
    assert seen[-1] == 59
    assert all(p.stat().st_size < 2000 + 300 for p in files)


WRITER = textwrap.dedent(
    """
    import sys
    from loop_dispatch.eventlog import EventLog
    log = EventLog(sys.argv[1], max_bytes=20000, backups=50)
    for i in range(300):
        log.emit("w.x", source=sys.argv[2], detail={"i": i, "pad": "p" * 40})
    """
)


def test_several_writer_processes_never_interleave_or_lose_records(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"w{n}"]) for n in range(4)]
    for p in procs:
        assert p.wait(timeout=60) == 0
    log = EventLog(path, max_bytes=20000, backups=50)
    assert len(log.files()) > 2  # rotation happened under concurrent writers
    for f in log.files():
        for line in f.read_bytes().splitlines():
            json.loads(line)  # every line is one whole record
    records = log.read()
    for n in range(4):
        mine = [r["detail"]["i"] for r in records if r["source"] == f"w{n}"]
        assert sorted(mine) == list(range(300))


def _take(gen: Iterator[dict], n: int, timeout: float = 10.0) -> list[dict]:
    """The next `n` records of a follow generator, or fail (never hang) after `timeout`."""
    got: list[dict] = []

    def pull() -> None:
        for rec in gen:
            got.append(rec)
            if len(got) == n:
                return

    thread = threading.Thread(target=pull, daemon=True)
    thread.start()
    thread.join(timeout)
    assert len(got) == n, f"follow yielded {len(got)} of {n} records within {timeout}s"
    return got


def _ids_until(
    gen: Iterator[dict], last: Callable[[int], bool], timeout: float = 10.0
) -> list[int]:
    """Ids the follow generator yields up to the one `last` accepts (never hangs)."""
    got: list[int] = []

    def pull() -> None:
        for rec in gen:
            got.append(rec["detail"]["i"])
            if last(got[-1]):
                return

    thread = threading.Thread(target=pull, daemon=True)
    thread.start()
    thread.join(timeout)
    assert got, f"follow yielded nothing within {timeout}s"
    assert last(got[-1]), f"follow stopped after {got[-3:]} within {timeout}s"
    return got


def _ids(records: list[dict]) -> list[int]:
    return [r["detail"]["i"] for r in records]


def test_follow_yields_new_records_across_rotation(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    # Several rotations can pass between two looks of the follower; none is skipped.
    log = EventLog(path, max_bytes=1500, backups=50)
    log.emit("old.x", source="t")
    gen = log.follow("new.*", interval=0.02)
    got: list[int] = []

    def consume() -> None:
        for rec in gen:
            got.append(rec["detail"]["i"])
            if len(got) == 30:
                return

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    for i in range(30):
        log.emit("new.x", source="t", detail={"i": i})
        log.emit("noise.x", source="t", detail={"i": -1})
    thread.join(timeout=15)
    assert len(log.files()) > 1  # it did rotate while followed
    assert got == list(range(30))


def test_follow_starts_where_the_log_is_when_called_not_at_first_next(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "e.jsonl")
    log.emit("n.x", source="t", detail={"i": -1})
    gen = log.follow(interval=0.02)
    log.emit("n.x", source="t", detail={"i": 0})  # before anyone iterates
    assert _ids(_take(gen, 1)) == [0]


def test_follow_from_a_log_that_does_not_exist_yet_misses_nothing(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "sub" / "e.jsonl")
    gen = log.follow(interval=0.02)
    for i in range(3):
        log.emit("n.x", source="t", detail={"i": i})
    assert _ids(_take(gen, 3)) == [0, 1, 2]


def test_follow_from_start_yields_each_existing_record_once_then_new_ones(
    tmp_path: Path,
) -> None:
    """The reported bug: from_start yielded the current file's records twice."""
    log = EventLog(tmp_path / "e.jsonl")
    for i in range(3):
        log.emit("n.x", source="t", detail={"i": i})
    log.emit("other.x", source="t", detail={"i": -1})
    gen = log.follow("n.*", from_start=True, interval=0.02)
    assert _ids([next(gen)]) == [0]
    # Written while the replay is being consumed: it must follow the replay, once.
    log.emit("n.x", source="t", detail={"i": 3})
    # A duplicate replay would put 0, 1, 2 again before 3.
    assert _ids(_take(gen, 3)) == [1, 2, 3]
    log.emit("n.x", source="t", detail={"i": 4})
    assert _ids(_take(gen, 1)) == [4]


def test_follow_from_start_with_limit_replays_only_the_newest(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "e.jsonl")
    for i in range(5):
        log.emit("n.x", source="t", detail={"i": i})
    gen = log.follow(from_start=True, limit=2, interval=0.02)
    log.emit("n.x", source="t", detail={"i": 5})
    assert _ids(_take(gen, 3)) == [3, 4, 5]
    with pytest.raises(ValueError, match="from_start"):
        log.follow(limit=2)


def test_follow_from_start_replays_rotated_files_in_order_once(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "e.jsonl", max_bytes=1000, backups=20)
    for i in range(40):
        log.emit("n.x", source="t", detail={"i": i})
    assert len(log.files()) > 3
    gen = log.follow(from_start=True, interval=0.02)
    log.emit("n.x", source="t", detail={"i": 40})
    assert _ids(_take(gen, 41)) == list(range(41))


def test_follow_rotation_between_the_call_and_the_first_next_loses_nothing(
    tmp_path: Path,
) -> None:
    log = EventLog(tmp_path / "e.jsonl", max_bytes=1000, backups=5)
    log.emit("n.x", source="t", detail={"i": -1})
    gen = log.follow(interval=0.02)
    for i in range(10):  # enough to rotate the file the follow started in
        log.emit("n.x", source="t", detail={"i": i})
    assert len(log.files()) == 2
    assert _ids(_take(gen, 10)) == list(range(10))


def _rotate_away(log: EventLog, first: int) -> int:
    """Emit records `first`, `first + 1`... until the current file rotates, leaving no
    current file (the instant between a rotation and the next write). Returns the next
    index."""
    i = first
    while log.path.exists() or i == first:
        log.emit("n.x", source="t", detail={"i": i})
        i += 1
    return i


def _sleep_that_writes(
    monkeypatch: pytest.MonkeyPatch, log: EventLog, write: Callable[[], None]
) -> None:
    """Make the follower's first sleep with no current file run `write` (once): what
    a busy writer does during the follower's poll interval."""
    done: list[bool] = []

    def sleep(seconds: float) -> None:
        if not done and not log.path.exists():
            done.append(True)
            write()
        time.sleep(0.001)

    monkeypatch.setattr(eventlog, "time", SimpleNamespace(sleep=sleep))


def _whole_file_then_one(log: EventLog, first: int, written: list[int]) -> None:
    """A whole file written and rotated, then one record in the next current file."""
    after = _rotate_away(log, first)
    log.emit("n.x", source="t", detail={"i": after})
    written.append(after + 1)


def test_follow_reads_a_file_created_and_rotated_while_it_slept_on_no_current_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CI failure: after a rotation the follower found no current file and slept; a
    whole file was written and rotated during that sleep, and its records were lost."""
    log = EventLog(tmp_path / "e.jsonl", max_bytes=1000, backups=20)
    gen = log.follow(interval=0.02)
    first = _rotate_away(log, 0)  # the follower's file rotates; no current file yet
    written: list[int] = []
    _sleep_that_writes(monkeypatch, log, lambda: _whole_file_then_one(log, first, written))
    got = _ids_until(gen, lambda i: bool(written) and i == written[0] - 1)
    assert got == list(range(written[0]))
    assert len(log.files()) == 3


def test_follow_first_look_at_no_current_file_misses_no_rotated_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = EventLog(tmp_path / "e.jsonl", max_bytes=1000, backups=20)
    log.emit("n.x", source="t", detail={"i": -1})
    gen = log.follow(interval=0.02)
    # Before the first next(): the start file rotates with no successor yet.
    first = _rotate_away(log, 0)
    written: list[int] = []
    _sleep_that_writes(monkeypatch, log, lambda: _whole_file_then_one(log, first, written))
    got = _ids_until(gen, lambda i: bool(written) and i == written[0] - 1)
    assert got == list(range(written[0]))
    assert len(log.files()) == 3


def test_follow_keeps_order_when_its_file_rotates_while_it_reads_the_backups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a stress run: the follower opened the current file, which then rotated
    twice while the backups were being read; the newer backups came out before the held
    file's records, then again after it."""
    log = EventLog(tmp_path / "e.jsonl", max_bytes=1000, backups=20)
    log.emit("n.x", source="t", detail={"i": -1})
    gen = log.follow(interval=0.02)
    held = _rotate_away(log, 0)  # the start file rotates...
    log.emit("n.x", source="t", detail={"i": held})  # ...and the follower will hold this one
    written: list[int] = []
    real_open = eventlog._open

    def open_racing_a_writer(path: Path) -> tuple[object, int | None]:
        if path.name.endswith(".1") and not written:
            # The held file and one more rotate after it was opened, mid-scan.
            _whole_file_then_one(log, _rotate_away(log, held + 1), written)
        return real_open(path)

    monkeypatch.setattr(eventlog, "_open", open_racing_a_writer)
    got = _ids_until(gen, lambda i: bool(written) and i == written[0] - 1)
    assert got == list(range(written[0]))


def test_a_lone_surrogate_in_a_field_never_makes_emit_raise(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    log.emit("dispatch.failed", source="t", delivery_id="comment:x:\ud800", detail={"e": "\udc80"})
    (record,) = log.read()
    assert record["deliveryId"] == "comment:x:\ud800"
    assert record["detail"] == {"e": "\udc80"}
    (tmp_path / "events.jsonl").read_bytes().decode("utf-8")  # the file stays valid UTF-8


def test_an_event_log_whose_directory_vanishes_is_recreated(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "logs" / "events.jsonl")
    log.emit("poll.cycle", source="t")
    shutil.rmtree(tmp_path / "logs")
    log.emit("poll.cycle", source="t", detail={"n": 2})
    assert [r["detail"] for r in log.read()] == [{"n": 2}]
