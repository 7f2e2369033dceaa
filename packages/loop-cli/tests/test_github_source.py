"""GitHubSource against the fake GitHub: watching, baselines, filters, cost, failures."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from loop_dispatch import EventKind, WorkItemRef, comment_delivery_id

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakegithub import FakeGitHub

from loop_cli.github.client import GitHubError
from loop_cli.github.parse import MARKER
from loop_cli.github.source import GitHubSource

REPO = "octo/app"
LABEL = "the-loop"
TOKEN = "ghp_sourceTEST"


@pytest.fixture
def fake():
    with FakeGitHub(token=TOKEN, login="Loop-Bot") as server:
        yield server


class Poller:
    """A source plus the cursor dispatch would store between cycles."""

    def __init__(self, fake: FakeGitHub, active=None, repos=(REPO,), actors=("Alice",)) -> None:
        self.fake = fake
        self.active: dict[WorkItemRef, datetime] = active if active is not None else {}
        self.source = GitHubSource(
            list(repos),
            TOKEN,
            fake.api_url,
            LABEL,
            list(actors),
            None,
            clock=lambda: fake.now,
            active_items=lambda: dict(self.active),
        )
        self.cursor: str | None = None

    def cycle(self, keep_cursor: bool = True):
        self.fake.reset_log()
        batch = self.source.poll(self.cursor)
        if keep_cursor:
            self.cursor = batch.cursor
        return batch

    def settle(self) -> None:
        """Let the settle window pass (and take the cycle that closes it)."""
        self.fake.tick(300)
        self.cycle()


def bodies(batch) -> list[str]:
    return [e.body for e in batch.events if e.kind is EventKind.COMMENT]


def test_first_cycle_baselines_what_is_already_there(fake: FakeGitHub) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    old = fake.comment(REPO, 1, "written before the-loop started")
    poller = Poller(fake)
    batch = poller.cycle()
    assert batch.events == []
    assert batch.errors == []
    assert f"opened:github:{REPO}#1" in batch.baseline
    assert comment_delivery_id(f"github:{REPO}", str(old.id)) in batch.baseline


def test_comment_by_authorized_actor_becomes_an_event(fake: FakeGitHub) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    poller = Poller(fake)
    poller.cycle()
    made = fake.comment(REPO, 1, "please add tests", user="alice")  # case-insensitive login
    batch = poller.cycle()
    [event] = batch.events
    assert event.kind is EventKind.COMMENT
    assert event.work_item == WorkItemRef.parse(f"github:{REPO}#1")
    assert event.delivery_id == comment_delivery_id(f"github:{REPO}", str(made.id))
    assert event.comment_id == str(made.id)
    assert event.actor == "alice"
    assert event.body == "please add tests"


def test_own_marker_and_unauthorized_comments_are_not_events(fake: FakeGitHub) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    poller = Poller(fake)
    poller.cycle()
    fake.comment(REPO, 1, "status update", user="loop-bot")  # the token's own login
    fake.comment(REPO, 1, f"{MARKER}\nposted by the agent", user="alice")
    fake.comment(REPO, 1, "drive-by request", user="mallory")
    fake.comment(REPO, 1, "real request", user="ALICE")
    assert bodies(poller.cycle()) == ["real request"]


def test_comments_on_unwatched_items_are_ignored(fake: FakeGitHub) -> None:
    fake.open_issue(REPO)  # no trigger label, no session
    poller = Poller(fake)
    poller.cycle()
    fake.comment(REPO, 1, "hello")
    assert poller.cycle().events == []


def test_newly_labeled_item_opens_and_its_comments_are_baseline(fake: FakeGitHub) -> None:
    poller = Poller(fake)
    fake.open_issue(REPO, title="Fix the parser", body="It breaks on tabs.")
    poller.cycle()
    early = fake.comment(REPO, 1, "context before labeling")
    fake.label(REPO, 1, LABEL)
    batch = poller.cycle()
    [opened] = batch.events
    assert opened.kind is EventKind.OPENED
    assert opened.body == "Fix the parser\n\nIt breaks on tabs."
    assert opened.delivery_id == f"opened:github:{REPO}#1"
    assert comment_delivery_id(f"github:{REPO}", str(early.id)) in batch.baseline
    # Later comments are events. The overlapping window may list the baselined one
    # again; the ledger drops it by the delivery id recorded above.
    fake.comment(REPO, 1, "now do it")
    assert "now do it" in bodies(poller.cycle())


def test_a_comment_written_after_the_label_but_before_the_poller_looked_is_delivered(
    fake: FakeGitHub,
) -> None:
    """The label's time comes from the issue's events: history before it is baselined,
    a request written right after it is a comment event (it used to be baselined: lost)."""
    poller = Poller(fake)
    fake.open_issue(REPO, title="Fix the parser", body="It breaks on tabs.")
    poller.cycle()
    early = fake.comment(REPO, 1, "context before labeling")
    fake.label(REPO, 1, LABEL)
    fake.comment(REPO, 1, "and mind the CRLF files too")
    batch = poller.cycle()
    assert [e.kind for e in batch.events] == [EventKind.COMMENT, EventKind.OPENED]
    assert bodies(batch) == ["and mind the CRLF files too"]
    assert comment_delivery_id(f"github:{REPO}", str(early.id)) in batch.baseline
    assert fake.count(f"/repos/{REPO}/issues/1/events") == 1


def test_without_issue_events_the_previous_look_bounds_the_label(fake: FakeGitHub) -> None:
    """GitHub cannot list the issue's events: comments from before the previous cycle are
    history, later ones are delivered (an extra comment beats a lost one)."""
    poller = Poller(fake)
    fake.open_issue(REPO, title="Fix the parser", body="It breaks on tabs.")
    old = fake.comment(REPO, 1, "long before")
    poller.cycle()
    fake.label(REPO, 1, LABEL)
    fake.comment(REPO, 1, "right after the label")
    real_list = poller.source.github.list_all

    def no_events(path, *args, **kwargs):
        if path.endswith("/events"):
            raise GitHubError("GET events: 502")
        return real_list(path, *args, **kwargs)

    poller.source.github.list_all = no_events
    batch = poller.cycle()
    assert bodies(batch) == ["right after the label"]
    assert comment_delivery_id(f"github:{REPO}", str(old.id)) not in [
        e.delivery_id for e in batch.events
    ]


def test_closing_a_watched_item_is_a_closed_event(fake: FakeGitHub) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    poller = Poller(fake)
    poller.cycle()
    fake.close(REPO, 1)
    [event] = poller.cycle().events
    assert event.kind is EventKind.CLOSED
    assert event.delivery_id.startswith(f"closed:github:{REPO}#1:")
    fake.comment(REPO, 1, "after close")
    assert poller.cycle().events == []  # no longer watched


def test_item_started_by_sessions_start_is_watched(fake: FakeGitHub) -> None:
    fake.open_issue(REPO)
    poller = Poller(fake)
    poller.cycle()
    before = fake.comment(REPO, 1, "said before the session started")
    ref = WorkItemRef.parse(f"github:{REPO}#1")
    poller.active[ref] = fake.tick()
    after = fake.comment(REPO, 1, "said after")
    batch = poller.cycle()
    assert bodies(batch) == ["said after"]
    assert comment_delivery_id(f"github:{REPO}", str(before.id)) in batch.baseline
    assert comment_delivery_id(f"github:{REPO}", str(after.id)) not in batch.baseline


def test_registry_of_a_real_store_marks_items_watched(fake: FakeGitHub, tmp_path: Path) -> None:
    from loop_cli.github.source import registry_active_items
    from loop_dispatch.store import Store

    store = Store.open(tmp_path)
    ref = WorkItemRef.parse(f"github:{REPO}#7")
    other = WorkItemRef.parse(f"github:{REPO}#8")
    store.registry.register(ref, harness="demo", conversation_id=None, cwd=tmp_path)
    store.registry.register(other, harness="demo", conversation_id=None, cwd=tmp_path)
    store.registry.close(other)
    active = registry_active_items(store)
    assert list(active) == [ref]
    assert active[ref].tzinfo is not None
    store.close()


def test_idle_cycle_costs_one_request_per_repo_answered_304(fake: FakeGitHub) -> None:
    repos = (REPO, "octo/lib")
    for repo in repos:
        for _ in range(3):
            fake.open_issue(repo, labels=(LABEL,))
            fake.comment(repo, 1, "x")
    poller = Poller(fake, repos=repos)
    poller.cycle()
    poller.settle()
    poller.cycle()
    for _ in range(3):
        poller.fake.tick(60)
        batch = poller.cycle()
        assert batch.events == []
        assert len(fake.requests) == 2
        assert {status for _, _, status in fake.requests} == {304}


def comments_since(poller: Poller) -> datetime:
    text = json.loads(poller.cursor)["repos"][REPO]["comments_since"]
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def test_window_is_kept_while_short_then_moves_with_overlap(fake: FakeGitHub) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    poller = Poller(fake)
    poller.cycle()
    start = comments_since(poller)
    fake.comment(REPO, 1, "x")
    poller.cycle()
    assert comments_since(poller) == start  # same window: its ETag stays usable
    fake.tick(700)  # older than max_window (600 s)
    made = fake.comment(REPO, 1, "y")
    poller.cycle()
    assert comments_since(poller) == made.updated_at - timedelta(seconds=60)
    moved = comments_since(poller)
    poller.cycle()  # a listing of only the overlap does not move it back
    assert comments_since(poller) == moved


def test_idle_cycle_right_after_a_busy_one_is_a_304(fake: FakeGitHub) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    poller = Poller(fake)
    poller.cycle()
    poller.settle()
    fake.comment(REPO, 1, "busy")
    assert bodies(poller.cycle()) == ["busy"]
    fake.tick(300)
    poller.cycle()
    assert [status for _, _, status in fake.requests] == [304]


def test_lagging_listing_is_caught_in_the_settle_window(fake: FakeGitHub) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    poller = Poller(fake)
    poller.cycle()
    poller.settle()
    fake.lag_seconds = 30  # the issue shows the update; the comment listing does not yet
    fake.comment(REPO, 1, "late to the listing")
    assert poller.cycle().events == []
    fake.tick(45)
    assert bodies(poller.cycle()) == ["late to the listing"]


def test_server_error_keeps_the_cursor_and_nothing_is_skipped(fake: FakeGitHub) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    poller = Poller(fake)
    poller.source.github._sleep = lambda s: None
    poller.cycle()
    fake.comment(REPO, 1, "during the outage")
    fake.fail_next(502, count=3)  # the first try and both retries
    failed = poller.cycle()
    assert failed.events == []
    assert failed.errors
    assert "502" in failed.errors[0]
    assert failed.cursor == poller.cursor
    assert bodies(poller.cycle()) == ["during the outage"]


def test_one_failing_repository_does_not_hold_back_the_other(fake: FakeGitHub) -> None:
    for repo in (REPO, "octo/lib"):
        fake.open_issue(repo, labels=(LABEL,))
    poller = Poller(fake, repos=(REPO, "octo/gone", "octo/lib"))
    poller.cycle()
    fake.comment("octo/lib", 1, "hi")
    batch = poller.cycle()
    assert bodies(batch) == ["hi"]
    assert any("octo/gone" in e and "404" in e for e in batch.errors)


def test_busy_window_over_many_pages_is_read_whole(fake: FakeGitHub) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    poller = Poller(fake)
    poller.cycle()
    for n in range(230):
        fake.comment(REPO, 1, f"c{n}")
    got = bodies(poller.cycle())
    assert got == [f"c{n}" for n in range(230)]


def test_window_growing_past_one_page_is_never_mistaken_for_idle(fake: FakeGitHub) -> None:
    # GitHub's ETag covers one page: when a full first page stays the same, newer rows
    # (sorted ascending) sit on page two, and a 304 for page one must not hide them.
    fake.open_issue(REPO, labels=(LABEL,))
    poller = Poller(fake)
    poller.cycle()
    for n in range(100):  # exactly one full page
        fake.comment(REPO, 1, f"a{n}")
    assert len(bodies(poller.cycle())) == 100
    for n in range(30):
        fake.comment(REPO, 1, f"b{n}")
    got = bodies(poller.cycle())
    assert [b for b in got if b.startswith("b")] == [f"b{n}" for n in range(30)]
    for n in range(30):
        fake.comment(REPO, 1, f"c{n}")
    got = bodies(poller.cycle())
    assert [b for b in got if b.startswith("c")] == [f"c{n}" for n in range(30)]


def test_rate_limit_is_an_error_and_keeps_the_cursor(fake: FakeGitHub) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    poller = Poller(fake)
    poller.cycle()
    fake.comment(REPO, 1, "x")
    fake.exhaust(reset_in=3600)
    batch = poller.cycle()
    assert batch.cursor == poller.cursor
    assert any("rate limited" in e for e in batch.errors)
    assert all(TOKEN not in e for e in batch.errors)


def test_damaged_cursor_is_reported_and_rebaselined(fake: FakeGitHub) -> None:
    fake.open_issue(REPO, labels=(LABEL,))
    poller = Poller(fake)
    poller.cursor = "{not json"
    batch = poller.cycle()
    assert batch.events == []
    assert any("cursor unreadable" in e for e in batch.errors)
    assert json.loads(batch.cursor)["repos"][REPO]["labeled"] == [1]


def test_token_login_is_asked_once_even_across_processes(fake: FakeGitHub) -> None:
    fake.repo(REPO)
    poller = Poller(fake)
    users = []
    for _ in range(3):
        poller.cycle()
        users.append(sum(1 for path, _, _ in fake.requests if path == "/user"))
    assert users == [1, 0, 0]
    assert poller.source.own_login() == "loop-bot"
    # A new source (a cron `poll --once`) reads the login from the cursor...
    again = GitHubSource(
        [REPO],
        TOKEN,
        fake.api_url,
        LABEL,
        ["alice"],
        None,
        clock=lambda: fake.now,
        active_items=dict,
    )
    fake.reset_log()
    again.poll(poller.cursor)
    assert fake.count("/user") == 0
    # ...unless the token changed.
    fake.token = "ghp_rotated"
    rotated = GitHubSource(
        [REPO],
        "ghp_rotated",
        fake.api_url,
        LABEL,
        ["alice"],
        None,
        clock=lambda: fake.now,
        active_items=dict,
    )
    fake.reset_log()
    rotated.poll(poller.cursor)
    assert fake.count("/user") == 1
    assert "ghp_rotated" not in (rotated.poll(poller.cursor).cursor or "")
