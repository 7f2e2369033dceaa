"""`sessions start` of a GitHub item asks GitHub first (the fake GitHub on loopback):
a closed or missing issue is refused with exit 2 and one line, nothing started; a ref
of the tracker this config does not read is refused the same way."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakegithub import FakeGitHub

TOKEN = "ghp_startTEST"
REPO = "Octo/App"


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(token=TOKEN) as server:
        yield server


@pytest.fixture
def github_config(write_config, fake: FakeGitHub, monkeypatch: pytest.MonkeyPatch, isolated):
    monkeypatch.setenv("GH_START_TOKEN", TOKEN)
    (isolated / "work").mkdir()
    return write_config(
        {
            "tracker": "github",
            "github": {
                "repositories": [REPO],
                "tokenEnv": "GH_START_TOKEN",
                "apiUrl": fake.api_url,
            },
            "harness": {"cwd": str(isolated / "work")},
        }
    )


def test_a_closed_github_issue_is_refused(run_cli, github_config, fake: FakeGitHub) -> None:
    issue = fake.open_issue(REPO, "Done already")
    fake.close(REPO, issue.number)
    result = run_cli("sessions", "start", f"github:{REPO}#{issue.number}")
    assert result.exit_code == 2, result.output
    assert f"github:octo/app#{issue.number} is closed on GitHub" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert run_cli("sessions", "list", "--format", "json").output.strip() == "[]"


def test_a_missing_github_issue_is_refused(run_cli, github_config, fake: FakeGitHub) -> None:
    fake.repo(REPO)
    result = run_cli("sessions", "start", f"github:{REPO}#404")
    assert result.exit_code == 2, result.output
    assert "no GitHub issue or pull request github:octo/app#404" in result.output


def test_a_local_ref_under_tracker_github_is_refused(run_cli, github_config) -> None:
    result = run_cli("sessions", "start", "local:loop#1")
    assert result.exit_code == 2, result.output
    assert "local:loop#1 is a local item, but this config's tracker is github" in result.output
