"""deliver and respawn against a real tmux server on a private socket."""

from __future__ import annotations

import os
import pty
import random
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from loop_tmux_testlib import Recorder, environ_of, invocations, recording_tmux, tmux_out

from loop_tmux import Presence, Tmux
from loop_tmux.paste import encode
from loop_tmux.testing import wait_until

pytestmark = pytest.mark.tmux

START, END, ENTER = b"\x1b[200~", b"\x1b[201~", b"\r"


def _big_text(size: int) -> str:
    rng = random.Random(7)
    pieces = ["quote ' and \" ", "semi; colon ", "$(rm -rf /) ", "`id` ", "ünïcødé ✓ 漢字 ", "\n"]
    pieces += ["tab\there ", "back\\slash ", "#{session_name} ", "%1 ", "\n\n"]
    out: list[str] = []
    while sum(len(p) for p in out) < size:
        out.append(rng.choice(pieces))
    return "".join(out)


def test_100kb_text_arrives_exactly_as_one_paste(
    tmux: Tmux, recorder: Callable[[str], Recorder]
) -> None:
    rec = recorder("loop-rec")
    text = _big_text(100_000)
    result = tmux.deliver("loop-rec", text)
    assert result.ok
    assert not result.session_missing
    assert result.error is None
    expected = START + text.encode() + END + ENTER
    assert rec.wait_bytes(len(expected)) == expected


def test_paste_end_marker_in_text_stays_inside_the_paste(
    tmux: Tmux, recorder: Callable[[str], Recorder]
) -> None:
    rec = recorder("loop-esc")
    text = "before\x1b[201~\nrm -rf ~\r\n\x1b[200~ after \x03\x04\x7f"
    assert tmux.deliver("loop-esc", text).ok
    expected = START + encode(text) + END + ENTER
    got = rec.wait_bytes(len(expected))
    assert got == expected
    assert got.count(END) == 1
    assert got.endswith(END + ENTER)
    assert b"\x1b" not in got[len(START) : -len(END + ENTER)]


def test_successive_deliveries_leave_no_buffer_behind(
    tmux: Tmux, recorder: Callable[[str], Recorder]
) -> None:
    rec = recorder("loop-many")
    for i in range(5):
        assert tmux.deliver("loop-many", f"message {i}").ok
    expected = b"".join(START + f"message {i}".encode() + END + ENTER for i in range(5))
    assert rec.wait_bytes(len(expected)) == expected
    assert tmux_out(tmux, "list-buffers") == ""


def test_empty_text_presses_enter_only(tmux: Tmux, recorder: Callable[[str], Recorder]) -> None:
    rec = recorder("loop-empty")
    assert tmux.deliver("loop-empty", "").ok
    assert rec.wait_bytes(1) == ENTER


def test_deliver_to_absent_or_dead_is_session_missing(tmux: Tmux, tmp_path: Path) -> None:
    none = tmux.deliver("loop-none", "hello")
    assert (none.ok, none.session_missing) == (False, True)
    assert tmux.spawn("loop-gone", ["true", "x"], tmp_path).ok
    wait_until(lambda: tmux.probe("loop-gone") is Presence.DEAD, what="dead")
    dead = tmux.deliver("loop-gone", "hello")
    assert (dead.ok, dead.session_missing) == (False, True)
    # tmux 3.3a's server crashes when pasting into a dead pane: it must still be up.
    assert tmux.probe("loop-gone") is Presence.DEAD
    assert tmux_out(tmux, "list-buffers") == ""
    assert tmux.deliver("loop-none", "").session_missing


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass


def _attach(tmux: Tmux, name: str, *flags: str) -> int:
    """Attach a real client under a pty; returns its pid (caller kills it)."""
    pid, fd = pty.fork()
    if pid == 0:  # child
        os.environ.pop("TMUX", None)
        argv = ["tmux", "-L", tmux.socket_name or "", "attach", *flags, "-t", f"={name}"]
        os.execvp("tmux", argv)
    threading.Thread(target=_drain, args=(fd,), daemon=True).start()
    wait_until(lambda: tmux_out(tmux, "list-clients", "-F", "#{client_pid}").strip(), what="client")
    return pid


def test_enter_reaches_the_program_with_a_read_only_client_attached(
    tmux: Tmux, recorder: Callable[[str], Recorder]
) -> None:
    rec = recorder("loop-ro")
    client = _attach(tmux, "loop-ro", "-r")
    try:
        flags = tmux_out(tmux, "list-clients", "-F", "#{client_flags}")
        assert "read-only" in flags
        assert tmux.deliver("loop-ro", "watched").ok
        expected = START + b"watched" + END + ENTER
        assert rec.wait_bytes(len(expected)) == expected
    finally:
        os.kill(client, 9)
        os.waitpid(client, 0)


