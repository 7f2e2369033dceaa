"""Jira's JSON, checked: an issue or comment as the-loop needs it, or one clear line.

A field Jira leaves out (a stripped-down proxy, another Jira version, a permission that
hides it) is a ParseError naming the issue and the field, never a KeyError traceback.
Cloud names people by `accountId`; Data Center by the user `key` (its stable id), which
stands in for it: either way the actor is `jira:<id>`, as `authorizedActors` lists it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from loop_dispatch import WorkItemRef, comment_delivery_id

from .adf import to_text

__all__ = [
    "MARKER",
    "JiraComment",
    "JiraIssue",
    "ParseError",
    "actor_of",
    "carries_marker",
    "closed_delivery_id",
    "comment_delivery",
    "issue_ref",
    "opened_delivery_id",
    "parse_comment",
    "parse_issue",
    "parse_time",
    "stamp",
]

MARKER = "[the-loop]"
_MARKER_RE = re.compile(r"^\s*\[the-loop\]")
_KEY_RE = re.compile(r"([A-Za-z][A-Za-z0-9_]*)-([1-9][0-9]{0,9})")
ISSUE_FIELDS = "summary,status,labels,updated,created,reporter,description"


class ParseError(ValueError):
    """Jira's answer lacks a field the-loop needs, or holds a wrong type there."""


@dataclass(frozen=True)
class JiraIssue:
    ref: WorkItemRef
    key: str
    summary: str
    description: str
    labels: frozenset[str]
    done: bool  # the status's category is Done: the item is closed
    updated: datetime
    updated_raw: str  # Jira's own spelling, compared as is between cycles
    created: datetime
    reporter: str  # jira:<id>, "" when Jira does not say


@dataclass(frozen=True)
class JiraComment:
    id: str
    author: str  # jira:<id>
    body: str  # plain text (ADF rendered)
    created: datetime
    updated: datetime
    editor: str = ""  # jira:<id> of who last edited it (updateAuthor); "" when Jira does not say


def parse_time(value: Any, what: str) -> datetime:
    """Jira's `2026-12-03T23:10:00.000+0000` (or ISO with a colon in the offset)."""
    if not isinstance(value, str):
        raise ParseError(f"{what}: expected a time string")
    for pattern in ("%Y-%m-%dT%H:%M:%S.%f%z", "%Y-%m-%dT%H:%M:%S%z"):
        try:
            return datetime.strptime(value, pattern).astimezone(timezone.utc)
        except ValueError:
            continue
    raise ParseError(f"{what}: {value[:40]!r} is not a Jira time")


def stamp(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def actor_of(user: Any) -> str:
    """`jira:<accountId>` (Cloud) or `jira:<key>` (Data Center); "" when absent."""
    if not isinstance(user, dict):
        return ""
    for field in ("accountId", "key", "name"):
        value = user.get(field)
        if isinstance(value, str) and value:
            return f"jira:{value}"
    return ""


def carries_marker(text: str) -> bool:
    """Does this text start with the-loop's marker (an acknowledgement it wrote)?"""
    return bool(_MARKER_RE.match(text or ""))


def issue_ref(site: str, key: str) -> WorkItemRef:
    """`KEY-N` on `site` as a ref; ParseError for something that is no issue key."""
    m = _KEY_RE.fullmatch(key) if isinstance(key, str) else None
    if not m:
        raise ParseError(f"{str(key)[:40]!r} is not a Jira issue key (KEY-N)")
    try:
        return WorkItemRef("jira", f"{site}/{m.group(1)}", int(m.group(2)))
    except ValueError as exc:
        raise ParseError(str(exc)) from None


def comment_delivery(site: str, comment_id: str) -> str:
    """`comment:jira:SITE:<id>`: the poller and the webhook derive the same one."""
    return comment_delivery_id(f"jira:{site}", comment_id)


def opened_delivery_id(ref: WorkItemRef, when: datetime) -> str:
    """One per opening (labeled while open, or reopened with the label): the issue's
    `updated` time then tells openings apart."""
    return f"opened:{ref}:{stamp(when)}"


def closed_delivery_id(ref: WorkItemRef, when: datetime) -> str:
    return f"closed:{ref}:{stamp(when)}"


def _need(obj: Any, key: str, what: str) -> Any:
    if not isinstance(obj, dict) or key not in obj or obj[key] is None:
        raise ParseError(f"{what}: Jira left out {key!r}")
    return obj[key]


def parse_issue(obj: Any, site: str) -> JiraIssue:
    """An issue of a search or `GET issue/KEY` answer (fields asked: ISSUE_FIELDS)."""
    key = _need(obj, "key", "jira issue")
    ref = issue_ref(site, key)
    what = f"jira issue {ref.jira_key}"
    fields = _need(obj, "fields", what)
    summary = _need(fields, "summary", f"{what} fields")
    status = _need(fields, "status", f"{what} fields")
    category = _need(status, "statusCategory", f"{what} fields.status")
    labels = fields.get("labels") or []
    if not isinstance(summary, str) or not isinstance(labels, list):
        raise ParseError(f"{what}: summary or labels of the wrong type")
    updated_raw = _need(fields, "updated", f"{what} fields")
    return JiraIssue(
        ref=ref,
        key=ref.jira_key,
        summary=summary,
        description=to_text(fields.get("description")),
        labels=frozenset(x for x in labels if isinstance(x, str)),
        done=_need(category, "key", f"{what} fields.status.statusCategory") == "done",
        updated=parse_time(updated_raw, f"{what} fields.updated"),
        updated_raw=str(updated_raw),
        created=parse_time(_need(fields, "created", f"{what} fields"), f"{what} fields.created"),
        reporter=actor_of(fields.get("reporter")),
    )


def parse_comment(obj: Any, key: str) -> JiraComment:
    what = f"jira comment on {key}"
    comment_id = _need(obj, "id", what)
    if not isinstance(comment_id, str) or not comment_id.isdigit():
        raise ParseError(f"{what}: id {str(comment_id)[:30]!r} is not Jira's numeric string")
    what = f"jira comment {comment_id} on {key}"
    author = actor_of(_need(obj, "author", what))
    if not author:
        raise ParseError(f"{what}: the author has no accountId")
    created = parse_time(_need(obj, "created", what), f"{what} created")
    updated_raw = obj.get("updated")
    updated = parse_time(updated_raw, f"{what} updated") if updated_raw else created
    editor = actor_of(obj.get("updateAuthor"))
    return JiraComment(comment_id, author, to_text(obj.get("body")), created, updated, editor)
