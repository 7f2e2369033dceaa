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
    "CheckInfo",
    "CommentInfo",
    "IssueInfo",
    "ParseError",
    "ReviewCommentInfo",
    "ReviewInfo",
    "carries_marker",
    "check_delivery_id",
    "closed_delivery_id",
    "opened_delivery_id",
    "parse_check",
    "parse_comment",
    "parse_issue",
    "parse_review",
    "parse_review_comment",
    "parse_status",
    "parse_time",
    "pr_closed_delivery_id",
    "pr_opened_delivery_id",
    "review_comment_delivery_id",
    "review_delivery_id",
    "source_name",
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
    is_pr: bool = False  # the issues API lists pull requests too
    state_reason: str = ""  # "reopened" once an issue was closed and opened again
    closed_by: str = ""  # only a single issue's GET (and the webhook's sender) say it


@dataclass(frozen=True)
class CommentInfo:
    id: int
    issue_number: int
    author: str
    body: str
    url: str
    created_at: datetime
    updated_at: datetime


def source_name(repository: str) -> str:
    """The `source` part of a GitHub comment's delivery id: `github:OWNER/REPO`."""
    return f"github:{repository.lower()}"


def opened_delivery_id(repository: str, number: int, again: datetime | None = None) -> str:
    """One opening per item: the poller and the webhook derive the same id. `again`:
    the time a reopened item was labeled again (a new opening, a new id)."""
    base = f"opened:github:{repository.lower()}#{number}"
    return base if again is None else f"{base}:{_stamp(again)}"


def closed_delivery_id(repository: str, number: int, closed_at: datetime | None) -> str:
    """One id per closing (a reopened and re-closed item closes again)."""
    stamp = closed_at.strftime("%Y%m%dT%H%M%SZ") if closed_at else "unknown"
    return f"closed:github:{repository.lower()}#{number}:{stamp}"


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
        is_pr=isinstance(obj.get("pull_request"), dict),
        state_reason=_str(obj, "state_reason", what, optional=True)
        if isinstance(obj.get("state_reason"), str)
        else "",
        closed_by=_closed_by(obj),
    )


def _closed_by(obj: dict[str, Any]) -> str:
    user = obj.get("closed_by")
    login = user.get("login") if isinstance(user, dict) else None
    return login if isinstance(login, str) else ""


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


# -- pull requests, reviews and checks ---------------------------------------------------
# Delivery ids are derived from GitHub's own ids, so the webhook and the poller agree.


def _stamp(moment: datetime | None) -> str:
    return moment.strftime("%Y%m%dT%H%M%SZ") if moment else "unknown"


def pr_opened_delivery_id(repository: str, number: int) -> str:
    return f"pr-opened:github:{repository.lower()}#{number}"


def pr_closed_delivery_id(repository: str, number: int, closed_at: datetime | None) -> str:
    return f"pr-closed:github:{repository.lower()}#{number}:{_stamp(closed_at)}"


def review_delivery_id(repository: str, review_id: int) -> str:
    return f"review:github:{repository.lower()}:{review_id}"


def review_comment_delivery_id(repository: str, comment_id: int) -> str:
    return f"review-comment:github:{repository.lower()}:{comment_id}"


def check_delivery_id(repository: str, what: str, check_id: int, conclusion: str) -> str:
    """`what` is `run` or `suite`; a re-run that fails again is a new check id."""
    return f"check-{what}:github:{repository.lower()}:{check_id}:{conclusion}"


@dataclass(frozen=True)
class ReviewInfo:
    id: int
    pr_number: int
    author: str
    body: str
    state: str  # approved | changes_requested | commented | dismissed
    url: str
    submitted_at: datetime


@dataclass(frozen=True)
class ReviewCommentInfo:
    id: int
    pr_number: int
    author: str
    body: str
    path: str
    line: int | None
    url: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class CheckInfo:
    id: int
    what: str  # run | suite | status
    name: str
    conclusion: str
    head_branch: str
    head_sha: str
    pr_numbers: tuple[int, ...]
    url: str
    completed_at: datetime
    # The PRs among `pr_numbers` whose head is in the repository itself (head.repo ==
    # base.repo): only their results are routed by the webhook (issue 20).
    own_pr_numbers: tuple[int, ...] = ()


def _number_from_url(url: str, what: str) -> int:
    tail = url.rstrip("/").rsplit("/", 1)[-1]
    if not tail.isdigit() or tail.startswith("0"):
        raise ParseError(f"{what}: does not end in a pull request number")
    return int(tail)


