"""No module imports another module's private names (`from .inbox import _iso`).

import-linter sees modules, not names, so this reads every package's sources: a name
starting with one underscore belongs to its module; a module that needs it from
elsewhere gets it made public in a module named for what it holds (as inboxtable.py
holds the SQL inbox.py, hosts.py and hostrestarts.py share).
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("loop_cli", "loop_dispatch", "loop_tmux", "loop_envstate")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_name_imports(sources: Path) -> list[str]:
    """`path:line: from M import _x` for each in-repo private name a module imports."""
    found: list[str] = []
    for path in sorted(sources.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            module = node.module or ""
            in_repo = node.level > 0 or module.split(".")[0] in PACKAGES
            if not in_repo or _private(module.rpartition(".")[2]):
                continue  # another project's, or a private module (import-linter's)
            for alias in node.names:
                if _private(alias.name):
                    where = path.relative_to(sources)
                    found.append(f"{where}:{node.lineno}: from {module} import {alias.name}")
    return found


def _sources(into: Path) -> Path:
    for name in PACKAGES:
        dist = name.replace("_", "-")
        shutil.copytree(
            ROOT / "packages" / dist / "src" / name,
            into / name,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    return into


def test_no_module_imports_another_modules_private_names(tmp_path: Path) -> None:
    assert private_name_imports(_sources(tmp_path)) == []


def test_a_private_name_import_is_found_and_named(tmp_path: Path) -> None:
    sources = _sources(tmp_path)
    hosts = sources / "loop_dispatch" / "hosts.py"
    hosts.write_text(hosts.read_text() + "\nfrom .inbox import _count\n", encoding="utf-8")
    found = private_name_imports(sources)
    assert len(found) == 1
    assert found[0].startswith("loop_dispatch/hosts.py:")
    assert found[0].endswith("from inbox import _count")
