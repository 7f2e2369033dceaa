"""The webhook app in-process: every status code, the filters, dedupe, the durable accept."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import httpx
from fakegithub import payloads, served

from loop_cli.webhook.app import create_app
from loop_cli.webhook.seen import InboxAccept
from loop_cli.webhook.verify import sign, verify_signature
from loop_dispatch import Event, EventKind, WorkItemRef, comment_delivery_id

SECRET = b"s3cret-webhook"
REPO = "octo/app"


def issue(number: int = 5, labels: tuple[str, ...] = ("the-loop",), state: str = "open") -> dict:
    return payloads.issue_json(REPO, number, labels=labels, state=state)


def comment_payload(login: str = "alice", body: str = "do the thing", cid: int = 77) -> dict:
    return payloads.issue_comment(REPO, comment_id=cid, body=body, login=login)


class Sink:
    """`accept`: records events (off the event loop), a GUID seen before is a duplicate."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.guids: set[str] = set()
        self.threads: set[str] = set()
        self.arrived = threading.Condition()

    def __call__(self, guid: str, kind: str, event: Event) -> str:
        with self.arrived:
            if guid in self.guids:
                return "duplicate"
            self.guids.add(guid)
            self.events.append(event)
            self.threads.add(threading.current_thread().name)
            self.arrived.notify_all()
        return "accepted"

    def wait(self, n: int, timeout: float = 10.0) -> list[Event]:
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.events) >= n, timeout)
        return list(self.events)


@pytest.fixture
def sink() -> Sink:
    return Sink()


@pytest.fixture
def client(sink: Sink):
    app = create_app(
        SECRET,
        sink,
        authorized_actors=["Alice"],
        trigger_label="the-loop",
        own_login="loop-bot",
        max_body=64 * 1024,
    )
    with served(app) as url, httpx.Client(base_url=url, timeout=10) as c:
        yield c


def post(
    client: httpx.Client,
    payload: Any,
    event: str = "issue_comment",
    *,
    delivery: str = "d-1",
    secret: bytes | None = SECRET,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
):
    body = raw if raw is not None else json.dumps(payload).encode()
    h = {"Content-Type": "application/json", "X-GitHub-Event": event, "X-GitHub-Delivery": delivery}
    if secret is not None:
        h["X-Hub-Signature-256"] = sign(secret, body)
    h.update(headers or {})
    return client.post("/", content=body, headers=h)


def test_signature_roundtrip_and_tampering() -> None:
    body = b'{"a": 1}'
    good = sign(SECRET, body)
    assert verify_signature(SECRET, body, good)
    assert not verify_signature(SECRET, body + b" ", good)
    assert not verify_signature(b"other", body, good)
    assert not verify_signature(SECRET, body, good.replace("sha256=", "sha1="))
    assert not verify_signature(SECRET, body, None)
    assert not verify_signature(SECRET, body, "sha256=zz\u00e9")


def test_signed_comment_is_accepted_and_dispatched_off_the_loop(client, sink: Sink) -> None:
    r = post(client, comment_payload())
    assert r.status_code == 202
    assert r.json()["status"] == "accepted"
    [event] = sink.wait(1)
    assert event.kind is EventKind.COMMENT
    assert event.work_item == WorkItemRef.parse(f"github:{REPO}#5")
    assert event.delivery_id == comment_delivery_id(f"github:{REPO}", "77")
    assert event.body == "do the thing"
    assert "MainThread" not in sink.threads  # committed off the event loop


def test_missing_or_wrong_signature_is_401(client, sink: Sink) -> None:
    assert post(client, comment_payload(), secret=None).status_code == 401
    assert post(client, comment_payload(), secret=b"wrong").status_code == 401
    r = post(client, comment_payload(), headers={"X-Hub-Signature-256": "sha256=" + "0" * 64})
    assert r.status_code == 401
    assert sink.events == []


