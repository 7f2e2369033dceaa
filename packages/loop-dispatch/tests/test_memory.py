"""The process-table pass behind each session's memory (memory.tree_rss): /proc read
directly on Linux, psutil elsewhere; both must find the same tree and the same RSS."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from loop_dispatch import memory

# A parent holding ~40 MiB, its child ~80 MiB, the grandchild sleeping: one tree.
TREE = """
import subprocess, sys, time
ballast = bytearray(40 << 20)
child = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys, time; b = bytearray(80 << 20); "
    "subprocess.Popen(['sleep', '60']); print('up', flush=True); time.sleep(60)"],
    stdout=sys.stdout)
time.sleep(60)
"""


@pytest.fixture
def tree() -> psutil.Process:
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "up\n"
        parent = psutil.Process(proc.pid)
        deadline = time.monotonic() + 10
        while len(parent.children(recursive=True)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        yield parent
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc on this platform")
def test_proc_and_psutil_read_the_same_tree(tree: psutil.Process) -> None:
    direct = memory._proc_table()
    assert direct is not None
    children, rss = direct
    pids = {c.pid for c in tree.children(recursive=True)}
    assert {p for p in children.get(tree.pid, [])} <= pids | {tree.pid}
    assert len(children.get(tree.pid, [])) == 1  # the child; the grandchild is its own
    by_psutil = memory._psutil_table()[1]
    for pid in [tree.pid, *pids]:
        assert abs(rss[pid] - by_psutil[pid]) <= 2 << 20, pid  # a moment apart


def test_the_tree_counts_every_descendant_and_nothing_else(tree: psutil.Process) -> None:
    own = sum(p.memory_info().rss for p in [tree, *tree.children(recursive=True)])
    found = memory.tree_rss({"s": [tree.pid], "none": [], "gone": [2**22 + 7]})
    assert found["none"] == 0
    assert found["gone"] == 0
    assert found["s"] > 120 << 20  # both ballasts, not only the root's
    assert abs(found["s"] - own) <= 4 << 20
    one = memory.tree_rss({"s": [tree.children()[0].pid]})["s"]  # a subtree
    assert 80 << 20 < one < found["s"] - (30 << 20)


def test_without_proc_psutil_gives_the_same_answer(
    tree: psutil.Process, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_proc = memory.tree_rss({"s": [tree.pid]})["s"]
    monkeypatch.setattr(memory, "_proc_table", lambda: None)  # a platform without it
    assert abs(memory.tree_rss({"s": [tree.pid]})["s"] - with_proc) <= 4 << 20


@pytest.mark.skipif(not os.path.isfile("/proc/meminfo"), reason="no /proc/meminfo here")
def test_the_hosts_memory_is_what_psutil_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    found = memory.available_bytes()
    assert found is not None
    vm = psutil.virtual_memory()
    assert found.total == vm.total
    assert abs(found.available - vm.available) < 64 << 20  # a moment apart
    monkeypatch.setattr(memory, "_meminfo", lambda: None)  # elsewhere: psutil says it
    fallback = memory.available_bytes()
    assert fallback is not None
    assert fallback.total == found.total
