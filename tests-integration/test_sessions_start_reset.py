"""`sessions start` does what it says, and `sessions reset --all` asks on a terminal.

Real processes on a private tmux server, the bundled demo agent as harness; what the
agent received is read from its own conversation file. The terminal is a real
pseudo-terminal: the command sees `isatty()` true on its stdin and stderr, as an
operator's shell gives it.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loop_rig import Loop

from loop_tmux.testing import wait_for

pytestmark = pytest.mark.tmux


@pytest.fixture
def loop(tmp_path: Path, tmux_socket: str) -> Loop:
    return Loop(tmp_path, tmux_socket)  # tmux_socket ends our private server


def _texts(loop: Loop, cid: str) -> list[str]:
    return [r["text"] for r in loop.conversation(cid) if r.get("role") == "user"]


# -- sessions start ---------------------------------------------------------------------


def test_start_begins_with_the_items_opening_and_it_is_not_pasted_again(loop: Loop) -> None:
    ref = loop.run("item", "open", "Fix the widget", "--body", "It breaks on Tuesdays").stdout
    ref = ref.strip()
    started = loop.run("sessions", "start", ref, codes=(0,))
    assert ref in started.stdout
    (row,) = loop.sessions()
    cid = row["conversationId"]
    assert wait_for(lambda: _texts(loop, cid))
    first = _texts(loop, cid)[0]
    assert "Fix the widget" in first
    assert "It breaks on Tuesdays" in first
    assert "sessions start" not in first  # no placeholder prompt
    # The opening waited in the inbox: the next poll settles it without a second copy.
    loop.run("poll", "--once", codes=(0,))
    loop.run("item", "comment", ref, "and on Wednesdays")
    loop.run("poll", "--once", codes=(0,))
    assert wait_for(lambda: any("Wednesdays" in t for t in _texts(loop, cid)))
    texts = _texts(loop, cid)
    assert sum("It breaks on Tuesdays" in t for t in texts) == 1, texts


def test_start_after_stop_resumes_the_recorded_conversation(loop: Loop) -> None:
    ref = loop.run("item", "open", "Remember me").stdout.strip()
    loop.run("poll", "--once", codes=(0,))
    (row,) = loop.sessions()
    cid = row["conversationId"]
    assert wait_for(lambda: _texts(loop, cid))
    loop.run("sessions", "stop", ref, codes=(0,))
    assert loop.sessions()[0]["status"] == "closed"

    loop.run("sessions", "start", ref, codes=(0,))
    (again,) = loop.sessions()
    assert (again["status"], again["conversationId"]) == ("active", cid)
    assert wait_for(lambda: [r for r in loop.conversation(cid) if r.get("event") == "resume"])
    assert wait_for(lambda: loop.sessions()[0]["presence"] == "live")


def test_start_refuses_a_closed_item_and_a_ref_of_another_tracker(loop: Loop) -> None:
    ref = loop.run("item", "open", "Done already").stdout.strip()
    loop.run("item", "close", ref)
    closed = loop.run("sessions", "start", ref, codes=(2,))
    assert f"{ref} is closed" in closed.stderr
    assert "Traceback" not in closed.stderr

    foreign = loop.run("sessions", "start", "github:octo/app#7", codes=(2,))
    assert "tracker" in foreign.stderr
    assert "local" in foreign.stderr
    assert len(foreign.stderr.strip().splitlines()) == 1
    assert loop.sessions() == []
    assert loop.tmux("list-sessions").stdout == ""


# -- sessions reset --all on a terminal ---------------------------------------------------


def _on_terminal(loop: Loop, args: list[str], answer: str | None) -> tuple[int, str]:
    """Run `the-loop ARGS` on a pseudo-terminal; type `answer` once it asks."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "loop_cli.main", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=loop.env,
        start_new_session=True,
    )
    os.close(slave)
    output = b""
    asked = False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: every writer of the terminal has closed it
                    break
                if not chunk:
                    break
                output += chunk
            if answer is not None and not asked and b"[y/N]" in output:
                os.write(master, answer.encode() + b"\r")
                asked = True
            if proc.poll() is not None and not ready:
                break
        code = proc.wait(timeout=30)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, output.decode("utf-8", "replace")


def _three_live(loop: Loop) -> list[str]:
    refs = [loop.run("item", "open", f"item {n}").stdout.strip() for n in range(3)]
    loop.run("poll", "--once", codes=(0,))
    assert wait_for(lambda: [r["presence"] for r in loop.sessions()] == ["live"] * 3)
    return refs


def test_reset_all_asks_on_a_terminal_and_no_touches_nothing(loop: Loop) -> None:
    refs = _three_live(loop)
    code, out = _on_terminal(loop, ["sessions", "reset", "--all"], "n")
    assert code == 1, out
    assert "ending 3 live agent(s)" in out
    assert all(ref in out for ref in refs)
    assert "nothing was reset" in out
    assert [r["presence"] for r in loop.sessions()] == ["live"] * 3

    code, out = _on_terminal(loop, ["sessions", "reset", "--all"], "y")
    assert code == 0, out
    assert out.count("reset local:loop#") == 3
    assert loop.sessions() == []


def test_reset_all_with_yes_does_not_ask_and_a_script_is_not_asked(loop: Loop) -> None:
    _three_live(loop)
    code, out = _on_terminal(loop, ["sessions", "reset", "--all", "--yes"], None)
    assert code == 0, out
    assert "[y/N]" not in out
    assert loop.sessions() == []
    # No terminal (a script, cron): nobody to ask; it proceeds as before.
    _three_live(loop)
    done = loop.run("sessions", "reset", "--all", codes=(0,))
    assert "[y/N]" not in done.stdout + done.stderr
    assert loop.sessions() == []
