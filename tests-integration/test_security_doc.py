"""docs/security.md is reviewed against the code: every guarantee names tests that
exist, and the facts it states (the allowlist, the limits' defaults) are the code's."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = (REPO / "docs" / "security.md").read_text(encoding="utf-8")


def _guarantees() -> list[tuple[str, list[str]]]:
    section = PAGE.split("## What the-loop guarantees", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("guarantee", "---") or set(cells[0]) <= {"-"}:
            continue
        rows.append((cells[0], re.findall(r"`([^`]+::test_[A-Za-z0-9_]+)`", cells[1])))
    return rows


def test_every_guarantee_names_tests_that_exist() -> None:
    rows = _guarantees()
    assert len(rows) >= 10
    for claim, tests in rows:
        assert tests, f"guarantee without a test: {claim}"
        for ref in tests:
            path, name = ref.split("::")
            source = REPO / path
            assert source.is_file(), f"{ref}: no such file"
            assert re.search(rf"^def {name}\(", source.read_text(), re.M), f"{ref}: no such test"


def test_the_allowlist_on_the_page_is_the_code_s() -> None:
    from loop_tmux import ALLOWED_NAMES
    from loop_tmux.environment import ALLOWED_PREFIXES

    listed = PAGE.split("exactly the allowlist (", 1)[1].split(")", 1)[0]
    names = {n.strip() for n in listed.replace("\n", " ").split(",")}
    assert names == set(ALLOWED_NAMES) | {p + "*" for p in ALLOWED_PREFIXES}


def test_the_limits_on_the_page_are_the_defaults() -> None:
    from loop_cli.agent_env import OWN_NAMES, SLACK_URL_VAR
    from loop_cli.config import Config
    from loop_cli.webhook.app import MAX_JSON_DEPTH

    hook = Config().webhook
    for key, value in (
        ("headerTimeoutSeconds", hook.header_timeout_seconds),
        ("bodyTimeoutSeconds", hook.body_timeout_seconds),
        ("keepAliveSeconds", hook.keep_alive_seconds),
        ("maxConnections", hook.max_connections),
    ):
        assert f"`webhook.{key}` ({value:g})" in PAGE or f"`{key}` ({value:g})" in PAGE, key
    assert f"deeper than {MAX_JSON_DEPTH}" in PAGE
    for name in OWN_NAMES:
        assert f"`{name}`" in PAGE
    assert "Slack URL" in PAGE
    assert SLACK_URL_VAR.startswith("THE_LOOP_")


# Issue 20: one table of actor rules, one row per GitHub event kind, each row a test.
EVENT_KINDS = {
    "issue opened",
    "issue labeled",
    "issue closed",
    "issue reopened",
    "issue comment",
    "pull request opened",
    "pull request closed / merged",
    "pull request review",
    "pull request review comment",
    "check run (failed)",
    "check suite (failed)",
    "status",
}


def _actor_rules() -> dict[str, list[str]]:
    section = PAGE.split("## The actor rules, per GitHub event", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] == "event" or set(cells[0]) <= {"-"}:
            continue
        rows[cells[0]] = re.findall(r"`([^`]+::test_[A-Za-z0-9_]+)`", cells[3])
    return rows


def test_the_actor_rules_cover_every_event_kind_each_with_tests_that_exist() -> None:
    rows = _actor_rules()
    assert set(rows) == EVENT_KINDS
    for kind, tests in rows.items():
        assert tests, f"actor rule without a test: {kind}"
        for ref in tests:
            path, name = ref.split("::")
            source = REPO / path
            assert source.is_file(), f"{kind}: {ref}: no such file"
            assert re.search(rf"^def {name}\(", source.read_text(), re.M), f"{kind}: {ref}"
