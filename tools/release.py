"""Cut a release of ONE package: `python -m tools.release PACKAGE VERSION [--apply]`.

Dry run by default: says what would change. With --apply: sets the package's
`__version__`, moves its CHANGELOG Unreleased entries under the new version's heading,
widens the in-repo ranges of packages that depend on it when the new version falls
outside them (adding an Unreleased entry to each such dependant), commits those files
and tags the commit `PACKAGE/vVERSION`. Nothing is pushed. See docs/releasing.md.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from tools import changelog, gitutil
from tools.monorepo import Package, ToolError, dependants, load_packages, replace_version

__all__ = ["Plan", "Widening", "apply", "main", "next_cap", "plan_release", "widen"]

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Widening:
    """A dependant's range on the released package, before and after."""

    dependant: Package
    old: str
    new: str
    version: Version

    @property
    def entry(self) -> str:
        """The dependant's CHANGELOG line: its metadata changed, so it has news too."""
        name = Requirement(self.old).name
        return f"Accepts {name} {self.version} (`{self.new}`, was `{self.old}`)."


@dataclass
class Plan:
    """Everything one release changes: file contents to write, then the commit and tag."""

    package: Package
    version: Version
    date: str
    entries: list[str]
    writes: dict[Path, str] = field(default_factory=dict)
    widenings: list[Widening] = field(default_factory=list)

    @property
    def tag(self) -> str:
        return self.package.tag(self.version)

    @property
    def message(self) -> str:
        return f"{self.package.name}: release {self.version}"


def next_cap(version: Version) -> Version:
    """The first version a compatible range excludes: next minor under 1.0, else next major."""
    if version.major == 0:
        return Version(f"0.{version.minor + 1}")
    return Version(f"{version.major + 1}")


def widen(req: Requirement, version: Version) -> str | None:
    """`req` written with its upper bound moved to `next_cap(version)`, or None when `version`
    already satisfies it. Lower bounds are kept: a dependant that needs the new version
    raises its own lower bound by hand."""
    if req.specifier.contains(version, prereleases=True):
        return None
    lower = [s for s in req.specifier if s.operator not in ("<", "<=")]
    spec = SpecifierSet(",".join([*(str(s) for s in lower), f"<{next_cap(version)}"]))
    if not spec.contains(version, prereleases=True):
        raise ToolError(f"cannot widen {req} to admit {version}: its lower bound excludes it")
    ordered = ",".join(
        str(s) for s in sorted(spec, key=lambda s: (s.operator.startswith("<"), str(s)))
    )
    text = f"{req.name}{'[' + ','.join(sorted(req.extras)) + ']' if req.extras else ''}{ordered}"
    if req.marker is not None:
        text += f"; {req.marker}"
    return text


def _check_version(package: Package, version: Version, tags: dict[Version, str]) -> None:
    if version.local is not None:
        raise ToolError(f"{version}: a local version (+...) cannot be released")
    if tags and version <= max(tags):
        raise ToolError(
            f"{package.name} {version}: not above the last release tag {tags[max(tags)]}"
        )
    if version < package.version:
        raise ToolError(f"{package.name} {version}: below the current version {package.version}")


def plan_release(root: Path, name: str, raw_version: str, date: str) -> Plan:
    """What releasing `name` at `raw_version` changes; raises ToolError if it may not."""
    packages = load_packages(root)
    key = canonicalize_name(name)
    if key not in packages:
        raise ToolError(f"unknown package {name!r} (one of: {', '.join(packages)})")
    package = packages[key]
    try:
        version = Version(raw_version)
    except InvalidVersion:
        raise ToolError(f"{raw_version!r} is not a PEP 440 version") from None
    if str(version) != raw_version:
        raise ToolError(f"write the version in normal form: {version} (not {raw_version!r})")
    _check_version(package, version, gitutil.release_tags(root, package, merged=False))

    changelog_path = root / "CHANGELOG.md"
    text = changelog_path.read_text(encoding="utf-8")
    entries = changelog.unreleased_entries(text, package.name)
    if not entries:
        raise ToolError(f"CHANGELOG.md: '## {package.name}' has no Unreleased entries to release")
    plan = Plan(package, version, date, entries)

    init_text = package.version_file.read_text(encoding="utf-8")
    new_init = replace_version(init_text, str(version), package.version_file)
    if new_init != init_text:
        plan.writes[package.version_file] = new_init
    text = changelog.release_section(text, package.name, str(version), date)

    for dependant in dependants(packages, package.name):
        new = widen(dependant.requires[package.name], version)
        if new is None:
            continue
        pyproject = plan.writes.get(dependant.pyproject) or dependant.pyproject.read_text(
            encoding="utf-8"
        )
        written = dependant.written[package.name]
        quoted = [f'"{written}"', f"'{written}'"]
        hits = [q for q in quoted if q in pyproject]
        if not hits:
            raise ToolError(f"{dependant.pyproject}: cannot find the requirement '{written}'")
        plan.writes[dependant.pyproject] = pyproject.replace(hits[0], f'"{new}"', 1)
        widening = Widening(dependant, written, new, version)
        plan.widenings.append(widening)
        text = changelog.add_unreleased(text, dependant.name, widening.entry)
    plan.writes[changelog_path] = text
    return plan


def apply(root: Path, plan: Plan) -> None:
    """Write the plan's files, commit exactly those, tag the commit (annotated)."""
    if gitutil.git(root, "status", "--porcelain", "--untracked-files=no").strip():
        raise ToolError("the working tree has uncommitted changes: commit or stash them first")
    for path, content in plan.writes.items():
        path.write_text(content, encoding="utf-8")
    files = [str(path.relative_to(root)) for path in plan.writes]
    gitutil.git(root, "add", "--", *files)
    gitutil.git(root, "commit", "-q", "-m", plan.message, "--", *files)
    gitutil.git(root, "tag", "-a", plan.tag, "-m", f"{plan.package.name} {plan.version}")


def render(root: Path, plan: Plan, *, applied: bool) -> list[str]:
    """The lines `main` prints: what changes, and what the operator does next."""
    package = plan.package
    state = "released" if applied else "dry run; --apply writes, commits and tags"
    lines = [f"{package.name} {package.version} -> {plan.version} ({state})"]
    if package.version_file in plan.writes:
        rel = package.version_file.relative_to(root)
        lines.append(f'  {rel}: __version__ = "{plan.version}"')
    count = len(plan.entries)
    lines.append(
        f"  CHANGELOG.md: {count} Unreleased entr{'y' if count == 1 else 'ies'}"
        f" of {package.name} move under '### {plan.version} ({plan.date})'"
    )
    for w in plan.widenings:
        lines.append(
            f"  {w.dependant.pyproject.relative_to(root)}: widened {w.old} -> {w.new};"
            f" {w.dependant.name} gets an Unreleased entry and needs its own release"
            " to publish the wider range"
        )
    lines.append(f"  git commit '{plan.message}', tag {plan.tag}")
    if applied:
        lines.append(f"  push: git push origin HEAD {plan.tag}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nox -s release --", description=__doc__)
    parser.add_argument("package", help="the package to release, e.g. loop-tmux")
    parser.add_argument("version", help="its new version, e.g. 0.1.1")
    parser.add_argument("--apply", action="store_true", help="write, commit and tag")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root = args.root.resolve()
    date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    try:
        plan = plan_release(root, args.package, args.version, date)
        if args.apply:
            apply(root, plan)
    except ToolError as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 2
    print("\n".join(render(root, plan, applied=args.apply)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
