"""CHANGELOG.md edits: line-based, one package's section at a time."""

from __future__ import annotations

import re

import pytest

from tools.changelog import add_unreleased, release_section, unreleased_entries
from tools.monorepo import ToolError

TEXT = """# Changelog

## loop-a

### Unreleased

- first change
  continued on a second line
- second change

### 0.1.0 (2026-01-01)

- old news

## loop-b

### Unreleased

## repository

- tooling
"""


def test_unreleased_entries_are_the_bullets_of_the_block() -> None:
    assert unreleased_entries(TEXT, "loop-a") == ["- first change", "- second change"]
    assert unreleased_entries(TEXT, "loop-b") == []


def test_release_moves_the_entries_under_the_version_and_opens_a_fresh_block() -> None:
    out = release_section(TEXT, "loop-a", "0.2.0", "2026-12-02")
    assert "### Unreleased\n\n### 0.2.0 (2026-12-02)\n\n- first change\n" in out
    assert unreleased_entries(out, "loop-a") == []
    # Everything else, loop-b's section included, is byte for byte the same.
    assert out.replace("### Unreleased\n\n### 0.2.0 (2026-12-02)\n", "### Unreleased\n") == TEXT


def test_release_refuses_a_version_the_section_already_has() -> None:
    with pytest.raises(ToolError, match=r"already has a '### 0\.1\.0' heading"):
        release_section(TEXT, "loop-a", "0.1.0", "2026-12-02")


def test_add_unreleased_appends_after_the_last_entry() -> None:
    out = add_unreleased(TEXT, "loop-a", "third change")
    assert "- second change\n- third change\n\n### 0.1.0" in out
    assert unreleased_entries(out, "loop-a")[-1] == "- third change"


def test_add_unreleased_fills_an_empty_block() -> None:
    out = add_unreleased(TEXT, "loop-b", "news")
    assert "## loop-b\n\n### Unreleased\n\n- news\n\n## repository" in out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("## loop-a\n\n- no heading\n", "must start with a '### Unreleased' heading"),
        ("## loop-a\n\n### 0.1.0\n\n### Unreleased\n", "must start with a '### Unreleased'"),
        ("## loop-b\n\n### Unreleased\n", "expected one '## loop-a' section, found 0"),
        ("## loop-a\n### Unreleased\n## loop-a\n", "expected one '## loop-a' section, found 2"),
    ],
)
def test_malformed_sections_are_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(ToolError, match=re.escape(message)):
        unreleased_entries(text, "loop-a")