def parse_review(obj: Any, pr_number: int, what: str = "review") -> ReviewInfo:
    if not isinstance(obj, dict):
        raise ParseError(f"{what}: expected an object")
    return ReviewInfo(
        id=_int(obj, "id", what),
        pr_number=pr_number,
        author=_login(obj, what),
        body=_str(obj, "body", what, optional=True),
        state=_str(obj, "state", what).lower(),
        url=_str(obj, "html_url", what, optional=True),
        submitted_at=parse_time(obj.get("submitted_at"), f"{what}.submitted_at"),
    )


def parse_review_comment(
    obj: Any, what: str = "comment", pr_number: int | None = None
) -> ReviewCommentInfo:
    """A review comment (on a line of a PR's diff); its PR from `pull_request_url`."""
    if not isinstance(obj, dict):
        raise ParseError(f"{what}: expected an object")
    if pr_number is None:
        pr_number = _number_from_url(
            _str(obj, "pull_request_url", what), f"{what}.pull_request_url"
        )
    line = obj.get("line") if obj.get("line") is not None else obj.get("original_line")
    return ReviewCommentInfo(
        id=_int(obj, "id", what),
        pr_number=pr_number,
        author=_login(obj, what),
        body=_str(obj, "body", what, optional=True),
        path=_str(obj, "path", what, optional=True),
        line=line if isinstance(line, int) and not isinstance(line, bool) else None,
        url=_str(obj, "html_url", what, optional=True),
        created_at=parse_time(obj.get("created_at"), f"{what}.created_at"),
        updated_at=parse_time(obj.get("updated_at"), f"{what}.updated_at"),
    )


def parse_check(obj: Any, what: str) -> CheckInfo:
    """A completed check run (`what` = "check_run") or check suite ("check_suite")."""
    if not isinstance(obj, dict):
        raise ParseError(f"{what}: expected an object")
    suite = obj.get("check_suite") if what == "check_run" else obj
    if not isinstance(suite, dict):
        raise ParseError(f"{what}.check_suite: expected an object")
    prs = obj.get("pull_requests") or []
    if not isinstance(prs, list):
        raise ParseError(f"{what}.pull_requests: expected a list")
    listed = [
        p
        for p in prs
        if isinstance(p, dict) and isinstance(p.get("number"), int) and p["number"] > 0
    ]
    numbers = tuple(p["number"] for p in listed)
    own = tuple(p["number"] for p in listed if _head_is_base(p))
    app = obj.get("app") if what == "check_suite" else None
    name = obj.get("name") if what == "check_run" else (app or {}).get("name")
    completed = obj.get("completed_at") if what == "check_run" else obj.get("updated_at")
    return CheckInfo(
        id=_int(obj, "id", what),
        what="run" if what == "check_run" else "suite",
        name=name if isinstance(name, str) else "",
        conclusion=_str(obj, "conclusion", what, optional=True).lower(),
        head_branch=_str(suite, "head_branch", what, optional=True),
        head_sha=_str(obj, "head_sha", what, optional=True),
        pr_numbers=numbers,
        own_pr_numbers=own,
        url=_str(obj, "html_url", what, optional=True)
        or _str(obj, "details_url", what, optional=True),
        completed_at=parse_time(completed, f"{what}.completed_at"),
    )


def parse_status(obj: Any, sha: str, what: str = "status") -> CheckInfo:
    """A commit status (`GET .../commits/REF/status` lists the latest per context):
    its context is its name, its state (`failure`, `error`, `success`, `pending`) its
    conclusion."""
    if not isinstance(obj, dict):
        raise ParseError(f"{what}: expected an object")
    updated = obj.get("updated_at") or obj.get("created_at")
    return CheckInfo(
        id=_int(obj, "id", what),
        what="status",
        name=_str(obj, "context", what, optional=True),
        conclusion=_str(obj, "state", what, optional=True).lower(),
        head_branch="",
        head_sha=sha,
        pr_numbers=(),
        url=_str(obj, "target_url", what, optional=True),
        completed_at=parse_time(updated, f"{what}.updated_at"),
    )


def _head_is_base(pr: dict[str, Any]) -> bool:
    """A check payload's PR entry whose head repository is its base repository (by id,
    else by API url); unknown is not."""

    def repo(side: str) -> Any:
        part = pr.get(side)
        found = part.get("repo") if isinstance(part, dict) else None
        return found if isinstance(found, dict) else {}

    head, base = repo("head"), repo("base")
    for key in ("id", "url"):
        if head.get(key) is not None and base.get(key) is not None:
            return bool(head[key] == base[key])
    return False
