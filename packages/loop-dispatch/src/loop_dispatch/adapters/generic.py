"""Any program, described by argv templates: no readiness, no receipts (it says so).

Its activity is "unknown" unless config names an idle file (`harness.idleFile`): a
file the program (or a hook of it) rewrites with one word, `busy` when a turn starts
and `idle` when it ends. The file's first word is the answer; a missing, unreadable or
other file says "unknown".
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from loop_tmux import PaneView

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
        idle_file: str | None = None,
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
        self.idle_file = idle_file

    def activity(self, view: PaneView, conversation_id: str | None = None) -> str:
        """The idle file's first word ("idle" or "busy"), else "unknown"."""
        path = self.idle_path(conversation_id)
        if path is None:
            return "unknown"
        try:
            with path.open("rb") as handle:
                head = handle.read(64)
        except OSError:
            return "unknown"
        words = head.decode("utf-8", "replace").split()
        word = words[0].casefold() if words else ""
        return word if word in ("idle", "busy") else "unknown"

    def idle_path(self, conversation_id: str | None) -> Path | None:
        """`harness.idleFile` with `{session_id}` filled in; None when not configured
        or the template needs an id this session does not have (or a malformed one)."""
        if self.idle_file is None:
            return None
        unsafe = not conversation_id or "/" in conversation_id or conversation_id.startswith(".")
        if "{session_id}" in self.idle_file and unsafe:
            return None
        return Path(_substitute([self.idle_file], "", conversation_id or "")[0]).expanduser()

    @property
    def can_resume(self) -> bool:
        return self._resume is not None

    def fresh_argv(self, prompt: str, conversation_id: str) -> list[str]:
        return _substitute(self.argv, prompt, conversation_id)

    def resume_argv(self, prompt: str, conversation_id: str) -> list[str]:
        if self._resume is None:
            raise ResumeUnsupported(f"harness {self.name!r} has no resume argv")
        return _substitute(self._resume, prompt, conversation_id)
