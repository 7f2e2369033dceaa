"""The CI check: changed package sources since the last release need an Unreleased entry."""

from __future__ import annotations

import re
from pathlib import Path

from release_support import ensure_entries, git, next_patch, run_tool

from tools.monorepo import load_packages

NAMES = "packages/loop-tmux/src/loop_tmux/names.py"


def release_tmux(clone: Path) -> str:
    """Release loop-tmux (its next patch) in the scratch clone; the new tag."""
    ensure_entries(clone)
    new = next_patch(load_packages(clone)["loop-tmux"].version)
    done = run_tool("release", "loop-tmux", new, "--apply", root=clone)
    assert done.returncode == 0, done.stderr
    return f"loop-tmux/v{new}"


def touch(clone: Path, rel: str) -> None:
    path = clone / rel
    path.write_text(path.read_text(encoding="utf-8") + "# changed\n", encoding="utf-8")


def commit_all(clone: Path, message: str) -> None:
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", message)


def add_entry(clone: Path, package: str, entry: str) -> None:
    path = clone / "CHANGELOG.md"
    text = path.read_text(encoding="utf-8")
    text = text.replace(
        f"## {package}\n\n### Unreleased\n", f"## {package}\n\n### Unreleased\n\n- {entry}\n", 1
    )
    path.write_text(text, encoding="utf-8")


def test_the_repository_as_it_stands_passes(clone: Path) -> None:
    done = run_tool("changelog_check", root=clone)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("ok: ") == 4
    assert done.stderr == ""


def test_a_commit_changing_a_package_without_an_entry_fails(clone: Path) -> None:
    tag = release_tmux(clone)
    touch(clone, NAMES)
    commit_all(clone, "loop-tmux: a change nobody wrote down")

    done = run_tool("changelog_check", root=clone)

    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"error: loop-tmux: 1 source file(s) changed since {tag} ({NAMES})"
        " but CHANGELOG.md has no entry under '## loop-tmux' / '### Unreleased'"
    )
    # The other packages still pass.
    assert len(re.findall(r"^ok: ", done.stdout, flags=re.MULTILINE)) == 3

    add_entry(clone, "loop-tmux", "A change, written down.")
    commit_all(clone, "CHANGELOG: loop-tmux")
    assert run_tool("changelog_check", root=clone).returncode == 0


def test_an_uncommitted_change_counts_too(clone: Path) -> None:
    release_tmux(clone)
    (clone / "packages/loop-tmux/src/loop_tmux/extra.py").write_text("X = 1\n", encoding="utf-8")

    done = run_tool("changelog_check", root=clone)

    assert done.returncode == 1
    assert "packages/loop-tmux/src/loop_tmux/extra.py" in done.stderr


def test_tests_and_docs_of_a_released_package_need_no_entry(clone: Path) -> None:
    tag = release_tmux(clone)
    touch(clone, "packages/loop-tmux/tests/test_units.py")
    touch(clone, "packages/loop-tmux/README.md")
    commit_all(clone, "loop-tmux: tests only")

    done = run_tool("changelog_check", root=clone)

    assert done.returncode == 0, done.stderr
    assert f"ok: loop-tmux: unchanged since {tag}" in done.stdout


def test_a_never_released_package_without_entries_fails(clone: Path) -> None:
    for tag in git(clone, "tag", "--list", "loop-envstate/v*").split():
        git(clone, "tag", "-d", tag)  # never released, whatever the real repository holds
    path = clone / "CHANGELOG.md"
    text = path.read_text(encoding="utf-8")
    start = text.index("## loop-envstate\n\n### Unreleased\n")
    end = text.index("## loop-tmux\n")
    emptied = "## loop-envstate\n\n### Unreleased\n\n"
    path.write_text(text[:start] + emptied + text[end:], encoding="utf-8")

    done = run_tool("changelog_check", root=clone)

    assert done.returncode == 1
    assert "error: loop-envstate: never released (no tag) but" in done.stderr


def test_a_changelog_without_the_unreleased_heading_cannot_be_checked(clone: Path) -> None:
    path = clone / "CHANGELOG.md"
    text = path.read_text(encoding="utf-8")
    path.write_text(
        text.replace("## loop-cli\n\n### Unreleased\n", "## loop-cli\n", 1), encoding="utf-8"
    )

    done = run_tool("changelog_check", root=clone)

    assert done.returncode == 2
    assert done.stderr.strip() == (
        "changelog check: CHANGELOG.md: section '## loop-cli' must start with a"
        " '### Unreleased' heading"
    )
