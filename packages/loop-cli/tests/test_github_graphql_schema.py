"""Every GraphQL document the-loop sends is valid against GitHub's published schema
(the `@octokit/graphql-schema` npm package: tests/published_github.py; validated with
graphql-core). Skipped with a message where npm is missing outside CI."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakegithub import FakeGitHub
from published_github import graphql_errors, graphql_schema
from test_github_source import LABEL, REPO, TOKEN

from loop_cli.github.pulls import SIDEBAR_FIRST, sidebar_document
from loop_cli.github.source import GitHubSource


@pytest.fixture(scope="module")
def schema() -> Any:
    return graphql_schema()


def errors_of(schema: Any, document: str) -> list[str]:
    return graphql_errors(document)


@pytest.mark.parametrize("numbers", [[1], [3, 12], list(range(1, 60))])
def test_the_sidebar_query_is_valid_against_githubs_schema(schema: Any, numbers: list[int]) -> None:
    assert errors_of(schema, sidebar_document(numbers)) == []


def test_the_check_can_fail(schema: Any) -> None:
    """A field GitHub does not have is caught (so the check above means something)."""
    wrong = sidebar_document([3]).replace("nameWithOwner", "fullName")
    assert errors_of(schema, wrong) != []
    assert "first: " + str(SIDEBAR_FIRST) in sidebar_document([3])


def test_every_document_the_poller_sent_is_valid(schema: Any) -> None:
    with FakeGitHub(token=TOKEN, login="Loop-Bot") as fake:
        fake.open_issue(REPO, labels=(LABEL,))
        source = GitHubSource(
            [REPO], TOKEN, fake.api_url, LABEL, ["Alice"], None, clock=lambda: fake.now
        )
        cursor = source.poll(None).cursor
        pr = fake.open_pull(REPO, body="", head_ref="feature")
        fake.link_sidebar(REPO, pr.number, REPO, 1)
        batch = source.poll(cursor)
        source.close()
        assert [e.work_item.number for e in batch.events] == [1]
        assert fake.graphql_documents
        for document in fake.graphql_documents:
            assert errors_of(schema, document) == []
