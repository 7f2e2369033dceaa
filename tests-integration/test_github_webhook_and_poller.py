"""A comment reaches the session once, whether the webhook, the poller, or both see it.

Real pieces: the fake GitHub on loopback, the webhook app under uvicorn on loopback,
dispatch's Store, ledger and Dispatcher, a private tmux server, and the fake harness
recording every bracketed paste it receives.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from integration_support import harness_texts, poll_and_drain

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "loop-cli" / "tests"))
from fakegithub import FakeGitHub, served

from loop_cli.github.source import GitHubSource
from loop_cli.webhook.app import create_app
from loop_cli.webhook.seen import InboxAccept
from loop_cli.webhook.verify import sign
from loop_tmux.testing import wait_for

HERE = Path(__file__).resolve().parent
FAKE_HARNESS = HERE / "harness" / "fake_harness.py"
REPO = "octo/app"
LABEL = "the-loop"
TOKEN = "ghp_integrationTOKEN"
SECRET = b"integration-secret"

pytestmark = pytest.mark.tmux


@pytest.fixture
def world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmux_socket: str
) -> Iterator[dict[str, Any]]:
    from loop_dispatch.adapters import ClaudeCodeAdapter
    from loop_dispatch.dispatcher import Dispatcher
    from loop_dispatch.eventlog import EventLog
    from loop_dispatch.store import Store
    from loop_tmux import Tmux

    convo = tmp_path / "conversations"
    convo.mkdir()
    monkeypatch.setenv("FAKE_HARNESS_DIR", str(convo))
    work = tmp_path / "work"
    work.mkdir()
    tmux = Tmux(socket_name=tmux_socket, config_file="/dev/null")
    store = Store.open(tmp_path / "state")
    events = EventLog(tmp_path / "events.jsonl")
    dispatcher = Dispatcher(
        store,
        tmux,
        ClaudeCodeAdapter(str(FAKE_HARNESS), checks=False),
        events,
        "0.1.0-test",
        cwd_for=lambda ref: work,
        lock_dir=tmp_path / "locks",
        survival_delay=0.3,
    )
    with FakeGitHub(token=TOKEN, login="loop-bot") as fake:
        fake.repo(REPO)
        source = GitHubSource(
            [REPO], TOKEN, fake.api_url, LABEL, ["alice"], store, clock=lambda: fake.now
        )
        yield {
            "fake": fake,
            "store": store,
            "events": events,
            "dispatcher": dispatcher,
            "source": source,
            "convo": convo,
            "tmux": tmux,
        }
    store.close()


def poll(world: dict[str, Any]) -> Any:
    """`poll --once`: the source into the inbox, then the drain once."""
    return poll_and_drain(world["store"], world["source"], world["dispatcher"], world["events"])


def drain(world: dict[str, Any]) -> Any:
    """What the receiver's drain does after a 202: deliver what the inbox holds."""
    from loop_dispatch.drain import Drain

    return Drain(
        world["store"], world["dispatcher"], world["events"], versions={"t": "1"}, idle=0.01
    ).run(until_idle=True)


def messages(world: dict[str, Any]) -> list[str]:
    return harness_texts(world["convo"])


def delivery(fake: FakeGitHub, comment_id: int) -> bytes:
    """The issue_comment payload GitHub would send for a comment of the fake."""
    repo = fake.repo(REPO)
    item = next(c for c in repo.comments if c.id == comment_id)
    payload = {
        "action": "created",
        "issue": fake._issue_json(repo, repo.issues[item.issue_number]),
        "comment": fake._comment_json(repo, item),
        "repository": {"full_name": REPO},
        "sender": {"login": item.user},
    }
    return json.dumps(payload).encode()


def send(url: str, body: bytes, guid: str) -> httpx.Response:
    return httpx.post(
        url + "/",
        content=body,
        timeout=10,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "issue_comment",
            "X-GitHub-Delivery": guid,
            "X-Hub-Signature-256": sign(SECRET, body),
        },
    )


