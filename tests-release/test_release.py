"""`nox -s release -- PACKAGE VERSION [--apply]`, exercised in scratch clones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from release_support import git, run_tool

from tools.changelog import unreleased_entries
from tools.monorepo import load_packages
from tools.release import next_cap, widen

PACKAGES = ["loop-envstate", "loop-tmux", "loop-dispatch", "loop-cli"]


def sections(text: str) -> dict[str, str]:
    """CHANGELOG.md cut at its `## ` headings: name -> the section's text."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def changed_files(repo: Path) -> set[str]:
    return set(git(repo, "diff", "--name-only", "HEAD~1", "HEAD").split())


@pytest.mark.parametrize(
    ("spec", "version", "expected"),
    [
        ("loop-tmux>=0.1,<0.2", "0.1.7", None),
        ("loop-tmux>=0.1,<0.2", "0.2.0", "loop-tmux>=0.1,<0.3"),
        ("loop-tmux>=0.1,<0.2", "0.2.0rc1", "loop-tmux>=0.1,<0.3"),
        ("loop-tmux>=0.1,<0.2", "1.0.0", "loop-tmux>=0.1,<2"),
        ("loop-tmux>=1.2,<2", "2.1", "loop-tmux>=1.2,<3"),
        ("loop-tmux>=0.1,<=0.1.9", "0.1.10", "loop-tmux>=0.1,<0.2"),
    ],
)
def test_widen_moves_only_the_upper_bound(spec: str, version: str, expected: str | None) -> None:
    assert widen(Requirement(spec), Version(version)) == expected


def test_next_cap_is_the_next_minor_before_1_and_the_next_major_after() -> None:
    assert next_cap(Version("0.4.2")) == Version("0.5")
    assert next_cap(Version("3.1")) == Version("4")


def test_dry_run_says_what_it_would_do_and_changes_nothing(clone: Path) -> None:
    head = git(clone, "rev-parse", "HEAD")
    done = run_tool("release", "loop-tmux", "0.1.1", root=clone)
    assert done.returncode == 0, done.stderr
    assert "loop-tmux 0.1.0 -> 0.1.1 (dry run" in done.stdout
    assert "tag loop-tmux/v0.1.1" in done.stdout
    assert git(clone, "status", "--porcelain") == ""
    assert git(clone, "rev-parse", "HEAD") == head
    assert git(clone, "tag", "--list") == ""


def test_apply_changes_only_that_package_its_changelog_section_and_tag(clone: Path) -> None:
    before = (clone / "CHANGELOG.md").read_text(encoding="utf-8")
    versions = {n: p.version for n, p in load_packages(clone).items()}
    pending = unreleased_entries(before, "loop-dispatch")

    done = run_tool("release", "loop-dispatch", "0.1.1", "--apply", root=clone)

    assert done.returncode == 0, done.stderr
    assert changed_files(clone) == {
        "CHANGELOG.md",
        "packages/loop-dispatch/src/loop_dispatch/__init__.py",
    }
    assert git(clone, "log", "-1", "--format=%s").strip() == "loop-dispatch: release 0.1.1"
    assert git(clone, "tag", "--list").split() == ["loop-dispatch/v0.1.1"]
    assert git(clone, "rev-parse", "loop-dispatch/v0.1.1^{commit}") == git(
        clone, "rev-parse", "HEAD"
    )
    after_versions = {n: p.version for n, p in load_packages(clone).items()}
    assert after_versions == {**versions, "loop-dispatch": Version("0.1.1")}
    after = (clone / "CHANGELOG.md").read_text(encoding="utf-8")
    old, new = sections(before), sections(after)
    assert {k: v for k, v in new.items() if k != "loop-dispatch"} == {
        k: v for k, v in old.items() if k != "loop-dispatch"
    }
    assert re.search(r"### Unreleased\n\n### 0\.1\.1 \(\d{4}-\d\d-\d\d\)\n", new["loop-dispatch"])
    assert unreleased_entries(after, "loop-dispatch") == []
    released = new["loop-dispatch"].split("### 0.1.1", 1)[1]
    assert all(entry in released for entry in pending)
    # Released and unchanged since: the CHANGELOG check is satisfied in the clone.
    assert run_tool("changelog_check", root=clone).returncode == 0


