"""`the-loop sessions peek`: what an agent shows or said lately, without attaching.

Attaching takes over a terminal and a stray keystroke reaches the agent; a peek only
reads: the pane's last lines (one tmux call), or the conversation's last turns from the
harness's own file (`--transcript`). Commands neutralise the text before showing it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import OperationalError, UsageError

if TYPE_CHECKING:
    from loop_dispatch import WorkItemRef
    from loop_dispatch.registry import SessionRecord

    from .runtime import Runtime

__all__ = ["pane_lines", "transcript_turns"]


def _record(rt: Runtime, ref: WorkItemRef) -> SessionRecord:
    record = rt.store.registry.get(ref) if rt.has_state else None
    if record is None:
        raise UsageError(f"no session registered for {ref}; see `the-loop sessions list`")
    return record


def pane_lines(rt: Runtime, ref: WorkItemRef, lines: int) -> dict[str, Any]:
    """The session pane's last `lines` lines (history included, a dead pane's too)."""
    from loop_tmux import TmuxUnavailable

    record = _record(rt, ref)
    try:
        text = rt.tmux.scrollback(record.tmux_name, lines)
    except TmuxUnavailable as exc:
        raise OperationalError(f"tmux did not answer about {record.tmux_name}: {exc}") from None
    if text is None:
        raise OperationalError(
            f"tmux session {record.tmux_name} does not exist (its scrollback went with it)"
        )
    return {"ref": str(ref), "tmuxName": record.tmux_name, "lines": text.split("\n")}


def transcript_turns(rt: Runtime, ref: WorkItemRef, turns: int) -> dict[str, Any]:
    """The conversation's last `turns` user/assistant turns, from the harness's files;
    refused (exit 2) with the reason when the harness keeps none we can read."""
    from loop_dispatch.adapters import TranscriptUnavailable

    record = _record(rt, ref)
    adapter = rt.adapter
    if adapter.name != record.harness:
        raise UsageError(
            f"the session of {ref} runs harness {record.harness!r}, but this config's "
            f"harness is {adapter.name!r}: its files are not where this config looks"
        )
    try:
        found = adapter.transcript(record.conversation_id, turns)
    except TranscriptUnavailable as exc:
        raise UsageError(f"no transcript for {ref}: {exc}") from None
    return {
        "ref": str(ref),
        "harness": record.harness,
        "conversationId": record.conversation_id,
        "turns": [{"role": t.role, "text": t.text} for t in found],
    }
