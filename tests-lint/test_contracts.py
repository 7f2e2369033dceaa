"""The lint session's checkers fail on a violation: each is run on a copy of the four
packages' sources with one deliberate breach added, and must name what broke.

Run by `nox -s lint` (which installs the pinned checkers); skipped, with the reason,
where they are not installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("loop_cli", "loop_dispatch", "loop_tmux", "loop_envstate")
CONFIG = ROOT / "pyproject.toml"


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (nox -s lint installs it)")
    return found


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the four packages' import packages, first on PYTHONPATH."""
    for name in PACKAGES:
        dist = name.replace("_", "-")
        shutil.copytree(
            ROOT / "packages" / dist / "src" / name,
            tmp_path / name,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    return tmp_path


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [_tool("lint-imports"), "--config", str(CONFIG), "--no-cache"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
        timeout=300,
        check=False,
    )


def test_the_real_tree_keeps_every_contract(tree: Path) -> None:
    done = _lint_imports(tree)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("files", "contract"),
    [
        ({"loop_tmux/upward.py": "import loop_dispatch\n"}, "Layers"),
        ({"loop_dispatch/upward.py": "from loop_cli import errors\n"}, "Layers"),
        ({"loop_envstate/sideways.py": "import loop_tmux\n"}, "loop_envstate is used by"),
        ({"loop_dispatch/env.py": "import loop_envstate\n"}, "do not import loop_envstate"),
        (
            {
                "loop_dispatch/_hidden.py": "X = 1\n",
                "loop_cli/peek.py": "from loop_dispatch._hidden import X\n",
            },
            "private module",
        ),
        (
            {
                "loop_tmux/ping.py": "from loop_tmux import pong\n",
                "loop_tmux/pong.py": "from loop_tmux import ping\n",
            },
            "import circles",
        ),
    ],
)
def test_a_breach_fails_the_check_and_is_named(
    tree: Path, files: dict[str, str], contract: str
) -> None:
    for path, text in files.items():
        (tree / path).write_text(text, encoding="utf-8")
    done = _lint_imports(tree)
    assert done.returncode != 0
    broken = done.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, done.stdout


def test_hosts_reaching_back_into_inbox_fails_the_check(tree: Path) -> None:
    """The shared SQL lives in inboxtable: hosts.py importing inbox.py again (as it did
    for inbox's private names) breaks a contract."""
    hosts = tree / "loop_dispatch" / "hosts.py"
    hosts.write_text(hosts.read_text() + "\nfrom .inbox import Inbox\n", encoding="utf-8")
    done = _lint_imports(tree)
    assert done.returncode != 0
    assert "never inbox.py" in done.stdout.split("Broken contracts", 1)[-1], done.stdout


def test_mypy_strict_fails_on_a_type_error(tree: Path) -> None:
    bad = tree / "loop_tmux" / "typo.py"
    bad.write_text('def width() -> int:\n    return "wide"\n', encoding="utf-8")
    done = subprocess.run(
        [_tool("mypy"), "--config-file", str(CONFIG), "--no-incremental", str(bad)],
        capture_output=True,
        text=True,
        cwd=tree,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout
    assert "typo.py:2: error: Incompatible return value type" in done.stdout
