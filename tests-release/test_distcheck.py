"""tools.distcheck: the artefact set, and a wheel that only works beside the source tree."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tools.distcheck import artefact_names, check_artefacts, smoke
from tools.monorepo import ToolError, load_packages


def test_the_artefact_set_is_one_sdist_and_one_wheel_per_package(tmp_path: Path) -> None:
    packages = load_packages(Path(__file__).resolve().parent.parent)
    for package in packages.values():
        for name in artefact_names(package):
            (tmp_path / name).touch()
    (tmp_path / ".gitignore").touch()  # uv build's own, not an artefact
    assert check_artefacts(tmp_path, packages) == []

    _sdist, wheel = artefact_names(packages["loop-tmux"])
    (tmp_path / wheel).unlink()
    (tmp_path / "loop_tmux-0.0.1-py3-none-any.whl").touch()
    assert check_artefacts(tmp_path, packages) == [
        f"missing {wheel}",
        "unexpected loop_tmux-0.0.1-py3-none-any.whl",
    ]


def test_a_wheel_importing_a_package_it_does_not_declare_fails_alone(
    clone: Path, tmp_path: Path
) -> None:
    """loop-tmux importing loop-envstate works in the dev venv (everything installed) but
    not installed alone: the smoke check must say so."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH (nox -s release_tests installs it)")
    names = clone / "packages/loop-tmux/src/loop_tmux/names.py"
    names.write_text(names.read_text(encoding="utf-8") + "\nimport loop_envstate  # noqa\n")
    dist = tmp_path / "dist"
    subprocess.run(
        [uv, "build", "-q", "--wheel", "--out-dir", str(dist), str(clone / "packages/loop-tmux")],
        check=True,
        timeout=300,
    )
    work = tmp_path / "work"
    work.mkdir()

    with pytest.raises(ToolError, match="No module named 'loop_envstate'"):
        smoke(dist, load_packages(clone), "loop-tmux", work)
