"""Per-item lock: exclusive across processes, independent across items, dies with holder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from loop_dispatch.lock import LockTimeout, item_lock, lock_path
from loop_dispatch.model import WorkItemRef

A = WorkItemRef.parse("github:a-b/c#1")
B = WorkItemRef.parse("github:a/b-c#1")

HOLDER = textwrap.dedent(
    """
    import sys, time
    from loop_dispatch.lock import item_lock
    from loop_dispatch.model import WorkItemRef
    with item_lock(sys.argv[1], WorkItemRef.parse(sys.argv[2])):
        print("held", flush=True)
        time.sleep(60)
    """
)


def _hold(tmp_path: Path, ref: WorkItemRef) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path), str(ref)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_lock_files_are_named_from_the_slug(tmp_path: Path) -> None:
    assert lock_path(tmp_path, A) != lock_path(tmp_path, B)
    assert lock_path(tmp_path, A).name == A.slug() + ".lock"


def test_other_process_holding_blocks_same_item_not_others(tmp_path: Path) -> None:
    proc = _hold(tmp_path, A)
    try:
        with pytest.raises(LockTimeout), item_lock(tmp_path, A, timeout=0.3):
            pass
        with item_lock(tmp_path, B, timeout=0):  # free at once: never waits on A
            pass
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_lock_is_released_by_the_os_when_the_holder_dies(tmp_path: Path) -> None:
    proc = _hold(tmp_path, A)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    with item_lock(tmp_path, A, timeout=5):
        pass
