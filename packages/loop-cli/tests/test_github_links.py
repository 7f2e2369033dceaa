"""Issue 27 points 1-4 against the fake GitHub and a real store: PRs linked in the
sidebar (GraphQL `closingIssuesReferences`), links stored for the webhook, closing
references across configured repositories, commit statuses and check suites through
the poller, and the CI retry budget."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakegithub import FakeGitHub
from fakegithub import payloads as p
from test_github_source import LABEL, REPO, TOKEN

from loop_cli.github.cibudget import CiBudget
from loop_cli.github.links import PrLinks
from loop_cli.github.source import GitHubSource
from loop_cli.webhook.payload import Rules, to_event
from loop_dispatch import Event, WorkItemRef
from loop_dispatch.eventlog import EventLog
from loop_dispatch.store import Store
from loop_tmux.testing import finished_records

API = "acme/api"
ITEM1 = WorkItemRef("github", REPO, 1)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "sqlite":
        s = Store.open(tmp_path / "state")
    else:
        cluster = request.getfixturevalue("cluster")
        s = Store.open(url=cluster.create_database(), password=cluster.password)
    yield s
    s.close()


@pytest.fixture
def sqlite_store(tmp_path: Path):
    s = Store.open(tmp_path / "state")
    yield s
    s.close()


@pytest.fixture
def fake():
    with FakeGitHub(token=TOKEN, login="Loop-Bot") as server:
        yield server


class Ledger:
    """A source on a store, with the cursor and the seen delivery ids dispatch keeps."""

    def __init__(
        self,
        fake: FakeGitHub,
        store: Store,
        tmp_path: Path,
        repos: tuple[str, ...] = (REPO,),
        ci_retries: int | None = 3,
    ) -> None:
        self.fake = fake
        self.log_path = tmp_path / "events.jsonl"
        self.source = GitHubSource(
            list(repos),
            TOKEN,
            fake.api_url,
            LABEL,
            ["Alice"],
            store,
            clock=lambda: fake.now,
            active_items=lambda: {},
            ci_retries=ci_retries,
            event_log=EventLog(self.log_path),
        )
        self.cursor: str | None = None
        self.seen: set[str] = set()

    def cycle(self) -> list[Event]:
        self.fake.reset_log()
        batch = self.source.poll(self.cursor)
        assert batch.errors == []
        self.cursor = batch.cursor
        fresh = [e for e in batch.events if e.delivery_id not in self.seen]
        self.seen.update(e.delivery_id for e in batch.events)
        self.seen.update(batch.baseline)
        return fresh

    def records(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in finished_records(self.log_path) if r["type"] == kind]


def graphql_posts(fake: FakeGitHub) -> int:
    return sum(1 for path, _, _ in fake.requests if path == "/graphql")


# -- the store ------------------------------------------------------------------------


def test_links_keep_their_precedence_and_the_poller_never_drops_a_manual_one(
    store: Store,
) -> None:
    links = PrLinks(store)
    item5, item7, item9 = (WorkItemRef("github", REPO, n) for n in (5, 7, 9))
    links.replace_automatic(REPO, 12, {"keyword": item5, "sidebar": item7}, keep=frozenset())
    assert links.target(REPO, 12) == item7  # sidebar beats keyword
    links.set(REPO, 12, "manual", item9)
    assert links.target(REPO, 12) == item9  # manual beats everything
    # The poller reads the PR again: the sidebar link is gone, the manual one stays.
    links.replace_automatic(REPO, 12, {"keyword": item5}, keep=frozenset())
    assert [link.via for link in links.of_pr(REPO, 12)] == ["manual", "keyword"]
    assert links.by_item() == {str(item9): [{"repository": REPO, "pr": 12, "via": "manual"}]}
    assert links.remove(REPO, 12, "manual")
    assert links.target(REPO.upper(), 12) == item5  # repositories compare case-blind
    # A cycle whose GraphQL failed keeps the sidebar as it was.
    links.replace_automatic(REPO, 12, {"sidebar": item7}, keep=frozenset())
    links.replace_automatic(REPO, 12, {}, keep=frozenset({"sidebar"}))
    assert links.target(REPO, 12) == item7


def test_ci_budget_pastes_n_times_escalates_once_then_stays_silent(store: Store) -> None:
    t0 = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)

    def at(minutes: int) -> datetime:
        return t0 + timedelta(minutes=minutes)

    budget = CiBudget(store, retries=2)
    verdicts = [budget.admit(REPO, "run:tests", "sha1", f"d{k}", at(k)) for k in range(5)]
    assert verdicts == ["paste", "paste", "escalate", "silent", "silent"]
    # The same delivery (the other ingress saw it) gets the same answer, counted once.
    assert budget.admit(REPO, "run:tests", "sha1", "d0", at(0)) == "paste"
    assert budget.admit(REPO, "run:tests", "sha1", "d2", at(2)) == "escalate"
    # Another head or another check has its own count.
    assert budget.admit(REPO, "run:tests", "sha2", "e0", at(5)) == "paste"
    assert budget.admit(REPO, "run:lint", "sha1", "f0", at(5)) == "paste"
    # A pass starts afresh: only failures after it count, and seeing the same pass
    # again (the listing shows it on every later change) does not reset again.
    budget.passed(REPO, "run:tests", at(10))
    assert budget.admit(REPO, "run:tests", "sha1", "g0", at(11)) == "paste"
    budget.passed(REPO, "run:tests", at(10))
    assert budget.admit(REPO, "run:tests", "sha1", "g1", at(12)) == "paste"
    budget.passed(REPO, "run:tests", at(10))
    # Durable: a new process (a new object on the same store) keeps counting.
    again = CiBudget(store, retries=2)
    assert again.admit(REPO, "run:tests", "sha1", "g2", at(13)) == "escalate"
    assert again.admit(REPO, "run:tests", "sha1", "g3", at(14)) == "silent"


# -- the poller -----------------------------------------------------------------------


def test_a_pr_linked_in_the_sidebar_reaches_the_item_and_unlinking_removes_it(
    fake: FakeGitHub, sqlite_store: Store, tmp_path: Path
) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    ledger = Ledger(fake, sqlite_store, tmp_path)
    ledger.cycle()
    pr = fake.open_pull(REPO, body="no keyword here", head_ref="feature")
    fake.link_sidebar(REPO, pr.number, REPO, 1)
    [opened] = ledger.cycle()
    assert opened.work_item == ITEM1
    assert opened.subject == f"pull request #{pr.number} opened"
    assert graphql_posts(fake) == 1  # one request for the repository's changed PRs
    links = PrLinks(sqlite_store)
    assert [(x.via, x.item) for x in links.of_pr(REPO, pr.number)] == [("sidebar", ITEM1)]
    # Idle: no GraphQL at all.
    fake.tick(300)
    ledger.cycle()
    ledger.cycle()
    assert graphql_posts(fake) == 0
    # A review reaches the item through the link.
    fake.review(REPO, pr.number, "please split this")
    [review] = ledger.cycle()
    assert review.work_item == ITEM1
    # Unlinked in the sidebar: the stored link goes, and the PR's talk is not routed.
    fake.unlink_sidebar(REPO, pr.number, REPO, 1)
    ledger.cycle()
    assert links.of_pr(REPO, pr.number) == []
    fake.review(REPO, pr.number, "and this too")
    assert ledger.cycle() == []


def test_one_graphql_request_for_several_changed_prs_of_a_repository(
    fake: FakeGitHub, sqlite_store: Store, tmp_path: Path
) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    fake.open_issue(REPO, labels=(LABEL,))
    ledger = Ledger(fake, sqlite_store, tmp_path)
    ledger.cycle()
    first = fake.open_pull(REPO, body="", head_ref="a")
    second = fake.open_pull(REPO, body="", head_ref="b")
    fake.link_sidebar(REPO, first.number, REPO, 1)
    fake.link_sidebar(REPO, second.number, REPO, 2)
    events = ledger.cycle()
    assert sorted(e.work_item.number for e in events) == [1, 2]
    assert graphql_posts(fake) == 1
    [document] = fake.graphql_documents
    assert f"pr{first.number}:" in document
    assert f"pr{second.number}:" in document


def test_graphql_errors_with_200_keep_the_stored_sidebar_link(
    fake: FakeGitHub, sqlite_store: Store, tmp_path: Path
) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    ledger = Ledger(fake, sqlite_store, tmp_path)
    ledger.cycle()
    pr = fake.open_pull(REPO, body="", head_ref="feature")
    fake.link_sidebar(REPO, pr.number, REPO, 1)
    ledger.cycle()
    # GitHub answers 200 with `errors` (and no data): the cycle goes on, the link stays.
    fake.fail_graphql([{"type": "FORBIDDEN", "message": "Resource not accessible"}])
    fake.review(REPO, pr.number, "looks wrong")
    [review] = ledger.cycle()
    assert review.work_item == ITEM1
    assert PrLinks(sqlite_store).target(REPO, pr.number) == ITEM1
    # GraphQL's own rate limit (200, RATE_LIMITED): the sidebar waits, REST goes on.
    fake.fail_graphql([{"type": "RATE_LIMITED", "message": "API rate limit exceeded"}])
    fake.review(REPO, pr.number, "still wrong")
    [again] = ledger.cycle()
    assert again.body == "still wrong"
    assert graphql_posts(fake) == 1
    assert PrLinks(sqlite_store).target(REPO, pr.number) == ITEM1


def test_closing_refs_to_another_configured_repository_route_there(
    fake: FakeGitHub, sqlite_store: Store, tmp_path: Path
) -> None:
    fake.repo(REPO)
    fake.open_issue(API, labels=(LABEL,))
    fake.open_issue(API, labels=(LABEL,))
    fake.open_issue(API, labels=(LABEL,))
    ledger = Ledger(fake, sqlite_store, tmp_path, repos=(REPO, API))
    ledger.cycle()
    pr = fake.open_pull(REPO, body="Fixes acme/api#3", head_ref="feature")
    [opened] = ledger.cycle()
    assert opened.work_item == WorkItemRef("github", API, 3)
    assert ledger.records("github.link_refused") == []
    # An unconfigured repository's issue: refused, and said so.
    other = fake.open_pull(REPO, body="Fixes stranger/thing#4", head_ref="other")
    assert ledger.cycle() == []
    [refused] = ledger.records("github.link_refused")
    assert refused["detail"] == {"pr": other.number, "refused": ["stranger/thing#4"]}
    assert refused["workItem"] == f"github:{REPO}#{other.number}"
    assert PrLinks(sqlite_store).of_pr(REPO, other.number) == []
    assert pr.number != other.number


def test_failed_statuses_and_check_suites_reach_the_item_through_the_poller(
    fake: FakeGitHub, sqlite_store: Store, tmp_path: Path
) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    ledger = Ledger(fake, sqlite_store, tmp_path)
    ledger.cycle()
    pr = fake.open_pull(REPO, body="Fixes #1", head_ref="feature")
    ledger.cycle()
    fake.status(REPO, pr.number, "success", context="ci/docs")
    failed = fake.status(REPO, pr.number, "failure", context="ci/lint")
    suite = fake.check_suite(REPO, pr.number, "failure", app="Buildkite")
    fake.check_suite(REPO, pr.number, "success", app="CircleCI")
    events = ledger.cycle()
    subjects = sorted(e.subject for e in events)
    assert subjects == [
        f"CI failure: check status {failed.id}",
        f"CI failure: check suite {suite.id}",
    ]
    assert {e.work_item for e in events} == {ITEM1}
    assert all(e.spawns is False for e in events)
    bodies = sorted(e.body for e in events)
    assert bodies[0].startswith("Buildkite: failure")
    assert bodies[1].startswith("ci/lint: failure")
    # An errored status counts as failed.
    errored = fake.status(REPO, pr.number, "error", context="ci/deploy")
    [event] = ledger.cycle()
    assert event.subject == f"CI error: check status {errored.id}"
    # Idle: all CI probes are free 304s.
    fake.tick(300)
    ledger.cycle()
    ledger.cycle()
    assert {status for _, _, status in fake.requests} == {304}


def test_ci_retry_budget_through_the_poller(
    fake: FakeGitHub, sqlite_store: Store, tmp_path: Path
) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    ledger = Ledger(fake, sqlite_store, tmp_path, ci_retries=2)
    ledger.cycle()
    pr = fake.open_pull(REPO, body="Fixes #1", head_ref="feature")
    ledger.cycle()
    got: list[Event] = []
    for _ in range(5):  # the agent re-runs the same failing check five times
        fake.check_run(REPO, pr.number, "failure", name="tests")
        got.extend(ledger.cycle())
    assert len(got) == 3
    assert "budget" not in got[0].subject
    assert "budget" not in got[1].subject
    assert got[2].subject.endswith("retry budget spent")
    assert "will not paste it again" in got[2].body
    # It passes (a flake): the old failures are history, the budget starts afresh, and
    # the pass seen again with later failures does not reset it again.
    fake.check_run(REPO, pr.number, "success", name="tests")
    assert ledger.cycle() == []
    after: list[Event] = []
    for _ in range(4):
        fake.check_run(REPO, pr.number, "failure", name="tests")
        after.extend(ledger.cycle())
    assert [e.subject.endswith("retry budget spent") for e in after] == [False, False, True]
    # The head moves: the new commit has its own budget.
    fake.push(REPO, pr.number)
    ledger.cycle()
    fake.check_run(REPO, pr.number, "failure", name="tests")
    [fresh] = ledger.cycle()
    assert "budget" not in fresh.subject


# -- the webhook ----------------------------------------------------------------------


def test_the_webhook_routes_a_check_of_a_sidebar_linked_pr_by_the_stored_link(
    sqlite_store: Store,
) -> None:
    links = PrLinks(sqlite_store)
    item = WorkItemRef("github", "acme/widgets", 3)
    links.replace_automatic("acme/widgets", 12, {"sidebar": item}, keep=frozenset())

    def stored(repository: str, number: int) -> dict[str, WorkItemRef]:
        return {x.via: x.item for x in links.of_pr(repository, number)}

    budget = CiBudget(sqlite_store, retries=1)
    rules = Rules.build("the-loop", ["alice"], pr_links=stored, ci_budget=budget)
    bare = Rules.build("the-loop", ["alice"])
    payload = p.check_run("acme/widgets", head_branch="feature")
    assert not isinstance(to_event("check_run", payload, bare), Event)
    event = to_event("check_run", payload, rules)
    assert isinstance(event, Event)
    assert event.work_item == item
    # The budget (1): the next failure escalates, the one after is ignored.
    second = to_event("check_run", p.check_run("acme/widgets", check_id=702), rules)
    assert isinstance(second, Event)
    assert second.subject.endswith("retry budget spent")
    third = to_event("check_run", p.check_run("acme/widgets", check_id=703), rules)
    assert not isinstance(third, Event)
    assert "budget" in third.reason
    # A pass (later than those failures) starts afresh.
    passing = p.check_run("acme/widgets", check_id=704, conclusion="success")
    passing["check_run"]["completed_at"] = "2026-01-01T11:05:00Z"
    assert not isinstance(to_event("check_run", passing, rules), Event)
    failing = p.check_run("acme/widgets", check_id=705)
    failing["check_run"]["completed_at"] = "2026-01-01T11:10:00Z"
    assert isinstance(to_event("check_run", failing, rules), Event)


def test_the_webhook_routes_a_review_of_a_sidebar_linked_pr_and_a_manual_link_wins(
    sqlite_store: Store,
) -> None:
    links = PrLinks(sqlite_store)
    widgets = "acme/widgets"
    pull = p.pull_json(widgets, 12, body="no keyword", head_ref="feature")
    payload = p.pull_request_review(widgets, pull)

    def stored(repository: str, number: int) -> dict[str, WorkItemRef]:
        return {x.via: x.item for x in links.of_pr(repository, number)}

    rules = Rules.build("the-loop", ["alice"], pr_links=stored)
    assert not isinstance(to_event("pull_request_review", payload, rules), Event)
    links.replace_automatic(
        widgets, 12, {"sidebar": WorkItemRef("github", widgets, 3)}, keep=frozenset()
    )
    event = to_event("pull_request_review", payload, rules)
    assert isinstance(event, Event)
    assert event.work_item == WorkItemRef("github", widgets, 3)
    links.set(widgets, 12, "manual", WorkItemRef("github", widgets, 8))
    event = to_event("pull_request_review", payload, rules)
    assert isinstance(event, Event)
    assert event.work_item == WorkItemRef("github", widgets, 8)


def test_the_webhook_routes_a_closing_reference_to_another_configured_repository() -> None:
    widgets = "acme/widgets"
    pull = p.pull_json(widgets, 12, body="Fixes acme/api#3", head_ref="feature")
    payload = p.pull_request_review(widgets, pull)
    both = Rules.build("the-loop", ["alice"], repositories=[widgets, API])
    event = to_event("pull_request_review", payload, both)
    assert isinstance(event, Event)
    assert event.work_item == WorkItemRef("github", API, 3)
    alone = Rules.build("the-loop", ["alice"], repositories=[widgets])
    ignored = to_event("pull_request_review", payload, alone)
    assert not isinstance(ignored, Event)
    assert "closes acme/api#3, of a repository not in github.repositories" in ignored.reason
