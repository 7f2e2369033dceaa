"""`nox -s release -- PACKAGE VERSION [--apply]`, exercised in scratch clones.

Versions are computed from the clone (the next patch, the first version outside the
dependants' ranges), so the tests hold whatever has been released by then."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from release_support import git, next_patch, run_tool, tags

from tools.changelog import unreleased_entries
from tools.monorepo import dependants, load_packages
from tools.release import next_cap, widen


def sections(text: str) -> dict[str, str]:
    """CHANGELOG.md cut at its `## ` headings: name -> the section's text."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def changed_files(repo: Path) -> set[str]:
    return set(git(repo, "diff", "--name-only", "HEAD~1", "HEAD").split())


def lower_bounds(written: str) -> set[str]:
    return {str(s) for s in Requirement(written).specifier if s.operator not in ("<", "<=")}


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


def test_dry_run_says_what_it_would_do_and_changes_nothing(ready: Path) -> None:
    current = load_packages(ready)["loop-tmux"].version
    new = next_patch(current)
    head, before = git(ready, "rev-parse", "HEAD"), tags(ready)

    done = run_tool("release", "loop-tmux", new, root=ready)

    assert done.returncode == 0, done.stderr
    assert f"loop-tmux {current} -> {new} (dry run" in done.stdout
    assert f"tag loop-tmux/v{new}" in done.stdout
    assert git(ready, "status", "--porcelain") == ""
    assert git(ready, "rev-parse", "HEAD") == head
    assert tags(ready) == before


def test_apply_changes_only_that_package_its_changelog_section_and_tag(ready: Path) -> None:
    before = (ready / "CHANGELOG.md").read_text(encoding="utf-8")
    versions = {n: p.version for n, p in load_packages(ready).items()}
    new = next_patch(versions["loop-dispatch"])
    pending = unreleased_entries(before, "loop-dispatch")
    tags_before = tags(ready)

    done = run_tool("release", "loop-dispatch", new, "--apply", root=ready)

    assert done.returncode == 0, done.stderr
    assert changed_files(ready) == {
        "CHANGELOG.md",
        "packages/loop-dispatch/src/loop_dispatch/__init__.py",
    }
    assert git(ready, "log", "-1", "--format=%s").strip() == f"loop-dispatch: release {new}"
    assert tags(ready) == {*tags_before, f"loop-dispatch/v{new}"}
    assert git(ready, "rev-parse", f"loop-dispatch/v{new}^{{commit}}") == git(
        ready, "rev-parse", "HEAD"
    )
    after_versions = {n: p.version for n, p in load_packages(ready).items()}
    assert after_versions == {**versions, "loop-dispatch": Version(new)}
    after = (ready / "CHANGELOG.md").read_text(encoding="utf-8")
    old, now = sections(before), sections(after)
    assert {k: v for k, v in now.items() if k != "loop-dispatch"} == {
        k: v for k, v in old.items() if k != "loop-dispatch"
    }
    heading = rf"### Unreleased\n\n### {re.escape(new)} \(\d{{4}}-\d\d-\d\d\)\n"
    assert re.search(heading, now["loop-dispatch"])
    assert unreleased_entries(after, "loop-dispatch") == []
    released = now["loop-dispatch"].split(f"### {new} ", 1)[1]
    assert all(entry in released for entry in pending)
    # Released and unchanged since: the CHANGELOG check is satisfied for it.
    check = run_tool("changelog_check", root=ready)
    assert f"ok: loop-dispatch: unchanged since loop-dispatch/v{new}" in check.stdout


