"""`tracker: jira`, the `jira:` section and `trackers:`: one clear line per problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from loop_cli.config import parse_text
from loop_cli.errors import ConfigError

GOOD = """
tracker: jira
jira:
  site: Acme.atlassian.net
  emailEnv: JIRA_EMAIL
  tokenEnv: JIRA_API_TOKEN
  projects: [ABC, OPS_2]
authorizedActors: ["jira:712020:alice"]
"""


def _errors(text: str, tmp_path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_text(text, tmp_path / "c.yaml")
    return [line.split(": ", 1)[1] for line in info.value.problems]


def test_a_cloud_jira_config(tmp_path: Path) -> None:
    cfg = parse_text(GOOD, tmp_path / "c.yaml")
    assert cfg.active_trackers() == ["jira"]
    assert cfg.jira.deployment == "cloud"
    assert cfg.jira.base_url() == "https://Acme.atlassian.net"
    assert cfg.jira.trigger_label == "the-loop"


def test_data_center_uses_a_bearer_pat_and_no_email(tmp_path: Path) -> None:
    text = GOOD.replace("  emailEnv: JIRA_EMAIL\n", "  deployment: data-center\n")
    assert parse_text(text, tmp_path / "c.yaml").jira.deployment == "data-center"
    both = GOOD.replace("  site:", "  deployment: data-center\n  site:")
    assert _errors(both, tmp_path) == [
        "jira: emailEnv is for deployment cloud; data-center uses a bearer PAT"
    ]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (("  emailEnv: JIRA_EMAIL\n", ""), "jira: deployment cloud needs emailEnv"),
        (("  site: Acme.atlassian.net\n", ""), "tracker jira needs jira.site"),
        (("[ABC, OPS_2]", "[ABC, 9X]"), "'9X' is not a Jira project key"),
        (("[ABC, OPS_2]", "[]"), "at least one jira.projects key"),
        (("Acme.atlassian.net", "https://acme.atlassian.net"), "is not a Jira site host name"),
        (("tokenEnv: JIRA_API_TOKEN", "tokenEnv: ATATT3xFfGF0abcdefghijklmnop"), None),
        (("tracker: jira", "tracker: jira\ntrackers: [github, github]"), "lists a tracker twice"),
        (("tracker: jira", "tracker: jira\ntrackers: [local]"), "tracker jira is not one of"),
        (("tracker: jira", "tracker: youtrack"), "tracker:"),
    ],
)
def test_jira_problems_are_one_line_each(tmp_path: Path, change, problem) -> None:
    old, new = change
    problems = _errors(GOOD.replace(old, new), tmp_path)
    assert len(problems) == 1, problems
    if problem is not None:
        assert problem in problems[0], problems
    assert "ATATT3xFfGF0abcdefghijklmnop" not in problems[0]


def test_jira_credentials_never_reach_an_agent(tmp_path: Path) -> None:
    text = GOOD + "harness:\n  passEnv: [JIRA_API_TOKEN]\n"
    assert any("credential of the daemon" in p for p in _errors(text, tmp_path))


def test_github_and_jira_side_by_side(tmp_path: Path) -> None:
    text = GOOD.replace("tracker: jira", "trackers: [github, jira]") + (
        "github:\n  repositories: [octo/app]\n"
    )
    assert parse_text(text, tmp_path / "c.yaml").active_trackers() == ["github", "jira"]
    no_repo = GOOD.replace("tracker: jira", "trackers: [github, jira]")
    assert any("github.repositories" in p for p in _errors(no_repo, tmp_path))


@pytest.mark.parametrize(
    ("api_url", "problem"),
    [
        ("https://bot:s3cr3t-tok@jira.example.com", "must not carry credentials"),
        ("http://jira.example.com", "plain http only to a loopback address"),
        ("ftp://jira.example.com", "must be an https:// URL"),
    ],
)
def test_jira_api_url_never_sends_the_token_in_the_clear(
    tmp_path: Path, api_url: str, problem: str
) -> None:
    """The Jira credential rides in the Authorization header of every request to apiUrl:
    plain http to another host would send it in the clear, and userinfo in the URL would
    be copied into every event's link."""
    text = GOOD.replace("  projects:", f"  apiUrl: {api_url}\n  projects:")
    problems = _errors(text, tmp_path)
    assert len(problems) == 1, problems
    assert problem in problems[0], problems
    assert "s3cr3t-tok" not in problems[0]
    loopback = GOOD.replace("  projects:", "  apiUrl: http://127.0.0.1:8080\n  projects:")
    assert parse_text(loopback, tmp_path / "c.yaml").jira.base_url() == "http://127.0.0.1:8080"
