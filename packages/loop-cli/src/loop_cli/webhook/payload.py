"""Webhook payloads to dispatch Events, or a reason to ignore them.

Raises `PayloadError` (answered 400) only for a delivery we should handle that lacks a
field we need; anything we do not act on is `Ignored` with a reason (answered 202),
because GitHub sends many event types and a webhook may be subscribed to all of them.
"""

from __future__ import annotations

from typing import Any

from loop_dispatch import Event, WorkItemRef

from ..github.parse import ParseError, parse_comment, parse_issue
from ..github.rules import Ignored, Rules, closed_event, comment_event, opened_event
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


def _repository(payload: dict[str, Any]) -> str:
    repo = payload.get("repository")
    name = repo.get("full_name") if isinstance(repo, dict) else None
    if not isinstance(name, str) or name.count("/") != 1:
        raise PayloadError("repository.full_name: expected OWNER/REPO")
    return name


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
    if not rules.watches(repository):
        return Ignored(f"repository {repository} is not configured")
    try:
        if kind in PR_KINDS:
            return pulls.to_event(kind, action, payload, repository, rules)
        issue = parse_issue(payload.get("issue"), "issue")
        if kind == "issue_comment":
            if issue.is_pr:
                return pulls.pr_issue_comment(action, payload, repository, issue, rules)
            return _comment(action, payload, repository, issue, rules)
        if issue.is_pr:
            return Ignored("issues events of pull requests are handled as pull_request")
        return _issue(action, payload, repository, issue, rules)
    except ParseError as exc:
        raise PayloadError(str(exc)) from None
    except ValueError as exc:  # a ref that could not be read back (RefError)
        raise PayloadError(f"issue.number / repository.full_name: {exc}") from None


def _comment(
    action: str, payload: dict[str, Any], repository: str, issue: Any, rules: Rules
) -> Event | Ignored:
    if action != "created":
        return Ignored(f"issue_comment action {action!r} is not handled")
    comment = parse_comment(payload.get("comment"), "comment", issue_number=issue.number)
    event = comment_event(repository, comment, rules, spawns=issue.state == "open")
    if isinstance(event, Event) and not _watched(issue, event.work_item, rules):
        # Only the label (or `sessions start`) takes an item on, as via the poller.
        return Ignored(
            f"issue #{issue.number} is not watched (no open {rules.trigger_label!r} label, "
            "no active session)"
        )
    return event


def _watched(issue: Any, ref: WorkItemRef, rules: Rules) -> bool:
    """Open and carrying the trigger label, or an item with an active session."""
    if issue.state == "open" and rules.trigger_label in issue.labels:
        return True
    return rules.has_session is not None and rules.has_session(ref)


def _sender(payload: dict[str, Any]) -> str:
    """Who did it (a closing's actor); "" when the payload does not say."""
    sender = payload.get("sender")
    login = sender.get("login") if isinstance(sender, dict) else None
    return login if isinstance(login, str) else ""


def _issue(
    action: str, payload: dict[str, Any], repository: str, issue: Any, rules: Rules
) -> Event | Ignored:
    if action == "labeled":
        label = payload.get("label")
        name = label.get("name") if isinstance(label, dict) else None
        if not isinstance(name, str):
            raise PayloadError("label.name: expected a string")
        if name != rules.trigger_label:
            return Ignored(f"label {name!r} is not the trigger label")
        if issue.state != "open":
            return Ignored("labeled item is closed")
        return opened_event(repository, issue)
    if action == "closed":
        return closed_event(repository, issue, _sender(payload), rules)
    return Ignored(f"issues action {action!r} is not handled")
