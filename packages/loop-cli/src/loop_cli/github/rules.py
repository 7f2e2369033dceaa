"""GitHub's rules, in one place: whose text counts, which work item activity belongs
to, and the Event each activity is (issue 10: the poller and the webhook both ask here,
so they agree on refs, delivery ids and actors; OWNER/REPO is canonical lower case).

Which work item a pull request's activity belongs to, and which CI results count.

A PR links to an issue the ways GitHub and the-loop's agents link them: a closing
keyword in its body (`Fixes #3`, `closes acme/widgets#3`, `resolves
https://github.com/acme/widgets/issues/3`, which is how GitHub itself fills a PR's
closing references from its text), or a head branch `loop/<slug>` that the-loop made
for the item (docs/workspaces.md). Only issues of the PR's own repository count: a
PR cannot steer another repository's agent. A PR that links to nothing is its own work
item only with `github.sessionPerPr: true`.

The webhook and the poller both route through `link_target`, so one PR's activity
reaches the same item by either road.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from loop_dispatch import Event, EventKind, WorkItemRef, comment_delivery_id

__all__ = [
    "FAILED_CONCLUSIONS",
    "Ignored",
    "PullRequest",
    "Rules",
    "branch_item",
    "canonical_repository",
    "check_event",
    "closed_event",
    "closing_numbers",
    "comment_delivery",
    "comment_event",
    "link_target",
    "opened_event",
    "parse_pull",
    "person_counts",
    "pr_closed_event",
    "pr_comment_event",
    "pr_opened_event",
    "review_comment_event",
    "review_event",
    "review_worth_routing",
]

# Check conclusions an agent should hear about: the others (success, neutral, skipped,
# cancelled, stale) need nothing from it.
FAILED_CONCLUSIONS = frozenset({"failure", "timed_out", "action_required"})

_KEYWORDS = r"(?:close|closes|closed|fix|fixes|fixed|resolve|resolves|resolved)"
_CLOSING_RE = re.compile(
    r"(?<![A-Za-z0-9_])" + _KEYWORDS + r":?\s+"
    r"(?:(?:https?://[^\s/]+/)(?P<url_repo>[A-Za-z0-9._-]+/[A-Za-z0-9._-]+)/issues/"
    r"|(?P<repo>[A-Za-z0-9._-]+/[A-Za-z0-9._-]+)?#)"
    r"(?P<number>[1-9][0-9]{0,9})\b",
    re.IGNORECASE,
)
_BODY_MAX = 65536  # a PR body is far below this; the scan is bounded either way


@dataclass(frozen=True)
class PullRequest:
    """What linking and framing need of a PR (a webhook payload's or `GET .../pulls/N`)."""

    repository: str
    number: int
    body: str
    head_ref: str
    head_sha: str = ""
    author: str = ""
    url: str = ""
    title: str = ""
    state: str = "open"
    merged: bool = False
    created_at: datetime | None = None
    updated_at: datetime | None = None
    closed_at: datetime | None = None


def parse_pull(obj: Any, repository: str, what: str = "pull_request") -> PullRequest:
    """A PR object (webhook `pull_request`, REST `GET /repos/R/pulls/N`)."""
    from .parse import ParseError, parse_time

    if not isinstance(obj, dict):
        raise ParseError(f"{what}: expected an object")
    number = obj.get("number")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ParseError(f"{what}.number: expected a positive integer")
    head = obj.get("head")
    if not isinstance(head, dict) or not isinstance(head.get("ref"), str):
        raise ParseError(f"{what}.head.ref: expected a string")
    user = obj.get("user")
    login = user.get("login") if isinstance(user, dict) else None
    if not isinstance(login, str):
        raise ParseError(f"{what}.user.login: expected a string")

    def text(key: str) -> str:
        value = obj.get(key)
        return value if isinstance(value, str) else ""

    closed = obj.get("closed_at")
    return PullRequest(
        repository=repository,
        number=number,
        body=text("body"),
        head_ref=head["ref"],
        head_sha=str(head.get("sha")) if isinstance(head.get("sha"), str) else "",
        author=login,
        url=text("html_url"),
        title=text("title"),
        state=text("state") or "open",
        merged=obj.get("merged") is True or bool(obj.get("merged_at")),
        created_at=parse_time(obj.get("created_at"), f"{what}.created_at"),
        updated_at=parse_time(obj.get("updated_at"), f"{what}.updated_at"),
        closed_at=parse_time(closed, f"{what}.closed_at") if closed else None,
    )


def closing_numbers(body: str, repository: str) -> list[int]:
    """Issue numbers of `repository` a PR body closes, in order of mention, once each."""
    seen: list[int] = []
    for m in _CLOSING_RE.finditer((body or "")[:_BODY_MAX]):
        repo = m.group("url_repo") or m.group("repo")
        if repo is not None and repo.lower() != repository.lower():
            continue
        number = int(m.group("number"))
        if number not in seen:
            seen.append(number)
    return seen


def branch_item(head_ref: str, repository: str) -> WorkItemRef | None:
    """The item whose branch `loop/<slug>` this is, when it is of `repository`."""
    from loop_dispatch.registry import slug_owner

    if not head_ref.startswith("loop/"):
        return None
    ref = slug_owner(head_ref[len("loop/") :])
    if ref is None or ref.source != "github" or ref.project.lower() != repository.lower():
        return None
    return ref


def link_target(pr: PullRequest, *, session_per_pr: bool) -> WorkItemRef | None:
    """The work item a PR's activity goes to: the item of its `loop/<slug>` branch, else
    the first issue its body closes, else the PR itself (with `session_per_pr`), else
    None (the activity is not routed)."""
    by_branch = branch_item(pr.head_ref, pr.repository)
    if by_branch is not None:
        return by_branch
    numbers = [n for n in closing_numbers(pr.body, pr.repository) if n != pr.number]
    if numbers:
        return WorkItemRef("github", pr.repository, numbers[0])
    if session_per_pr:
        return WorkItemRef("github", pr.repository, pr.number)
    return None


# -- who counts, and the events both ingresses build ----------------------------------


def person_counts(author: str, body: str, authorized: frozenset[str], own: str | None) -> str:
    """ "" when a person's text may reach an agent, else why not (the same rules as
    for issue comments: never the-loop's own account or marker, only authorized actors)."""
    from .parse import carries_marker

    login = author.lower()
    if own and login == own:
        return "written by the-loop's own account"
    if carries_marker(body):
        return "carries the-loop's marker"
    if login not in authorized:
        return f"{author} is not an authorized actor"
    return ""


def _quoted(text: str, limit: int = 200) -> str:
    """Text from a payload (a file path, a check's name) as it goes into the framing's
    header line, outside the fence: quoted, one line, bounded, so it reads as a name."""
    flat = " ".join(text.replace("`", "'").split())
    return "`" + (flat if len(flat) <= limit else flat[: limit - 1] + "\u2026") + "`"


def _pr_words(number: int) -> str:
    return f"pull request #{number}"


def pr_comment_event(target: WorkItemRef, repository: str, comment: Any) -> Event:
    """A conversation comment on a PR (GitHub's issue comment on the PR)."""
    from .parse import source_name

    return Event(
        delivery_id=comment_delivery_id(source_name(repository), str(comment.id)),
        work_item=target,
        kind=EventKind.COMMENT,
        actor=comment.author,
        body=comment.body,
        url=comment.url,
        created_at=comment.created_at,
        comment_id=str(comment.id),
        subject=_subject(target, comment.issue_number, "comment"),
    )


def review_comment_event(target: WorkItemRef, repository: str, comment: Any) -> Event:
    from .parse import review_comment_delivery_id

    where = _quoted(comment.path) if comment.path else "the diff"
    if comment.line is not None:
        where += f" line {comment.line}"
    return Event(
        delivery_id=review_comment_delivery_id(repository, comment.id),
        work_item=target,
        kind=EventKind.COMMENT,
        actor=comment.author,
        body=comment.body,
        url=comment.url,
        created_at=comment.created_at,
        comment_id=f"review-comment:{comment.id}",
        subject=f"{_pr_words(comment.pr_number)}, review comment on {where}",
    )


def review_event(target: WorkItemRef, repository: str, review: Any) -> Event:
    from .parse import review_delivery_id

    state = review.state.replace("_", " ")
    return Event(
        delivery_id=review_delivery_id(repository, review.id),
        work_item=target,
        kind=EventKind.COMMENT,
        actor=review.author,
        body=review.body or f"(review: {state}, no text)",
        url=review.url,
        created_at=review.submitted_at,
        subject=f"{_pr_words(review.pr_number)}, review: {state}",
    )


def review_worth_routing(review: Any) -> bool:
    """A bare "commented" review only wraps line comments (routed on their own)."""
    return review.state in ("approved", "changes_requested") or bool(review.body.strip())


def pr_opened_event(target: WorkItemRef, repository: str, pr: Any) -> Event:
    from .parse import pr_opened_delivery_id

    return Event(
        delivery_id=pr_opened_delivery_id(repository, pr.number),
        work_item=target,
        kind=EventKind.COMMENT,
        actor=pr.author,
        body=pr.title if not pr.body else f"{pr.title}\n\n{pr.body}",
        url=pr.url,
        created_at=pr.created_at,
        subject=f"{_pr_words(pr.number)} opened",
    )


def pr_closed_event(target: WorkItemRef, repository: str, pr: Any, merged: bool) -> Event:
    from .parse import pr_closed_delivery_id

    what = "merged" if merged else "closed without merging"
    return Event(
        delivery_id=pr_closed_delivery_id(repository, pr.number, pr.closed_at),
        work_item=target,
        kind=EventKind.COMMENT,
        actor="",
        body=f"Pull request #{pr.number} was {what}.",
        url=pr.url,
        created_at=pr.closed_at or pr.updated_at,
        subject=f"{_pr_words(pr.number)} {what}",
    )


def check_event(target: WorkItemRef, repository: str, check: Any) -> Event:
    from .parse import check_delivery_id

    name = check.name or f"check {check.what}"
    on = f"branch {check.head_branch}" if check.head_branch else f"commit {check.head_sha[:12]}"
    return Event(
        delivery_id=check_delivery_id(repository, check.what, check.id, check.conclusion),
        work_item=target,
        kind=EventKind.COMMENT,
        actor="CI",
        body=f"{name}: {check.conclusion.replace('_', ' ')} on {on}.",
        url=check.url,
        created_at=check.completed_at,
        subject=f"CI {check.conclusion.replace('_', ' ')}: {_quoted(name)}",
    )


def _subject(target: WorkItemRef, number: int, what: str) -> str:
    return "" if target.number == number else f"{_pr_words(number)}, {what}"


# -- issues: the rules and events of the issue ingresses (issue 10) -------------------


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

    def watches(self, repository: str) -> bool:
        return self.repositories is None or repository.lower() in self.repositories

    def comment_ignored(self, comment: Any) -> Ignored | None:
        """Why a comment is not a prompt, or None when it counts (`person_counts`)."""
        why = person_counts(comment.author, comment.body, self.authorized_actors, self.own_login)
        if not why:
            return None
        return Ignored(f"comment {why}" if not why.endswith("actor") else why)


def canonical_repository(repository: str) -> str:
    """OWNER/REPO as refs and delivery ids spell it (GitHub names are case-insensitive)."""
    return repository.lower()


def _ref(repository: str, number: int) -> WorkItemRef:
    return WorkItemRef("github", canonical_repository(repository), number)


def comment_delivery(repository: str, comment_id: int | str) -> str:
    """A comment's delivery id: `comment:github:owner/repo:ID`."""
    from .parse import source_name

    return comment_delivery_id(source_name(repository), str(comment_id))


def comment_event(repository: str, comment: Any, rules: Rules) -> Event | Ignored:
    """An issue comment's Event, or why it is ignored."""
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


def opened_event(repository: str, issue: Any) -> Event:
    """An item taken on (labeled): its title and body open the session."""
    from .parse import opened_delivery_id

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


def closed_event(repository: str, issue: Any) -> Event:
    """An item closed. The actor is empty on both paths: a REST listing does not say
    who closed it, and a closing carries no text to attribute."""
    from .parse import closed_delivery_id

    return Event(
        delivery_id=closed_delivery_id(repository, issue.number, issue.closed_at),
        work_item=_ref(repository, issue.number),
        kind=EventKind.CLOSED,
        actor="",
        body="",
        url=issue.url,
        created_at=issue.closed_at or issue.updated_at,
    )
