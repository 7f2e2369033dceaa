"""Reactions on the triggering comment, so the commenter sees their words arrived.

`eyes` once the comment is delivered to the agent, `rocket` after it when the harness
confirms its conversation holds the text (receipts); `confused` plus one short comment
(naming the reason and the operator's remedy, marked so the-loop never reads it back as
a prompt) when it is given up. Review summaries have no reactions on GitHub: they get
none.

The drain calls `Reactor.on_settled` from its worker right after a settle; that call
only queues (never blocks, never raises: a full queue drops the reaction and counts
it). One background thread posts in queue order, each call tried at most `attempts`
times with backoff for a 5xx, a timeout or a rate limit; a 404/422 (a deleted comment,
a locked issue) is not retried. A delivery never waits for GitHub.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loop_dispatch import EventKind

from ..acknowledge import Answer, control_answer
from .client import GitHubError, PermanentError
from .parse import MARKER

__all__ = ["EYES", "Reaction", "Reactor", "jobs_for"]

log = logging.getLogger(__name__)

EYES = "eyes"
ROCKET = "rocket"
CONFUSED = "confused"
PLUS_ONE = "+1"
REVIEW_COMMENT_PREFIX = "review-comment:"


@dataclass(frozen=True)
class Reaction:
    """One call: a reaction on a comment, or a comment on an issue/PR."""

    path: str
    body: dict[str, str]
    what: str  # for the log and the event: "eyes", "confused", "comment"


def _comment_path(repository: str, comment_id: str) -> str | None:
    if comment_id.startswith(REVIEW_COMMENT_PREFIX):
        number = comment_id[len(REVIEW_COMMENT_PREFIX) :]
        kind = "pulls"
    else:
        number, kind = comment_id, "issues"
    if not number.isdigit():
        return None
    return f"repos/{repository}/{kind}/comments/{number}/reactions"


def _issue_number(url: str) -> int | None:
    """The issue or PR number in a comment's html_url (`.../issues/7#...`, `.../pull/7#...`)."""
    path = url.split("#", 1)[0].rstrip("/")
    tail = path.rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else None


def jobs_for(settlement: Any) -> list[Reaction]:
    """What to post for one settled inbox entry (nothing for non-GitHub comments)."""
    entry = settlement.entry
    event = entry.event
    if event is None or not event.comment_id or event.work_item.source != "github":
        return []
    repository = event.work_item.project
    path = _comment_path(repository, event.comment_id)
    if path is None:
        return []
    outcome = settlement.outcome
    answer = control_answer(settlement, reply_when_ok=False)
    if answer is not None:
        return _control_jobs(path, repository, event.url, answer)
    if event.kind is EventKind.CONTROL and settlement.state == "done":
        return []  # a command is never "delivered": no eyes
    if settlement.state == "done" and outcome is not None and outcome.kind.value == "processed":
        jobs = [Reaction(path, {"content": EYES}, EYES)]
        if getattr(outcome, "confirmed", False):  # the agent's conversation holds it
            jobs.append(Reaction(path, {"content": ROCKET}, ROCKET))
        return jobs
    if settlement.state != "given_up":
        return []
    jobs = [Reaction(path, {"content": CONFUSED}, CONFUSED)]
    number = _issue_number(event.url)
    if number is not None:
        reason = (outcome.reason if outcome is not None else "") or "unreadable"
        text = (
            f"{MARKER}\nThe-loop could not hand this comment to the agent and gave up "
            f"(`{reason}`). An operator can see why with `the-loop inbox list --given-up` "
            f"and retry it with `the-loop inbox retry {entry.seq}` once the cause is fixed."
        )
        jobs.append(
            Reaction(f"repos/{repository}/issues/{number}/comments", {"body": text}, "comment")
        )
    return jobs


def _control_jobs(path: str, repository: str, url: str, answer: Answer) -> list[Reaction]:
    """A control word's answer (acknowledge.py): `+1` when executed, `confused` when
    refused; the reply (the reason and the remedy, or `status`) as one marked comment."""
    content = PLUS_ONE if answer.ok else CONFUSED
    jobs = [Reaction(path, {"content": content}, content)]
    number = _issue_number(url)
    if answer.reply and number is not None:
        text = f"{MARKER}\n{answer.reply}"
        jobs.append(
            Reaction(f"repos/{repository}/issues/{number}/comments", {"body": text}, "comment")
        )
    return jobs


class Reactor:
    """Posts reactions off the delivery path; `close()` stops its thread."""

    def __init__(
        self,
        post: Callable[[str, dict[str, str]], Any],
        *,
        max_queue: int = 1000,
        attempts: int = 3,
        backoff: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
        on_result: Callable[[Reaction, str], None] | None = None,
    ) -> None:
        self._post = post
        self._queue: queue.Queue[Reaction | None] = queue.Queue(maxsize=max_queue)
        self.attempts = attempts
        self.backoff = backoff
        self._sleep = sleep
        self._on_result = on_result
        self.dropped = 0
        self.posted = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name="the-loop-reactions", daemon=True)
        self._thread.start()

    def on_settled(self, settlement: Any) -> None:
        """The drain's callback: queue, never wait."""
        try:
            jobs = jobs_for(settlement)
        except Exception:  # a malformed entry must not reach the drain
            return
        for job in jobs:
            try:
                self._queue.put_nowait(job)
            except queue.Full:
                self.dropped += 1

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                self._attempt(job)
            finally:
                self._queue.task_done()

    def _attempt(self, job: Reaction) -> None:
        for attempt in range(1, self.attempts + 1):
            try:
                self._post(job.path, job.body)
            except PermanentError as exc:
                self._result(job, f"refused: {exc}")
                return
            except GitHubError as exc:
                if attempt == self.attempts:
                    self._result(job, f"gave up: {exc}")
                    return
                self._sleep(self.backoff * 2 ** (attempt - 1))
            except Exception as exc:  # never let the thread die
                self._result(job, f"error: {type(exc).__name__}")
                return
            else:
                self.posted += 1
                self._result(job, "posted")
                return

    def _result(self, job: Reaction, result: str) -> None:
        if result != "posted":
            self.failed += 1
            log.warning("reaction %s on %s: %s", job.what, job.path, result)
        if self._on_result is not None:
            with contextlib.suppress(Exception):
                self._on_result(job, result)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued so far is posted or given up (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self._queue.unfinished_tasks

    def close(self, timeout: float = 5.0) -> None:
        """Post what is queued (bounded by `timeout`), then stop the thread."""
        self.flush(timeout)
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        self._thread.join(timeout)
