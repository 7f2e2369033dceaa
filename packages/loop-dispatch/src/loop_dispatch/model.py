"""Work item references and the events the dispatcher acts on.

A work item is named by a ref string (`github:OWNER/REPO#N`, `local:PROJECT#N` or
`jira:SITE/KEY-N`).
Everything derived from it that reaches tmux (the slug, the session name) must be
injective and tmux-safe, because two tickets sharing a session name would paste one
ticket's comments into the other's agent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from .errors import DispatchError

__all__ = [
    "MAX_NUMBER",
    "Event",
    "EventKind",
    "RefError",
    "WorkItemRef",
    "comment_delivery_id",
]

# GitHub: owner is alphanumerics and single interior hyphens (max 39); a repository name
# is alphanumerics, '.', '_' and '-' (max 100), never '.' or '..'.
_OWNER_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,37}[A-Za-z0-9])?")
_NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,100}")
_NUMBER_RE = re.compile(r"[1-9][0-9]{0,9}")
MAX_NUMBER = 2**31 - 1
"""The largest item number (GitHub's are 32-bit); one bound for writing and reading."""
_GITHUB_RE = re.compile(r"github:([^/#]+)/([^/#]+)#(.+)")
_LOCAL_RE = re.compile(r"local:([^/#]+)#(.+)")
_JIRA_RE = re.compile(r"jira:([^/#]+)/([^/#-]+)-(.+)")
# A Jira site is a DNS host name (`acme.atlassian.net`, `jira.example.com`), canonical
# lower case; a project key is a letter then letters, digits or '_' (Jira's rule),
# canonical upper case (Jira keys are case-insensitive, issue keys are shown upper).
_SITE_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_SITE_RE = re.compile(rf"{_SITE_LABEL}(?:\.{_SITE_LABEL})*")
_KEY_RE = re.compile(r"[A-Z][A-Z0-9_]{0,99}")

# '.' is not tmux-safe (tmux rewrites it to '_' in session names), so names are
# escaped with a prefix-free code over [A-Za-z0-9_-]: '_' -> '__', '.' -> '_d'.
_ESCAPES = {"_": "__", ".": "_d"}


class RefError(DispatchError, ValueError):
    """A work item ref that is not `github:OWNER/REPO#N`, `local:PROJECT#N` or
    `jira:SITE/KEY-N`."""


def _escape(name: str) -> str:
    return "".join(_ESCAPES.get(ch, ch) for ch in name)


def _check_name(value: str, what: str, text: str) -> None:
    if not _NAME_RE.fullmatch(value) or value in {".", ".."}:
        raise RefError(
            f"invalid work item ref {text!r}: {what} {value!r} must be 1-100 of "
            "A-Z a-z 0-9 . _ - (and not '.' or '..')"
        )


def _check_number(value: str, text: str) -> int:
    if not _NUMBER_RE.fullmatch(value) or int(value) > MAX_NUMBER:
        raise RefError(
            f"invalid work item ref {text!r}: number {value[:30]!r} must be an integer "
            f"1..{MAX_NUMBER} without leading zeros"
        )
    return int(value)


@dataclass(frozen=True, order=True)
class WorkItemRef:
    """One ticket: `github:OWNER/REPO#N` (project = "OWNER/REPO"), `local:PROJECT#N`
    or `jira:SITE/KEY-N` (project = "SITE/KEY", the issue KEY-N on that Jira site).

    GitHub's OWNER/REPO is canonical lower case (docs/security.md, canonical refs); a
    Jira site is lower case and its project key upper case.

    Build with `parse()`; the constructor validates too, so a ref cannot exist in an
    invalid form (a hand-edited store row is re-validated when read).
    """

    source: str  # "github" | "local" | "jira"
    project: str  # "OWNER/REPO" for github, "PROJECT" for local, "SITE/KEY" for jira
    number: int

    def __post_init__(self) -> None:
        if isinstance(self.number, bool) or not isinstance(self.number, int):
            raise RefError(f"invalid work item number {self.number!r}: must be an int")
        if not isinstance(self.project, str) or not isinstance(self.source, str):
            raise RefError("invalid work item ref: source and project must be strings")
        text = f"{self.source}:{self.project}#{self.number}"
        if not 1 <= self.number <= MAX_NUMBER:
            raise RefError(f"invalid work item ref {text[:200]!r}: number must be 1..{MAX_NUMBER}")
        if self.source == "github":
            # GitHub names are case-insensitive: one spelling (lower case) for every
            # ingress, so the poller and the webhook never split one ticket in two.
            object.__setattr__(self, "project", self.project.lower())
            owner, sep, repo = self.project.partition("/")
            if not sep:
                raise RefError(f"invalid work item ref {text!r}: expected OWNER/REPO")
            if not _OWNER_RE.fullmatch(owner):
                raise RefError(
                    f"invalid work item ref {text!r}: owner {owner!r} must be 1-39 of "
                    "A-Z a-z 0-9 and inner '-'"
                )
            _check_name(repo, "repository", text)
        elif self.source == "local":
            _check_name(self.project, "project", text)
        elif self.source == "jira":
            self._check_jira(text)
        else:
            raise RefError(
                f"invalid work item ref {text[:200]!r}: source must be 'github', 'local' or 'jira'"
            )

    def _check_jira(self, text: str) -> None:
        site, sep, key = self.project.partition("/")
        site, key = site.lower(), key.upper()
        if not sep or len(site) > 253 or not _SITE_RE.fullmatch(site):
            raise RefError(
                f"invalid work item ref {text[:200]!r}: expected jira:SITE/KEY-N with SITE a "
                "host name (letters, digits, '-' and '.')"
            )
        if not _KEY_RE.fullmatch(key):
            raise RefError(
                f"invalid work item ref {text[:200]!r}: project key {key[:100]!r} must be a "
                "letter then up to 99 letters, digits or '_'"
            )
        object.__setattr__(self, "project", f"{site}/{key}")

    @property
    def jira_site(self) -> str:
        """The Jira site of a jira ref (`acme.atlassian.net`)."""
        return self.project.partition("/")[0]

    @property
    def jira_key(self) -> str:
        """The Jira issue key of a jira ref (`ABC-12`)."""
        return f"{self.project.partition('/')[2]}-{self.number}"

    @classmethod
    def parse(cls, text: str) -> WorkItemRef:
        """Parse `github:OWNER/REPO#N`, `local:PROJECT#N` or `jira:SITE/KEY-N`; raise
        RefError otherwise."""
        if not isinstance(text, str):
            raise RefError(f"invalid work item ref {text!r}: not a string")
        shown = text if len(text) <= 200 else text[:200] + "..."
        m = _GITHUB_RE.fullmatch(text)
        if m:
            number = _check_number(m.group(3), shown)
            return cls("github", f"{m.group(1)}/{m.group(2)}", number)
        m = _LOCAL_RE.fullmatch(text)
        if m:
            number = _check_number(m.group(2), shown)
            return cls("local", m.group(1), number)
        m = _JIRA_RE.fullmatch(text)
        if m:
            number = _check_number(m.group(3), shown)
            return cls("jira", f"{m.group(1)}/{m.group(2)}", number)
        raise RefError(
            f"invalid work item ref {shown!r}: expected github:OWNER/REPO#N, local:PROJECT#N "
            "or jira:SITE/KEY-N"
        )

    def __str__(self) -> str:
        if self.source == "jira":
            return f"jira:{self.project}-{self.number}"
        return f"{self.source}:{self.project}#{self.number}"

    def slug(self) -> str:
        """Injective, tmux-safe (`[A-Za-z0-9_-]`) name for this ref.

        `gh_OWNER_REPO_N` / `local_PROJECT_N`. An owner never holds '_', N never does,
        and names are escaped with a prefix-free code, so the parts can be read back
        unambiguously: `github:a-b/c#1` -> `gh_a-b_c_1`, `github:a/b-c#1` -> `gh_a_b-c_1`.
        `jira:acme.atlassian.net/ABC-7` -> `jira_acme_datlassian_dnet_ABC_7`: an escaped
        site's '_' is followed by 'd' or '_', the separator by the key's capital letter;
        the key's own '_' are doubled and the last separator is followed by a digit.
        """
        if self.source == "github":
            owner, _, repo = self.project.partition("/")
            return f"gh_{owner}_{_escape(repo)}_{self.number}"
        if self.source == "jira":
            site, _, key = self.project.partition("/")
            return f"jira_{_escape(site)}_{_escape(key)}_{self.number}"
        return f"local_{_escape(self.project)}_{self.number}"

    def tmux_name(self) -> str:
        """The tmux session name this item's harness runs in."""
        return "loop-" + self.slug()


class EventKind(str, Enum):
    """What happened on the work item."""

    COMMENT = "comment"
    OPENED = "opened"
    CLOSED = "closed"
    MANUAL = "manual"
    SAY = "say"  # the operator's own words (`sessions say`), never on the ticket
    CONTROL = "control"  # a control word (`the-loop pause`...): executed, never pasted


@dataclass(frozen=True)
class Event:
    """One thing to hand to a work item's session.

    `delivery_id` is the de-duplication key: for comments use `comment_delivery_id` so
    the poller and the webhook agree on it. `body` is untrusted text: it is framed
    before pasting and never logged.
    """

    delivery_id: str
    work_item: WorkItemRef
    kind: EventKind
    actor: str
    body: str
    url: str
    created_at: datetime
    comment_id: str | None = None
    # What the event is about when that is not the work item itself, one line for the
    # framing header: "pull request #12, review comment on src/app.py line 40". Empty
    # for an ordinary comment on the item.
    subject: str = ""
    # False: the event is only for an item already taken on (an active session); it
    # never starts an agent (a CI result, a PR's closing: issue 20).
    spawns: bool = True
    # A close by someone who is not an authorized actor keeps the item's workspace, so
    # a reopen resumes where the agent was (issue 20).
    keep_workspace: bool = False
    # A control word the ingress already refuses ("not_authorized"): settled as
    # rejected and acknowledged, never run (issue 24). Empty for every other event.
    refused: str = ""

    def __post_init__(self) -> None:
        if not self.delivery_id:
            raise ValueError("event delivery_id must not be empty")
        if not isinstance(self.work_item, WorkItemRef):
            raise TypeError("event work_item must be a WorkItemRef")
        if not isinstance(self.kind, EventKind):
            object.__setattr__(self, "kind", EventKind(self.kind))
        if self.created_at.tzinfo is None or self.created_at.utcoffset() is None:
            raise ValueError("event created_at must be timezone-aware")

    def to_dict(self) -> dict[str, str | None]:
        """JSON-ready form (the poll ledger stores pending events this way)."""
        out: dict[str, str | None] = {
            "deliveryId": self.delivery_id,
            "workItem": str(self.work_item),
            "kind": self.kind.value,
            "actor": self.actor,
            "body": self.body,
            "url": self.url,
            "createdAt": self.created_at.isoformat(),
            "commentId": self.comment_id,
        }
        if self.subject:  # absent when empty: rows written before it read back the same
            out["subject"] = self.subject
        if not self.spawns:  # absent when default, likewise
            out["spawns"] = "false"
        if self.keep_workspace:
            out["keepWorkspace"] = "true"
        if self.refused:
            out["refused"] = self.refused
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Event:
        """Inverse of `to_dict`; raises ValueError (RefError included) on bad data."""
        try:
            return cls(
                delivery_id=str(data["deliveryId"]),
                work_item=WorkItemRef.parse(data["workItem"]),
                kind=EventKind(data["kind"]),
                actor=str(data["actor"]),
                body=str(data["body"]),
                url=str(data["url"]),
                created_at=datetime.fromisoformat(data["createdAt"]),
                comment_id=None if data.get("commentId") is None else str(data["commentId"]),
                subject=str(data.get("subject") or ""),
                spawns=str(data.get("spawns", "true")) != "false",
                keep_workspace=str(data.get("keepWorkspace", "false")) == "true",
                refused=str(data.get("refused") or ""),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed stored event: {exc!r}") from None


def comment_delivery_id(source: str, comment_id: str) -> str:
    """Delivery id of a comment, from its identity: `comment:<source>:<id>`.

    The poller and the webhook both derive it, so one comment is one delivery however
    many times, and by whichever path, it is seen.
    """
    return f"comment:{source}:{comment_id}"
