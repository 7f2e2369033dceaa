"""The fake harness keeps its documented contract (other packages' tests rely on it)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from loop_tmux import Tmux


def _records(directory: Path, session_id: str) -> list[dict]:
    path = directory / f"{session_id}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _wait(predicate, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)
    return value


def test_resume_of_an_unknown_conversation_exits_1_within_a_second(
    fake_harness: Path, fake_harness_dir: Path
) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [str(fake_harness), "--resume", "no-such-id", "hello"],
        capture_output=True,
        text=True,
        timeout=10,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert "No conversation found with session ID: no-such-id" in done.stderr
    assert time.monotonic() - started < 1.0 + 0.5  # interpreter start-up on a loaded box
    assert not list(fake_harness_dir.iterdir())


@pytest.mark.tmux
def test_start_line_fingerprints_env_and_pastes_are_recorded(
    fake_harness: Path, fake_harness_dir: Path, tmux_socket: str
) -> None:
    tmux = Tmux(socket_name=tmux_socket, config_file="/dev/null")
    sid = str(uuid.uuid4())
    secret = "s3cr3t-value-" + uuid.uuid4().hex
    env = {"FAKE_HARNESS_DIR": str(fake_harness_dir), "API_TOKEN": secret}
    argv = [str(fake_harness), "--session-id", sid, "first prompt"]
    assert tmux.spawn("loop-harness-test", argv, str(fake_harness_dir), env).ok
    start = _wait(lambda: _records(fake_harness_dir, sid))[0]
    assert (start["event"], start["mode"], start["prompt"]) == ("start", "fresh", "first prompt")
    assert len(start["env_fp"]["API_TOKEN"]) == 12
    assert secret not in (fake_harness_dir / f"{sid}.jsonl").read_text()

    _wait(lambda: "[fake-harness]" in _screen(tmux_socket))  # raw mode is on
    text = "two lines\nwith `ticks` and \x1b[200~ nothing special"
    assert tmux.deliver("loop-harness-test", text).ok
    assert tmux.deliver("loop-harness-test", "second").ok

    def messages() -> list[dict]:
        return [r for r in _records(fake_harness_dir, sid) if r["event"] == "message"]

    msgs = _wait(lambda: len(messages()) >= 2 and messages())
    # loop-tmux makes the embedded ESC visible (U+241B), so the paste cannot be escaped.
    assert [m["text"] for m in msgs] == [text.replace("\x1b", "\u241b"), "second"]
    assert all(m["bracketed"] for m in msgs)

    # A resume of the now-known conversation starts in resume mode.
    assert tmux.terminate("loop-harness-test", grace=3.0)
    argv = [str(fake_harness), "--resume", sid, "again"]
    assert tmux.spawn("loop-harness-test", argv, str(fake_harness_dir), env).ok
    starts = _wait(
        lambda: [r for r in _records(fake_harness_dir, sid) if r["event"] == "start"][1:]
    )
    assert starts[0]["mode"] == "resume"


def _screen(socket: str) -> str:
    return subprocess.run(
        ["tmux", "-L", socket, "capture-pane", "-p", "-t", "=loop-harness-test:"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    ).stdout
