"""Harness adapters: the argv that starts or resumes a coding agent's conversation, and
for the harnesses they know, readiness before a paste and a receipt after it.

The prompt is only ever one whole argv element (the harness's positional prompt), and
argv lists go to tmux without a shell, so no payload text is ever parsed as a command.
"""

from __future__ import annotations

from .base import (
    BLOCKED,
    NOT_READY,
    READY,
    CliAdapter,
    HarnessAdapter,
    Readiness,
    Receipt,
    ResumeUnsupported,
    VerifiedAdapter,
    new_conversation_id,
)
from .claude import ClaudeCodeAdapter
from .codex import CodexAdapter
from .generic import GenericAdapter
from .transcripts import TranscriptUnavailable, Turn

__all__ = [
    "BLOCKED",
    "NOT_READY",
    "READY",
    "ClaudeCodeAdapter",
    "CliAdapter",
    "CodexAdapter",
    "GenericAdapter",
    "HarnessAdapter",
    "Readiness",
    "Receipt",
    "ResumeUnsupported",
    "TranscriptUnavailable",
    "Turn",
    "VerifiedAdapter",
    "new_conversation_id",
]
