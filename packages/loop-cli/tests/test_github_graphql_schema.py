"""Every GraphQL document the-loop sends is valid against GitHub's published schema
(the `@octokit/graphql-schema` npm package, pinned in tests/github_schema/package.json
and installed there with `npm ci`; validated with graphql-core). Skipped with a message
where npm is missing outside CI; on CI a missing npm fails."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakegithub import FakeGitHub
from test_github_source import LABEL, REPO, TOKEN

from loop_cli.github.pulls import SIDEBAR_FIRST, sidebar_document
from loop_cli.github.source import GitHubSource

HERE = Path(__file__).resolve().parent / "github_schema"
SCHEMA = HERE / "node_modules" / "@octokit" / "graphql-schema" / "schema.json"


@pytest.fixture(scope="module")
def schema() -> Any:
    graphql = pytest.importorskip("graphql", reason="graphql-core is not installed")
    if not SCHEMA.exists():
        npm = shutil.which("npm")
        if npm is None:
            if os.environ.get("CI"):
                pytest.fail("npm is missing on CI: GitHub's GraphQL schema cannot be installed")
            pytest.skip("npm is not installed: cannot install @octokit/graphql-schema")
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--silent"],
            cwd=HERE,
            check=True,
            timeout=300,
        )
    data = json.loads(SCHEMA.read_text())
    return graphql.build_client_schema(data.get("data", data))


def errors_of(schema: Any, document: str) -> list[str]:
    from graphql import parse, validate

    return [error.message for error in validate(schema, parse(document))]


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
