"""The operator's side of the console: `sessions say`, `sessions peek`, and a read-only
`sessions attach` (issue 24, points 5-7).

Real processes on a private tmux server, the bundled demo agent as harness (it records
every message it receives in its own conversation file: the tests read that file, not
our claims); a real `poll start` daemon where a daemon is what delivers; a real
pseudo-terminal for the attached client.
"""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loop_rig import Loop, cycled

from loop_tmux.testing import wait_for

pytestmark = pytest.mark.tmux


@pytest.fixture
def loop(tmp_path: Path, tmux_socket: str) -> Loop:
    return Loop(tmp_path, tmux_socket)  # tmux_socket ends our private server


def _texts(loop: Loop, cid: str) -> list[str]:
    return [r["text"] for r in loop.conversation(cid) if r.get("role") == "user"]


def _started(loop: Loop, title: str) -> tuple[str, str]:
    """An item whose session is up (`sessions start`): its ref and conversation id."""
    ref = loop.run("item", "open", title, codes=(0,)).stdout.strip()
    loop.run("sessions", "start", ref, codes=(0,))
    (row,) = [r for r in loop.sessions() if r["ref"] == ref]
    assert wait_for(lambda: _texts(loop, row["conversationId"]))
    return ref, row["conversationId"]


def _events(loop: Loop, type_: str) -> list[dict]:
    path = loop.root / "state" / "events.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if f'"{type_}"' in x]


# -- say ----------------------------------------------------------------------------------


def test_say_goes_through_the_inbox_in_order_framed_as_the_operators_words(loop: Loop) -> None:
    ref, cid = _started(loop, "Say hello")
    first = loop.run("sessions", "say", ref, "say-one: rebase on main", codes=(0,))
    assert "queued as inbox #" in first.stdout
    assert "no poll daemon is running" in first.stderr  # nobody would deliver it yet
    loop.run("item", "comment", ref, "comment-two")
    loop.run("sessions", "say", ref, "-", input="say-three\n$(rm -rf /)\x1b]0;t\x07", codes=(0,))
    loop.run("poll", "--once", codes=(0,))
    assert wait_for(lambda: len(_texts(loop, cid)) >= 4)
    texts = _texts(loop, cid)[1:]
    order = [next(m for m in ("say-one", "say-three", "comment-two") if m in t) for t in texts]
    assert order == ["say-one", "comment-two", "say-three"], texts  # as they were written
    rows = json.loads(loop.run("inbox", "list", "--state", "done", "-o", "json").stdout)
    kinds = [r["deliveryId"].split(":")[0] for r in sorted(rows, key=lambda r: r["seq"])]
    assert kinds == ["opened", "say", "comment", "say"]  # delivered in the inbox's order
    said = texts[0]
    assert said.startswith(f"Message from the operator on {ref} by ")
    assert "not on the work item" in said
    assert "untrusted" not in said
    assert "untrusted" in texts[1]  # a comment keeps its warning
    assert "$(rm -rf /)" in texts[2]  # pasted as text, never run
    assert "\x1b" not in texts[2]
    says = [r for r in rows if r["deliveryId"].startswith("say:")]
    assert [(r["state"], r["outcome"]) for r in says] == [("done", "processed")] * 2
    logged = _events(loop, "operator.said")
    assert len(logged) == 2
    assert "say-one" not in json.dumps(logged)  # the length is recorded, never the text
    assert logged[0]["detail"]["chars"] == len("say-one: rebase on main")


