"""OpenAI Codex CLI: start, find the conversation's id in its rollout file, resume by id.

Tested with Codex CLI 0.169.0 and 0.171.0 (node 20, tmux 3.3a). As observed:

- `codex PROMPT` starts a conversation; Codex cannot be told its id. It writes
  `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`, whose first line is a
  `session_meta` record with the id, the cwd and the start time, and its `codex`
  process holds that file open for as long as it runs. The adapter takes the rollout
  file the pane's own process tree holds open (/proc); only where that cannot be read
  (no live pane, another user's processes, no /proc) does it fall back to cwd and start
  time (never "the latest": items sharing a cwd would resume each other's
  conversations), skipping ids other items hold. Start time alone cannot tell two
  starts in one cwd apart: of two Codex started 0.1 s apart, the later one may write
  its `session_meta` first (seen on 0.171.0).
- `codex resume ID PROMPT` resumes exactly that conversation. Until the id is known the
  session counts as not resumable.
- The TUI is on the alternate screen from its first frame, composer marked U+203A; the trusted-
  folder dialog ("Trust this folder?", default "Trust and continue") and sign-in are
  dialogs a pasted CR would answer.
- Submitted turns are `response_item` records with `role: user` in the rollout file.
- A turn, in that file (0.171.0): `event_msg` `task_started`, the user's
  `response_item`, the reply's items, then `event_msg` `task_complete` once it is over
  (`turn_aborted` when it was interrupted). `token_count`, `turn_context`,
  `thread_settings_applied` and the like decide nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from loop_tmux import PaneView

from ..procinfo import tree_open_files
from . import receipts
from .activity import BUSY, IDLE, from_tail
from .base import (
    BLOCKED,
    NOT_READY,
    READY,
    CliAdapter,
    Readiness,
    Receipt,
    file_end,
    screen_has,
)
from .transcripts import TranscriptUnavailable, Turn, last_turns

__all__ = ["CodexAdapter"]

DIALOGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("trust", ("Trust this folder?", "Do you trust the contents of this directory")),
    ("login", ("Sign in with ChatGPT", "Provide your own API key")),
    ("update", ("Update available!",)),
    # A command waiting for the operator's approval (issue 26; seen on 0.171.0 with
    # approval on-request, tests/screens/codex-approval.txt): its key hint, which an
    # agent's reply would not draw ("Would you like to run the following command?" it
    # might).
    ("approval", ("Press enter to confirm or esc to cancel",)),
)
COMPOSER = "\u203a"  # the prompt mark of Codex's input box
_SKEW = 2.0  # seconds a rollout's start time may precede the spawn we noted


def default_home() -> Path:
    return CodexAdapter.default_state_dir()


def _user_text(record: dict[str, Any]) -> str | None:
    if record.get("type") != "response_item":
        return None
    payload = record.get("payload")
    if (
        isinstance(payload, dict)
        and payload.get("type") == "message"
        and payload.get("role") == "user"
    ):
        return receipts.text_of(payload.get("content"))
    return None


# Codex records its context for the model as user messages of its own: not the people's.
_CONTEXT_TAGS = ("<environment_context>", "<user_instructions>", "<permissions")


def _turn(record: dict[str, Any]) -> Turn | None:
    """A `response_item` message of the user or the assistant as a turn (Codex's own
    context messages and developer instructions are not turns)."""
    if record.get("type") != "response_item":
        return None
    payload = record.get("payload")
    if not isinstance(payload, dict) or payload.get("type") != "message":
        return None
    role = payload.get("role")
    if role not in ("user", "assistant"):
        return None
    text = receipts.text_of(payload.get("content"))
    if role == "user" and text.lstrip().startswith(_CONTEXT_TAGS):
        return None
    return Turn(role, text)


TURN_ENDED = frozenset({"task_complete", "turn_complete", "turn_aborted"})
TURN_OPEN = frozenset({"task_started", "turn_started", "user_message"})


def turn_verdict(record: dict[str, Any]) -> str | None:
    """Does this rollout record end a turn ("idle"), belong to an open one ("busy"),
    or say neither (None)?"""
    payload = record.get("payload")
    if not isinstance(payload, dict):
        return None
    kind = payload.get("type")
    if record.get("type") == "event_msg":
        return IDLE if kind in TURN_ENDED else BUSY if kind in TURN_OPEN else None
    if _user_text(record) is not None:
        return BUSY
    return None


def _meta(path: Path) -> dict[str, Any] | None:
    """The `session_meta` payload on the rollout file's first line, if whole."""
    try:
        with path.open("rb") as handle:
            first = handle.readline()
    except OSError:
        return None
    if not first.endswith(b"\n"):
        return None
    try:
        record = json.loads(first)
    except ValueError:
        return None
    payload = record.get("payload") if isinstance(record, dict) else None
    if not isinstance(payload, dict) or record.get("type") != "session_meta":
        return None
    return payload


