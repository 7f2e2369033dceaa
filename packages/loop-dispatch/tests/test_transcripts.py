"""`transcript`: the last turns of a conversation, read backwards from the harness's file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loop_dispatch.adapters import (
    ClaudeCodeAdapter,
    CodexAdapter,
    GenericAdapter,
    TranscriptUnavailable,
    Turn,
)
from loop_dispatch.adapters.transcripts import records_backwards

CID = "0b7c9a4e-2f51-4d8e-9a51-3c1d2e4f5a6b"


def _lines(records: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.text(max_size=30), max_size=30),
    st.sampled_from(["", '{"n": 9', "not json\n", "[1, 2]\n"]),
    st.integers(min_value=1, max_value=80),
)
def test_records_come_back_last_first_whatever_the_block_size(
    tmp_path_factory, texts: list[str], ending: str, block: int
) -> None:
    """Lines cut across blocks are put back together; an unfinished last line and
    lines that are not JSON objects are skipped, never raised on."""
    path = tmp_path_factory.mktemp("t") / "c.jsonl"
    records = [{"n": n, "t": t} for n, t in enumerate(texts)]
    path.write_text(_lines(records) + ending)
    assert list(records_backwards(path, block)) == records[::-1]


def _claude(tmp_path: Path, records: list[dict]) -> ClaudeCodeAdapter:
    folder = tmp_path / "claude" / "projects" / "-work-acme"
    folder.mkdir(parents=True)
    (folder / f"{CID}.jsonl").write_text(_lines(records))
    return ClaudeCodeAdapter(state_dir=tmp_path / "claude")


def _user(content: object, **extra: object) -> dict:
    return {"type": "user", "message": {"role": "user", "content": content}, **extra}


def _assistant(mid: str, *blocks: dict) -> dict:
    return {
        "type": "assistant",
        "message": {"id": mid, "role": "assistant", "content": list(blocks)},
    }


def test_claude_turns_join_a_reply_written_block_by_block(tmp_path: Path) -> None:
    adapter = _claude(
        tmp_path,
        [
            {"type": "summary", "summary": "older"},
            _user("first question"),
            _assistant("m1", {"type": "text", "text": "first answer"}),
            _user("<command-name>/clear</command-name>", isMeta=True),  # Claude's own
            _user([{"type": "text", "text": "second question"}]),
            _assistant("m2", {"type": "text", "text": "let me look"}),
            _assistant("m2", {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}}),
            _user([{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}]),
            _assistant("m3", {"type": "text", "text": "found a.py"}),
            {"type": "queue-operation", "operation": "enqueue", "content": "queued"},
        ],
    )
    assert adapter.transcript(CID, 10) == [
        Turn("user", "first question"),
        Turn("assistant", "first answer"),
        Turn("user", "second question"),
        Turn("assistant", "let me look\n[tool: Bash]\nfound a.py"),
    ]
    assert adapter.transcript(CID, 2) == [
        Turn("user", "second question"),
        Turn("assistant", "let me look\n[tool: Bash]\nfound a.py"),
    ]


def test_claude_codes_own_placeholder_reply_is_not_the_models_turn(tmp_path: Path) -> None:
    """Killed before its reply was written, then resumed with the next comment: Claude
    Code 2.x writes "No response requested." itself (model `<synthetic>`, seen with the
    pinned CLI). That is not the agent's reply; an API error it writes so is kept."""

    def synthetic(text: str, **extra: object) -> dict:
        record = _assistant("s", {"type": "text", "text": text})
        record["message"]["model"] = "<synthetic>"
        return {**record, **extra}

    adapter = _claude(
        tmp_path,
        [
            _user("before the kill"),
            synthetic("No response requested.", isApiErrorMessage=False),
            _user("after the kill"),
            _assistant("m1", {"type": "text", "text": "Noted."}),
            _user("and then"),
            synthetic("API Error: Connection error.", isApiErrorMessage=True),
        ],
    )
    assert adapter.transcript(CID, 10) == [
        Turn("user", "before the kill\nafter the kill"),
        Turn("assistant", "Noted."),
        Turn("user", "and then"),
        Turn("assistant", "API Error: Connection error."),
    ]


def test_codex_turns_leave_out_its_own_context(tmp_path: Path) -> None:
    day = tmp_path / "codex" / "sessions" / "2026" / "12" / "03"
    day.mkdir(parents=True)
    records = [
        {"type": "session_meta", "payload": {"id": CID, "cwd": "/work"}},
        {
            "type": "response_item",
            "payload": {"type": "message", "role": "developer", "content": []},
        },
        {
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "<environment_context>cwd"}],
            },
        },
        {
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "fix the test"}],
            },
        },
        {"type": "event_msg", "payload": {"type": "user_message", "message": "fix the test"}},
        {
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "done"}],
            },
        },
    ]
    (day / f"rollout-2026-12-03T00-00-00-{CID}.jsonl").write_text(_lines(records))
    adapter = CodexAdapter(state_dir=tmp_path / "codex")
    assert adapter.transcript(CID, 5) == [Turn("user", "fix the test"), Turn("assistant", "done")]


def test_no_file_and_the_generic_adapter_say_why(tmp_path: Path) -> None:
    with pytest.raises(TranscriptUnavailable, match="no Claude Code conversation file"):
        ClaudeCodeAdapter(state_dir=tmp_path).transcript(CID, 5)
    with pytest.raises(TranscriptUnavailable, match="not known yet"):
        CodexAdapter(state_dir=tmp_path).transcript(None, 5)
    with pytest.raises(TranscriptUnavailable, match="reads no conversation file"):
        GenericAdapter(["prog", "{prompt}"]).transcript(CID, 5)
