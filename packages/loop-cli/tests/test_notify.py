"""Notifications (issue 26 point 3): the outbox on both backends, the throttle, the
retry and give-up of a post, and what a message may contain."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loop_cli.attention_store import AttentionStore, Stall
from loop_cli.config import parse_text
from loop_cli.errors import ConfigError
from loop_cli.notify import NotifyingEventLog, Outbox, build_message, flush, item_link, sign
from loop_dispatch.eventlog import EventLog
from loop_dispatch.store import Store


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "sqlite":
        s = Store.open(tmp_path)
    else:
        cluster = request.getfixturevalue("cluster")
        s = Store.open(url=cluster.create_database(), password=cluster.password)
    yield s
    s.close()


def _config(tmp_path: Path, notify: str) -> Any:
    return parse_text(f"stateDir: {tmp_path}\nnotify:\n{notify}", tmp_path / "c.yaml")


def test_the_outbox_throttles_one_message_per_item_and_reason(store: Store) -> None:
    box = Outbox(store)
    assert box.enqueue("local:p#1|session.stalled|blocked-dialog", {"a": 1}, ["webhook"], 3600)
    assert not box.enqueue("local:p#1|session.stalled|blocked-dialog", {"a": 2}, ["webhook"], 3600)
    assert box.enqueue("local:p#1|session.stalled|no-progress", {"a": 3}, ["webhook"], 3600)
    assert box.enqueue("local:p#2|session.stalled|blocked-dialog", {"a": 4}, ["webhook"], 3600)
    assert box.enqueue("local:p#2|session.stalled|blocked-dialog", {"a": 5}, ["webhook"], 0)
    claimed = box.claim(30)
    assert [r.message["a"] for r in claimed] == [1, 3, 4, 5]
    assert box.claim(30) == []  # leased: not handed out twice


def test_the_attention_tables_keep_since_across_stores(store: Store) -> None:
    from datetime import datetime, timezone

    since = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    AttentionStore(store).put(Stall("local:p#1", "blocked-dialog", since, "permission", since))
    (kept,) = AttentionStore(store).raised()
    assert kept.since == since
    assert kept.note == "permission"


def test_a_refused_post_is_retried_then_given_up_as_notify_failed(tmp_path: Path) -> None:
    """Nothing listens on the port: each try is a `notify.failed`, the last with no
    retry; the daemon's flush never raises."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: connections are refused
    config = _config(
        tmp_path,
        f"  webhookUrl: http://127.0.0.1:{port}/hook\n  webhookSecretEnv: NFY\n"
        "  maxAttempts: 2\n  backoffSeconds: 0.01\n  maxBackoffSeconds: 0.01\n",
    )
    log = EventLog(tmp_path / "events.jsonl")
    with Store.open(tmp_path) as store:
        Outbox(store).enqueue(
            "x|session.stalled|dead", {"event": "session.stalled"}, ["webhook"], 0
        )
        first = flush(store, config, log, {"NFY": "s3cret-value"})
        import time

        time.sleep(0.05)
        second = flush(store, config, log, {"NFY": "s3cret-value"})
        assert Outbox(store).counts() == {"failed": 1}
    assert first == {"sent": 0, "retrying": 1, "failed": 0}
    assert second == {"sent": 0, "retrying": 0, "failed": 1}
    failed = log.read("notify.failed")
    assert [e["detail"]["willRetry"] for e in failed] == [True, False]
    assert [e["level"] for e in failed] == ["warning", "error"]
    assert all(e["detail"]["error"] == "ConnectError" for e in failed)


