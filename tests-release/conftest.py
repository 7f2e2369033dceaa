"""Fixtures for the release tooling's tests: scratch clones of the repository."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# tools/ is not installed: the repository root goes on sys.path, and this directory for
# release_support (pytest runs in importlib mode).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from release_support import ROOT, ensure_entries, git


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A scratch clone of this repository's HEAD (tags included), safe to commit in."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the release tooling needs the repository's history")
    target = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(ROOT), str(target))
    return target


@pytest.fixture
def ready(clone: Path) -> Path:
    """A scratch clone where every package has an Unreleased entry to release."""
    ensure_entries(clone)
    return clone
