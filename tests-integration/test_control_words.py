"""Control words on the ticket (issue 24), through both ingresses.

Real pieces: the fake GitHub on loopback (comments, reactions, replies), the webhook app
under uvicorn on loopback, the poller, the inbox and drain, a private tmux server and
the recording fake harness. `the-loop pause` runs once however many times it is seen,
is never pasted, holds later comments in the inbox; `the-loop resume` pastes them in
order; an outsider's `the-loop stop` is refused and answered; quotes and code never
match; the-loop's own replies are never read back.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from test_github_webhook_and_poller import (  # noqa: F401 (the `world` fixture)
    LABEL,
    REPO,
    SECRET,
    TOKEN,
    delivery,
    messages,
    send,
    world,
)

from loop_cli.github.client import GitHubClient
from loop_cli.github.reactions import Reactor
from loop_cli.webhook.app import create_app
from loop_cli.webhook.seen import InboxAccept
from loop_tmux.testing import wait_for

pytestmark = pytest.mark.tmux


def _cycle(w: dict[str, Any], reactor: Reactor, *, poll: bool = True) -> None:
    """`poll --once` (or the receiver's drain alone), acknowledging through `reactor`."""
    from loop_dispatch.drain import Drain, RetryPolicy
    from loop_dispatch.poll import run_poll_cycle

    if poll:
        run_poll_cycle(w["store"], w["source"], w["events"])
    Drain(
        w["store"],
        w["dispatcher"],
        w["events"],
        versions={"t": "1"},
        policy=RetryPolicy(backoff=0.01, max_backoff=0.01),
        idle=0.01,
        on_settled=reactor.on_settled,
    ).run(until_idle=True)
    reactor.flush(10)


def _of(w: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r for r in w["events"].read() if r["type"] == kind]


def test_pause_holds_resume_pastes_in_order_once_through_webhook_and_poller(
    world,  # noqa: F811 (the imported fixture)
) -> None:
    fake = world["fake"]
    fake.open_issue(REPO, labels=(LABEL,))
    client = GitHubClient(TOKEN, fake.api_url)
    reactor = Reactor(client.post_json)
    _cycle(world, reactor)  # baseline: issue 1 is watched
    from loop_dispatch import WorkItemRef

    ref = WorkItemRef.parse(f"github:{REPO}#1")
    world["dispatcher"].start(ref, "begin")
    assert wait_for(lambda: "begin" in " ".join(messages(world)))
    app = create_app(
        SECRET,
        InboxAccept(world["store"]),
        authorized_actors=["alice"],
        trigger_label=LABEL,
        own_login="loop-bot",
    )
    with served_app(app) as url:
        pause = fake.comment(REPO, 1, "\r\nthe-loop pause\r\nback after lunch")
        assert send(url, delivery(fake, pause.id), "g-pause").status_code == 202
        _cycle(world, reactor)  # the poller lists the same comment: one delivery id
        assert len(_of(world, "control.command")) == 1
        held = [
            fake.comment(REPO, 1, "First, held."),
            fake.comment(REPO, 1, "> the-loop resume\n\nquoted, not a command"),
            fake.comment(REPO, 1, "```\nthe-loop resume\n```"),
            fake.comment(REPO, 1, "    the-loop resume"),
        ]
        _cycle(world, reactor)
        paused = world["store"].inbox.entries(("paused",), work_item=str(ref))
        assert [e.event.comment_id for e in paused] == [str(c.id) for c in held]
        # redelivered by GitHub under a new GUID, and listed again: runs nothing twice
        assert send(url, delivery(fake, pause.id), "g-pause-2").json()["status"] == "duplicate"
        outsider = fake.comment(REPO, 1, "the-loop stop", user="mallory")
        _cycle(world, reactor)
        resume = fake.comment(REPO, 1, "THE-LOOP resume")
        assert send(url, delivery(fake, resume.id), "g-resume").status_code == 202
        _cycle(world, reactor, poll=False)
        _cycle(world, reactor)
    texts = messages(world)
    assert wait_for(lambda: sum("First, held." in t for t in messages(world)) == 1)
    assert wait_for(lambda: sum("    the-loop resume" in t for t in messages(world)) == 1)
    time.sleep(0.5)  # any second paste would land by now (none must)
    texts = messages(world)
    order = [
        next(i for i, t in enumerate(texts) if marker in t)
        for marker in (
            "First, held.",
            "quoted, not a command",
            "```\nthe-loop resume",
            "    the-loop resume",
        )
    ]
    assert order == sorted(order)
    assert sum("First, held." in t for t in texts) == 1
    assert not any("the-loop pause" in t or "THE-LOOP resume" in t for t in texts)
    assert not any("the-loop stop" in t for t in texts)  # the outsider's: never pasted
    commands = _of(world, "control.command")
    assert [c["detail"]["verb"] for c in commands] == ["pause", "resume"]
    (rejected,) = _of(world, "control.rejected")
    assert rejected["detail"] == {"verb": "stop", "actor": "mallory", "reason": "not_authorized"}
    assert world["store"].registry.get(ref).status == "active"  # the stop ran nothing
    reactions = {(cid, content) for _, cid, content, _ in fake.repo(REPO).reactions}
    assert {(pause.id, "+1"), (resume.id, "+1"), (outsider.id, "confused")} <= reactions
    assert not any(content == "eyes" and cid in (pause.id, resume.id) for cid, content in reactions)
    replies = [c for c in fake.repo(REPO).comments if c.user == "loop-bot"]
    assert len(replies) == 1
    assert "not an authorized actor" in replies[0].body
    assert "Remedy" in replies[0].body
    # the-loop's own reply is never read back as a command or a prompt
    before = len(world["store"].inbox.entries(("done",)))
    _cycle(world, reactor)
    assert len(world["store"].inbox.entries(("done",))) == before
    assert not any("not an authorized actor" in t for t in messages(world))
    reactor.close()
    client.close()


def served_app(app: Any) -> Any:
    from fakegithub import served

    return served(app)
