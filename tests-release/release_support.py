"""Helpers for the release tooling's tests: git with a fixed identity, the tools' CLIs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["GIT_ENV", "ROOT", "git", "run_tool"]

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
