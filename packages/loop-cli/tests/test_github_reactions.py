"""Reactions against the fake GitHub: what is posted, in which order, and that neither
a slow nor a failing GitHub ever holds up the caller (the drain) or retries forever."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakegithub import FakeGitHub

from loop_cli.github.client import GitHubClient
from loop_cli.github.parse import MARKER
from loop_cli.github.reactions import Reactor, jobs_for
from loop_dispatch import Event, EventKind, WorkItemRef

REPO = "octo/app"
TOKEN = "ghp_reactionsTEST"


@dataclass
class Outcome:
    kind: Any
    reason: str
    confirmed: bool = False


@dataclass
class Kind:
    value: str


@dataclass
class Entry:
    seq: int
    event: Event | None


@dataclass
class Settlement:
    entry: Entry
    outcome: Outcome | None
    state: str


def settled(
    comment_id: str,
    state: str = "done",
    kind: str = "processed",
    number: int = 1,
    confirmed: bool = False,
):
    event = Event(
        delivery_id=f"comment:github:{REPO}:{comment_id}",
        work_item=WorkItemRef("github", REPO, number),
        kind=EventKind.COMMENT,
        actor="alice",
        body="hi",
        url=f"https://github.com/{REPO}/issues/{number}#issuecomment-{comment_id}",
        created_at=datetime.now(timezone.utc),
        comment_id=comment_id,
    )
    return Settlement(Entry(7, event), Outcome(Kind(kind), "harness_exited", confirmed), state)


@pytest.fixture
def fake():
    with FakeGitHub(token=TOKEN, login="loop-bot") as server:
        server.open_issue(REPO)
        yield server


@pytest.fixture
def reactor(fake):
    client = GitHubClient(TOKEN, fake.api_url, retries=0)
    made = Reactor(client.post_json, backoff=0.0)
    yield made
    made.close()
    client.close()


def test_delivered_gets_eyes_given_up_gets_confused_then_one_comment(fake, reactor) -> None:
    first = fake.comment(REPO, 1, "please")
    second = fake.comment(REPO, 1, "and this")
    reactor.on_settled(settled(str(first.id)))
    reactor.on_settled(settled(str(second.id), state="given_up", kind="failed"))
    reactor.on_settled(settled(str(second.id), state="retry", kind="failed"))  # nothing
    assert reactor.flush()
    assert fake.repos[REPO].reactions == [
        ("issues", first.id, "eyes", "loop-bot"),
        ("issues", second.id, "confused", "loop-bot"),
    ]
    notes = [c for c in fake.repos[REPO].comments if c.user == "loop-bot"]
    assert len(notes) == 1
    assert notes[0].body.startswith(MARKER)  # never read back as a prompt
    assert "harness_exited" in notes[0].body
    assert "the-loop inbox retry 7" in notes[0].body


def test_a_receipt_adds_a_rocket_after_the_eyes(fake, reactor) -> None:
    """Where the harness confirms its conversation holds the text (receipts), the comment
    also gets `rocket`, after `eyes`; an unconfirmed delivery gets `eyes` only."""
    held = fake.comment(REPO, 1, "confirmed by the harness")
    plain = fake.comment(REPO, 1, "no receipt")
    reactor.on_settled(settled(str(held.id), confirmed=True))
    reactor.on_settled(settled(str(plain.id)))
    assert reactor.flush()
    assert fake.repos[REPO].reactions == [
        ("issues", held.id, "eyes", "loop-bot"),
        ("issues", held.id, "rocket", "loop-bot"),
        ("issues", plain.id, "eyes", "loop-bot"),
    ]


def test_review_comments_react_on_the_pulls_endpoint(fake, reactor) -> None:
    pr = fake.open_pull(REPO, body="Fixes #1")
    line = fake.review_comment(REPO, pr.number, "nit")
    reactor.on_settled(settled(f"review-comment:{line.id}"))
    assert reactor.flush()
    assert fake.repos[REPO].reactions == [("pulls", line.id, "eyes", "loop-bot")]


def test_no_reaction_for_local_items_or_events_without_a_comment() -> None:
    local = settled("5")
    event = local.entry.event
    local.entry.event = Event(**{**event.__dict__, "work_item": WorkItemRef("local", "p", 1)})
    assert jobs_for(local) == []
    opened = settled("5")
    opened.entry.event = Event(**{**event.__dict__, "comment_id": None})
    assert jobs_for(opened) == []


def test_a_5xx_is_retried_a_404_is_not_and_retries_are_bounded(fake, reactor) -> None:
    made = fake.comment(REPO, 1, "x")
    fake.fail_next(502)
    reactor.on_settled(settled(str(made.id)))
    assert reactor.flush()
    assert fake.repos[REPO].reactions == [("issues", made.id, "eyes", "loop-bot")]
    fake.reset_log()
    reactor.on_settled(settled("999999"))  # a deleted comment: 404, one call
    assert reactor.flush()
    assert fake.count("/repos") == 1
    fake.reset_log()
    fake.fail_next(503, count=10)
    reactor.on_settled(settled(str(made.id)))
    assert reactor.flush()
    assert fake.count("/repos") == reactor.attempts  # then it gives up
    assert reactor.failed == 2


def test_rate_limited_github_is_given_up_not_waited_on(fake) -> None:
    made = fake.comment(REPO, 1, "x")
    fake.exhaust(retry_after=3600)
    client = GitHubClient(TOKEN, fake.api_url, retries=0, max_wait=0.5)
    results: list[str] = []
    reactor = Reactor(client.post_json, backoff=0.0, on_result=lambda job, r: results.append(r))
    try:
        reactor.on_settled(settled(str(made.id)))
        assert reactor.flush()
        assert len(results) == 1
        assert results[0].startswith("gave up")
        assert "rate limited" in results[0]
    finally:
        reactor.close()
        client.close()


def test_the_callback_never_waits_for_github() -> None:
    """A GitHub that hangs: on_settled still returns at once, each time; a full queue
    drops (and counts) rather than blocks."""
    release = threading.Event()
    calls: list[str] = []

    def hanging_post(path: str, body: dict) -> None:
        calls.append(path)
        release.wait(30)

    reactor = Reactor(hanging_post, max_queue=2)
    try:
        for n in range(5):
            reactor.on_settled(settled(str(100 + n)))  # returns though the post hangs
        assert reactor.dropped >= 2
    finally:
        release.set()
        reactor.close()
    assert calls


def test_runtime_chains_reactions_only_when_enabled_with_a_token(write_config, monkeypatch) -> None:
    from loop_cli.config import load_config
    from loop_cli.runtime import Runtime

    base = {"tracker": "github", "github": {"repositories": [REPO], "tokenEnv": "GH_T"}}
    monkeypatch.setenv("GH_T", TOKEN)
    for reactions, token, wanted in (
        (True, True, True),
        (False, True, False),
        (True, False, False),
    ):
        if not token:
            monkeypatch.delenv("GH_T")
        write_config({**base, "github": {**base["github"], "reactions": reactions}})
        rt = Runtime(load_config(None))
        try:
            assert (rt.reactor() is not None) is wanted
            rt.drain()
            # The drain asks the reactor of the config in force at each settlement (a
            # reload may switch reactions on or off): none is built when they are off.
            assert (rt.reactor() is not None) is wanted
        finally:
            rt.close()


def _control(comment_id: str, reason: str, detail: str, state: str = "done") -> Any:
    from loop_dispatch.drain import Settlement as Real
    from loop_dispatch.reasons import Outcome as RealOutcome
    from loop_dispatch.reasons import Reason

    event = Event(
        delivery_id=f"comment:github:{REPO}:{comment_id}",
        work_item=WorkItemRef("github", REPO, 1),
        kind=EventKind.CONTROL,
        actor="alice",
        body="the-loop pause",
        url=f"https://github.com/{REPO}/issues/1#issuecomment-{comment_id}",
        created_at=datetime.now(timezone.utc),
        comment_id=comment_id,
    )
    member = Reason.of(reason)
    assert member is not None
    return Real(entry=Entry(7, event), outcome=RealOutcome.of(member, detail), state=state)  # type: ignore[arg-type]


def test_control_words_are_answered_plus_one_or_confused_with_one_reply() -> None:
    """Issue 24: executed -> +1 alone (no eyes: a command is never delivered); status
    -> +1 and its reply; refused -> confused and one marked reply with the remedy."""
    ran = jobs_for(_control("5", "control_executed", "paused: new events wait"))
    assert [j.what for j in ran] == ["+1"]
    assert ran[0].body == {"content": "+1"}
    status = jobs_for(_control("6", "control_executed", "status: live; host h"))
    assert [j.what for j in status] == ["+1", "comment"]
    assert status[1].body["body"] == f"{MARKER}\nstatus: live; host h"
    refused = jobs_for(_control("7", "control_rejected", "Refused: x. Remedy: y."))
    assert [j.what for j in refused] == ["confused", "comment"]
    assert refused[1].path == f"repos/{REPO}/issues/1/comments"
    assert refused[1].body["body"].startswith(MARKER)
    assert "Remedy: y." in refused[1].body["body"]
    # a command that failed and will be retried gets nothing yet (no eyes either)
    assert jobs_for(_control("8", "spawn_failed", "x", state="retry")) == []


def test_a_reload_switches_reactions_per_project(write_config, monkeypatch) -> None:
    from loop_cli.config import LoadedConfig, load_config
    from loop_cli.runtime import Runtime

    monkeypatch.setenv("GH_T", TOKEN)
    base = {"tracker": "github", "github": {"repositories": [REPO], "tokenEnv": "GH_T"}}
    write_config({**base, "github": {**base["github"], "reactions": False}})
    rt = Runtime(load_config(None))
    try:
        assert rt.reactor() is None
        write_config(
            {
                **base,
                "github": {**base["github"], "reactions": False},
                "projects": {REPO: {"reactions": True}},
            }
        )
        loaded = load_config(None)
        rt.apply_config(LoadedConfig(loaded.config, loaded.path, loaded.origin))
        assert rt.reactor() is not None
        assert rt.config.for_project(REPO).github.reactions is True
    finally:
        rt.close()