def test_enter_reaches_the_program_while_an_operator_scrolls(
    tmux: Tmux, recorder: Callable[[str], Recorder]
) -> None:
    rec = recorder("loop-scroll")
    subprocess.run(["tmux", "-L", tmux.socket_name or "", "copy-mode", "-t", "=loop-scroll:"])
    in_mode = ["display-message", "-p", "-t", "=loop-scroll:", "#{pane_in_mode}"]
    assert tmux_out(tmux, *in_mode).strip() == "1"
    assert tmux.deliver("loop-scroll", "two\nlines").ok
    # Still a bracketed paste (copy mode would have taken it raw), Enter included.
    expected = START + b"two\nlines" + END + ENTER
    assert rec.wait_bytes(len(expected)) == expected
    assert tmux_out(tmux, *in_mode).strip() == "0"


def test_respawn_in_place_keeps_name_client_and_env(tmux: Tmux, tmp_path: Path) -> None:
    lines = "; ".join(f"echo old-line-{i}" for i in range(60))
    argv = ["sh", "-c", f"{lines}; sleep 300"]
    first = tmux.spawn("loop-re", argv, tmp_path, {"LOOP_GEN": "one"})
    assert first.ok
    wait_until(lambda: "old-line-59" in tmux_out(tmux, "capture-pane", "-p", "-t", "=loop-re:"))
    control = subprocess.Popen(
        ["tmux", "-L", tmux.socket_name or "", "-C", "attach", "-t", "=loop-re"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: tmux_out(tmux, "list-clients", "-F", "#{client_session}").strip())
        pane_id = tmux_out(tmux, "list-panes", "-t", "=loop-re:", "-F", "#{pane_id}").strip()
        in_history = tmux_out(tmux, "capture-pane", "-p", "-S", "-", "-E", "-1", "-t", "=loop-re:")
        on_screen = tmux_out(tmux, "capture-pane", "-p", "-t", "=loop-re:")
        assert "old-line-0\n" in in_history
        assert "old-line-59" in on_screen
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        newer = [sys.executable, "-c", "import time; time.sleep(300)"]
        result = tmux.respawn("loop-re", newer, elsewhere, {"LOOP_GEN": "two", "LOOP_X": "x;"})
        assert result.ok
        assert result.error is None
        pids = wait_until(lambda: tmux.pane_pids("loop-re"), what="new pid")
        assert pids != [first.pid]
        (pid,) = pids
        cmdline = Path(f"/proc/{pid}/cmdline")
        wait_until(lambda: cmdline.read_bytes().startswith(sys.executable.encode()), what="exec")
        env = environ_of(pid)
        assert (env["LOOP_GEN"], env["LOOP_X"]) == ("two", "x;")
        assert os.readlink(f"/proc/{pid}/cwd") == str(elsewhere)
        # Same session, same pane, the control client still attached to it.
        assert tmux_out(tmux, "list-clients", "-F", "#{client_session}").split() == ["loop-re"]
        assert control.poll() is None
        pane_now = tmux_out(tmux, "list-panes", "-t", "=loop-re:", "-F", "#{pane_id}")
        assert pane_now.strip() == pane_id
        # What was on the visible screen does not survive respawn-pane; lines that had
        # already scrolled into the history stay above the new program (tmux 3.3a).
        after = tmux_out(tmux, "capture-pane", "-p", "-S", "-", "-t", "=loop-re:")
        assert "old-line-59" not in after
        for line in in_history.split():
            assert line in after.split()
        for line in on_screen.split():
            assert line not in after.split()
    finally:
        control.kill()
        control.wait()


def test_respawn_of_absent_session_is_session_missing(tmux: Tmux, tmp_path: Path) -> None:
    result = tmux.respawn("loop-never", ["sleep", "300"], tmp_path)
    assert (result.ok, result.session_missing) == (False, True)
    assert tmux.probe("loop-never") is Presence.ABSENT
    missing_dir = tmux.respawn("loop-never", ["sleep", "300"], tmp_path / "nope")
    assert not missing_dir.ok
    assert "does not exist" in (missing_dir.error or "")


def test_respawn_revives_a_dead_pane(tmux: Tmux, tmp_path: Path) -> None:
    assert tmux.spawn("loop-revive", ["true", "x"], tmp_path).ok
    wait_until(lambda: tmux.probe("loop-revive") is Presence.DEAD, what="dead")
    assert tmux.respawn("loop-revive", ["sleep", "300"], tmp_path).ok
    assert tmux.probe("loop-revive") is Presence.LIVE


def test_delivery_is_one_tmux_process_and_keeps_the_payload_off_its_argv(
    tmux: Tmux, recorder: Callable[[str], Recorder], tmp_path: Path
) -> None:
    rec = recorder("loop-argv-check")
    wrapper, log = recording_tmux(tmp_path)
    client = Tmux(binary=str(wrapper), socket_name=tmux.socket_name, config_file="/dev/null")
    secret = "PAYLOAD-7f3a9c-never-in-argv"
    assert client.deliver("loop-argv-check", secret).ok
    expected = START + secret.encode() + END + ENTER
    assert rec.wait_bytes(len(expected)) == expected
    calls = invocations(log)
    assert calls[0] == "-V"  # read once per client
    assert len(calls) == 2  # the whole delivery is ONE tmux process
    assert "paste-buffer" in calls[1]
    assert secret not in "\n".join(calls)