def test_non_json_content_type_is_415(client) -> None:
    r = post(
        client, comment_payload(), headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert r.status_code == 415


def raw_status(base_url: str, head: str, body: bytes = b"") -> int:
    """Send bytes a well-behaved client would refuse to (a lying Content-Length)."""
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        reply = conn.recv(4096).decode("latin-1")
    return int(reply.split(" ", 2)[1])


HEAD = (
    "POST / HTTP/1.1\nHost: localhost\nContent-Type: application/json\n"
    "X-GitHub-Event: issue_comment\nX-GitHub-Delivery: raw-1\n"
)


def test_declared_oversize_is_413_before_reading(client) -> None:
    # Ten megabytes declared, two bytes sent: the answer comes without waiting for the rest.
    head = HEAD + f"Content-Length: {10 * 1024 * 1024}\n"
    assert raw_status(str(client.base_url).rstrip("/"), head, b"{}") == 413


def test_unreadable_content_length_is_400(client) -> None:
    assert raw_status(str(client.base_url).rstrip("/"), HEAD + "Content-Length: ten\n") == 400


def test_oversize_body_is_413(client) -> None:
    payload = comment_payload(body="x" * (80 * 1024))
    assert post(client, payload).status_code == 413


def test_chunked_body_over_the_cap_is_413(client) -> None:
    def chunks():
        for _ in range(100):
            yield b"x" * 1024

    r = client.post(
        "/",
        content=chunks(),
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "issue_comment",
            "X-GitHub-Delivery": "d-chunked",
            "X-Hub-Signature-256": "sha256=00",
        },
    )
    assert r.status_code == 413


@pytest.mark.parametrize(
    ("raw", "headers", "reason"),
    [
        (b"{not json", {}, "not valid JSON"),
        (b"[]", {}, "expected a JSON object"),
        (
            json.dumps({"action": "created", "repository": {"full_name": REPO}}).encode(),
            {},
            "issue",
        ),
        (b"{}", {"X-GitHub-Event": ""}, "X-GitHub-Event"),
        (b"{}", {"X-GitHub-Delivery": ""}, "X-GitHub-Delivery"),
        (b"\xff\xfe", {}, "not valid JSON"),
    ],
)
def test_malformed_is_400_with_a_reason(client, raw: bytes, headers: dict, reason: str) -> None:
    r = post(client, None, raw=raw, headers=headers)
    assert r.status_code == 400
    assert reason in r.json()["reason"]


def without(payload: dict, path: str) -> dict:
    """A deep copy of payload with the field at dotted `path` removed."""
    data = json.loads(json.dumps(payload))
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[key]
    del node[last]
    return data


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (without(comment_payload(), "comment.id"), "comment.id"),
        (without(comment_payload(), "comment.user"), "comment.user"),
        (without(comment_payload(), "issue.number"), "issue.number"),
        (without(comment_payload(), "repository"), "repository.full_name"),
        (without(comment_payload(), "action"), "action"),
        ({**comment_payload(), "repository": {"full_name": "evil/../x"}}, "repository"),
        ({**comment_payload(), "repository": {"full_name": "a/b/c"}}, "repository"),
        (
            {**comment_payload(), "comment": {**comment_payload()["comment"], "created_at": "x"}},
            "comment.created_at",
        ),
    ],
)
def test_missing_or_bad_fields_are_400_naming_the_field(client, sink, payload, field) -> None:
    r = post(client, payload)
    assert r.status_code == 400
    assert field in r.json()["reason"]
    assert sink.events == []


def test_ping_is_200(client) -> None:
    r = post(client, {"zen": "Keep it logically awesome."}, event="ping")
    assert r.status_code == 200
    assert r.json()["status"] == "pong"


