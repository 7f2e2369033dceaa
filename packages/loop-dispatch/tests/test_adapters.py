"""Harness adapters: argv shapes, resume support, placeholder substitution."""

from __future__ import annotations

import uuid

import pytest

from loop_dispatch.adapters import (
    ClaudeCodeAdapter,
    CodexAdapter,
    GenericAdapter,
    HarnessAdapter,
    ResumeUnsupported,
    new_conversation_id,
)

PROMPT = "line one\n`rm -rf /`; $(echo pwned) {session_id}"


def test_claude_code_flags_before_prompt() -> None:
    a = ClaudeCodeAdapter(binary="/opt/claude", extra_args=["--model", "opus"])
    assert a.can_resume
    assert a.name == "claude-code"
    assert a.fresh_argv(PROMPT, "ID") == [
        "/opt/claude",
        "--model",
        "opus",
        "--session-id",
        "ID",
        PROMPT,
    ]
    assert a.resume_argv(PROMPT, "ID") == [
        "/opt/claude",
        "--model",
        "opus",
        "--resume",
        "ID",
        PROMPT,
    ]


def test_codex_fresh_and_resume_by_id_never_last() -> None:
    a = CodexAdapter(extra_args=["--full-auto"])
    assert a.fresh_argv(PROMPT, "ignored") == ["codex", "--full-auto", PROMPT]
    resumed = a.resume_argv(PROMPT, "0199-abc")
    assert resumed == ["codex", "resume", "--full-auto", "0199-abc", PROMPT]
    assert "--last" not in resumed
    assert a.can_resume
    assert not a.assigns_conversation_id  # Codex picks its id; we read it back


def test_generic_substitutes_whole_and_inner_placeholders_only_once() -> None:
    a = GenericAdapter(
        ["prog", "--id={session_id}", "{prompt}", "x{prompt}y"],
        ["prog", "--resume", "{session_id}", "{prompt}"],
        name="mine",
    )
    argv = a.fresh_argv(PROMPT, "S1")
    assert argv == ["prog", "--id=S1", PROMPT, f"x{PROMPT}y"]  # prompt's {session_id} stays
    assert a.resume_argv("p", "S2") == ["prog", "--resume", "S2", "p"]
    assert a.can_resume
    assert a.name == "mine"


def test_generic_without_resume_says_so() -> None:
    a = GenericAdapter(["prog", "{prompt}"])
    assert a.can_resume is False
    with pytest.raises(ResumeUnsupported):
        a.resume_argv("p", "S")


@pytest.mark.parametrize("argv", [[], [1, 2], ""])
def test_generic_rejects_bad_templates(argv) -> None:
    with pytest.raises(ValueError):
        GenericAdapter(argv)


def test_all_adapters_satisfy_the_protocol() -> None:
    for a in (ClaudeCodeAdapter(), CodexAdapter(), GenericAdapter(["p"])):
        assert isinstance(a, HarnessAdapter)


def test_conversation_ids_are_uuid4() -> None:
    ids = {new_conversation_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(uuid.UUID(i).version == 4 for i in ids)
