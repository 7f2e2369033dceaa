"""Readiness, receipts and Codex id discovery on the records the real CLIs write
(shapes observed from Claude Code 2.1.332 and Codex 0.171.0; the real programs are
driven in tests-integration/test_real_harnesses.py)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from loop_dispatch.adapters import ClaudeCodeAdapter, CodexAdapter, GenericAdapter
from loop_tmux import PaneView

CLAUDE_TRUST = """ Accessing workspace:
 /tmp/w
 Quick safety check: Is this a project you created or one you trust?
 \u276f No, exit
   Yes, I trust this folder
 Enter to confirm · Esc to cancel"""
CODEX_TRUST = """  Folder access
  Trust this folder? Codex can read, edit, and run files here.
\u203a 1. Trust and continue
  2. Back to Agent Command Center"""
CODEX_MAIN = """  >_ OpenAI Codex (v0.171.0)
\u203a Ask Codex to do anything"""


def view(screen: str, alternate: bool = True) -> PaneView:
    return PaneView(alternate_on=alternate, command="claude", dead=False, pid=1, screen=screen)


def test_claude_readiness_start_up_dialog_and_ready() -> None:
    a = ClaudeCodeAdapter()
    assert a.readiness(view("", alternate=False)).state == "not_ready"
    blocked = a.readiness(view(CLAUDE_TRUST, alternate=False))
    assert (blocked.state, blocked.dialog) == ("blocked", "trust")
    key = a.readiness(view("Detected a custom API key in your environment", alternate=False))
    assert key.dialog == "api_key"
    assert a.readiness(view("\u276f ")).ready
    box = "\u2500" * 40
    drawn = f"\u25cf Noted.\n{box}\n\u276f \n{box}\n  auto mode on"
    assert a.readiness(view(drawn, alternate=False)).ready  # a relaunch on the normal screen
    assert not a.readiness(view("\u276f no rule above", alternate=False)).ready


def test_codex_readiness_needs_its_composer_and_no_dialog() -> None:
    a = CodexAdapter()
    assert a.readiness(view("", alternate=True)).state == "not_ready"
    assert a.readiness(view(CODEX_TRUST)).dialog == "trust"
    assert a.readiness(view(CODEX_MAIN)).ready


def test_generic_has_no_checks_and_says_so() -> None:
    a = GenericAdapter(["prog", "{prompt}"])
    assert not a.reads_screen
    assert not a.has_receipts
    assert a.receipt("x", 0, "t").state == "unknown"


def _claude_file(state: Path, cid: str, *records: dict) -> Path:
    path = state / "projects" / "-tmp-w" / f"{cid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        for r in records:
            handle.write(json.dumps(r) + "\n")
    return path


def test_claude_receipts_from_its_session_file(tmp_path: Path) -> None:
    a = ClaudeCodeAdapter(state_dir=tmp_path)
    cid = "11111111-1111-4111-8111-111111111111"
    assert not a.resumable(cid)  # nothing saved: resume would fail
    assert a.receipt(cid, 0, "hello").state == "unknown"
    _claude_file(tmp_path, cid, {"type": "mode"})
    assert not a.resumable(cid)
    mark = a.receipt_mark(cid)
    assert a.receipt(cid, mark, "hello there").state == "absent"
    _claude_file(
        tmp_path, cid, {"type": "user", "message": {"role": "user", "content": "hello\n there"}}
    )
    assert a.receipt(cid, mark, "hello there").state == "confirmed"
    assert a.resumable(cid)
    later = a.receipt_mark(cid)
    long = "\n".join(f"line {i} of a long comment" for i in range(80))
    wrapped = f"<pasted_content>\n{long}\n</pasted_content>"
    _claude_file(
        tmp_path, cid, {"type": "queue-operation", "operation": "enqueue", "content": wrapped}
    )
    assert a.receipt(cid, later, long).state == "confirmed"
    assert a.receipt(cid, a.receipt_mark(cid), long).state == "absent"  # only past the mark
    assert a.launch_env() == {"CLAUDE_CONFIG_DIR": str(tmp_path)}


def _rollout(home: Path, cid: str, cwd: str, began: float, *turns: str) -> Path:
    stamp = time.strftime("%Y-%m-%dT%H-%M-%S", time.gmtime(began))
    path = home / "sessions" / "2026" / "12" / "03" / f"rollout-{stamp}-{cid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    iso = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(began))
    lines = [{"type": "session_meta", "payload": {"id": cid, "timestamp": iso, "cwd": cwd}}]
    for t in turns:
        content = [{"type": "input_text", "text": t}]
        payload = {"type": "message", "role": "user", "content": content}
        lines.append({"type": "response_item", "payload": payload})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_codex_discovers_its_own_conversation_never_the_latest(tmp_path: Path) -> None:
    home, work = tmp_path / "codex", tmp_path / "work"
    work.mkdir()
    a = CodexAdapter(state_dir=home)
    now = time.time()
    _rollout(home, "old-1", str(work), now - 600)  # an earlier conversation here
    old = home / "sessions" / "2026" / "12" / "03"
    for p in old.iterdir():
        os.utime(p, (now - 600, now - 600))
    _rollout(home, "other-dir", str(tmp_path), now + 0.5)
    _rollout(home, "mine", str(work), now + 1)
    _rollout(home, "next", str(work), now + 3)  # another item's, started later
    assert a.discover_conversation(work, now, set()) == "mine"
    assert a.discover_conversation(work, now, {"mine"}) == "next"  # held by another item
    assert a.discover_conversation(work, now + 60, set()) is None
    assert a.resume_argv("p", "mine") == ["codex", "resume", "mine", "p"]
    assert a.resumable("mine")
    assert not a.resumable("unknown-id")


def test_codex_receipts_from_its_rollout_file(tmp_path: Path) -> None:
    home = tmp_path / "codex"
    a = CodexAdapter(state_dir=home)
    path = _rollout(home, "c1", str(tmp_path), time.time(), "first")
    mark = a.receipt_mark("c1")
    assert a.receipt("c1", mark, "second turn").state == "absent"
    with path.open("a") as handle:
        handle.write('{"type": "response_item", "payload": {"type": "message", "role": "user", ')
    assert a.receipt("c1", mark, "second turn").state == "absent"  # half a line: not yet
    with path.open("a") as handle:
        handle.write('"content": [{"type": "input_text", "text": "second turn"}]}}\n')
    assert a.receipt("c1", mark, "second turn").state == "confirmed"
    assert a.receipt(None, 0, "second turn").state == "unknown"


def test_activity_reads_the_turn_from_the_screen() -> None:
    """Issue 20: a close waits while the CLI shows it can be interrupted (a turn runs)."""
    claude_busy = "\u273b Thinking\u2026 (12s \u00b7 \u2191 1.2k tokens \u00b7 esc to interrupt)"
    codex_busy = "\u2022 Working (5s \u2022 Esc to interrupt)"
    assert ClaudeCodeAdapter().activity(view(claude_busy)) == "busy"
    assert CodexAdapter().activity(view(codex_busy)) == "busy"
    # No marker, a stand-in that draws none of the CLI's screens, or a generic harness:
    # unknown (the dispatcher then watches whether the screen changes).
    assert ClaudeCodeAdapter().activity(view("\u276f ")) == "unknown"
    assert CodexAdapter().activity(view(CODEX_MAIN)) == "unknown"
    assert ClaudeCodeAdapter(checks=False).activity(view(claude_busy)) == "unknown"
    assert GenericAdapter(["prog"]).activity(view(claude_busy)) == "unknown"


SCREENS = Path(__file__).parent / "screens"


def _screen(name: str) -> str:
    return (SCREENS / f"{name}.txt").read_text(encoding="utf-8")


def test_claude_code_permission_and_question_prompts_drawn_by_the_real_cli_are_dialogs() -> None:
    a = ClaudeCodeAdapter()
    for name, dialog in (
        ("claude-permission", "permission"),
        ("claude-write", "permission"),
        ("claude-question", "question"),
    ):
        readiness = a.readiness(view(_screen(name)))
        assert (name, readiness.state, readiness.dialog) == (name, "blocked", dialog)


def test_codex_approval_prompt_drawn_by_the_real_cli_is_a_dialog() -> None:
    readiness = CodexAdapter().readiness(view(_screen("codex-approval")))
    assert (readiness.state, readiness.dialog) == ("blocked", "approval")
    assert CodexAdapter().readiness(view(CODEX_MAIN)).dialog is None


def test_an_agent_reply_asking_to_proceed_is_not_a_permission_prompt() -> None:
    said = "\u25cf Shall I? Do you want to proceed? Would you like to run the following command?"
    assert ClaudeCodeAdapter().readiness(view(said)).dialog is None
    assert CodexAdapter().readiness(view(said)).dialog is None


def test_codex_takes_the_rollout_file_its_own_process_holds_open(tmp_path: Path) -> None:
    """Two Codex started in one cwd a moment apart: the later one may write its rollout
    file first (seen on 0.171.0). The file the pane's process tree holds open decides,
    never the start times."""
    home, work = tmp_path / "codex", tmp_path / "work"
    work.mkdir()
    a = CodexAdapter(state_dir=home)
    now = time.time()
    _rollout(home, "sibling", str(work), now + 1)  # written first, by the other pane
    mine = _rollout(home, "mine", str(work), now + 2)
    holder = subprocess.Popen(["sh", "-c", 'exec 3<"$0"; exec sleep 30', str(mine)])
    idle = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while a.discover_conversation(work, now, set(), [holder.pid]) is None:
            assert time.monotonic() < deadline, "the held file was never read"
            time.sleep(0.05)
        assert a.discover_conversation(work, now, set(), [holder.pid]) == "mine"
        # A pane whose processes hold no rollout file yet: wait, never guess a sibling's.
        assert a.discover_conversation(work, now, set(), [idle.pid]) is None
        # Its own file taken by another item already: not twice.
        assert a.discover_conversation(work, now, {"mine"}, [holder.pid]) is None
    finally:
        for proc in (holder, idle):
            proc.kill()
            proc.wait()
    # No live process to read (the pane is gone): start time and cwd, as before.
    assert a.discover_conversation(work, now, set(), [holder.pid]) == "sibling"
    assert a.discover_conversation(work, now, set()) == "sibling"
