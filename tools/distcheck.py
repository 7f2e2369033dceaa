"""Check built distributions: `python -m tools.distcheck DIST_DIR` (run by `nox -s build`).

DIST_DIR must hold exactly one sdist and one wheel per package, at the version its
`__version__` says. Then each wheel is installed ALONE into a fresh venv, with only the
wheels of the in-repo packages it needs (third-party dependencies come from the index;
`loop-*` names never do: each must be installed from our own file, and no other in-repo
package may be present). In that venv every module of the package is imported from the
venv (isolated mode, never the source tree) and each console script answers `--version`
with its package's version.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.monorepo import Package, ToolError, closure, load_packages

__all__ = ["artefact_names", "check_artefacts", "main", "smoke"]

ROOT = Path(__file__).resolve().parent.parent

# Runs inside the fresh venv: which loop-* distributions are there and where from, the
# import of every module of the package, and its console scripts.
_PROBE = r"""
import importlib, importlib.metadata as md, json, pkgutil, sys
name, module = sys.argv[1], sys.argv[2]
dists = {}
for dist in md.distributions():
    dname = dist.metadata["Name"].lower().replace("_", "-")
    if dname.startswith("loop-"):
        url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
        dists[dname] = {"version": dist.version, "url": url}
top = importlib.import_module(module)
imported = [module]
# A pytest plugin the package registers (pytest11) is loaded by pytest alone, which
# brings pytest with it: it is not imported here, where pytest is not installed.
plugins = sorted(
    ep.value.split(":")[0] for ep in md.distribution(name).entry_points if ep.group == "pytest11"
)
for info in pkgutil.walk_packages(top.__path__, module + "."):
    if info.name.rsplit(".", 1)[-1] != "__main__" and info.name not in plugins:
        importlib.import_module(info.name)
        imported.append(info.name)
scripts = sorted(
    ep.name for ep in md.distribution(name).entry_points if ep.group == "console_scripts"
)
version = getattr(top, "__version__", None)
print(json.dumps({"dists": dists, "file": top.__file__, "version": version,
                  "imported": imported, "scripts": scripts, "plugins": plugins}))
"""


def artefact_names(package: Package) -> tuple[str, str]:
    """The sdist and wheel file names hatchling gives the package's current version."""
    stem = f"{package.name.replace('-', '_')}-{package.version}"
    return f"{stem}.tar.gz", f"{stem}-py3-none-any.whl"


def check_artefacts(dist: Path, packages: dict[str, Package]) -> list[str]:
    """Problems with the set of files in dist (missing, unexpected); empty when right."""
    expected = {n for p in packages.values() for n in artefact_names(p)}
    # uv build leaves a .gitignore in its output directory: dotfiles are not artefacts.
    present = (
        {p.name for p in dist.iterdir() if not p.name.startswith(".")} if dist.is_dir() else set()
    )
    problems = [f"missing {name}" for name in sorted(expected - present)]
    problems += [f"unexpected {name}" for name in sorted(present - expected)]
    return problems


def _run(argv: list[str], cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-5:]
        raise ToolError(f"{' '.join(argv[:3])} ... exited {done.returncode}: {' | '.join(tail)}")
    return done.stdout


def _venv(path: Path, wheels: list[Path], cwd: Path) -> Path:
    """A fresh venv at path with exactly these wheels (and their third-party deps)."""
    python = path / "bin" / "python"
    uv = shutil.which("uv")
    if uv:
        _run([uv, "venv", "-q", "--python", sys.executable, str(path)], cwd)
        _run([uv, "pip", "install", "-q", "--python", str(python), *map(str, wheels)], cwd)
    else:
        _run([sys.executable, "-m", "venv", str(path)], cwd)
        _run([str(python), "-m", "pip", "install", "-q", *map(str, wheels)], cwd)
    return python


def smoke(dist: Path, packages: dict[str, Package], name: str, workdir: Path) -> list[str]:
    """Install one package's wheel with its in-repo dependencies' wheels alone in a fresh
    venv, import it all, run its scripts; the lines to report, or ToolError."""
    package = packages[name]
    needed = closure(packages, name)
    wheels = [dist / artefact_names(packages[n])[1] for n in needed]
    python = _venv(workdir / name, wheels, workdir)
    probe = json.loads(_run([str(python), "-I", "-c", _PROBE, name, package.module], workdir))
    problems = []
    if sorted(probe["dists"]) != sorted(needed):
        problems.append(f"in-repo packages installed {sorted(probe['dists'])}, want {needed}")
    for dname, info in probe["dists"].items():
        if not info["url"].startswith("file:") or not info["url"].endswith(".whl"):
            problems.append(f"{dname} was not installed from our wheel ({info['url'] or 'index'})")
    if not Path(probe["file"]).resolve().is_relative_to((workdir / name).resolve()):
        problems.append(f"{package.module} imported from {probe['file']}, not the venv")
    if probe["version"] != str(package.version):
        problems.append(f"{package.module}.__version__ is {probe['version']!r}")
    lines = [f"{name}: {len(probe['imported'])} modules import with only {', '.join(needed)}"]
    if probe["plugins"]:
        lines.append(f"{name}: pytest plugin(s) left to pytest: {', '.join(probe['plugins'])}")
    for script in probe["scripts"]:
        exe = workdir / name / "bin" / script
        # The first line names the script's own version (the-loop's lists the rest below).
        answer = (_run([str(exe), "--version"], workdir).strip().splitlines() or [""])[0]
        if answer != f"{script} {package.version}":
            problems.append(f"`{script} --version` said {answer!r}")
        lines.append(f"{name}: `{script} --version` -> {answer}")
    if problems:
        raise ToolError(f"{name}: " + "; ".join(problems))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.distcheck", description=__doc__)
    parser.add_argument("dist", type=Path, help="the directory nox -s build filled")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        packages = load_packages(args.root.resolve())
        problems = check_artefacts(args.dist, packages)
        if problems:
            raise ToolError(f"{args.dist}: " + "; ".join(problems))
        print(f"{args.dist}: {2 * len(packages)} artefacts, one sdist and one wheel per package")
        with tempfile.TemporaryDirectory(prefix="distcheck-") as tmp:
            for name in packages:
                print("\n".join(smoke(args.dist.resolve(), packages, name, Path(tmp))))
    except ToolError as exc:
        print(f"distcheck: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
