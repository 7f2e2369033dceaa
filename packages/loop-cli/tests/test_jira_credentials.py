"""Jira's credentials are daemon credentials like GitHub's (review of issues 26/28):
kept out of notifications, refused in a pane, reported when an agent can read them."""

from __future__ import annotations

from pathlib import Path

from loop_cli.agent_env import allowed_in_pane, credential_names, exposures
from loop_cli.config import parse_text
from loop_cli.notify import build_message, secret_values

JIRA = """
tracker: jira
jira:
  site: acme.atlassian.net
  emailEnv: JIRA_EMAIL
  tokenEnv: JIRA_API_TOKEN
  projects: [ABC]
authorizedActors: ["jira:712020:alice"]
notify:
  slackUrlEnv: SLACK_URL
"""
TOKEN = "ATATT3xFfGF0-jira-token-value"
HOOK_SECRET = "jira-hook-secret-9f3e"


def test_jiras_credentials_are_daemon_credentials(tmp_path: Path) -> None:
    cfg = parse_text(f"stateDir: {tmp_path}\n{JIRA}", tmp_path / "c.yaml")
    names = credential_names(cfg)
    assert {"JIRA_API_TOKEN", "THE_LOOP_JIRA_WEBHOOK_SECRET"} <= set(names)
    assert "JIRA_EMAIL" not in names  # an address, often the operator's git one too
    # The webhook secret's default name starts with THE_LOOP_: still not for a pane.
    assert not allowed_in_pane(cfg)("THE_LOOP_JIRA_WEBHOOK_SECRET")
    env = {"JIRA_API_TOKEN": TOKEN, "THE_LOOP_JIRA_WEBHOOK_SECRET": HOOK_SECRET}
    record = {
        "ts": "2026-12-01T12:00:00+00:00",
        "type": "session.stalled",
        "level": "warning",
        "workItem": "jira:acme.atlassian.net/ABC-7",
        "detail": {"reason": "blocked-dialog", "remedy": f"curl -u me:{TOKEN} ..."},
    }
    message = build_message(record, cfg, secret_values(cfg, env))
    assert TOKEN not in str(message)
    found = exposures(
        cfg, {"COPY": TOKEN, "THE_LOOP_JIRA_WEBHOOK_SECRET": HOOK_SECRET}, [], environ=env
    )
    assert {(e.credential, e.found_as) for e in found} == {
        ("JIRA_API_TOKEN", "COPY"),
        ("THE_LOOP_JIRA_WEBHOOK_SECRET", "THE_LOOP_JIRA_WEBHOOK_SECRET"),
    }
    assert all(TOKEN not in e.line() and HOOK_SECRET not in e.line() for e in found)


def test_jiras_names_are_not_credentials_without_jira(tmp_path: Path) -> None:
    """A GitHub-only daemon: an agent's own JIRA_API_TOKEN (its env file) is no leak."""
    cfg = parse_text(
        f"stateDir: {tmp_path}\ntracker: github\ngithub:\n  repositories: [o/r]\n",
        tmp_path / "c.yaml",
    )
    assert "JIRA_API_TOKEN" not in credential_names(cfg)
