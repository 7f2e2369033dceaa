"""The few git questions the release tooling asks, each one `git` process."""

from __future__ import annotations

import subprocess
from pathlib import Path

from packaging.version import InvalidVersion, Version

from tools.monorepo import Package, ToolError

__all__ = ["changed_files", "git", "is_shallow", "release_tags"]


def git(root: Path, *args: str) -> str:
    """Run git in root; its stdout, or a ToolError carrying git's own first line."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(f"git {args[0]}: {exc}") from None
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["failed"])[0]
        raise ToolError(f"git {args[0]}: {first}")
    return done.stdout


def is_shallow(root: Path) -> bool:
    return git(root, "rev-parse", "--is-shallow-repository").strip() == "true"


def release_tags(root: Path, package: Package, *, merged: bool) -> dict[Version, str]:
    """The package's `<name>/v<version>` tags by version (only those reachable from HEAD
    when `merged`). Tags whose suffix is not a version are ignored."""
    args = ["tag", "--list", f"{package.tag_prefix}*"]
    if merged:
        args += ["--merged", "HEAD"]
    found: dict[Version, str] = {}
    for tag in git(root, *args).split():
        try:
            found[Version(tag[len(package.tag_prefix) :])] = tag
        except InvalidVersion:
            continue
    return found


def changed_files(root: Path, base: str, paths: list[str]) -> list[str]:
    """Files under `paths` that differ between `base` and the working tree, untracked
    ones included (so a check run before committing sees them too)."""
    tracked = git(root, "diff", "--name-only", base, "--", *paths).split("\n")
    untracked = git(root, "ls-files", "--others", "--exclude-standard", "--", *paths).split("\n")
    return sorted({line for line in tracked + untracked if line})
