"""CI check: a package whose sources changed since its last release has news.

`python -m tools.changelog_check`: for each package, its sources (`src/` and
`pyproject.toml`, what a wheel is made of) are compared with its newest release tag
`PACKAGE/v*` reachable from HEAD, working-tree changes included. If they differ, the
package's `### Unreleased` block in CHANGELOG.md must hold at least one entry. A package
never released (no tag) must have one too: everything in it is unreleased. Tests,
benchmarks and docs need no entry. Exit 0 when every package passes, 1 when one fails,
2 when the check cannot run (shallow clone, malformed CHANGELOG). See docs/releasing.md.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from tools import changelog, gitutil
from tools.monorepo import Package, ToolError, load_packages

__all__ = ["Verdict", "check", "main", "source_paths"]

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Verdict:
    """One package's result: its base tag (None: never released), what changed, entries."""

    package: str
    base: str | None
    changed: list[str]
    entries: int

    @property
    def ok(self) -> bool:
        needs_entry = self.base is None or bool(self.changed)
        return self.entries > 0 or not needs_entry

    def describe(self) -> str:
        if self.base is None:
            why = "never released (no tag)"
        elif self.changed:
            sample = ", ".join(self.changed[:3]) + (", ..." if len(self.changed) > 3 else "")
            why = f"{len(self.changed)} source file(s) changed since {self.base} ({sample})"
        else:
            why = f"unchanged since {self.base}"
        if self.ok:
            return f"ok: {self.package}: {why}, {self.entries} Unreleased entr" + (
                "y" if self.entries == 1 else "ies"
            )
        return (
            f"error: {self.package}: {why} but CHANGELOG.md has no entry under"
            f" '## {self.package}' / '{changelog.UNRELEASED}'"
        )


def source_paths(root: Path, package: Package) -> list[str]:
    """The paths, relative to root, whose changes need a CHANGELOG entry."""
    rel = package.directory.relative_to(root)
    return [str(rel / "src"), str(rel / "pyproject.toml")]


def check(root: Path) -> list[Verdict]:
    """Every package's verdict; ToolError when the check cannot be made."""
    if gitutil.is_shallow(root):
        raise ToolError(
            "shallow clone: release tags and history are needed (git fetch --unshallow --tags)"
        )
    packages = load_packages(root)
    text = (root / "CHANGELOG.md").read_text(encoding="utf-8")
    verdicts = []
    for package in packages.values():
        entries = len(changelog.unreleased_entries(text, package.name))
        tags = gitutil.release_tags(root, package, merged=True)
        if not tags:
            verdicts.append(Verdict(package.name, None, [], entries))
            continue
        base = tags[max(tags)]
        changed = gitutil.changed_files(root, base, source_paths(root, package))
        verdicts.append(Verdict(package.name, base, changed, entries))
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.changelog_check", description=__doc__)
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        verdicts = check(args.root.resolve())
    except ToolError as exc:
        print(f"changelog check: {exc}", file=sys.stderr)
        return 2
    for verdict in verdicts:
        print(verdict.describe(), file=sys.stdout if verdict.ok else sys.stderr)
    return 0 if all(v.ok for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
