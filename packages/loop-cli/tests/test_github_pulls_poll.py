"""The poller's pull request coverage against the fake GitHub: linking, reviews, line
comments, conversation comments on PRs, failed checks, and what an idle cycle costs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakegithub import FakeGitHub
from test_github_source import LABEL, REPO, TOKEN, Poller

from loop_cli.github.source import GitHubSource
from loop_dispatch import WorkItemRef

ITEM1 = WorkItemRef("github", REPO, 1)


class Ledger(Poller):
    """A poller whose cycles return only events not seen before, as dispatch's ledger
    keeps them (overlapping windows list an event again; its delivery id drops it)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.seen: set[str] = set()

    def cycle(self, keep_cursor: bool = True):
        batch = super().cycle(keep_cursor)
        fresh = [e for e in batch.events if e.delivery_id not in self.seen]
        self.seen.update(e.delivery_id for e in batch.events)
        self.seen.update(batch.baseline)
        batch.events = fresh
        return batch


@pytest.fixture
def fake():
    with FakeGitHub(token=TOKEN, login="Loop-Bot") as server:
        yield server


def per_pr(poller: Ledger) -> Ledger:
    poller.source = GitHubSource(
        [REPO],
        TOKEN,
        poller.fake.api_url,
        LABEL,
        ["Alice"],
        None,
        clock=lambda: poller.fake.now,
        active_items=lambda: dict(poller.active),
        session_per_pr=True,
    )
    return poller


def test_review_comment_on_a_pr_that_fixes_an_item_reaches_the_item(fake: FakeGitHub) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    poller = Ledger(fake)
    poller.cycle()
    pr = fake.open_pull(REPO, title="Parser fix", body="Fixes #1", user="alice")
    [opened] = poller.cycle().events
    assert opened.work_item == ITEM1
    assert opened.delivery_id == f"pr-opened:github:{REPO}#{pr.number}"
    assert opened.subject == f"pull request #{pr.number} opened"

    made = fake.review_comment(REPO, pr.number, "rename this", path="src/parse.py", line=12)
    [event] = poller.cycle().events
    assert event.work_item == ITEM1
    assert event.delivery_id == f"review-comment:github:{REPO}:{made.id}"
    assert event.subject == f"pull request #{pr.number}, review comment on `src/parse.py` line 12"
    assert event.body == "rename this"

    talk = fake.comment(REPO, pr.number, "and the docs?")
    review = fake.review(REPO, pr.number, "needs tests")
    fake.review(REPO, pr.number, "", state="COMMENTED")  # only wraps line comments
    fake.comment(REPO, pr.number, "drive-by", user="mallory")
    batch = poller.cycle()
    got = {e.delivery_id: e for e in batch.events}
    assert set(got) == {
        f"comment:github:{REPO}:{talk.id}",
        f"review:github:{REPO}:{review.id}",
    }
    assert {e.work_item for e in batch.events} == {ITEM1}
    assert got[f"review:github:{REPO}:{review.id}"].subject.endswith("review: changes requested")


def test_failed_check_on_a_loop_branch_reaches_its_item(fake: FakeGitHub) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    poller = Ledger(fake)
    poller.cycle()
    pr = fake.open_pull(REPO, body="no keywords here", head_ref=f"loop/{ITEM1.slug()}")
    poller.cycle()
    fake.check_run(REPO, pr.number, conclusion="success", name="lint")
    run = fake.check_run(REPO, pr.number, conclusion="failure", name="tests")
    [event] = poller.cycle().events
    assert event.work_item == ITEM1
    assert event.delivery_id == f"check-run:github:{REPO}:{run.id}:failure"
    assert event.subject == f"CI failure: check run {run.id}"
    # Idle: the activity probe and the linked PR's three CI probes (check runs, check
    # suites, commit statuses: issue 27), all 304s (free), no GraphQL.
    fake.tick(300)
    poller.cycle()
    poller.cycle()
    paths = [path for path, _, _ in fake.requests]
    assert len(paths) == 4
    assert "/graphql" not in paths
    assert all(status == 304 for _, _, status in fake.requests)
    # Merged: the item hears of it, and its checks are no longer probed.
    fake.close_pull(REPO, pr.number, merged=True)
    [merged] = poller.cycle().events
    assert merged.subject == f"pull request #{pr.number} merged"
    fake.tick(300)
    poller.cycle()
    poller.cycle()
    assert len(fake.requests) == 1


def test_unlinked_pr_creates_nothing_unless_session_per_pr(fake: FakeGitHub) -> None:
    poller = Ledger(fake)
    poller.cycle()
    pr = fake.open_pull(REPO, body="just a change")
    fake.review_comment(REPO, pr.number, "hm")
    assert poller.cycle().events == []

    fake2 = per_pr(Ledger(fake))
    fake2.cycle()
    fake.review_comment(REPO, pr.number, "now routed")
    events = fake2.cycle().events
    assert [e.body for e in events] == ["now routed"]
    assert events[0].work_item == WorkItemRef("github", REPO, pr.number)
