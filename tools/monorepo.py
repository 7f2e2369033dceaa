"""The repository's packages as the release tooling sees them.

Each package under `packages/` has one version, written only as `__version__` in the
file its `[tool.hatch.version] path` names, and declares its in-repo dependencies with a
range (`loop-tmux>=0.1,<0.2`). Everything here reads files; nothing runs git.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised by nox sessions on 3.10 only
    import tomli as tomllib

__all__ = [
    "PACKAGES_DIR",
    "Package",
    "ToolError",
    "closure",
    "dependants",
    "load_packages",
    "read_version",
    "replace_version",
]

PACKAGES_DIR = "packages"

# The line hatch's regex version source reads; the release tool rewrites only this line.
_VERSION_LINE = re.compile(r"""^(__version__\s*=\s*)(["'])([^"']*)\2""", re.MULTILINE)


class ToolError(Exception):
    """A problem the tooling reports as one line (bad input, refused release, git failure)."""


@dataclass(frozen=True)
class Package:
    """One distribution under packages/: where it lives, its version, its in-repo ranges."""

    name: str
    directory: Path
    version_file: Path
    version: Version
    # In-repo dependency name -> its parsed requirement, and the string as written in
    # pyproject.toml (which the release tool replaces when it widens a range).
    requires: dict[str, Requirement] = field(default_factory=dict)
    written: dict[str, str] = field(default_factory=dict)

    @property
    def pyproject(self) -> Path:
        return self.directory / "pyproject.toml"

    @property
    def module(self) -> str:
        """Import name, the directory holding the version file."""
        return self.version_file.parent.name

    @property
    def tag_prefix(self) -> str:
        """Release tags of this package are `<name>/v<version>`."""
        return f"{self.name}/v"

    def tag(self, version: Version | str) -> str:
        return f"{self.tag_prefix}{version}"


def read_version(text: str, where: Path) -> str:
    """The `__version__` string of a version file's text; exactly one such line."""
    found = _VERSION_LINE.findall(text)
    if len(found) != 1:
        raise ToolError(f'{where}: expected one `__version__ = "..."` line, found {len(found)}')
    return str(found[0][2])


def replace_version(text: str, new: str, where: Path) -> str:
    """The version file's text with its `__version__` set to `new`, all else untouched."""
    read_version(text, where)
    return _VERSION_LINE.sub(lambda m: f"{m.group(1)}{m.group(2)}{new}{m.group(2)}", text)


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise ToolError(f"{path}: cannot read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ToolError(f"{path}: not valid TOML ({exc})") from None


def _parse_package(directory: Path) -> tuple[str, Path, Version, dict[str, Requirement]]:
    pyproject = directory / "pyproject.toml"
    data = _load_toml(pyproject)
    project = data.get("project", {})
    name = project.get("name")
    if not isinstance(name, str):
        raise ToolError(f"{pyproject}: no [project] name")
    if "version" in project or "version" not in project.get("dynamic", []):
        raise ToolError(f"{pyproject}: the version must be dynamic (read from __version__)")
    rel = data.get("tool", {}).get("hatch", {}).get("version", {}).get("path")
    if not isinstance(rel, str):
        raise ToolError(f"{pyproject}: no [tool.hatch.version] path")
    version_file = directory / rel
    try:
        text = version_file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ToolError(f"{version_file}: cannot read ({exc.strerror})") from None
    raw = read_version(text, version_file)
    try:
        version = Version(raw)
    except InvalidVersion:
        raise ToolError(f"{version_file}: {raw!r} is not a PEP 440 version") from None
    requirements = {}
    for spec in project.get("dependencies", []):
        try:
            requirements[spec] = Requirement(spec)
        except InvalidRequirement as exc:
            raise ToolError(f"{pyproject}: bad dependency {spec!r} ({exc})") from None
    return canonicalize_name(name), version_file, version, requirements


def load_packages(root: Path) -> dict[str, Package]:
    """Every package under root/packages, dependencies before their dependants."""
    parsed = {}
    for pyproject in sorted((root / PACKAGES_DIR).glob("*/pyproject.toml")):
        name, version_file, version, reqs = _parse_package(pyproject.parent)
        parsed[name] = (pyproject.parent, version_file, version, reqs)
    if not parsed:
        raise ToolError(f"{root / PACKAGES_DIR}: no packages found")
    packages = {}
    for name, (directory, version_file, version, reqs) in parsed.items():
        own = {raw: r for raw, r in reqs.items() if canonicalize_name(r.name) in parsed}
        packages[name] = Package(
            name,
            directory,
            version_file,
            version,
            {canonicalize_name(r.name): r for r in own.values()},
            {canonicalize_name(r.name): raw for raw, r in own.items()},
        )
    return _dependency_order(packages)


def _dependency_order(packages: dict[str, Package]) -> dict[str, Package]:
    ordered: dict[str, Package] = {}
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in ordered:
            return
        if name in visiting:
            raise ToolError(f"in-repo dependency cycle through {name}")
        visiting.add(name)
        for dep in packages[name].requires:
            visit(dep)
        visiting.discard(name)
        ordered[name] = packages[name]

    for name in packages:
        visit(name)
    return ordered


def closure(packages: dict[str, Package], name: str) -> list[str]:
    """`name` and every in-repo package it needs, transitively, dependencies first."""
    wanted: set[str] = set()
    stack = [name]
    while stack:
        current = stack.pop()
        if current not in wanted:
            wanted.add(current)
            stack.extend(packages[current].requires)
    return [n for n in packages if n in wanted]


def dependants(packages: dict[str, Package], name: str) -> list[Package]:
    """The packages that declare a range on `name` directly."""
    return [p for p in packages.values() if name in p.requires]
