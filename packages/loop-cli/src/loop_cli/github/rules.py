"""GitHub's rules, in one place: whose comment counts, and the Event each activity is.

The poller (REST listings) and the webhook (payloads) see the same activity through
different doors. Both ask this module, so they agree on refs (canonical lower-case
OWNER/REPO), delivery ids, actors, and on which comments are ignored (the-loop's own
account, its marker, anyone not authorized): one ticket is one session, one comment
one delivery, whichever door saw it first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from loop_dispatch import Event, EventKind, WorkItemRef, comment_delivery_id

from .parse import CommentInfo, IssueInfo, carries_marker

__all__ = [
    "Ignored",
    "Rules",
    "canonical_repository",
    "closed_delivery_id",
    "closed_event",
    "comment_delivery",
    "comment_event",
    "opened_delivery_id",
    "opened_event",
]


@dataclass(frozen=True)
class Ignored:
    """Activity that is not an event, and why."""

    reason: str


@dataclass(frozen=True)
class Rules:
    """Who and what counts. Logins and repositories compare case-insensitively, like
    GitHub's."""

    trigger_label: str
    authorized_actors: frozenset[str]
    own_login: str | None = None
    repositories: frozenset[str] | None = None  # None: any repository

    @classmethod
    def build(
        cls,
        trigger_label: str,
        authorized_actors: Iterable[str],
        own_login: str | None = None,
        repositories: Iterable[str] | None = None,
    ) -> Rules:
        return cls(
            trigger_label=trigger_label,
            authorized_actors=frozenset(a.lower() for a in authorized_actors),
            own_login=own_login.lower() if own_login else None,
            repositories=frozenset(r.lower() for r in repositories) if repositories else None,
        )

    def watches(self, repository: str) -> bool:
        return self.repositories is None or repository.lower() in self.repositories

    def comment_ignored(self, comment: CommentInfo) -> Ignored | None:
        """Why a comment is not a prompt, or None when it counts."""
        author = comment.author.lower()
        if self.own_login and author == self.own_login:
            return Ignored("comment written by the-loop's own account")
        if carries_marker(comment.body):
            return Ignored("comment carries the-loop's marker")
        if author not in self.authorized_actors:
            return Ignored(f"{comment.author} is not an authorized actor")
        return None


def canonical_repository(repository: str) -> str:
    """OWNER/REPO as refs and delivery ids spell it (GitHub names are case-insensitive)."""
    return repository.lower()


def _ref(repository: str, number: int) -> WorkItemRef:
    return WorkItemRef("github", canonical_repository(repository), number)


def comment_delivery(repository: str, comment_id: int | str) -> str:
    """A comment's delivery id: `comment:github:owner/repo:ID`."""
    return comment_delivery_id(f"github:{canonical_repository(repository)}", str(comment_id))


def opened_delivery_id(repository: str, number: int) -> str:
    """One opening per item: the poller and the webhook derive the same id."""
    return f"opened:github:{canonical_repository(repository)}#{number}"


def closed_delivery_id(repository: str, number: int, closed_at: object) -> str:
    """One id per closing (a reopened and re-closed item closes again)."""
    stamp = closed_at.strftime("%Y%m%dT%H%M%SZ") if closed_at is not None else "unknown"  # type: ignore[attr-defined]
    return f"closed:github:{canonical_repository(repository)}#{number}:{stamp}"


def comment_event(repository: str, comment: CommentInfo, rules: Rules) -> Event | Ignored:
    """A comment's Event, or why it is ignored."""
    ignored = rules.comment_ignored(comment)
    if ignored is not None:
        return ignored
    return Event(
        delivery_id=comment_delivery(repository, comment.id),
        work_item=_ref(repository, comment.issue_number),
        kind=EventKind.COMMENT,
        actor=comment.author,
        body=comment.body,
        url=comment.url,
        created_at=comment.created_at,
        comment_id=str(comment.id),
    )


def opened_event(repository: str, issue: IssueInfo) -> Event:
    """An item taken on (labeled): its title and body open the session."""
    body = issue.title if not issue.body else f"{issue.title}\n\n{issue.body}"
    return Event(
        delivery_id=opened_delivery_id(repository, issue.number),
        work_item=_ref(repository, issue.number),
        kind=EventKind.OPENED,
        actor=issue.author,
        body=body,
        url=issue.url,
        created_at=issue.updated_at,
    )


def closed_event(repository: str, issue: IssueInfo) -> Event:
    """An item closed. The actor is empty on both paths: a REST listing does not say
    who closed it, and a closing carries no text to attribute."""
    return Event(
        delivery_id=closed_delivery_id(repository, issue.number, issue.closed_at),
        work_item=_ref(repository, issue.number),
        kind=EventKind.CLOSED,
        actor="",
        body="",
        url=issue.url,
        created_at=issue.closed_at or issue.updated_at,
    )