def test_a_breaking_version_widens_the_dependants_ranges_and_says_so(clone: Path) -> None:
    before = (clone / "CHANGELOG.md").read_text(encoding="utf-8")

    done = run_tool("release", "loop-tmux", "0.2.0", "--apply", root=clone)

    assert done.returncode == 0, done.stderr
    assert "widened loop-tmux>=0.1,<0.2 -> loop-tmux>=0.1,<0.3" in done.stdout
    assert changed_files(clone) == {
        "CHANGELOG.md",
        "packages/loop-tmux/src/loop_tmux/__init__.py",
        "packages/loop-dispatch/pyproject.toml",
        "packages/loop-cli/pyproject.toml",
    }
    packages = load_packages(clone)
    assert packages["loop-tmux"].version == Version("0.2.0")
    assert packages["loop-dispatch"].version == Version("0.1.0")  # not released by this
    for dependant in ("loop-dispatch", "loop-cli"):
        assert packages[dependant].written["loop-tmux"] == "loop-tmux>=0.1,<0.3"
    assert packages["loop-cli"].written["loop-dispatch"] == "loop-dispatch>=0.1,<0.2"
    # Each widened dependant records the change in its own Unreleased block.
    after = (clone / "CHANGELOG.md").read_text(encoding="utf-8")
    for dependant in ("loop-dispatch", "loop-cli"):
        assert unreleased_entries(after, dependant)[-1].startswith("- Accepts loop-tmux 0.2.0")
    assert sections(after)["loop-envstate"] == sections(before)["loop-envstate"]
    assert git(clone, "tag", "--list").split() == ["loop-tmux/v0.2.0"]


def test_a_version_not_above_the_last_release_is_refused(clone: Path) -> None:
    assert run_tool("release", "loop-tmux", "0.1.1", "--apply", root=clone).returncode == 0
    git(clone, "commit", "-q", "--allow-empty", "-m", "later work")
    head = git(clone, "rev-parse", "HEAD")

    again = run_tool("release", "loop-tmux", "0.1.1", "--apply", root=clone)

    assert again.returncode == 2
    assert again.stderr.strip() == (
        "release: loop-tmux 0.1.1: not above the last release tag loop-tmux/v0.1.1"
    )
    assert git(clone, "rev-parse", "HEAD") == head


def test_an_empty_unreleased_block_is_refused(clone: Path) -> None:
    assert run_tool("release", "loop-tmux", "0.1.1", "--apply", root=clone).returncode == 0
    done = run_tool("release", "loop-tmux", "0.1.2", root=clone)
    assert done.returncode == 2
    assert "'## loop-tmux' has no Unreleased entries to release" in done.stderr


def test_apply_refuses_a_dirty_working_tree_and_writes_nothing(clone: Path) -> None:
    readme = clone / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + "local edit\n", encoding="utf-8")

    done = run_tool("release", "loop-tmux", "0.1.1", "--apply", root=clone)

    assert done.returncode == 2
    assert "uncommitted changes" in done.stderr
    assert git(clone, "status", "--porcelain").split() == ["M", "README.md"]
    assert git(clone, "tag", "--list") == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["loop-nope", "1.0"], "unknown package 'loop-nope'"),
        (["loop-tmux", "one"], "'one' is not a PEP 440 version"),
        (["loop-tmux", "0.1.1+local"], "a local version (+...) cannot be released"),
        (["loop-tmux", "0.0.9"], "below the current version 0.1.0"),
        (["loop-tmux", "v0.2"], "write the version in normal form: 0.2"),
    ],
)
def test_bad_arguments_are_one_line_errors(clone: Path, args: list[str], message: str) -> None:
    done = run_tool("release", *args, root=clone)
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stderr.count("\n") == 1
