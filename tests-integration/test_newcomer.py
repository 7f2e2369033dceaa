"""A newcomer's first run: a fresh venv with the four local packages, then `the-loop demo`.

Installed non-editable from the local paths (never a `loop-*` name from an index), so a
missing dependency declaration or package file fails here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.tmux]

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["loop-envstate", "loop-tmux", "loop-dispatch", "loop-cli"]
INSTALL_TIMEOUT = 600
DEMO_TIMEOUT = 180


def _make_venv(venv: Path) -> Path:
    uv = shutil.which("uv")
    paths = [str(ROOT / "packages" / p) for p in PACKAGES]
    if uv:
        subprocess.run(
            [uv, "venv", "-q", "-p", sys.executable, str(venv)], check=True, timeout=INSTALL_TIMEOUT
        )
        subprocess.run(
            [uv, "pip", "install", "-q", "-p", str(venv / "bin" / "python"), *paths],
            check=True,
            timeout=INSTALL_TIMEOUT,
        )
    else:
        subprocess.run(
            [sys.executable, "-m", "venv", str(venv)], check=True, timeout=INSTALL_TIMEOUT
        )
        subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *paths],
            check=True,
            timeout=INSTALL_TIMEOUT,
        )
    return venv / "bin" / "the-loop"


def test_fresh_venv_demo_exits_0(tmp_path: Path) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    the_loop = _make_venv(tmp_path / "venv")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TMUX", "TMUX_PANE", "THE_LOOP_CONFIG", "PYTHONPATH", "VIRTUAL_ENV")
    }
    env.update(
        HOME=str(tmp_path / "home"),
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
    )
    version = subprocess.run(
        [str(the_loop), "--version"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert version.returncode == 0, version.stderr
    done = subprocess.run(
        [str(the_loop), "demo"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=DEMO_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All 5 steps observed" in done.stdout