def test_say_never_takes_an_item_on(loop: Loop) -> None:
    waiting = loop.run("item", "open", "Not started", codes=(0,)).stdout.strip()
    refused = loop.run("sessions", "say", waiting, "hello", codes=(2,))
    assert f"no session for {waiting}" in refused.stderr
    ref, cid = _started(loop, "Forgotten later")
    loop.run("sessions", "say", ref, "too-late", codes=(0,))
    loop.run("sessions", "reset", ref, codes=(0,))  # forgotten between the say and its drain
    loop.run("poll", "--once", codes=(0,))
    rows = json.loads(loop.run("inbox", "list", "--state", "done", "-o", "json").stdout)
    (row,) = [r for r in rows if r["deliveryId"].startswith("say:")]
    assert (row["state"], row["outcome"], row["lastReason"]) == ("done", "skipped", "not_taken_on")
    # Not delivered, and no agent was started to read it.
    cids = {cid} | {r["conversationId"] for r in loop.sessions()}
    assert not any("too-late" in t for c in cids for t in _texts(loop, c))


def test_say_to_a_stopped_item_waits_for_its_start(loop: Loop) -> None:
    """`stop` holds later events (issue 24): the operator's words too, never dropped,
    delivered once the item is started again, its conversation resumed."""
    ref, cid = _started(loop, "Stopped")
    loop.run("sessions", "stop", ref, codes=(0,))
    loop.run("sessions", "say", ref, "read-this-after-the-start", codes=(0,))
    loop.run("poll", "--once", codes=(0,))
    held = json.loads(loop.run("inbox", "list", "--state", "paused", "-o", "json").stdout)
    assert [r["deliveryId"].split(":")[0] for r in held] == ["say"]
    assert not any("read-this-after-the-start" in t for t in _texts(loop, cid))
    loop.run("sessions", "start", ref, codes=(0,))
    loop.run("poll", "--once", codes=(0,))
    assert wait_for(lambda: any("read-this-after-the-start" in t for t in _texts(loop, cid)))
    assert sum("read-this-after-the-start" in t for t in _texts(loop, cid)) == 1


def test_say_brings_a_dead_agent_back_to_read_it(loop: Loop) -> None:
    ref, cid = _started(loop, "Dies")
    (row,) = loop.sessions()
    pid = int(loop.tmux("list-panes", "-t", f"={row['tmuxName']}", "-F", "#{pane_pid}").stdout)
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: loop.sessions()[0]["presence"] == "dead")
    loop.run("sessions", "say", ref, "wake-up-and-read", codes=(0,))
    loop.run("poll", "--once", codes=(0,))
    assert wait_for(lambda: any("wake-up-and-read" in t for t in _texts(loop, cid)))
    (after,) = loop.sessions()
    assert (after["presence"], after["conversationId"]) == ("live", cid)  # resumed, same one
    assert _events(loop, "session.respawned")


def test_say_to_all_or_a_project_and_its_refusals(loop: Loop) -> None:
    a, _ = _started(loop, "A")
    other = loop.run("item", "open", "B", "--project", "other", codes=(0,)).stdout.strip()
    loop.run("sessions", "start", other, codes=(0,))
    dry = json.loads(loop.run("sessions", "say", "--all", "--dry-run", "x", "-o", "json").stdout)
    assert sorted(r["ref"] for r in dry) == sorted([a, "local:other#1"])
    queued = loop.run("inbox", "list", "--state", "pending", "-o", "json").stdout
    assert not [r for r in json.loads(queued) if r["deliveryId"].startswith("say:")]  # dry run
    one = json.loads(loop.run("sessions", "say", "--project", "other", "hi", "-o", "json").stdout)
    assert [r["ref"] for r in one] == ["local:other#1"]
    nobody = loop.run("sessions", "say", "--project", "nope", "hi", codes=(2,))
    assert "no session of project 'nope'" in nobody.stderr
    assert "loop, other" in nobody.stderr
    both = loop.run("sessions", "say", a, "--all", "hi", codes=(2,))
    assert "exactly one of them" in both.stderr
    empty = loop.run("sessions", "say", a, "-", input=" \n", codes=(2,))
    assert "nothing to say: the text from standard input is empty" in empty.stderr
    huge = loop.run("sessions", "say", a, "x" * 70_000, codes=(2,))
    assert "the TEXT argument is longer than 65536 characters" in huge.stderr
    piped = loop.run("sessions", "say", a, "-", input="y" * 10_000_000, codes=(2,))
    assert "standard input is longer than 65536 characters" in piped.stderr