@pytest.mark.parametrize(
    ("payload", "event", "reason"),
    [
        (comment_payload(login="mallory"), "issue_comment", "not an authorized actor"),
        (comment_payload(login="Loop-Bot"), "issue_comment", "own account"),
        (comment_payload(body="<!-- the-loop -->\nreport"), "issue_comment", "marker"),
        ({**comment_payload(), "action": "edited"}, "issue_comment", "action 'edited'"),
        (
            {"action": "opened", "repository": {"full_name": REPO}, "issue": issue()},
            "issues",
            "action 'opened'",
        ),
        (
            {
                "action": "labeled",
                "label": {"name": "bug"},
                "issue": issue(),
                "repository": {"full_name": REPO},
            },
            "issues",
            "not the trigger label",
        ),
        ({"ref": "main"}, "push", "'push' is not handled"),
    ],
)
def test_ignored_deliveries_are_202_with_a_reason(client, sink, payload, event, reason) -> None:
    r = post(client, payload, event=event)
    assert r.status_code == 202
    assert r.json()["status"] == "ignored"
    assert reason in r.json()["reason"]
    time.sleep(0.05)
    assert sink.events == []


def test_labeled_with_trigger_opens_and_closed_closes(client, sink: Sink) -> None:
    labeled = {
        "action": "labeled",
        "label": {"name": "the-loop"},
        "issue": issue(),
        "repository": {"full_name": REPO},
        "sender": {"login": "alice"},
    }
    closed = {
        "action": "closed",
        "issue": issue(state="closed"),
        "repository": {"full_name": REPO},
        "sender": {"login": "bob"},
    }
    assert post(client, labeled, event="issues", delivery="a").status_code == 202
    assert post(client, closed, event="issues", delivery="b").status_code == 202
    opened, closing = sink.wait(2)
    assert opened.kind is EventKind.OPENED
    assert opened.delivery_id == f"opened:github:{REPO}#5"
    assert opened.body == "Fix it\n\nDetails here."
    assert closing.kind is EventKind.CLOSED
    # Who closed it is recorded (issue 20; the poller asks the issue's `closed_by`), and
    # a close by someone who is not an authorized actor keeps the workspace.
    assert closing.actor == "bob"
    assert closing.keep_workspace


def test_redelivery_is_answered_duplicate_and_not_dispatched(client, sink: Sink) -> None:
    assert post(client, comment_payload(), delivery="same").status_code == 202
    r = post(client, comment_payload(), delivery="same")
    assert r.status_code == 200
    assert r.json()["status"] == "duplicate"
    sink.wait(1)
    time.sleep(0.05)
    assert len(sink.events) == 1


def test_a_store_that_cannot_commit_answers_503_and_keeps_nothing(sink: Sink) -> None:
    calls: list[str] = []

    def flaky(guid: str, kind: str, event: Event) -> str:
        calls.append(guid)
        if len(calls) == 1:
            raise RuntimeError("database is locked")
        return sink(guid, kind, event)

    app = create_app(SECRET, flaky, authorized_actors=["alice"], trigger_label="the-loop")
    with served(app) as url, httpx.Client(base_url=url, timeout=10) as c:
        first = post(c, comment_payload(cid=1), delivery="x1")
        assert first.status_code == 503
        assert "could not commit" in first.json()["reason"]
        # Nothing was kept: GitHub's redelivery of the same GUID is accepted.
        assert post(c, comment_payload(cid=1), delivery="x1").status_code == 202
        assert [e.comment_id for e in sink.wait(1)] == ["1"]


def test_an_accept_held_past_the_deadline_is_answered_503_and_kept_once(sink: Sink) -> None:
    """Issue 20, point 13: whatever holds the commit, the answer comes by the deadline
    (503, Retry-After), not at GitHub's 10 s timeout. An accept that commits after it
    makes GitHub's redelivery a duplicate: the event is kept once."""
    release = threading.Event()

    def stalled(guid: str, kind: str, event: Event) -> str:
        release.wait(30)
        return sink(guid, kind, event)

    app = create_app(
        SECRET, stalled, authorized_actors=["alice"], trigger_label="the-loop", answer_within=0.5
    )
    with served(app) as url, httpx.Client(base_url=url, timeout=10) as c:
        started = time.monotonic()
        first = post(c, comment_payload(cid=1), delivery="late-1")
        elapsed = time.monotonic() - started
        assert first.status_code == 503
        assert first.headers["Retry-After"].isdigit()
        assert "did not commit within 0.5s" in first.json()["reason"]
        assert elapsed < 5.0  # the deadline (0.5 s) and a loaded box, far from 10 s
        release.set()
        assert [e.comment_id for e in sink.wait(1)] == ["1"]  # the late commit landed
        assert post(c, comment_payload(cid=1), delivery="late-1").status_code == 200
        assert len(sink.events) == 1