def _epoch(stamp: Any) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _same_dir(a: Any, b: Path) -> bool:
    if not isinstance(a, str):
        return False
    return os.path.realpath(a) == os.path.realpath(b)


class CodexAdapter(CliAdapter):
    """`codex [extra] PROMPT` fresh; `codex resume [extra] ID PROMPT` once the id is known."""

    name = "codex"
    can_resume = True
    assigns_conversation_id = False
    tested_versions = ("0.169.0", "0.171.0")
    default_binary = "codex"
    state_env = "CODEX_HOME"
    default_state = ".codex"

    def fresh_argv(self, prompt: str, conversation_id: str) -> list[str]:
        return [self.binary, *self.extra_args, prompt]

    def resume_argv(self, prompt: str, conversation_id: str) -> list[str]:
        return [self.binary, "resume", *self.extra_args, conversation_id, prompt]

    def readiness(self, view: PaneView) -> Readiness:
        for dialog, phrases in DIALOGS:
            if screen_has(view.screen, *phrases):
                return Readiness(BLOCKED, dialog, f"Codex shows its {dialog} dialog")
        if view.alternate_on and screen_has(view.screen, COMPOSER):
            return Readiness(READY)
        return Readiness(NOT_READY, None, "Codex has not drawn its composer yet")

    def _rollouts(self, since: float) -> list[Path]:
        try:
            paths = (self.state_dir / "sessions").glob("*/*/*/rollout-*.jsonl")
            recent = [p for p in paths if p.stat().st_mtime >= since - _SKEW]
        except OSError:
            return []
        return sorted(recent, key=lambda p: p.name)

    def rollout_file(self, conversation_id: str) -> Path | None:
        if not conversation_id or "/" in conversation_id or conversation_id.startswith("."):
            return None
        try:
            found = sorted(
                (self.state_dir / "sessions").glob(f"*/*/*/rollout-*-{conversation_id}.jsonl")
            )
        except OSError:
            return None
        return found[0] if found else None

    def discover_conversation(
        self,
        cwd: Path,
        started_at: float,
        exclude: set[str],
        pids: Sequence[int] = (),
        *,
        guess: bool = True,
    ) -> str | None:
        """The conversation of the rollout file the pane's processes (`pids`) hold open;
        where they cannot be read (and `guess`), the earliest one started in `cwd` since
        `started_at` that no other item holds. None while Codex has not written it yet."""
        held = tree_open_files(pids) if pids else None
        if held is not None:
            return self._held_conversation(held, exclude)
        if not guess:
            return None
        for path in self._rollouts(started_at):
            meta = _meta(path)
            if meta is None:
                continue
            conversation = meta.get("id")
            began = _epoch(meta.get("timestamp"))
            if (
                isinstance(conversation, str)
                and conversation not in exclude
                and began is not None
                and began >= started_at - _SKEW
                and _same_dir(meta.get("cwd"), cwd)
            ):
                return conversation
        return None

    @staticmethod
    def _held_conversation(held: list[Path], exclude: set[str]) -> str | None:
        """The id in the rollout file among `held` (its process's own, whatever its
        start time or cwd); None while it holds none yet."""
        for path in held:
            if not (path.name.startswith("rollout-") and path.name.endswith(".jsonl")):
                continue
            meta = _meta(path)
            conversation = meta.get("id") if meta is not None else None
            if isinstance(conversation, str) and conversation not in exclude:
                return conversation
        return None

    def turn_state(self, conversation_id: str | None) -> str:
        return from_tail(self.rollout_file(conversation_id or ""), turn_verdict)

    def resumable(self, conversation_id: str) -> bool:
        if not self.checks:
            return True  # argv only: the harness's own files are not consulted
        return self.rollout_file(conversation_id) is not None

    def receipt_mark(self, conversation_id: str | None) -> int:
        return file_end(self.rollout_file(conversation_id or ""))

    def receipt(self, conversation_id: str | None, mark: int, text: str) -> Receipt:
        path = self.rollout_file(conversation_id or "")
        state = receipts.find(path, mark, text, _user_text)
        return Receipt(state, "" if path is None else path.name)

    def transcript(self, conversation_id: str | None, turns: int) -> list[Turn]:
        path = self.rollout_file(conversation_id or "")
        if path is None:
            raise TranscriptUnavailable(
                f"no Codex rollout file for conversation {conversation_id or '(not known yet)'}"
                f" under {self.state_dir / 'sessions'}"
            )
        return last_turns(path, turns, _turn)