# -- with the daemon, and someone watching ----------------------------------------------


def test_a_read_only_watcher_types_nothing_and_deliveries_go_on(loop: Loop) -> None:
    log = loop.root / "daemon.log"
    daemon = loop.daemon(log)
    watcher = None
    try:
        assert wait_for(lambda: cycled(log.read_text()), timeout=60), log.read_text()
        ref = loop.run("item", "open", "Watched", codes=(0,)).stdout.strip()
        assert wait_for(lambda: [r for r in loop.sessions() if r["presence"] == "live"])
        (row,) = loop.sessions()
        cid = row["conversationId"]
        assert wait_for(lambda: _texts(loop, cid))
        master, slave = pty.openpty()
        watcher = subprocess.Popen(
            [sys.executable, "-m", "loop_cli.main", "sessions", "attach", ref, "--read-only"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**loop.env, "TERM": "xterm"},
            start_new_session=True,
        )
        os.close(slave)
        clients = lambda: loop.tmux("list-clients", "-F", "#{client_readonly}").stdout.split()  # noqa: E731
        assert wait_for(lambda: clients() == ["1"]), "no read-only client attached"
        os.write(master, b"typed-by-the-watcher\r")
        said = loop.run("sessions", "say", ref, "said-while-watched", "--wait", "30", codes=(0,))
        assert f"{ref}: processed" in said.stdout
        loop.run("item", "comment", ref, "commented-while-watched")
        assert wait_for(lambda: any("commented-while-watched" in t for t in _texts(loop, cid)))
        texts = _texts(loop, cid)
        assert sum("said-while-watched" in t for t in texts) == 1
        assert not any("typed-by-the-watcher" in t for t in texts)
        assert clients() == ["1"]  # still attached, still only watching
        os.close(master)
    finally:
        if watcher is not None and watcher.poll() is None:
            os.killpg(watcher.pid, signal.SIGTERM)
            watcher.wait(10)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)


def test_say_wait_reports_what_is_not_delivered_yet(loop: Loop) -> None:
    ref, _ = _started(loop, "Nobody drains")
    started = time.monotonic()
    late = loop.run("sessions", "say", ref, "waiting", "--wait", "0.5", codes=(1,))
    assert time.monotonic() - started < 30
    assert f"{ref}: not delivered yet (inbox #" in late.stdout
    assert "pending" in late.stdout


# -- peek -----------------------------------------------------------------------------------


def test_peek_shows_the_last_lines_neutralised_and_transcript_refuses_for_the_demo(
    loop: Loop,
) -> None:
    ref, cid = _started(loop, "Peek")
    loop.run("item", "comment", ref, "peek-marker \x1b]0;retitled\x07 end")
    loop.run("poll", "--once", codes=(0,))
    assert wait_for(lambda: any("peek-marker" in t for t in _texts(loop, cid)))

    def peeked() -> str | None:
        out = loop.run("sessions", "peek", ref, "-n", "200", codes=(0,)).stdout
        return out if "peek-marker" in out else None

    shown = wait_for(peeked)
    assert shown, "the pasted comment never showed in the pane's last lines"
    assert "\x1b" not in shown
    assert "\x07" not in shown
    few = loop.run("sessions", "peek", ref, "-n", "3", "-o", "json", codes=(0,))
    data = json.loads(few.stdout)
    assert data["ref"] == ref
    assert 1 <= len(data["lines"]) <= 3
    refused = loop.run("sessions", "peek", ref, "--transcript", codes=(2,))
    assert "reads no conversation file" in refused.stderr
    unknown = loop.run("sessions", "peek", "local:loop#99", codes=(2,))
    assert "no session registered for local:loop#99" in unknown.stderr
    (row,) = loop.sessions()
    loop.tmux("kill-session", "-t", f"={row['tmuxName']}")
    gone = loop.run("sessions", "peek", ref, codes=(1,))
    assert "does not exist" in gone.stderr
