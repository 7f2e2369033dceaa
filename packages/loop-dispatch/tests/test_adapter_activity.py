"""Issue 25: each adapter says whether its harness is mid-turn from the harness's own
files first (record shapes as Claude Code 2.1.332 and Codex 0.171.0 write them; the real
CLIs are driven in tests-integration/test_activity_real.py), the screen only adding
caution, and reads only the tail of a conversation that may be megabytes long."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loop_dispatch.adapters import ClaudeCodeAdapter, CodexAdapter, GenericAdapter
from loop_dispatch.adapters import activity as tail
from loop_tmux import PaneView

CLAUDE_IDLE_SCREEN = "\u2500" * 20 + "\n\u276f \n" + "\u2500" * 20
CLAUDE_BUSY_SCREEN = "\u273b Crunching\u2026 (3s \u00b7 esc to interrupt)\n" + CLAUDE_IDLE_SCREEN
CLAUDE_TRUST = "Quick safety check\n\u276f No, exit\n  Yes, I trust this folder"


def view(screen: str = CLAUDE_IDLE_SCREEN) -> PaneView:
    return PaneView(alternate_on=True, command="node", dead=False, pid=1, screen=screen)


def _user(text: str) -> dict:
    return {"type": "user", "message": {"role": "user", "content": text}, "promptId": "p"}


def _assistant(stop: str | None) -> dict:
    return {
        "type": "assistant",
        "message": {"role": "assistant", "type": "message", "stop_reason": stop, "content": []},
    }


API = {"type": "api-request", "id": "r1"}
ENDED = {"type": "system", "subtype": "turn_duration", "durationMs": 6000}
QUEUED = {"type": "queue-operation", "operation": "enqueue", "content": "x"}
META = [{"type": "last-prompt"}, {"type": "mode"}, {"type": "permission-mode"}]


def _claude(tmp_path: Path, records: list[dict], tail_text: str = "") -> ClaudeCodeAdapter:
    folder = tmp_path / "projects" / "-w"
    folder.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (folder / "c1.jsonl").write_text(lines + tail_text)
    return ClaudeCodeAdapter(state_dir=tmp_path)


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        # the prompt went in and the model call runs: mid-turn
        ([_user("hello"), API], "busy"),
        # the reply streamed whole and the turn's end is written
        ([_user("hello"), API, _assistant("end_turn"), ENDED, *META], "idle"),
        # an older writer without turn_duration: the assistant's stop reason ends it
        ([_user("hello"), API, _assistant("end_turn"), *META], "idle"),
        # a tool runs: tool_use, then its result goes back to the model
        ([_user("hello"), API, _assistant("tool_use")], "busy"),
        ([_user("hello"), _assistant("tool_use"), _user("tool output"), API], "busy"),
        # a comment queued while busy
        (
            [_user("a"), _assistant("end_turn"), ENDED, QUEUED],
            "busy",
        ),
        # a turn the user interrupted is over
        ([_user("a"), API, _user("[Request interrupted by user]")], "idle"),
        # a new prompt after an ended turn
        ([_user("a"), _assistant("end_turn"), ENDED, _user("b")], "busy"),
        # metadata only: nothing to say
        (META, "unknown"),
    ],
)
def test_claude_turn_from_its_conversation_file(tmp_path, records, expected) -> None:
    assert _claude(tmp_path, records).activity(view(), "c1") == expected


def test_claude_half_written_line_is_left_for_the_next_read(tmp_path) -> None:
    half = json.dumps(_user("next"))[:30]
    a = _claude(tmp_path, [_user("a"), _assistant("end_turn"), ENDED], half)
    assert a.activity(view(), "c1") == "idle"


def test_the_screen_adds_caution_never_idleness(tmp_path) -> None:
    a = _claude(tmp_path, [_user("a"), _assistant("end_turn"), ENDED])
    # a turn whose first record is not written yet: the screen offers to interrupt it
    assert a.activity(view(CLAUDE_BUSY_SCREEN), "c1") == "busy"
    # a dialog on screen: blocked, whatever the file says
    assert a.activity(view(CLAUDE_TRUST), "c1") == "blocked"
    busy = _claude(tmp_path, [_user("a"), API])
    assert busy.activity(view(CLAUDE_IDLE_SCREEN), "c1") == "busy"
    # no conversation file (or no id): the screen alone, which cannot prove idle
    assert busy.activity(view(), None) == "unknown"
    assert busy.activity(view(), "no-such-id") == "unknown"
    assert busy.activity(view(CLAUDE_BUSY_SCREEN), None) == "busy"


def test_a_stand_in_without_checks_is_unknown(tmp_path) -> None:
    folder = tmp_path / "projects" / "-w"
    folder.mkdir(parents=True)
    (folder / "c1.jsonl").write_text(json.dumps(_user("a")) + "\n")
    assert ClaudeCodeAdapter(state_dir=tmp_path, checks=False).activity(view(), "c1") == "unknown"


def test_only_the_tail_of_a_large_conversation_is_read(tmp_path, monkeypatch) -> None:
    """A conversation of about 2 MB: the reading looks at its last 64 KiB (a wider
    window once, only when that holds no deciding record), never the whole file."""
    big = [_user("x" * 1000), _assistant("end_turn"), ENDED] * 1500
    a = _claude(tmp_path, [*big, _user("now"), API])
    path = a.conversation_file("c1")
    assert path is not None
    assert path.stat().st_size > 1_500_000
    reads: list[int] = []
    real = tail.tail_records

    def counting(p: Path, size: int):
        reads.append(size)
        return real(p, size)

    monkeypatch.setattr(tail, "tail_records", counting)
    assert a.activity(view(), "c1") == "busy"
    assert reads == [tail.TAIL]
    # metadata filling the whole tail: one wider look, still bounded
    _claude(tmp_path, [*big, *([{"type": "mode", "pad": "y" * 500}] * 200)])
    reads.clear()
    assert a.activity(view(), "c1") == "idle"
    assert reads == [tail.TAIL, tail.WIDE_TAIL]


def _codex(tmp_path: Path, payloads: list[tuple[str, dict]]) -> CodexAdapter:
    day = tmp_path / "sessions" / "2026" / "12" / "03"
    day.mkdir(parents=True, exist_ok=True)
    meta = ("session_meta", {"id": "c1", "cwd": "/w", "timestamp": "2026-12-03T23:14:08Z"})
    lines = [json.dumps({"type": t, "payload": p}) for t, p in [meta, *payloads]]
    (day / "rollout-2026-12-03T23-14-08-c1.jsonl").write_text("\n".join(lines) + "\n")
    return CodexAdapter(state_dir=tmp_path)


def _event(kind: str) -> tuple[str, dict]:
    return ("event_msg", {"type": kind, "turn_id": "t"})


SETTINGS = _event("thread_settings_applied")
USER = ("response_item", {"type": "message", "role": "user", "content": [{"text": "hi"}]})
REPLY = ("response_item", {"type": "message", "role": "assistant", "content": []})


@pytest.mark.parametrize(
    ("payloads", "expected"),
    [
        ([_event("task_started"), ("turn_context", {}), USER], "busy"),
        ([_event("task_started"), USER, REPLY, _event("token_count")], "busy"),
        ([_event("task_started"), USER, REPLY, _event("task_complete")], "idle"),
        (
            [_event("task_started"), USER, REPLY, _event("task_complete"), SETTINGS],
            "idle",
        ),
        ([_event("task_started"), USER, _event("turn_aborted")], "idle"),
        ([_event("task_complete"), _event("task_started")], "busy"),
        ([], "unknown"),
    ],
)
def test_codex_turn_from_its_rollout_file(tmp_path, payloads, expected) -> None:
    screen = "\u203a Ask Codex to do anything"
    assert _codex(tmp_path, payloads).activity(view(screen), "c1") == expected


def test_generic_is_unknown_unless_an_idle_file_is_configured(tmp_path) -> None:
    assert GenericAdapter(["prog"]).activity(view(), "s1") == "unknown"
    adapter = GenericAdapter(["prog"], idle_file=str(tmp_path / "{session_id}.state"))
    assert adapter.activity(view(), "s1") == "unknown"  # not written yet
    (tmp_path / "s1.state").write_text("busy\n")
    assert adapter.activity(view(), "s1") == "busy"
    (tmp_path / "s1.state").write_text("IDLE since 12:00\n")
    assert adapter.activity(view(), "s1") == "idle"
    (tmp_path / "s1.state").write_text("thinking\n")
    assert adapter.activity(view(), "s1") == "unknown"
    # an id that would leave the folder is never put in a path
    assert adapter.activity(view(), "../s1") == "unknown"
    assert adapter.activity(view(), None) == "unknown"
