"""Claude Code: start and resume by id, readiness from its screen, receipts from its files.

Tested with Claude Code 2.1.328 and 2.1.332 (node 20, tmux 3.3a). What it does, as
observed by running it (tests-integration/test_real_harnesses.py keeps checking it):

- `claude --session-id ID PROMPT` starts conversation ID; `claude --resume ID PROMPT`
  restores its whole history (from any directory). `--resume` of an id with nothing saved
  exits 1 ("No conversation found"), so an id counts as resumable only once its
  conversation file holds a user turn; otherwise the dispatcher starts fresh.
- The main screen switches the terminal to the alternate screen once drawn (its input
  box, a prompt line under a rule, is the proof when it does not); a paste before that
  is lost. Its dialogs (trusted folder, custom API key, bypass-permissions
  warning, onboarding) draw on the normal screen, and a pasted CR answers them: the
  trust dialog's default is "No, exit".
- Each submitted turn is appended to `<config dir>/projects/<cwd, / as ->/<ID>.jsonl` as
  `"type": "user"`; an input queued while busy is first a `queue-operation` enqueue.
  The config dir is `$CLAUDE_CONFIG_DIR`, else `~/.claude`.
- A turn, in that file (2.1.332): `user`, `api-request` (a model call begins), then
  once the reply streamed whole an `assistant` record (`message.stop_reason`:
  `tool_use` when a tool runs next, then a `user` tool_result and another call;
  `end_turn` when the turn is over), and last `system` with `subtype: turn_duration`.
  Metadata records (`last-prompt`, `mode`, `permission-mode`, `attachment`,
  `file-history-snapshot`, ...) come and go around them and decide nothing.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loop_tmux import PaneView

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

__all__ = ["ClaudeCodeAdapter"]

# (dialog name, phrases that identify it on screen)
DIALOGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("trust", ("Yes, I trust this folder", "Do you trust the files in this folder")),
    ("api_key", ("Detected a custom API key",)),
    ("bypass_permissions", ("Bypass Permissions mode",)),
    # A tool waiting for the operator's permission (a pasted CR would answer "Yes"), and
    # a question the agent asks with choices (issue 26). Seen on 2.1.332 (tests/screens/):
    # Bash asks "Do you want to proceed?", Write "Do you want to create FILE?"; both end
    # with this footer, and the question prompt with its own. Footers only: an agent's
    # reply may well say "Do you want to proceed?", never these key hints.
    ("permission", ("Esc to cancel · Tab to amend",)),
    ("question", ("Enter to select · ↑/↓ to navigate",)),
    (
        "onboarding",
        (
            "Unable to connect to Anthropic services",
            "Choose the text style",
            "Select login method",
        ),
    ),
)


PROMPT_MARK = "\u276f"  # the input box's prompt (dialogs use it too: checked first)
RULE = "\u2500"  # the box-drawing rule above and below the input box


def _has_composer(screen: str | None) -> bool:
    """The input box: a prompt line right under a rule. Claude Code usually draws its
    main screen on the alternate screen, but a relaunch into a pane (respawn-pane) on a
    loaded host was seen drawing it on the normal one: the box is the proof then."""
    lines = (screen or "").splitlines()
    for above, line in itertools.pairwise(lines):
        rule = above.strip()
        if rule and set(rule) == {RULE} and line.lstrip().startswith(PROMPT_MARK):
            return True
    return False


def default_config_dir() -> Path:
    return ClaudeCodeAdapter.default_state_dir()


def _user_text(record: dict[str, Any]) -> str | None:
    kind = record.get("type")
    if kind == "user":
        message = record.get("message")
        if isinstance(message, dict) and message.get("role") == "user":
            return receipts.text_of(message.get("content"))
    if kind == "queue-operation" and record.get("operation") == "enqueue":
        content = record.get("content")
        return content if isinstance(content, str) else None
    return None


# The model Claude Code names on the assistant records it writes itself (2.x).
SYNTHETIC = "<synthetic>"


def _turn(record: dict[str, Any]) -> Turn | None:
    """A user or assistant record as a turn: the text blocks, a tool call as its name.
    A user record that only carries tool results, and Claude Code's own meta records
    (`isMeta`), are not turns; nor is the placeholder reply it writes itself (model
    `<synthetic>`, e.g. "No response requested." when a conversation killed before its
    reply is resumed), unless it reports an API error: that one the operator needs."""
    kind = record.get("type")
    message = record.get("message")
    if kind not in ("user", "assistant") or not isinstance(message, dict):
        return None
    if record.get("isMeta") or record.get("isSidechain"):
        return None
    if message.get("model") == SYNTHETIC and not record.get("isApiErrorMessage"):
        return None
    content = message.get("content")
    if isinstance(content, str):
        return Turn(kind, content)
    if not isinstance(content, list):
        return None
    parts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif block.get("type") == "tool_use" and isinstance(block.get("name"), str):
            parts.append(f"[tool: {block['name']}]")
    return Turn(kind, "\n".join(parts)) if parts else None


ENDED = frozenset({"end_turn", "stop_sequence", "max_tokens", "refusal"})
INTERRUPTED = "[Request interrupted by user"


def turn_verdict(record: dict[str, Any]) -> str | None:
    """Does this record end a turn ("idle"), belong to an open one ("busy"), or say
    neither (None: metadata)? An interrupted turn ends with a user record naming it."""
    kind = record.get("type")
    if kind == "system":
        return IDLE if record.get("subtype") == "turn_duration" else None
    if kind == "assistant":
        message = record.get("message")
        stop = message.get("stop_reason") if isinstance(message, dict) else None
        return IDLE if stop in ENDED else BUSY
    if kind == "user":
        return IDLE if (_user_text(record) or "").startswith(INTERRUPTED) else BUSY
    if kind == "api-request":
        return BUSY
    if kind == "queue-operation" and record.get("operation") == "enqueue":
        return BUSY
    return None


class ClaudeCodeAdapter(CliAdapter):
    """`claude [extra] --session-id ID PROMPT` / `claude [extra] --resume ID PROMPT`."""

    name = "claude-code"
    can_resume = True
    assigns_conversation_id = True
    tested_versions = ("2.1.328", "2.1.332")
    default_binary = "claude"
    state_env = "CLAUDE_CONFIG_DIR"
    default_state = ".claude"

    def __init__(
        self,
        binary: str | None = None,
        extra_args: Sequence[str] = (),
        *,
        state_dir: str | os.PathLike[str] | None = None,
        read_dir: str | os.PathLike[str] | None = None,
        config_file: str | os.PathLike[str] | None = None,
        checks: bool = True,
    ) -> None:
        super().__init__(binary, extra_args, state_dir=state_dir, read_dir=read_dir, checks=checks)
        # `.claude.json` where the launched CLI reads it: in its config dir when one is
        # set, else in its HOME (`config_file`, derived by the caller like `read_dir`).
        self._config_file = None if config_file is None else Path(config_file).expanduser()

    def prepare_workspace(self, folder: Path) -> None:
        """Seed Claude Code's folder trust so a new worktree opens no trust dialog (in
        `harness.stateDir` when set, else where the launched Claude Code looks)."""
        from ..claude_trust import trust_folder

        file = self._config_file
        if self._state_dir is not None:
            file = self._state_dir / ".claude.json"
        trust_folder(folder, file)

    def fresh_argv(self, prompt: str, conversation_id: str) -> list[str]:
        return [self.binary, *self.extra_args, "--session-id", conversation_id, prompt]

    def resume_argv(self, prompt: str, conversation_id: str) -> list[str]:
        return [self.binary, *self.extra_args, "--resume", conversation_id, prompt]

    def readiness(self, view: PaneView) -> Readiness:
        for dialog, phrases in DIALOGS:
            if screen_has(view.screen, *phrases):
                return Readiness(BLOCKED, dialog, f"Claude Code shows its {dialog} dialog")
        if view.alternate_on or _has_composer(view.screen):
            return Readiness(READY)
        return Readiness(NOT_READY, None, "Claude Code has not drawn its main screen yet")

    def conversation_file(self, conversation_id: str) -> Path | None:
        """`projects/<any>/<ID>.jsonl`: the id is unique, the folder naming is Claude's."""
        if not conversation_id or "/" in conversation_id or conversation_id.startswith("."):
            return None
        try:
            return next(
                iter(sorted((self.state_dir / "projects").glob(f"*/{conversation_id}.jsonl")))
            )
        except (StopIteration, OSError):
            return None

    def turn_state(self, conversation_id: str | None) -> str:
        return from_tail(self.conversation_file(conversation_id or ""), turn_verdict)

    def resumable(self, conversation_id: str) -> bool:
        if not self.checks:
            return True  # argv only: the harness's own files are not consulted
        path = self.conversation_file(conversation_id)
        if path is None:
            return False
        records = receipts.new_records(path, 0)
        return records is not None and any(r.get("type") == "user" for r in records)

    def receipt_mark(self, conversation_id: str | None) -> int:
        return file_end(self.conversation_file(conversation_id or ""))

    def receipt(self, conversation_id: str | None, mark: int, text: str) -> Receipt:
        path = self.conversation_file(conversation_id or "")
        state = receipts.find(path, mark, text, _user_text)
        return Receipt(state, "" if path is None else path.name)

    def transcript(self, conversation_id: str | None, turns: int) -> list[Turn]:
        path = self.conversation_file(conversation_id or "")
        if path is None:
            where = self.state_dir / "projects"
            raise TranscriptUnavailable(
                f"no Claude Code conversation file {conversation_id or '(no id recorded)'}"
                f".jsonl under {where}"
            )
        return last_turns(path, turns, _turn)