def test_a_breaking_version_widens_the_dependants_ranges_and_says_so(ready: Path) -> None:
    before_text = (ready / "CHANGELOG.md").read_text(encoding="utf-8")
    before = load_packages(ready)
    users = {p.name: p.written["loop-tmux"] for p in dependants(before, "loop-tmux")}
    assert set(users) == {"loop-dispatch", "loop-cli"}
    # The first version outside every dependant's range (their upper bounds are exclusive).
    cap = max(
        Version(s.version)
        for written in users.values()
        for s in Requirement(written).specifier
        if s.operator == "<"
    )
    new = f"{cap.major}.{cap.minor}.0"
    tags_before = tags(ready)

    done = run_tool("release", "loop-tmux", new, "--apply", root=ready)

    assert done.returncode == 0, done.stderr
    assert changed_files(ready) == {
        "CHANGELOG.md",
        "packages/loop-tmux/src/loop_tmux/__init__.py",
        "packages/loop-dispatch/pyproject.toml",
        "packages/loop-cli/pyproject.toml",
    }
    after = load_packages(ready)
    assert after["loop-tmux"].version == Version(new)
    assert {n: p.version for n, p in after.items() if n != "loop-tmux"} == {
        n: p.version for n, p in before.items() if n != "loop-tmux"
    }
    text = (ready / "CHANGELOG.md").read_text(encoding="utf-8")
    for name, old in users.items():
        widened = after[name].written["loop-tmux"]
        assert f"{name}/pyproject.toml: widened {old} -> {widened}" in done.stdout
        assert Requirement(widened).specifier.contains(new)
        assert lower_bounds(widened) == lower_bounds(old)
        # Its metadata changed: the dependant records it in its own Unreleased block.
        assert unreleased_entries(text, name)[-1].startswith(f"- Accepts loop-tmux {new} (")
    assert after["loop-cli"].written["loop-dispatch"] == before["loop-cli"].written["loop-dispatch"]
    assert sections(text)["loop-envstate"] == sections(before_text)["loop-envstate"]
    assert tags(ready) == {*tags_before, f"loop-tmux/v{new}"}


def test_a_version_not_above_the_last_release_is_refused(ready: Path) -> None:
    new = next_patch(load_packages(ready)["loop-tmux"].version)
    assert run_tool("release", "loop-tmux", new, "--apply", root=ready).returncode == 0
    git(ready, "commit", "-q", "--allow-empty", "-m", "later work")
    head = git(ready, "rev-parse", "HEAD")

    again = run_tool("release", "loop-tmux", new, "--apply", root=ready)

    assert again.returncode == 2
    assert again.stderr == (
        f"release: loop-tmux {new}: not above the last release tag loop-tmux/v{new}\n"
    )
    assert git(ready, "rev-parse", "HEAD") == head


def test_an_empty_unreleased_block_is_refused(ready: Path) -> None:
    new = next_patch(load_packages(ready)["loop-tmux"].version)
    assert run_tool("release", "loop-tmux", new, "--apply", root=ready).returncode == 0

    done = run_tool("release", "loop-tmux", next_patch(Version(new)), root=ready)

    assert done.returncode == 2
    assert "'## loop-tmux' has no Unreleased entries to release" in done.stderr


def test_apply_refuses_a_dirty_working_tree_and_writes_nothing(ready: Path) -> None:
    readme = ready / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + "local edit\n", encoding="utf-8")
    new = next_patch(load_packages(ready)["loop-tmux"].version)
    before = tags(ready)

    done = run_tool("release", "loop-tmux", new, "--apply", root=ready)

    assert done.returncode == 2
    assert "uncommitted changes" in done.stderr
    assert git(ready, "status", "--porcelain").split() == ["M", "README.md"]
    assert tags(ready) == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["loop-nope", "1.0"], "unknown package 'loop-nope'"),
        (["loop-tmux", "one"], "'one' is not a PEP 440 version"),
        (["loop-tmux", "99.1.1+local"], "a local version (+...) cannot be released"),
        (["loop-tmux", "0.0.0"], "loop-tmux 0.0.0: "),  # below current, or not above a tag
        (["loop-tmux", "v99.2"], "write the version in normal form: 99.2"),
    ],
)
def test_bad_arguments_are_one_line_errors(ready: Path, args: list[str], message: str) -> None:
    done = run_tool("release", *args, root=ready)
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stderr.count("\n") == 1
