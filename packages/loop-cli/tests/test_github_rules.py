"""Issue 10: one home for GitHub's rules. The same activity, seen by the poller (REST
listings) and by the webhook (payloads), is the same Event: ref, delivery id, actor."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from loop_dispatch import Event, EventKind

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakegithub import FakeGitHub

from loop_cli.github.rules import Ignored, Rules
from loop_cli.github.source import GitHubSource
from loop_cli.webhook.payload import PayloadError, to_event

CANONICAL = "Acme/Widgets"  # GitHub's spelling, in every payload
CONFIGURED = "acme/widgets"  # the operator's spelling, in the config
LABEL = "the-loop"
TOKEN = "ghp_rulesTEST"


def _payload(fake: FakeGitHub, action: str, number: int, **extra: object) -> dict:
    repo = fake.repo(CANONICAL)
    return {
        "action": action,
        "repository": {"full_name": CANONICAL},
        "issue": fake._issue_json(repo, repo.issues[number]),
        "sender": {"login": "Closer"},
        **extra,
    }


def _key(event: Event) -> tuple:
    return (
        event.delivery_id,
        str(event.work_item),
        event.kind,
        event.actor,
        event.body,
        event.spawns,
        event.keep_workspace,
    )


def test_poller_and_webhook_build_identical_events() -> None:
    with FakeGitHub(token=TOKEN, login="loop-bot") as fake:
        fake.open_issue(CANONICAL, labels=())
        source = GitHubSource(
            [CONFIGURED], TOKEN, fake.api_url, LABEL, ["Alice"], None, clock=lambda: fake.now
        )
        rules = Rules.build(LABEL, ["Alice"], "loop-bot", [CONFIGURED])
        cursor = source.poll(None).cursor
        fake.label(CANONICAL, 1, LABEL)
        labeled = to_event("issues", _payload(fake, "labeled", 1, label={"name": LABEL}), rules)
        batch = source.poll(cursor)
        cursor = batch.cursor
        polled = list(batch.events)
        comment = fake.comment(CANONICAL, 1, "please fix", user="alice")
        marker = fake.comment(CANONICAL, 1, "<!-- the-loop --> done", user="alice")
        stranger = fake.comment(CANONICAL, 1, "do evil", user="mallory")
        repo = fake.repo(CANONICAL)
        hooked = [labeled]
        for item in (comment, marker, stranger):
            hooked.append(
                to_event(
                    "issue_comment",
                    _payload(fake, "created", 1, comment=fake._comment_json(repo, item)),
                    rules,
                )
            )
        fake.tick(5)
        batch = source.poll(cursor)
        cursor = batch.cursor
        polled += batch.events
        fake.close(CANONICAL, 1, by="Closer")
        hooked.append(to_event("issues", _payload(fake, "closed", 1), rules))
        fake.tick(5)
        batch = source.poll(cursor)
        cursor = batch.cursor
        polled += batch.events
        # Reopened and labeled again: a new opening, the same id by both roads.
        fake.reopen(CANONICAL, 1)
        fake.label(CANONICAL, 1, LABEL)
        hooked.append(
            to_event("issues", _payload(fake, "labeled", 1, label={"name": LABEL}), rules)
        )
        fake.tick(5)
        polled += source.poll(cursor).events
        source.close()

    events = [e for e in hooked if isinstance(e, Event)]
    assert [type(e) for e in hooked] == [Event, Event, Ignored, Ignored, Event, Event]
    assert [e.kind for e in events] == [
        EventKind.OPENED,
        EventKind.COMMENT,
        EventKind.CLOSED,
        EventKind.OPENED,
    ]
    assert events[2].actor == "Closer"
    assert events[3].delivery_id != events[0].delivery_id
    assert events[3].delivery_id.startswith(events[0].delivery_id + ":")
    assert sorted(map(_key, polled)) == sorted(map(_key, events))
    for event in events:
        assert str(event.work_item) == "github:acme/widgets#1"
        assert CANONICAL not in event.delivery_id


def test_a_number_that_could_not_be_read_back_is_a_400() -> None:
    rules = Rules.build(LABEL, ["alice"])
    issue = {
        "number": 10**19,
        "title": "t",
        "user": {"login": "alice"},
        "state": "open",
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    payload = {
        "action": "labeled",
        "repository": {"full_name": CANONICAL},
        "issue": issue,
        "label": {"name": LABEL},
    }
    with pytest.raises(PayloadError, match="number") as caught:
        to_event("issues", payload, rules)
    assert "\n" not in str(caught.value)


def test_display_keeps_the_configured_spelling() -> None:
    from loop_cli.sessions import display_ref
    from loop_dispatch import WorkItemRef

    ref = WorkItemRef("github", "Acme/Widgets", 4)
    assert str(ref) == "github:acme/widgets#4"
    assert display_ref(ref, ["ACME/widgets"]) == "github:ACME/widgets#4"
    assert display_ref(ref, ["other/repo"]) == "github:acme/widgets#4"
    assert display_ref(WorkItemRef("local", "Proj", 1), []) == "local:Proj#1"
