"""The bundled demo agent behaves like a harness CLI: ids, resume, fail-fast."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from loop_cli.demo_agent import read_conversation


def _agent(tmp_path: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "loop_cli.demo_agent", "--conversations", str(tmp_path), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_fresh_then_resume(tmp_path: Path) -> None:
    first = _agent(tmp_path, "--session-id", "c1", "hello", stdin="one\n\ntwo\n")
    assert first.returncode == 0, first.stderr
    assert "hello" in first.stdout
    assert "one" in first.stdout
    second = _agent(tmp_path, "--resume", "c1", "three")
    assert second.returncode == 0
    assert "3 earlier message(s)" in second.stdout
    records = read_conversation(tmp_path / "c1.jsonl")
    assert [r.get("event") or r["text"] for r in records] == [
        "start",
        "hello",
        "one",
        "two",
        "resume",
        "three",
    ]


def test_unknown_resume_fails_fast(tmp_path: Path) -> None:
    started = time.monotonic()
    result = _agent(tmp_path, "--resume", "nope", "hi")
    assert result.returncode == 1
    assert "No conversation found with session ID: nope" in result.stderr
    assert time.monotonic() - started < 5
    assert not (tmp_path / "nope.jsonl").exists()


def test_reused_id_and_bad_ids_are_refused(tmp_path: Path) -> None:
    assert _agent(tmp_path, "--session-id", "c2").returncode == 0
    assert _agent(tmp_path, "--session-id", "c2").returncode == 1
    assert _agent(tmp_path, "--session-id", "../escape").returncode == 2
    assert not (tmp_path.parent / "escape.jsonl").exists()


def test_demo_fails_cleanly_without_tmux(run_cli, monkeypatch) -> None:
    import loop_cli.demo as demo

    monkeypatch.setattr(demo.shutil, "which", lambda name: None)
    result = run_cli("demo")
    assert result.exit_code == 1
    assert "[FAIL] find tmux" in result.output
    assert "Error: demo step not observed: find tmux: tmux is not installed" in result.output