def test_an_unreadable_outbox_row_is_failed_not_blocking_the_others(tmp_path: Path) -> None:
    """A row whose message is not JSON (hand-edited or damaged state) failed every
    flush before a single post was sent, so no notification ever left again; it is
    set aside as failed and the others go on."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = _config(
        tmp_path, f"  webhookUrl: http://127.0.0.1:{port}/hook\n  webhookSecretEnv: NFY\n"
    )
    log = EventLog(tmp_path / "events.jsonl")
    with Store.open(tmp_path) as store:
        box = Outbox(store)
        box.enqueue("a|session.stalled|dead", {"event": "session.stalled"}, ["webhook"], 0)
        with store.transaction() as conn:
            conn.execute("UPDATE notify_outbox SET message = '{not json'")
        box.enqueue("b|session.stalled|dead", {"event": "session.stalled"}, ["webhook"], 0)
        counts = flush(store, config, log, {"NFY": "s3cret-value"})
        assert box.counts() == {"failed": 1, "pending": 1}
    assert counts == {"sent": 0, "retrying": 1, "failed": 1}
    failed = log.read("notify.failed")
    assert sorted(e["detail"]["error"] for e in failed) == ["ConnectError", "unreadable message"]


def test_a_message_holds_named_fields_only_and_no_credential_value(tmp_path: Path) -> None:
    config = _config(tmp_path, "  slackUrlEnv: SLACK_URL\n")
    record = {
        "ts": "2026-12-01T12:00:00+00:00",
        "type": "session.stalled",
        "level": "warning",
        "workItem": "github:octo/app#7",
        "detail": {
            "reason": "blocked-dialog",
            "remedy": "the-loop sessions attach github:octo/app#7 ghp_tok3nvalue",
            "path": "/home/someone/secret-place",
        },
    }
    message = build_message(record, config, ["ghp_tok3nvalue"])
    assert set(message) == {"event", "item", "reason", "level", "at", "link", "remedy", "summary"}
    assert message["link"] == "https://github.com/octo/app/issues/7"
    assert "ghp_tok3nvalue" not in json.dumps(message)
    assert "secret-place" not in json.dumps(message)  # the detail never rides along


def test_item_links() -> None:
    assert item_link("local:proj#3", "https://api.github.com") is None
    assert (
        item_link("github:o/r#12", "https://ghe.example/api/v3")
        == "https://ghe.example/o/r/issues/12"
    )


def test_the_signature_is_hmac_sha256_of_the_body() -> None:
    import hashlib
    import hmac

    body = b'{"a":1}'
    assert sign("k", body) == "sha256=" + hmac.new(b"k", body, hashlib.sha256).hexdigest()


def test_a_store_that_cannot_take_the_message_never_fails_the_writer(tmp_path: Path) -> None:
    config = _config(tmp_path, "  slackUrlEnv: SLACK_URL\n")

    def broken() -> Store:
        raise OSError("disk gone")

    log = NotifyingEventLog(tmp_path / "events.jsonl", config=config, store=broken)
    log.emit("inbox.gave_up", level="error", source="test", work_item="local:p#1")
    (failed,) = log.read("notify.failed")
    assert failed["detail"]["stage"] == "queue"
    assert len(log.read("inbox.gave_up")) == 1


@pytest.mark.parametrize(
    ("notify", "says"),
    [
        ("  webhookUrl: https://h.example/x\n", "webhookUrl needs webhookSecretEnv"),
        ("  webhookUrl: http://h.example/x\n  webhookSecretEnv: S\n", "https:// URL"),
        ("  slackUrlEnv: https://hooks.slack.com/services/x\n", "NAME of an environment"),
        ("  events: [poll.cycle]\n", "not a notifiable event"),
    ],
)
def test_bad_notify_config_is_one_line_naming_the_key(
    tmp_path: Path, notify: str, says: str
) -> None:
    with pytest.raises(ConfigError) as err:
        _config(tmp_path, notify)
    text = str(err.value)
    assert "notify" in text
    assert len(text.splitlines()) == 1
    assert says in text
    assert "hooks.slack.com" not in text  # a value is never repeated


def test_settled_rows_are_pruned_after_their_keep_time(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        box = Outbox(store)
        box.enqueue("a|b|c", {"n": 1}, ["webhook"], 0)
        (row,) = box.claim(30)
        box.settle(row, None, None)
        assert box.prune(keep_seconds=3600) == 0
        assert box.counts() == {"sent": 1}
        assert box.prune(keep_seconds=-1) == 1
        assert box.counts() == {}
