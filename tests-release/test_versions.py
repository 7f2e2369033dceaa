"""The repository's own versions and in-repo ranges, as they stand in this checkout."""

from __future__ import annotations

import ast

from packaging.version import Version
from release_support import ROOT

from tools.monorepo import load_packages


def test_every_in_repo_range_admits_the_current_version() -> None:
    packages = load_packages(ROOT)
    wrong = [
        f"{p.name} wants {p.written[dep]}, {dep} is {packages[dep].version}"
        for p in packages.values()
        for dep, req in p.requires.items()
        if not req.specifier.contains(packages[dep].version, prereleases=True)
    ]
    assert wrong == []


def test_every_in_repo_range_has_a_lower_and_an_upper_bound() -> None:
    """An upper bound is what makes a breaking release visible to dependants (and what the
    release tool widens); a lower bound says which features a dependant relies on."""
    for package in load_packages(ROOT).values():
        for dep, req in package.requires.items():
            operators = {s.operator for s in req.specifier}
            assert operators & {">=", ">", "~=", "=="}, f"{package.name}: {dep} has no lower bound"
            assert operators & {"<", "<=", "~=", "=="}, f"{package.name}: {dep} has no upper bound"


def test_versions_are_pep440_and_written_once() -> None:
    packages = load_packages(ROOT)
    assert set(packages) == {"loop-envstate", "loop-tmux", "loop-dispatch", "loop-cli"}
    for package in packages.values():
        assert str(package.version) == str(Version(str(package.version)))
        text = package.pyproject.read_text(encoding="utf-8")
        assert '\nversion = "' not in text, f"{package.pyproject}: a static version"


def test_noxfile_installs_exactly_the_declared_in_repo_dependencies() -> None:
    """nox's PACKAGES table decides what `nox -s tests` installs beside each package."""
    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    table = next(
        ast.literal_eval(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and node.target.id == "PACKAGES"
        and node.value is not None
    )
    declared = {name: sorted(p.requires) for name, p in load_packages(ROOT).items()}
    assert {name: sorted(deps) for name, deps in table.items()} == declared
