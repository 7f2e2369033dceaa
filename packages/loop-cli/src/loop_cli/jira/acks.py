"""Acknowledgements on Jira: short comments starting with the-loop's marker.

Jira has no reactions, so where GitHub gets an emoji the-loop writes a one-line
comment instead, and only where a person needs the answer: a comment the-loop gave up
on, and a control word's reply (`acknowledge`, the seam control words call). Posting
runs on one worker thread off the delivery path; a failure is reported through
`on_failed` (the runtime emits `jira.ack_failed`), never raised into the drain. The
poller ignores these comments: they carry the marker and come from the-loop's account.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from loop_dispatch import WorkItemRef

__all__ = ["JiraAcks", "give_up_text"]

Post = Callable[[WorkItemRef, str], str]  # JiraSource.post_comment


def give_up_text(seq: int, reason: str, comment_id: str) -> str:
    return (
        f"could not hand comment {comment_id} to the agent and gave up ({reason}). An "
        f"operator can see why with `the-loop inbox list --given-up` and retry it with "
        f"`the-loop inbox retry {seq}` once the cause is fixed."
    )


class JiraAcks:
    """Posts acknowledgements for Jira items; `close()` posts what is queued first."""

    def __init__(self, post: Post, on_failed: Callable[[str, str], None] | None = None) -> None:
        self._post = post
        self._on_failed = on_failed
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="the-loop-jira-acks")
        self.posted = 0

    def on_settled(self, settlement: Any) -> None:
        """The drain's callback: a given-up Jira comment gets a marked reply."""
        entry = settlement.entry
        event = entry.event
        if event is None or event.work_item.source != "jira" or not event.comment_id:
            return
        if settlement.state != "given_up":
            return
        outcome = settlement.outcome
        reason = (outcome.reason if outcome is not None else "") or "unreadable"
        self._queue(event.work_item, give_up_text(entry.seq, reason, event.comment_id))

    def acknowledge(self, ref: WorkItemRef, comment_id: str, ok: bool, reply: str) -> None:
        """A control word's answer on its item (the tracker-side acknowledgement seam)."""
        verdict = "done" if ok else "refused"
        self._queue(ref, f"{verdict} (comment {comment_id}): {' '.join(reply.split())[:500]}")

    def _queue(self, ref: WorkItemRef, text: str) -> None:
        with contextlib.suppress(RuntimeError):  # closed: nothing more is posted
            self._pool.submit(self._send, ref, text)

    def _send(self, ref: WorkItemRef, text: str) -> None:
        try:
            self._post(ref, text)
        except Exception as exc:  # never let the worker die; say what failed
            if self._on_failed is not None:
                with contextlib.suppress(Exception):
                    self._on_failed(str(ref), " ".join(str(exc).split())[:300])
            return
        self.posted += 1

    def close(self) -> None:
        self._pool.shutdown(wait=True)