def test_a_busy_store_is_answered_503_with_retry_after(sink: Sink) -> None:
    from loop_dispatch.store import StoreBusy

    def busy(guid: str, kind: str, event: Event) -> str:
        raise StoreBusy("state.db", "busy: another process held the write lock")

    app = create_app(SECRET, busy, authorized_actors=["alice"], trigger_label="the-loop")
    with served(app) as url, httpx.Client(base_url=url, timeout=10) as c:
        answer = post(c, comment_payload(cid=2), delivery="busy-1")
        assert answer.status_code == 503
        assert answer.headers["Retry-After"] == "10"
        assert "another process holds its write lock" in answer.json()["reason"]


def test_202_means_the_event_is_already_in_the_inbox(tmp_path: Path) -> None:
    """Accepted means durable: when 202 arrives, the inbox row is committed."""
    from loop_dispatch.store import Store

    store = Store.open(tmp_path)
    woken: list[int] = []
    accept = InboxAccept(store, on_accepted=lambda: woken.append(1))
    app = create_app(SECRET, accept, authorized_actors=["alice"], trigger_label="the-loop")
    try:
        with served(app) as url, httpx.Client(base_url=url, timeout=10) as c:
            r = post(c, comment_payload(), delivery="durable-1")
            assert r.status_code == 202
            entry = store.inbox.by_delivery(r.json()["deliveryId"])
            assert entry is not None
            assert (entry.state, entry.source) == ("pending", "webhook")
            assert woken == [1]
            # The same comment under another GUID (the poller saw it too): a duplicate.
            again = post(c, comment_payload(), delivery="durable-2")
            assert again.json()["status"] == "duplicate"
    finally:
        store.close()


def test_a_push_for_a_comment_the_poller_only_baselined_is_delivered(tmp_path: Path) -> None:
    """The poller saw the item first and baselined its comments; GitHub pushing one of
    them says it is new (written after the label): it is taken, not a duplicate."""
    from loop_dispatch.store import Store

    store = Store.open(tmp_path)
    delivery = comment_delivery_id(f"github:{REPO}", "77")
    store.inbox.accept("github", [], baseline=[delivery])
    app = create_app(
        SECRET, InboxAccept(store), authorized_actors=["alice"], trigger_label="the-loop"
    )
    try:
        with served(app) as url, httpx.Client(base_url=url, timeout=10) as c:
            r = post(c, comment_payload(cid=77), delivery="push-1")
            assert r.status_code == 202, r.json()
            assert r.json()["deliveryId"] == delivery
            assert store.inbox.by_delivery(delivery).state == "pending"
    finally:
        store.close()


def test_a_receiver_whose_state_was_replaced_answers_503(tmp_path: Path) -> None:
    """A state directory replaced under the receiver: a row committed now lands in a file
    no daemon reads, so the answer is 503 (GitHub delivers it again), never 202."""
    from loop_cli.ground import Ground
    from loop_dispatch.store import Store

    state = tmp_path / "state"
    store = Store.open(state)
    ground = Ground(state, state / "state.db")
    accept = InboxAccept(store, watch=ground.check)
    app = create_app(SECRET, accept, authorized_actors=["alice"], trigger_label="the-loop")
    try:
        with served(app) as url, httpx.Client(base_url=url, timeout=10) as c:
            assert post(c, comment_payload(cid=1), delivery="g-1").status_code == 202
            state.rename(tmp_path / "old-state")
            Store.open(state).close()  # the operator restored another state directory
            r = post(c, comment_payload(cid=2), delivery="g-2")
            assert r.status_code == 503
            assert "replaced" in r.json()["reason"]
    finally:
        store.close()


