"""Harness adapters: the argv that starts or resumes a coding agent's conversation.

The prompt is only ever one whole argv element (the harness's positional prompt), and
argv lists go to tmux without a shell, so no payload text is ever parsed as a command.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = [
    "ClaudeCodeAdapter",
    "CodexAdapter",
    "GenericAdapter",
    "HarnessAdapter",
    "ResumeUnsupported",
    "new_conversation_id",
]


class ResumeUnsupported(Exception):
    """The adapter cannot resume a conversation (the dispatcher starts a fresh one)."""


def new_conversation_id() -> str:
    """A fresh conversation id (uuid4), assigned by us and recorded at spawn."""
    return str(uuid.uuid4())


@runtime_checkable
class HarnessAdapter(Protocol):
    name: str

    @property
    def can_resume(self) -> bool: ...

    def fresh_argv(self, prompt: str, conversation_id: str) -> list[str]: ...

    def resume_argv(self, prompt: str, conversation_id: str) -> list[str]: ...


class ClaudeCodeAdapter:
    """Claude Code: `claude [extra] --session-id ID PROMPT` / `claude [extra] --resume ID PROMPT`.

    Claude Code accepts a caller-chosen session id (a UUID) for a new conversation and
    resumes one by id; flags go before the positional prompt.
    """

    name = "claude-code"
    can_resume = True

    def __init__(self, binary: str = "claude", extra_args: Sequence[str] = ()) -> None:
        self.binary = binary
        self.extra_args = list(extra_args)

    def fresh_argv(self, prompt: str, conversation_id: str) -> list[str]:
        return [self.binary, *self.extra_args, "--session-id", conversation_id, prompt]

    def resume_argv(self, prompt: str, conversation_id: str) -> list[str]:
        return [self.binary, *self.extra_args, "--resume", conversation_id, prompt]

    def prepare_workspace(self, folder: Path) -> None:
        """Seed Claude Code's folder trust so a new worktree opens no trust dialog."""
        from .claude_trust import trust_folder

        trust_folder(folder)


class CodexAdapter:
    """OpenAI Codex CLI: `codex [extra] PROMPT` fresh, `codex resume --last [extra] PROMPT`.

    Relied on (Codex CLI's documented interface): `codex [OPTIONS] [PROMPT]` starts an
    interactive session; `codex resume [OPTIONS] [SESSION_ID] [PROMPT]` resumes one, and
    `--last` picks the most recent session without the picker. Codex cannot be handed a
    session id for a new conversation, so the id we record is ours, and a resume means
    "the latest conversation" (in newer Codex versions, the latest in the pane's cwd).
    """

    name = "codex"
    can_resume = True

    def __init__(self, binary: str = "codex", extra_args: Sequence[str] = ()) -> None:
        self.binary = binary
        self.extra_args = list(extra_args)

    def fresh_argv(self, prompt: str, conversation_id: str) -> list[str]:
        return [self.binary, *self.extra_args, prompt]

    def resume_argv(self, prompt: str, conversation_id: str) -> list[str]:
        return [self.binary, "resume", "--last", *self.extra_args, prompt]


def _substitute(template: Sequence[str], prompt: str, conversation_id: str) -> list[str]:
    """Replace `{prompt}` / `{session_id}` inside each element; never re-split, never a
    shell. A single pass, so a prompt containing `{session_id}` stays literal."""
    out = []
    for arg in template:
        pieces = []
        i = 0
        while i < len(arg):
            if arg.startswith("{prompt}", i):
                pieces.append(prompt)
                i += len("{prompt}")
            elif arg.startswith("{session_id}", i):
                pieces.append(conversation_id)
                i += len("{session_id}")
            else:
                pieces.append(arg[i])
                i += 1
        out.append("".join(pieces))
    return out


class GenericAdapter:
    """Any program, described by argv templates (from config).

    `argv` starts a fresh conversation; `resume_argv` (optional) resumes one. Both may
    use `{prompt}` and `{session_id}` placeholders, as a whole argument or inside one.
    Without `resume_argv` the adapter cannot resume and says so.
    """

    def __init__(
        self,
        argv: Sequence[str],
        resume_argv: Sequence[str] | None = None,
        name: str = "generic",
    ) -> None:
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError("generic harness argv must be a non-empty list of strings")
        if resume_argv is not None and (
            not resume_argv or not all(isinstance(a, str) for a in resume_argv)
        ):
            raise ValueError("generic harness resumeArgv must be a non-empty list of strings")
        self.name = name
        self.argv = list(argv)
        self._resume = None if resume_argv is None else list(resume_argv)

    @property
    def can_resume(self) -> bool:
        return self._resume is not None

    def fresh_argv(self, prompt: str, conversation_id: str) -> list[str]:
        return _substitute(self.argv, prompt, conversation_id)

    def resume_argv(self, prompt: str, conversation_id: str) -> list[str]:
        if self._resume is None:
            raise ResumeUnsupported(f"harness {self.name!r} has no resume argv")
        return _substitute(self._resume, prompt, conversation_id)
