"""What the receiver's `/jira-webhook` route does with a signed Jira delivery.

A Jira webhook's body is never trusted for content: only the issue key and the
comment id are read from it, and both are fetched again from Jira's REST API with
the-loop's own credential (a forged or replayed body can at most make the-loop look
something up). The event is then built by the same rules and with the same delivery
id (`comment:jira:SITE:<id>`) as the poller's, so a comment seen by both runs once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loop_dispatch import Event, WorkItemRef

from .client import JiraClient, NotFound
from .parse import ISSUE_FIELDS, ParseError, issue_ref, parse_comment, parse_issue
from .source import JiraRules, counted_event

__all__ = ["HookError", "JiraRefetch", "hook_ids"]

# Only a new comment is a prompt: an edit (`comment_updated`) of a comment written
# before the item was watched, or already run, must never reach the agent again.
COMMENT_EVENTS = frozenset({"comment_created"})


class HookError(ValueError):
    """A delivery body the route cannot use (400, one line)."""


def hook_ids(payload: Any) -> tuple[str, str] | None:
    """(issue key, comment id) of a `comment_created` delivery; None for another kind of
    event, an edit included (answered 202 ignored). Nothing else of the body is read."""
    if not isinstance(payload, dict):
        raise HookError("body is not a JSON object")
    kind = payload.get("webhookEvent")
    if kind not in COMMENT_EVENTS:
        return None
    issue, comment = payload.get("issue"), payload.get("comment")
    key = issue.get("key") if isinstance(issue, dict) else None
    comment_id = comment.get("id") if isinstance(comment, dict) else None
    if not isinstance(key, str) or not isinstance(comment_id, str) or not comment_id.isdigit():
        raise HookError("issue.key and comment.id (a numeric string) are required")
    if len(key) > 120 or len(comment_id) > 30:
        raise HookError("issue.key or comment.id is too long")
    return key, comment_id


@dataclass
class Refetched:
    """The re-fetched comment as an event, or why it is not one."""

    event: Event | None
    reason: str = ""


class JiraRefetch:
    """Fetch the issue and comment a delivery names and apply the poller's rules.

    Thread-safe enough for the receiver's accept threads: the own account is read once
    under a lock, and httpx's client is safe to share."""

    def __init__(
        self,
        client: JiraClient,
        site: str,
        projects: list[str],
        trigger_label: str,
        authorized_actors: list[str],
        has_session: Callable[[WorkItemRef], bool] | None = None,
    ) -> None:
        self.client = client
        self.site = site.lower()
        self.projects = {p.upper() for p in projects}
        self.trigger_label = trigger_label
        self.authorized_actors = list(authorized_actors)
        self.has_session = has_session or (lambda ref: False)
        self._own: str | None = None
        self._lock = threading.Lock()

    def own(self) -> str:
        with self._lock:
            if self._own is None:
                me = self.client.get("myself")
                account = (me.get("accountId") or me.get("key")) if isinstance(me, dict) else None
                if not isinstance(account, str) or not account:
                    raise ParseError("jira GET myself: Jira left out 'accountId'")
                self._own = f"jira:{account}"
            return self._own

    def __call__(self, key: str, comment_id: str) -> Refetched:
        """Raises JiraError (Jira did not answer: 503, Jira redelivers), ParseError, or
        HookError (the body names no issue key: 400, nothing is asked of Jira)."""
        try:
            ref = issue_ref(self.site, key)
        except ParseError as exc:
            raise HookError(str(exc)) from None
        if ref.project.partition("/")[2] not in self.projects:
            return Refetched(None, f"{ref.jira_key} is not in a watched project")
        try:
            issue = parse_issue(
                self.client.get(f"issue/{ref.jira_key}", {"fields": ISSUE_FIELDS}), self.site
            )
            comment = parse_comment(
                self.client.get(f"issue/{ref.jira_key}/comment/{comment_id}"), ref.jira_key
            )
        except NotFound:
            return Refetched(None, "the issue or comment is gone or not visible")
        session = self.has_session(issue.ref)
        if not session and (issue.done or self.trigger_label not in issue.labels):
            return Refetched(None, f"{issue.key} is not watched (label or session)")
        rules = JiraRules.build(self.trigger_label, self.authorized_actors, self.own())
        event, why = counted_event(self.site, issue, comment, self.client.base_url, rules)
        if event is None:
            return Refetched(None, f"comment {why}")
        return Refetched(event)
