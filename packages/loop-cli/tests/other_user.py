"""Running a command as another user (`nobody`) in tests of private state."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

NOBODY = ["--reuid=65534", "--regid=65534", "--clear-groups"]


def nobody_prefix() -> list[str]:
    """The argv prefix that runs this interpreter as `nobody`; skips the test, naming
    why, when that cannot be done here: not root, no setpriv, or an interpreter
    `nobody` cannot load (pyenv's shared libpython under root's 0700 home)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a command as another user")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot run a command as another user")
    prefix = [setpriv, *NOBODY]
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", "pass"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
        pytest.skip(f"`nobody` cannot run {sys.executable}: {why}")
    return prefix
