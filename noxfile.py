"""Sessions for the the-loop monorepo: lint, tests, integration, bench, demo, build, release.

`nox` with no arguments runs lint, the package x Python matrix, the integration tests,
the CHANGELOG check, the release tooling's tests and the build of every distribution:
that is the project's whole test suite and what `.ci/run` runs. `nox -s release -- ...`
cuts one package's release (docs/releasing.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]

# Each package with the in-repo packages it depends on (installed from local paths,
# never from an index: these names are not ours on public indexes).
PACKAGES: dict[str, list[str]] = {
    "loop-envstate": [],
    "loop-tmux": [],
    "loop-dispatch": ["loop-tmux"],
    "loop-cli": ["loop-envstate", "loop-tmux", "loop-dispatch"],
}
# In-repo packages a suite's tests use beyond those: loop-tmux's pytest plugin
# (loop_tmux.testing: wait_for/wait_until, private tmux server, the fake) serves every
# suite; loop-envstate itself still depends on nothing in the repo.
TEST_PACKAGES: dict[str, list[str]] = {"loop-envstate": ["loop-tmux"]}

nox.options.default_venv_backend = "uv|virtualenv"
# The package matrix runs by default on the oldest and newest supported Pythons (the
# two ends catch what the middle would: syntax, stdlib and typing changes); `nox -s
# tests` runs all four. That keeps the whole default run well under 30 min on 2 cores.
MATRIX_ENDS = [f"tests-{PYTHONS[0]}", f"tests-{PYTHONS[-1]}"]
nox.options.sessions = ["lint", *MATRIX_ENDS, "integration"]
# A missing interpreter is skipped with a message, under CI=true too.
nox.options.error_on_missing_interpreters = False
# Fresh venvs every run, so a dependency a package forgot to declare fails the run.
nox.options.reuse_venv = "no"
# uv must use the interpreters on this machine, never try to download one.
os.environ.setdefault("UV_PYTHON_DOWNLOADS", "never")


def _expose_pyenv_interpreters() -> None:
    """Make every pyenv-installed CPython findable as pythonX.Y on PATH."""
    if not shutil.which("pyenv"):
        return
    try:
        out = subprocess.run(
            ["pyenv", "versions", "--bare"], capture_output=True, text=True, timeout=20
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return
    latest: dict[str, str] = {}
    for version in out.split():
        parts = version.split(".")
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            minor = ".".join(parts[:2])
            if minor in PYTHONS:
                latest[minor] = version  # pyenv lists in ascending order
    # pyenv's shims export PYENV_VERSION for the nox process itself: extend it, keeping
    # whatever it already names first.
    chosen = [v for v in os.environ.get("PYENV_VERSION", "").split(":") if v]
    chosen += [latest[m] for m in PYTHONS if m in latest and latest[m] not in chosen]
    if chosen:
        os.environ["PYENV_VERSION"] = ":".join(chosen)


_expose_pyenv_interpreters()


def _local(*names: str) -> list[str]:
    return [str(ROOT / "packages" / name) for name in names]


def _install_all(session: nox.Session, extra: str = "") -> None:
    paths = _local(*PACKAGES)
    paths[-1] += extra
    session.install(*paths)


# Pinned so every machine gives the same verdict (docs/architecture.md, "Enforced").
LINT_TOOLS = [
    "ruff==0.17.6",
    "mypy==2.4.1",
    "types-PyYAML==6.0.12.20261122",
    "types-psutil==7.2.2.20261111",
    "import-linter==2.17",
]


@nox.session(python=None)
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, mypy --strict over every package's sources, and
    the layering contracts (lint-imports); the settings live in the root pyproject.toml."""
    # Each package with the extras its sources import (psycopg for the PostgreSQL store),
    # so mypy sees every library's types.
    packages = [
        p + ("[postgresql]" if p.endswith("loop-dispatch") else "") for p in _local(*PACKAGES)
    ]
    session.install(*LINT_TOOLS, "pytest>=8", *packages)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
    session.run("lint-imports")
    # The checkers themselves, shown failing on a copy of the tree with one breach each.
    session.run("pytest", str(ROOT / "tests-lint"), "-q")


@nox.session(python=PYTHONS)
@nox.parametrize("package", list(PACKAGES))
def tests(session: nox.Session, package: str) -> None:
    """One package installed alone (plus its in-repo dependencies, and TEST_PACKAGES for
    its tests) into a fresh venv."""
    local = [*PACKAGES[package], *TEST_PACKAGES.get(package, [])]
    session.install(*_local(*local), f"{ROOT / 'packages' / package}[test]")
    session.run(
        "pytest",
        str(ROOT / "packages" / package / "tests"),
        "-q",
        *session.posargs,
    )


@nox.session(python=None)
def integration(session: nox.Session) -> None:
    """End-to-end tests over the installed packages: real tmux, loopback HTTP."""
    _install_all(session, "[test]")
    session.install("pytest>=8")
    # Exit 5 is pytest's "no tests collected": allowed while the suite is empty.
    session.run(
        "pytest", str(ROOT / "tests-integration"), "-q", *session.posargs, success_codes=[0, 5]
    )


@nox.session(python=None)
def bench(session: nox.Session) -> None:
    """Benchmarks: every packages/*/benchmarks/bench_*.py, printing medians and growth."""
    _install_all(session, "[test]")
    scripts = sorted(ROOT.glob("packages/*/benchmarks/bench_*.py"))
    wanted = set(session.posargs)
    for script in scripts:
        if wanted and script.stem not in wanted:
            continue
        session.log(f"== {script.relative_to(ROOT)}")
        session.run("python", str(script))


@nox.session(python=None)
def demo(session: nox.Session) -> None:
    """The main job on embedded defaults: `the-loop demo` in a fresh venv."""
    _install_all(session)
    session.run("the-loop", "demo", *session.posargs)


# --- Build and release (docs/releasing.md); the logic lives in tools/, tested by tests-release/.

# What the tools/ modules need besides the standard library.
TOOLS_DEPS = ["packaging>=23", "tomli>=2; python_version < '3.11'"]
# Part of the default run: together they take well under a minute (build: ~20 s).
nox.options.sessions = [*nox.options.sessions, "changelog", "release_tests", "build"]


@nox.session(python=None)
def build(session: nox.Session) -> None:
    """sdist + wheel per package into dist/, twine check --strict, each wheel alone in a venv."""
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.install("uv", "twine>=5", *TOOLS_DEPS)
    for name in PACKAGES:
        session.run("uv", "build", "-q", "--out-dir", str(dist), str(ROOT / "packages" / name))
    artefacts = sorted(str(p) for p in dist.iterdir() if p.name.endswith((".whl", ".tar.gz")))
    session.run("twine", "check", "--strict", *artefacts)
    session.run("python", "-m", "tools.distcheck", str(dist))


@nox.session(python=None)
def release(session: nox.Session) -> None:
    """`nox -s release -- PACKAGE VERSION [--apply]`: dry run unless --apply (commit + tag)."""
    session.install(*TOOLS_DEPS)
    session.run("python", "-m", "tools.release", *session.posargs)


@nox.session(python=None)
def changelog(session: nox.Session) -> None:
    """A package whose sources changed since its last release tag has an Unreleased entry."""
    session.install(*TOOLS_DEPS)
    session.run("python", "-m", "tools.changelog_check")


@nox.session(python=None)
def release_tests(session: nox.Session) -> None:
    """Tests of the release tooling and of the repository's versions and ranges."""
    session.install("pytest>=8", "uv", *TOOLS_DEPS)
    session.run("pytest", str(ROOT / "tests-release"), "-q", *session.posargs)
