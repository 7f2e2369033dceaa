from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from envstate_support import DEADLINE, Children, needs_proc, wait_for_exec

from loop_envstate import process_environ
from loop_envstate.procenv import (
    chained_reader,
    parse_environ_block,
    read_proc_environ,
    read_psutil_environ,
)
from loop_tmux.testing import wait_until


@needs_proc
def test_reads_a_child_started_with_a_known_environment(children: Children) -> None:
    child = children(["env", "-i", "NAME=value", "OTHER=with space=and equals", "sleep", "30"])
    wait_for_exec(child.pid, b"sleep")
    assert process_environ(child.pid) == {"NAME": "value", "OTHER": "with space=and equals"}


@needs_proc
def test_reads_an_empty_environment_as_empty_not_none(children: Children) -> None:
    child = children(["env", "-i", "sleep", "30"])
    wait_for_exec(child.pid, b"sleep")
    assert process_environ(child.pid) == {}


@needs_proc
def test_reads_its_own_pid_as_started_not_as_mutated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOP_ENVSTATE_SET_AFTER_START", "late")
    env = process_environ(os.getpid())
    assert env is not None
    assert env["PATH"] == os.environ["PATH"]
    # /proc shows the block the process was started with, not later os.environ edits.
    assert "LOOP_ENVSTATE_SET_AFTER_START" not in env


def test_exited_pid_is_none() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    assert process_environ(proc.pid) is None


@needs_proc
def test_zombie_is_none_not_empty(children: Children) -> None:
    child = children([sys.executable, "-c", "pass"])

    def is_zombie() -> bool:
        stat = Path(f"/proc/{child.pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] == "Z"

    wait_until(is_zombie, "the child to exit unreaped", DEADLINE)
    assert process_environ(child.pid) is None


def test_injected_permission_refusal_is_none() -> None:
    def refuse(pid: int) -> dict[str, str]:
        raise PermissionError(13, "Permission denied", f"/proc/{pid}/environ")

    assert process_environ(os.getpid(), reader=refuse) is None


@needs_proc
def test_real_permission_refusal_is_none() -> None:
    try:
        Path("/proc/1/environ").read_bytes()
    except PermissionError:
        assert process_environ(1) is None
    else:
        pytest.skip("this user may read pid 1's environment")


@pytest.mark.parametrize("error", [OSError, RuntimeError, ValueError, NotImplementedError])
def test_any_reader_failure_is_none(error: type[Exception]) -> None:
    def broken(pid: int) -> dict[str, str]:
        raise error("platform says no")

    assert process_environ(123, reader=broken) is None


def test_reader_saying_none_is_none_and_mapping_is_copied() -> None:
    assert process_environ(5, reader=lambda pid: None) is None
    source = {"A": "1"}
    got = process_environ(5, reader=lambda pid: source)
    assert got == {"A": "1"}
    assert got is not source


@pytest.mark.parametrize("pid", [0, -1, -4242, True, "12", 3.0, None])
def test_invalid_pids_are_none_without_calling_the_reader(pid: object) -> None:
    calls: list[object] = []

    def reader(p: int) -> dict[str, str]:
        calls.append(p)
        return {}

    assert process_environ(pid, reader=reader) is None  # type: ignore[arg-type]
    assert calls == []


def test_no_proc_and_no_fallback_is_none(tmp_path: Path) -> None:
    reader = chained_reader(proc_root=str(tmp_path / "no-proc"), fallback=lambda pid: None)
    assert process_environ(os.getpid(), reader=reader) is None


@needs_proc
def test_no_proc_falls_back_to_psutil(tmp_path: Path, children: Children) -> None:
    child = children(["env", "-i", "VIA=psutil", "sleep", "30"])
    wait_for_exec(child.pid, b"sleep")
    reader = chained_reader(proc_root=str(tmp_path / "no-proc"))
    assert process_environ(child.pid, reader=reader) == {"VIA": "psutil"}


def test_psutil_reader_on_an_exited_pid_is_none() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    assert read_psutil_environ(proc.pid) is None


def test_fake_proc_tree_is_read_like_the_real_one(tmp_path: Path) -> None:
    (tmp_path / "self").mkdir()
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "environ").write_bytes(b"A=1\0B=x=y\0")
    (tmp_path / "77" / "cmdline").write_bytes(b"prog\0")
    reader = chained_reader(proc_root=str(tmp_path), fallback=lambda pid: {"WRONG": "1"})
    assert process_environ(77, reader=reader) == {"A": "1", "B": "x=y"}
    assert process_environ(78, reader=reader) is None  # no such pid: exited
    assert read_proc_environ(77, str(tmp_path)) == {"A": "1", "B": "x=y"}


def test_environ_block_parsing() -> None:
    block = b"A=1\0EMPTY=\0NOEQUALS\0=novalue\0A=second\0RAW=caf\xe9\0"
    assert parse_environ_block(block) == {"A": "1", "EMPTY": "", "RAW": os.fsdecode(b"caf\xe9")}
    assert parse_environ_block(b"") == {}
