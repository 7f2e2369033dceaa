"""Helpers for the release tooling's tests: git with a fixed identity, the tools' CLIs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from packaging.version import Version

from tools.changelog import add_unreleased, unreleased_entries
from tools.monorepo import load_packages

__all__ = ["GIT_ENV", "ROOT", "ensure_entries", "git", "next_patch", "run_tool", "tags"]

ROOT = Path(__file__).resolve().parent.parent

# git in a scratch clone: a fixed identity, none of the user's or system's config
# (commit signing, hook paths), so the tests behave the same on every machine.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "release test",
    "GIT_AUTHOR_EMAIL": "release-test@example.invalid",
    "GIT_COMMITTER_NAME": "release test",
    "GIT_COMMITTER_EMAIL": "release-test@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
    ).stdout


def run_tool(module: str, *args: str, root: Path) -> subprocess.CompletedProcess[str]:
    """Run tools.<module> of this working tree against `root` (a scratch clone)."""
    return subprocess.run(
        [sys.executable, "-m", f"tools.{module}", "--root", str(root), *args],
        cwd=ROOT,
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
        timeout=120,
    )


def next_patch(version: Version) -> str:
    """A compatible release after `version` (0.1.0 -> 0.1.1)."""
    return f"{version.major}.{version.minor}.{version.micro + 1}"


def tags(repo: Path) -> set[str]:
    return set(git(repo, "tag", "--list").split())


def ensure_entries(repo: Path) -> None:
    """Give every package an Unreleased entry (commit it): whatever state the real
    CHANGELOG is in, any package of the scratch clone can be released."""
    path = repo / "CHANGELOG.md"
    text = path.read_text(encoding="utf-8")
    for name in load_packages(repo):
        if not unreleased_entries(text, name):
            text = add_unreleased(text, name, "A scratch change for the release tests.")
    path.write_text(text, encoding="utf-8")
    git(repo, "commit", "-q", "--allow-empty", "-m", "scratch: entries", "--", "CHANGELOG.md")
