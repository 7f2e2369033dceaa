"""GitHub JSON (REST listings and webhook payloads) to plain values.

Both the poller and the webhook read the same objects (an issue, a comment); parsing
them in one place keeps the two paths agreeing on delivery ids and on who wrote what.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

__all__ = [
    "MARKER_RE",
    "CommentInfo",
    "IssueInfo",
    "ParseError",
    "carries_marker",
    "parse_comment",
    "parse_issue",
    "parse_time",
]

# the-loop marks what it writes with a hidden HTML comment; such a comment is never a
# prompt, even when its author is an authorized human account.
MARKER = "<!-- the-loop -->"
MARKER_RE = re.compile(r"<!--\s*the-loop\b")


class ParseError(ValueError):
    """A GitHub object lacking a field we need; the message names the field."""


@dataclass(frozen=True)
class IssueInfo:
    number: int
    title: str
    body: str
    author: str
    labels: frozenset[str]
    state: str
    url: str
    created_at: datetime
    updated_at: datetime
    closed_at: datetime | None


@dataclass(frozen=True)
class CommentInfo:
    id: int
    issue_number: int
    author: str
    body: str
    url: str
    created_at: datetime
    updated_at: datetime


def carries_marker(body: str) -> bool:
    return bool(MARKER_RE.search(body or ""))


def parse_time(value: Any, what: str) -> datetime:
    """GitHub's `2026-01-01T12:00:00Z` (Python 3.10's fromisoformat rejects the Z)."""
    if not isinstance(value, str):
        raise ParseError(f"{what}: expected an ISO 8601 time")
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ParseError(f"{what}: not an ISO 8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment


def _str(obj: dict[str, Any], key: str, what: str, *, optional: bool = False) -> str:
    value = obj.get(key)
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise ParseError(f"{what}.{key}: expected a string")
    return value


def _int(obj: dict[str, Any], key: str, what: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ParseError(f"{what}.{key}: expected a positive integer")
    return value


def _login(obj: dict[str, Any], what: str) -> str:
    user = obj.get("user")
    if not isinstance(user, dict):
        raise ParseError(f"{what}.user: expected an object")
    return _str(user, "login", f"{what}.user")


def parse_issue(obj: Any, what: str = "issue") -> IssueInfo:
    if not isinstance(obj, dict):
        raise ParseError(f"{what}: expected an object")
    labels = obj.get("labels") or []
    if not isinstance(labels, list):
        raise ParseError(f"{what}.labels: expected a list")
    names = frozenset(
        label["name"]
        for label in labels
        if isinstance(label, dict) and isinstance(label.get("name"), str)
    )
    closed = obj.get("closed_at")
    return IssueInfo(
        number=_int(obj, "number", what),
        title=_str(obj, "title", what),
        body=_str(obj, "body", what, optional=True),
        author=_login(obj, what),
        labels=names,
        state=_str(obj, "state", what),
        url=_str(obj, "html_url", what, optional=True),
        created_at=parse_time(obj.get("created_at"), f"{what}.created_at"),
        updated_at=parse_time(obj.get("updated_at"), f"{what}.updated_at"),
        closed_at=parse_time(closed, f"{what}.closed_at") if closed else None,
    )


def issue_number_from_url(url: str, what: str) -> int:
    tail = url.rstrip("/").rsplit("/", 1)[-1]
    if not tail.isdigit() or tail.startswith("0"):
        raise ParseError(f"{what}.issue_url: does not end in an issue number")
    return int(tail)


def parse_comment(obj: Any, what: str = "comment", issue_number: int | None = None) -> CommentInfo:
    """A comment; its issue number comes from `issue_url` unless the caller knows it."""
    if not isinstance(obj, dict):
        raise ParseError(f"{what}: expected an object")
    if issue_number is None:
        issue_number = issue_number_from_url(_str(obj, "issue_url", what), what)
    return CommentInfo(
        id=_int(obj, "id", what),
        issue_number=issue_number,
        author=_login(obj, what),
        body=_str(obj, "body", what, optional=True),
        url=_str(obj, "html_url", what, optional=True),
        created_at=parse_time(obj.get("created_at"), f"{what}.created_at"),
        updated_at=parse_time(obj.get("updated_at"), f"{what}.updated_at"),
    )