def test_labeled_issue_is_opened_and_comments_delivered_by_the_poller(world) -> None:
    fake: FakeGitHub = world["fake"]
    assert poll(world).errors == []  # baseline
    fake.open_issue(REPO, title="Make it faster", body="The parser is slow.")
    fake.label(REPO, 1, LABEL)
    report = poll(world)
    assert report.processed == 1, report
    assert wait_for(lambda: any("Make it faster" in t for t in messages(world)))
    fake.comment(REPO, 1, "Start with the tokenizer.")
    poll(world)
    assert wait_for(lambda: any("Start with the tokenizer." in t for t in messages(world)))
    record = world["store"].registry.list()[0]
    assert str(record.work_item) == f"github:{REPO}#1"


def test_comment_seen_by_webhook_and_poller_reaches_the_session_once(world) -> None:
    fake: FakeGitHub = world["fake"]
    fake.open_issue(REPO, labels=(LABEL,))
    poll(world)  # baseline: issue 1 is watched
    from loop_dispatch import WorkItemRef

    world["dispatcher"].start(WorkItemRef.parse(f"github:{REPO}#1"), "begin")
    assert wait_for(lambda: "begin" in " ".join(messages(world)))
    made = fake.comment(REPO, 1, "Exactly-once, please.")
    body = delivery(fake, made.id)
    app = create_app(
        SECRET,
        InboxAccept(world["store"]),
        authorized_actors=["alice"],
        trigger_label=LABEL,
        own_login="loop-bot",
    )
    with served(app) as url:
        assert send(url, body, "guid-1").status_code == 202
        assert drain(world).processed == 1
        assert wait_for(lambda: any("Exactly-once" in t for t in messages(world)))
        # GitHub redelivers under a new GUID, and the poller lists the same comment:
        # the inbox already holds its delivery id.
        assert send(url, body, "guid-2").json()["status"] == "duplicate"
        assert send(url, body, "guid-1").status_code == 200
        report = poll(world)
        time.sleep(1.0)  # give any duplicate paste time to land (none must)
    assert sum("Exactly-once" in t for t in messages(world)) == 1
    assert report.processed == 0


def test_poller_first_then_webhook_is_also_once(world) -> None:
    fake: FakeGitHub = world["fake"]
    fake.open_issue(REPO, labels=(LABEL,))
    poll(world)
    from loop_dispatch import WorkItemRef

    world["dispatcher"].start(WorkItemRef.parse(f"github:{REPO}#1"), "begin")
    made = fake.comment(REPO, 1, "Poller got here first.")
    assert poll(world).processed == 1
    assert wait_for(lambda: any("Poller got here first." in t for t in messages(world)))
    app = create_app(
        SECRET,
        InboxAccept(world["store"]),
        authorized_actors=["alice"],
        trigger_label=LABEL,
    )
    with served(app) as url:
        late = send(url, delivery(fake, made.id), "late-guid")
        assert late.json()["status"] == "duplicate"
        assert drain(world).processed == 0
    assert sum("Poller got here first." in t for t in messages(world)) == 1


def test_transient_github_failure_loses_nothing(world) -> None:
    fake: FakeGitHub = world["fake"]
    fake.open_issue(REPO, labels=(LABEL,))
    poll(world)
    from loop_dispatch import WorkItemRef

    world["dispatcher"].start(WorkItemRef.parse(f"github:{REPO}#1"), "begin")
    fake.comment(REPO, 1, "Said during an outage.")
    world["source"].github._sleep = lambda s: None
    fake.fail_next(503, count=3)
    failed = poll(world)
    assert failed.errors
    assert failed.processed == 0
    assert poll(world).processed == 1
    assert wait_for(lambda: any("Said during an outage." in t for t in messages(world)))
    assert os.environ.get("TMUX") is None
