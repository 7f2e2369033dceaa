"""Webhook payloads to dispatch Events, or a reason to ignore them.

Raises `PayloadError` (answered 400) only for a delivery we should handle that lacks a
field we need; anything we do not act on is `Ignored` with a reason (answered 202),
because GitHub sends many event types and a webhook may be subscribed to all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from loop_dispatch import Event, EventKind, WorkItemRef, comment_delivery_id

from ..github.parse import (
    ParseError,
    carries_marker,
    closed_delivery_id,
    opened_delivery_id,
    parse_comment,
    parse_issue,
    source_name,
)
from . import pulls

__all__ = ["HANDLED", "Ignored", "PayloadError", "Rules", "to_event"]

# The event types to subscribe the webhook to (docs/github.md).
PR_KINDS = frozenset(
    {
        "pull_request",
        "pull_request_review",
        "pull_request_review_comment",
        "check_run",
        "check_suite",
    }
)
HANDLED = frozenset({"issues", "issue_comment"}) | PR_KINDS


class PayloadError(ValueError):
    """A payload missing what its event type must carry; the message names the field."""


@dataclass(frozen=True)
class Ignored:
    reason: str


@dataclass(frozen=True)
class Rules:
    """Who and what counts. Logins compare case-insensitively, like GitHub's."""

    trigger_label: str
    authorized_actors: frozenset[str]
    own_login: str | None = None
    repositories: frozenset[str] | None = None  # None: any repository
    session_per_pr: bool = False  # an unlinked PR is its own work item
    # Does this item have an active session? An unlinked PR that has one of its own
    # (labeled, or `sessions start`) keeps hearing its activity, as via the poller.
    has_session: Callable[[WorkItemRef], bool] | None = None

    @classmethod
    def build(
        cls,
        trigger_label: str,
        authorized_actors: Iterable[str],
        own_login: str | None = None,
        repositories: Iterable[str] | None = None,
        session_per_pr: bool = False,
        has_session: Callable[[WorkItemRef], bool] | None = None,
    ) -> Rules:
        return cls(
            trigger_label=trigger_label,
            authorized_actors=frozenset(a.lower() for a in authorized_actors),
            own_login=own_login.lower() if own_login else None,
            repositories=frozenset(r.lower() for r in repositories) if repositories else None,
            session_per_pr=session_per_pr,
            has_session=has_session,
        )


def _repository(payload: dict[str, Any]) -> str:
    repo = payload.get("repository")
    name = repo.get("full_name") if isinstance(repo, dict) else None
    if not isinstance(name, str) or name.count("/") != 1:
        raise PayloadError("repository.full_name: expected OWNER/REPO")
    return name


def _ref(repository: str, number: int) -> WorkItemRef:
    try:
        return WorkItemRef("github", repository, number)
    except ValueError as exc:
        raise PayloadError(f"repository.full_name: {exc}") from None


def _sender(payload: dict[str, Any]) -> str:
    sender = payload.get("sender")
    login = sender.get("login") if isinstance(sender, dict) else None
    return login if isinstance(login, str) else ""


def to_event(kind: str, payload: Any, rules: Rules) -> Event | Ignored:
    """The Event a delivery of GitHub event type `kind` stands for."""
    if not isinstance(payload, dict):
        raise PayloadError("body: expected a JSON object")
    action = payload.get("action")
    if kind not in HANDLED:
        return Ignored(f"event type {kind!r} is not handled")
    if not isinstance(action, str):
        raise PayloadError("action: expected a string")
    repository = _repository(payload)
    if rules.repositories is not None and repository.lower() not in rules.repositories:
        return Ignored(f"repository {repository} is not configured")
    try:
        if kind in PR_KINDS:
            return pulls.to_event(kind, action, payload, repository, rules)
        issue = parse_issue(payload.get("issue"), "issue")
        if kind == "issue_comment":
            if issue.is_pr:
                return pulls.pr_issue_comment(action, payload, repository, issue, rules)
            return _comment(action, payload, repository, issue.number, rules)
        if issue.is_pr:
            return Ignored("issues events of pull requests are handled as pull_request")
        return _issue(action, payload, repository, issue, rules)
    except ParseError as exc:
        raise PayloadError(str(exc)) from None


def _comment(
    action: str, payload: dict[str, Any], repository: str, number: int, rules: Rules
) -> Event | Ignored:
    if action != "created":
        return Ignored(f"issue_comment action {action!r} is not handled")
    comment = parse_comment(payload.get("comment"), "comment", issue_number=number)
    author = comment.author.lower()
    if rules.own_login and author == rules.own_login:
        return Ignored("comment written by the-loop's own account")
    if carries_marker(comment.body):
        return Ignored("comment carries the-loop's marker")
    if author not in rules.authorized_actors:
        return Ignored(f"{comment.author} is not an authorized actor")
    return Event(
        delivery_id=comment_delivery_id(source_name(repository), str(comment.id)),
        work_item=_ref(repository, number),
        kind=EventKind.COMMENT,
        actor=comment.author,
        body=comment.body,
        url=comment.url,
        created_at=comment.created_at,
        comment_id=str(comment.id),
    )


def _issue(
    action: str, payload: dict[str, Any], repository: str, issue: Any, rules: Rules
) -> Event | Ignored:
    ref = _ref(repository, issue.number)
    if action == "labeled":
        label = payload.get("label")
        name = label.get("name") if isinstance(label, dict) else None
        if not isinstance(name, str):
            raise PayloadError("label.name: expected a string")
        if name != rules.trigger_label:
            return Ignored(f"label {name!r} is not the trigger label")
        if issue.state != "open":
            return Ignored("labeled item is closed")
        body = issue.title if not issue.body else f"{issue.title}\n\n{issue.body}"
        return Event(
            delivery_id=opened_delivery_id(repository, issue.number),
            work_item=ref,
            kind=EventKind.OPENED,
            actor=issue.author,
            body=body,
            url=issue.url,
            created_at=issue.updated_at,
        )
    if action == "closed":
        return Event(
            delivery_id=closed_delivery_id(repository, issue.number, issue.closed_at),
            work_item=ref,
            kind=EventKind.CLOSED,
            actor=_sender(payload),
            body="",
            url=issue.url,
            created_at=issue.closed_at or issue.updated_at,
        )
    return Ignored(f"issues action {action!r} is not handled")