def test_unconfigured_repository_is_ignored(sink: Sink) -> None:
    app = create_app(
        SECRET,
        sink,
        authorized_actors=["alice"],
        trigger_label="the-loop",
        repositories=["octo/other"],
    )
    with served(app) as url, httpx.Client(base_url=url, timeout=10) as c:
        r = post(c, comment_payload())
    assert r.status_code == 202
    assert "not configured" in r.json()["reason"]


def test_secret_required_unless_insecure(sink: Sink) -> None:
    with pytest.raises(ValueError, match="secret"):
        create_app(None, sink, authorized_actors=[], trigger_label="x")
    app = create_app(None, sink, authorized_actors=["alice"], trigger_label="x", insecure=True)
    with served(app) as url, httpx.Client(base_url=url, timeout=10) as c:
        assert post(c, comment_payload(), secret=None).status_code == 202


def test_delivery_ids_survive_a_restart_in_the_store(tmp_path: Path, sink: Sink) -> None:
    from loop_dispatch.store import Store

    for n, expected in enumerate((202, 200)):
        store = Store.open(tmp_path)
        app = create_app(
            SECRET,
            InboxAccept(store),
            authorized_actors=["alice"],
            trigger_label="the-loop",
        )
        with served(app) as url, httpx.Client(base_url=url, timeout=10) as c:
            # Another comment under the same GUID: the GUID alone decides.
            r = post(c, comment_payload(cid=100 + n), delivery="persist")
            assert r.status_code == expected
        store.close()
    with Store.open(tmp_path) as store:
        assert store.inbox.counts() == {"pending": 1}


def test_a_projects_actors_and_label_steer_its_deliveries_and_reload_whole(sink: Sink) -> None:
    """`projects:` (issue 27): carol may steer octo/app only; octo/app answers to its
    own label; a reload swaps the rules whole (apply_rules, as `gh-webhook start`)."""
    from loop_cli.commands.webhook import apply_rules
    from loop_cli.config import validate

    def cfg(projects: dict[str, Any]) -> Any:
        data = {
            "tracker": "github",
            "github": {"repositories": [REPO, "octo/lib"]},
            "authorizedActors": ["alice"],
            "projects": projects,
        }
        return validate(data, Path("c.yaml"))

    app = create_app(
        SECRET, sink, authorized_actors=["alice"], trigger_label="the-loop", own_login="loop-bot"
    )
    apply_rules(app, cfg({REPO: {"authorizedActors": ["carol"]}}))
    with served(app) as url, httpx.Client(base_url=url, timeout=10) as c:
        carol_app = payloads.issue_comment(REPO, comment_id=1, body="app", login="carol")
        carol_lib = payloads.issue_comment("octo/lib", comment_id=2, body="lib", login="carol")
        assert post(c, carol_app, delivery="g1").status_code == 202
        assert post(c, carol_lib, delivery="g2").json()["status"] == "ignored"
        assert [e.body for e in sink.wait(1)] == ["app"]
        # A reload that drops carol: her next comment on octo/app is ignored too.
        apply_rules(app, cfg({}))
        again = payloads.issue_comment(REPO, comment_id=3, body="app again", login="carol")
        assert post(c, again, delivery="g3").json()["status"] == "ignored"
        # A project label: the app's items are watched by `agent`, not `the-loop`.
        apply_rules(app, cfg({REPO: {"triggerLabel": "agent"}}))
        opened = {
            "action": "labeled",
            "issue": issue(9, labels=("agent",)),
            "label": {"name": "agent"},
            "repository": {"full_name": REPO},
            "sender": {"login": "alice"},
        }
        assert post(c, opened, "issues", delivery="g4").status_code == 202
        assert [str(e.work_item) for e in sink.wait(2)][1] == f"github:{REPO}#9"
