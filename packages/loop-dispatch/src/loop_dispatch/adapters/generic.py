"""Any program, described by argv templates: no readiness, no receipts (it says so)."""

from __future__ import annotations

from collections.abc import Sequence

from .base import ResumeUnsupported, VerifiedAdapter

__all__ = ["GenericAdapter"]


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


class GenericAdapter(VerifiedAdapter):
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
