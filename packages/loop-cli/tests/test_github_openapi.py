"""Every REST request the poller and the reactions send fits GitHub's published OpenAPI
description (`@octokit/openapi`, tests/published_github.py): the path exists, for that
method, and every query parameter is declared (and within its enum). GraphQL requests
are checked against GitHub's schema in test_github_graphql_schema.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakegithub import FakeGitHub
from published_github import openapi, rest_problems
from test_github_source import LABEL, REPO, TOKEN

from loop_cli.github.client import GitHubClient
from loop_cli.github.reactions import _comment_path
from loop_cli.github.source import GitHubSource


@pytest.fixture(scope="module")
def described() -> None:
    assert "/repos/{owner}/{repo}/issues" in openapi()["paths"]


def test_the_check_can_fail(described: None) -> None:
    assert rest_problems("GET", "/repos/o/r/issues", "state=all") == []
    assert rest_problems("GET", "/repos/o/r/issues", "state=everything") != []
    assert rest_problems("GET", "/repos/o/r/issues", "colour=red") != []
    assert rest_problems("GET", "/repos/o/r/no-such-thing", "") != []
    assert rest_problems("DELETE", "/user", "") != []


def test_every_rest_request_of_a_busy_poller_fits_the_published_description(
    described: None, tmp_path: Path
) -> None:
    from loop_dispatch.store import Store

    store = Store.open(tmp_path / "state")
    with FakeGitHub(token=TOKEN, login="Loop-Bot") as fake:
        fake.open_issue(REPO, labels=(LABEL,))
        fake.open_issue(REPO)
        source = GitHubSource(
            [REPO],
            TOKEN,
            fake.api_url,
            LABEL,
            ["Alice"],
            store,
            clock=lambda: fake.now,
            ci_retries=2,
        )
        cursor = source.poll(None).cursor
        comment = fake.comment(REPO, 1, "please", user="alice")
        fake.label(REPO, 2, LABEL)
        pr = fake.open_pull(REPO, body="Fixes #1", head_ref="feature")
        other = fake.open_pull(REPO, body="", head_ref="side")
        fake.link_sidebar(REPO, other.number, REPO, 2)
        cursor = source.poll(cursor).cursor
        fake.review(REPO, pr.number, "split it")
        fake.review_comment(REPO, pr.number, "rename")
        fake.comment(REPO, pr.number, "on the PR")
        fake.check_run(REPO, pr.number, "failure")
        fake.check_suite(REPO, pr.number, "failure")
        fake.status(REPO, pr.number, "error")
        cursor = source.poll(cursor).cursor
        fake.close(REPO, 2)
        fake.tick(300)
        cursor = source.poll(cursor).cursor
        source.poll(cursor)
        source.close()
        # The reactions' POSTs, on an issue comment and a review comment.
        client = GitHubClient(TOKEN, fake.api_url)
        client.post_json(_comment_path(REPO, str(comment.id)) or "", {"content": "eyes"})
        client.post_json(f"repos/{REPO}/issues/1/comments", {"body": "gave up"})
        client.close()
        calls = [c for c in fake.calls if c[1] != "/graphql"]
    store.close()
    seen = {(method, path.split("/")[-1]) for method, path, _ in calls}
    assert {("GET", "status"), ("GET", "check-suites"), ("GET", "check-runs")} <= seen
    assert ("POST", "reactions") in seen
    problems = [p for call in calls for p in rest_problems(*call)]
    assert problems == []
