"""Pull request and CI activity reaches the linked item's agent once, by either road.

Real pieces as in test_github_webhook_and_poller: the fake GitHub on loopback (now
with pull requests, reviews, line comments and check runs), the webhook app under
uvicorn, dispatch's inbox and drain, a private tmux server and the fake harness.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_github_webhook_and_poller import LABEL, REPO, SECRET, TOKEN, drain, messages, poll
from test_github_webhook_and_poller import world as world

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "loop-cli" / "tests"))
from fakegithub import FakeGitHub, served

from loop_cli.webhook.app import create_app
from loop_cli.webhook.seen import InboxAccept
from loop_cli.webhook.verify import sign
from loop_dispatch import WorkItemRef
from loop_tmux.testing import wait_for

pytestmark = pytest.mark.tmux


def send(url: str, kind: str, payload: dict[str, Any], guid: str) -> httpx.Response:
    body = json.dumps(payload).encode()
    return httpx.post(
        url + "/",
        content=body,
        timeout=10,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": kind,
            "X-GitHub-Delivery": guid,
            "X-Hub-Signature-256": sign(SECRET, body),
        },
    )


def review_comment_payload(fake: FakeGitHub, number: int, comment_id: int) -> dict[str, Any]:
    repo = fake.repo(REPO)
    item = next(c for c in repo.review_comments if c.id == comment_id)
    return {
        "action": "created",
        "pull_request": fake._pull_json(repo, repo.issues[number]),
        "comment": fake._review_comment_json(repo, item),
        "repository": {"full_name": REPO},
        "sender": {"login": item.user},
    }


def app(world: dict[str, Any], **kwargs: Any) -> Any:
    return create_app(
        SECRET,
        InboxAccept(world["store"]),
        authorized_actors=["alice"],
        trigger_label=LABEL,
        own_login="loop-bot",
        **kwargs,
    )


def started(world: dict[str, Any], number: int) -> WorkItemRef:
    ref = WorkItemRef("github", REPO, number)
    world["dispatcher"].start(ref, f"begin {number}")
    assert wait_for(lambda: f"begin {number}" in " ".join(messages(world)))
    return ref


def test_review_comment_on_a_fixes_pr_reaches_the_item_once_by_both_roads(world) -> None:
    fake: FakeGitHub = world["fake"]
    for _ in range(3):
        fake.open_issue(REPO, labels=(LABEL,))
    poll(world)  # baseline
    started(world, 3)
    pr = fake.open_pull(REPO, title="Speed up", body="Fixes #3", user="alice")
    poll(world)  # the PR's opening reaches #3
    assert wait_for(lambda: any(f"pull request #{pr.number} opened" in t for t in messages(world)))
    made = fake.review_comment(REPO, pr.number, "Inline: rename x.", path="src/x.py", line=7)
    with served(app(world)) as url:
        answer = send(
            url,
            "pull_request_review_comment",
            review_comment_payload(fake, pr.number, made.id),
            "g1",
        )
        assert answer.status_code == 202, answer.text
        assert drain(world).processed == 1
        assert wait_for(lambda: any("Inline: rename x." in t for t in messages(world)))
        report = poll(world)  # the poller lists the same line comment
        time.sleep(1.0)  # room for a duplicate paste to land (none must)
    texts = [t for t in messages(world) if "Inline: rename x." in t]
    assert len(texts) == 1
    assert report.processed == 0
    assert f"(pull request #{pr.number}, review comment on `src/x.py` line 7)" in texts[0]
    assert f"github:{REPO}#3" in texts[0]

    # The other way round: the poller first, then the webhook's copy is a duplicate.
    later = fake.review_comment(REPO, pr.number, "Poller first this time.")
    assert poll(world).processed == 1
    with served(app(world)) as url:
        late = send(
            url,
            "pull_request_review_comment",
            review_comment_payload(fake, pr.number, later.id),
            "g2",
        )
        assert late.json()["status"] == "duplicate"
    assert sum("Poller first this time." in t for t in messages(world)) == 1


def test_failed_check_on_the_item_branch_reaches_its_agent(world) -> None:
    fake: FakeGitHub = world["fake"]
    fake.open_issue(REPO, labels=(LABEL,))
    poll(world)
    ref = started(world, 1)
    pr = fake.open_pull(REPO, body="no keyword", head_ref=f"loop/{ref.slug()}")
    poll(world)
    run = fake.check_run(REPO, pr.number, conclusion="failure", name="unit tests")
    check = {
        "action": "completed",
        "check_run": fake._check_run_json(fake.repo(REPO), fake.repo(REPO).check_runs[-1]),
        "repository": {"full_name": REPO},
        "sender": {"login": "github-actions[bot]"},
    }
    with served(app(world)) as url:
        assert send(url, "check_run", check, "c1").status_code == 202
        assert drain(world).processed == 1
    assert wait_for(lambda: any("unit tests: failure" in t for t in messages(world)))
    assert poll(world).processed == 0  # the poller's copy of run {run.id} is the same id
    assert sum("unit tests: failure" in t for t in messages(world)) == 1
    assert run.id


def test_a_pr_with_no_link_creates_nothing_unless_session_per_pr(world) -> None:
    fake: FakeGitHub = world["fake"]
    poll(world)
    pr = fake.open_pull(REPO, body="a drive-by refactor")
    made = fake.review_comment(REPO, pr.number, "unlinked")
    payload = review_comment_payload(fake, pr.number, made.id)
    with served(app(world)) as url:
        answer = send(url, "pull_request_review_comment", payload, "u1")
        assert answer.json()["status"] == "ignored"
        assert "sessionPerPr" in answer.json()["reason"]
    assert poll(world).processed == 0
    assert world["store"].registry.list() == []
    with served(app(world, session_per_pr=True)) as url:
        assert send(url, "pull_request_review_comment", payload, "u2").status_code == 202
        assert drain(world).processed == 1
    [record] = world["store"].registry.list()
    assert record.work_item == WorkItemRef("github", REPO, pr.number)
    assert wait_for(lambda: any("unlinked" in t for t in messages(world)))


def test_reactions_follow_the_pastes_in_order(world) -> None:
    """eyes on each delivered comment, in delivery order, after its paste: the drain
    hands settled events to the reactor, which posts to the fake GitHub."""
    from loop_cli.github.client import GitHubClient
    from loop_cli.github.reactions import Reactor
    from loop_dispatch.drain import Drain

    fake: FakeGitHub = world["fake"]
    fake.open_issue(REPO, labels=(LABEL,))
    poll(world)
    started(world, 1)
    pr = fake.open_pull(REPO, body="Fixes #1")
    poll(world)
    first = fake.comment(REPO, 1, "First, this.")
    line = fake.review_comment(REPO, pr.number, "Then, this line.")
    second = fake.comment(REPO, pr.number, "Last, on the PR.")
    client = GitHubClient(fake.token, fake.api_url, retries=0)
    reactor = Reactor(client.post_json, backoff=0.0)
    settled: list[str] = []

    def on_settled(settlement: Any) -> None:  # as the runtime chains it: after the settle
        settled.append(settlement.entry.delivery_id)
        reactor.on_settled(settlement)

    try:
        from loop_dispatch.poll import run_poll_cycle

        run_poll_cycle(world["store"], world["source"], world["events"])  # commit only
        Drain(
            world["store"],
            world["dispatcher"],
            world["events"],
            versions={"t": "1"},
            idle=0.01,
            concurrency=1,
            on_settled=on_settled,
        ).run(until_idle=True)
        assert reactor.flush()
    finally:
        reactor.close()
        client.close()
    reactions = [(kind, cid, content) for kind, cid, content, _ in fake.repos[REPO].reactions]
    assert reactions == [
        ("issues", first.id, "eyes"),
        ("pulls", line.id, "eyes"),
        ("issues", second.id, "eyes"),
    ]
    assert settled == [
        f"comment:github:{REPO}:{first.id}",
        f"review-comment:github:{REPO}:{line.id}",
        f"comment:github:{REPO}:{second.id}",
    ]
    assert wait_for(
        lambda: sum(s in " ".join(messages(world)) for s in ("First", "Then", "Last")) == 3
    )
    texts = messages(world)
    order = [next(i for i, t in enumerate(texts) if s in t) for s in ("First", "Then", "Last")]
    assert order == sorted(order)


def test_a_sidebar_linked_pr_is_heard_by_both_roads_within_the_ci_budget(world) -> None:
    """Issue 27: a PR linked only in GitHub's sidebar. The poller reads the link (one
    GraphQL request) and stores it; the webhook, whose payloads lack the sidebar,
    routes the PR's checks by the stored link; the CI retry budget (1) lets one failure
    through, then one escalation, then nothing — one paste each, by either road."""
    from loop_cli.commands.webhook import _pr_links
    from loop_cli.github.cibudget import CiBudget
    from loop_cli.github.source import GitHubSource

    fake: FakeGitHub = world["fake"]
    world["source"] = GitHubSource(  # as `poll start` builds it from github.ciRetries: 1
        [REPO],
        TOKEN,
        fake.api_url,
        LABEL,
        ["alice"],
        world["store"],
        clock=lambda: fake.now,
        ci_retries=1,
    )
    fake.open_issue(REPO, labels=(LABEL,))
    poll(world)
    ref = started(world, 1)
    pr = fake.open_pull(REPO, title="Quiet fix", body="no keyword", head_ref="feature")
    fake.link_sidebar(REPO, pr.number, REPO, 1)
    fake.reset_log()
    poll(world)
    assert wait_for(lambda: any(f"pull request #{pr.number} opened" in t for t in messages(world)))
    assert fake.count("/graphql") == 1
    budget = CiBudget(world["store"], retries=1)
    hooks = app(world, pr_links=_pr_links(world["store"]), ci_budget=budget)
    answers = []
    with served(hooks) as url:
        for k in range(3):
            fake.check_run(REPO, pr.number, conclusion="failure", name="flaky suite")
            repo = fake.repo(REPO)
            check = {
                "action": "completed",
                "check_run": fake._check_run_json(repo, repo.check_runs[-1]),
                "repository": {"full_name": REPO},
                "sender": {"login": "github-actions[bot]"},
            }
            answers.append(send(url, "check_run", check, f"s{k}").json()["status"])
            drain(world)
    assert answers == ["accepted", "accepted", "ignored"]
    assert wait_for(lambda: any("retry budget spent" in t for t in messages(world)))
    assert poll(world).processed == 0  # the poller's copies: same ids, or over budget
    time.sleep(1.0)  # room for a duplicate paste to land (none must)
    pasted = [t for t in messages(world) if "flaky suite: failure" in t]
    assert len(pasted) == 2
    assert ref == WorkItemRef("github", REPO, 1)
