"""`sessions link-pr` / `unlink-pr` and the PRs `sessions list -o json` shows (issue 27)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fakegithub import FakeGitHub

TOKEN = "ghp_linkTEST"
REPO = "Octo/App"


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(token=TOKEN) as server:
        yield server


@pytest.fixture
def github_config(write_config, fake: FakeGitHub, monkeypatch: pytest.MonkeyPatch, isolated):
    monkeypatch.setenv("GH_LINK_TOKEN", TOKEN)
    (isolated / "work").mkdir()
    return write_config(
        {
            "tracker": "github",
            "github": {
                "repositories": [REPO, "acme/api"],
                "tokenEnv": "GH_LINK_TOKEN",
                "apiUrl": fake.api_url,
            },
            "harness": {"cwd": str(isolated / "work")},
        }
    )


@pytest.mark.parametrize(
    ("ref", "pr", "said"),
    [
        ("github:octo/app#1", "twelve", "PR must be a number (N, #N) or OWNER/REPO#N"),
        ("github:octo/app#1", "stranger/thing#4", "stranger/thing is not in github.repositories"),
        ("local:loop#1", "12", "local:loop#1 is not a GitHub item"),
    ],
)
def test_bad_arguments_are_refused_with_exit_2(
    run_cli, github_config, ref: str, pr: str, said: str
) -> None:
    result = run_cli("sessions", "link-pr", ref, pr)
    assert result.exit_code == 2, result.output
    assert said in result.output
    assert "Traceback" not in result.output


def test_link_list_unlink(run_cli, github_config, fake: FakeGitHub) -> None:
    fake.open_issue(REPO, "Parser")
    started = run_cli("sessions", "start", "github:octo/app#1")
    assert started.exit_code == 0, started.output
    linked = run_cli("sessions", "link-pr", "github:octo/app#1", "acme/api#12", "-o", "json")
    assert linked.exit_code == 0, linked.output
    assert json.loads(linked.output) == {
        "ref": "github:octo/app#1",
        "pr": "acme/api#12",
        "outcome": "linked",
        "routesTo": "github:octo/app#1",
        "via": "manual",
    }
    run_cli("sessions", "link-pr", "github:octo/app#1", "#7")
    [row] = json.loads(run_cli("sessions", "list", "-o", "json").output)
    assert row["pullRequests"] == [
        {"repository": "acme/api", "pr": 12, "via": "manual"},
        {"repository": "octo/app", "pr": 7, "via": "manual"},
    ]
    text = run_cli("sessions", "unlink-pr", "github:octo/app#1", "7")
    assert text.exit_code == 0, text.output
    assert "octo/app#7: unlinked from github:octo/app#1" in text.output
    [row] = json.loads(run_cli("sessions", "list", "-o", "json").output)
    assert row["pullRequests"] == [{"repository": "acme/api", "pr": 12, "via": "manual"}]
    again = run_cli("sessions", "unlink-pr", "github:octo/app#1", "7")
    assert again.exit_code == 1
    assert "octo/app#7 has no link-pr link to github:octo/app#1" in again.output
    run_cli("sessions", "stop", "github:octo/app#1")


def test_store_migrate_carries_the_pr_links_to_postgresql(
    cluster, run_cli, github_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run_cli("sessions", "link-pr", "github:octo/app#1", "12").exit_code == 0
    url = cluster.create_database()
    monkeypatch.setenv("LOOP_TEST_PG_PASSWORD", cluster.password)
    moved = run_cli(
        "store", "migrate", "--to", url, "--password-env", "LOOP_TEST_PG_PASSWORD", "-o", "json"
    )
    assert moved.exit_code == 0, moved.output
    assert json.loads(moved.output)["tables"]["loop_cli_github_pr_links"] == 1
    from loop_cli.github.links import PrLinks
    from loop_dispatch import WorkItemRef
    from loop_dispatch.store import Store

    store = Store.open(url=url, password=cluster.password)
    try:
        assert PrLinks(store).target("octo/app", 12) == WorkItemRef("github", "octo/app", 1)
    finally:
        store.close()
