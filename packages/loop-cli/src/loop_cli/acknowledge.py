"""Answers to control words on the ticket (issue 24), one seam for every tracker.

A settled control word is acknowledged where it was written: executed -> a `+1`
(GitHub) or a reply (the local tracker); refused -> `confused` and one short reply
naming the reason and the remedy. `control_answer` reads a settlement; a tracker's
`Acknowledger` posts it (GitHub's rides on the reactions queue, github/reactions.py;
the local tracker's writes a comment by `the-loop`, marked, which no ingress reads back).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from loop_dispatch import EventKind, WorkItemRef

__all__ = ["Acknowledger", "Answer", "LocalAcknowledger", "control_answer", "on_control_settled"]

EXECUTED = "control_executed"
REJECTED = "control_rejected"


@dataclass(frozen=True)
class Answer:
    """What to say about one control word: `ok` (executed) and the reply ("" for none)."""

    ref: WorkItemRef
    comment_id: str | None
    ok: bool
    reply: str


class Acknowledger(Protocol):
    """A tracker's side of the answer (GitHub, the local tracker, Jira)."""

    def acknowledge(self, ref: WorkItemRef, comment_id: str | None, ok: bool, reply: str) -> None:
        """Mark the comment (`ok`: executed, else refused) and post `reply` when not empty."""


def control_answer(settlement: Any, *, reply_when_ok: bool) -> Answer | None:
    """The answer a settled control word gets; None for any other settlement.

    `reply_when_ok`: an executed command gets a reply too (the local tracker has no
    reactions); `status` always replies, it is its whole point.
    """
    entry = settlement.entry
    event = entry.event
    outcome = settlement.outcome
    if event is None or event.kind is not EventKind.CONTROL or outcome is None:
        return None
    if settlement.state != "done" or outcome.reason not in (EXECUTED, REJECTED):
        return None
    ok = outcome.reason == EXECUTED
    status = outcome.detail.startswith("status:")
    reply = outcome.detail if (not ok or reply_when_ok or status) else ""
    return Answer(event.work_item, event.comment_id, ok, reply)


class LocalAcknowledger:
    """Replies on a local item as `the-loop`, marked (tracker.is_own_reply)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def acknowledge(self, ref: WorkItemRef, comment_id: str | None, ok: bool, reply: str) -> None:
        from .tracker import OWN_AUTHOR, OWN_MARKER, LocalTracker

        head = "Done" if ok else "Not done"
        where = f" (comment {comment_id})" if comment_id else ""
        text = f"{OWN_MARKER}\n{head}{where}: {reply or 'executed'}"
        LocalTracker(self.store).comment(ref, text, author=OWN_AUTHOR)


def on_control_settled(ack: Acknowledger) -> Callable[[Any], None]:
    """The drain's `on_settled` hook answering control words through `ack`."""

    def settled(settlement: Any) -> None:
        answer = control_answer(settlement, reply_when_ok=True)
        if answer is None:
            return
        with contextlib.suppress(Exception):  # an answer never blocks the drain
            ack.acknowledge(answer.ref, answer.comment_id, answer.ok, answer.reply)

    return settled
