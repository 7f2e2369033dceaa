"""GitHub's rules, in one place: whose text counts, which work item activity belongs
to, and the Event each activity is (issue 10: the poller and the webhook both ask here,
so they agree on refs, delivery ids and actors; OWNER/REPO is canonical lower case).

Which work item a pull request's activity belongs to, and which CI results count.

A PR links to an issue the ways GitHub and the-loop's agents link them: a closing
keyword in its body (`Fixes #3`, `closes acme/widgets#3`, `resolves
https://github.com/acme/widgets/issues/3`, which is how GitHub itself fills a PR's
closing references from its text), or a head branch `loop/<slug>` that the-loop made
for the item (docs/workspaces.md), or GitHub's Development sidebar, or by hand
(`sessions link-pr`; issue 27: github/links.py stores the links). Only issues of the
PR's own repository or another configured one count: a PR cannot steer the agent of a
repository the operator did not set up. A PR that links to nothing is its own work
item only with `github.sessionPerPr: true`.

The webhook and the poller both route through `link_target`, so one PR's activity
reaches the same item by either road.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from loop_dispatch import Event, EventKind, WorkItemRef, comment_delivery_id

__all__ = [
    "FAILED_CONCLUSIONS",
    "STATUS_FAILED",
    "Ignored",
    "PullRequest",
    "Rules",
    "branch_item",
    "canonical_repository",
    "check_event",
    "closed_event",
    "closing_numbers",
    "closing_refs",
    "comment_delivery",
    "comment_event",
    "keyword_item",
    "link_target",
    "opened_event",
    "parse_pull",
    "person_counts",
    "pr_closed_event",
    "pr_comment_event",
    "pr_opened_event",
    "pull_counts",
    "review_comment_event",
    "review_event",
    "review_worth_routing",
    "safe_path",
]

# Check conclusions an agent should hear about: the others (success, neutral, skipped,
# cancelled, stale) need nothing from it.
FAILED_CONCLUSIONS = frozenset({"failure", "timed_out", "action_required"})

# A commit status's failing states (issue 27: statuses reach the agent as checks do).
STATUS_FAILED = frozenset({"failure", "error"})

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
    # OWNER/REPO the head branch lives in: the watched repository itself, or a fork
    # ("" when GitHub did not say, e.g. a deleted fork: never taken for the repository).
    head_repo: str = ""

    @property
    def from_repository(self) -> bool:
        """Is its head branch in the watched repository itself (not a fork)? Only people
        with write access can push there."""
        return bool(self.head_repo) and self.head_repo.lower() == self.repository.lower()


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
    head_repo = head.get("repo")
    head_name = head_repo.get("full_name") if isinstance(head_repo, dict) else None
    return PullRequest(
        repository=repository,
        head_repo=head_name if isinstance(head_name, str) else "",
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


def closing_refs(body: str, repository: str) -> list[tuple[str, int]]:
    """(OWNER/REPO lower case, number) of every issue a PR body closes, in order of
    mention, once each; a bare `#N` is of `repository`."""
    seen: list[tuple[str, int]] = []
    for m in _CLOSING_RE.finditer((body or "")[:_BODY_MAX]):
        repo = (m.group("url_repo") or m.group("repo") or repository).lower()
        ref = (repo, int(m.group("number")))
        if ref not in seen:
            seen.append(ref)
    return seen


def closing_numbers(body: str, repository: str) -> list[int]:
    """Issue numbers of `repository` a PR body closes, in order of mention, once each."""
    own = repository.lower()
    return [n for repo, n in closing_refs(body, repository) if repo == own]


def keyword_item(
    pr: PullRequest, configured: Iterable[str] = ()
) -> tuple[WorkItemRef | None, list[str]]:
    """The first issue the PR's body closes in its own repository or another configured
    one (issue 27), and the references it refused (`OWNER/REPO#N` of repositories not
    configured: a PR cannot steer an agent the operator did not set up)."""
    own = pr.repository.lower()
    allowed = {own} | {r.lower() for r in configured}
    found: WorkItemRef | None = None
    refused: list[str] = []
    for repo, number in closing_refs(pr.body, pr.repository):
        if repo == own and number == pr.number:
            continue
        if repo not in allowed:
            refused.append(f"{repo}#{number}")
        elif found is None:
            found = WorkItemRef("github", repo, number)
    return found, refused


def branch_item(head_ref: str, repository: str) -> WorkItemRef | None:
    """The item whose branch `loop/<slug>` this is, when it is of `repository`."""
    from loop_dispatch.registry import slug_owner

    if not head_ref.startswith("loop/"):
        return None
    ref = slug_owner(head_ref[len("loop/") :])
    if ref is None or ref.source != "github" or ref.project.lower() != repository.lower():
        return None
    return ref


def link_target(
    pr: PullRequest,
    *,
    session_per_pr: bool,
    configured: Iterable[str] = (),
    stored: Mapping[str, WorkItemRef] | None = None,
) -> WorkItemRef | None:
    """The work item a PR's activity goes to, strongest link first (issue 27): a
    `manual` link (`sessions link-pr`), the item of its `loop/<slug>` branch (a branch
    of the repository itself: a fork may name its branch anything), a `sidebar` link
    (GitHub's Development sidebar, read by the poller through GraphQL), the first issue
    its body closes (in its repository or another configured one), else the PR itself
    (with `session_per_pr`), else None (the activity is not routed). `stored`: the
    links the store holds for the PR, by way; what the PR itself shows wins over them."""
    links = dict(stored or {})
    by_branch = branch_item(pr.head_ref, pr.repository) if pr.from_repository else None
    by_keyword, _refused = keyword_item(pr, configured)
    for via, found in (("branch", by_branch), ("keyword", by_keyword)):
        if found is not None:
            links[via] = found
    for via in ("manual", "branch", "sidebar", "keyword"):
        if via in links:
            return links[via]
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


def pull_counts(pr: PullRequest, authorized: frozenset[str], own: str | None) -> str:
    """ "" when a PR's own activity (its closing, its CI results) may reach an agent:
    its head is in the watched repository itself, or its author is an authorized actor
    or the-loop's own account (issue 20); else why not. Anyone can open a PR from a
    fork, name its branch `loop/<slug>`, write `Fixes #N` and close it again."""
    login = pr.author.lower()
    if pr.from_repository or login in authorized or (own and login == own):
        return ""
    return (
        f"pull request #{pr.number} is from a fork and its author {pr.author} "
        "is not an authorized actor"
    )


_PATH_MAX = 120
_SAFE_PATH = re.compile(r"[A-Za-z0-9._/+@=,-]+")


def safe_path(path: str) -> str | None:
    """A file path as it may stand outside the fence: `quoted` when it is made of
    ordinary path characters (no spaces, no punctuation a sentence needs) and bounded,
    else None: the caller puts it inside the fence instead (issue 20)."""
    if 0 < len(path) <= _PATH_MAX and _SAFE_PATH.fullmatch(path) and ".." not in path.split("/"):
        return f"`{path}`"
    return None


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
        spawns=_own_item(target, comment.issue_number),
    )


def review_comment_event(target: WorkItemRef, repository: str, comment: Any) -> Event:
    from .parse import review_comment_delivery_id

    shown = safe_path(comment.path)
    body = comment.body
    if shown is not None:
        where = shown
    elif comment.path:  # an unusual path is data: inside the fence, with the comment
        where = "a file named in the text"
        body = f"(file: {' '.join(comment.path.split())})\n\n{comment.body}"
    else:
        where = "the diff"
    if comment.line is not None:
        where += f" line {int(comment.line)}"
    return Event(
        delivery_id=review_comment_delivery_id(repository, comment.id),
        work_item=target,
        kind=EventKind.COMMENT,
        actor=comment.author,
        body=body,
        url=comment.url,
        created_at=comment.created_at,
        comment_id=f"review-comment:{comment.id}",
        subject=f"{_pr_words(comment.pr_number)}, review comment on {where}",
        spawns=_own_item(target, comment.pr_number),
    )


def review_event(target: WorkItemRef, repository: str, review: Any) -> Event:
    from .parse import review_delivery_id

    # The header names the state only from GitHub's own set (issue 20: nothing else
    # from a payload stands outside the fence).
    state = review.state.replace("_", " ") if review.state in _REVIEW_STATES else "submitted"
    return Event(
        delivery_id=review_delivery_id(repository, review.id),
        work_item=target,
        kind=EventKind.COMMENT,
        actor=review.author,
        body=review.body or f"(review: {state}, no text)",
        url=review.url,
        created_at=review.submitted_at,
        subject=f"{_pr_words(review.pr_number)}, review: {state}",
        spawns=_own_item(target, review.pr_number),
    )


_REVIEW_STATES = frozenset({"approved", "changes_requested", "commented", "dismissed"})


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
        spawns=_own_item(target, pr.number),
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
        spawns=False,  # news for an agent at work, never a reason to start one
    )


def check_event(target: WorkItemRef, repository: str, check: Any) -> Event:
    from .parse import check_delivery_id

    name = check.name or f"check {check.what}"
    on = f"branch {check.head_branch}" if check.head_branch else f"commit {check.head_sha[:12]}"
    conclusion = check.conclusion.replace("_", " ")
    return Event(
        delivery_id=check_delivery_id(repository, check.what, check.id, check.conclusion),
        work_item=target,
        kind=EventKind.COMMENT,
        actor="CI",
        # The job's name and branch are chosen by whoever wrote the workflow: they stay
        # in the body, inside the fence; the header says only the check's id.
        body=f"{name}: {conclusion} on {on}.",
        url=check.url,
        created_at=check.completed_at,
        subject=f"CI {conclusion}: check {check.what} {int(check.id)}",
        spawns=False,  # a CI result reaches an agent at work, never starts one
    )


def _own_item(target: WorkItemRef, number: int) -> bool:
    """May this PR activity start an agent? Only for the PR's own item (`sessionPerPr`,
    the operator's opt-in): an issue it links to is taken on by its label alone, so a
    `Fixes #88` never starts #88's agent (issue 20)."""
    return target.number == number


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
    # The links the store holds for a PR, by way (issue 27: a webhook payload does not
    # show the sidebar; the poller stored it), and the CI retry budget (cibudget.py).
    pr_links: Callable[[str, int], Mapping[str, WorkItemRef]] | None = None
    ci_budget: Any = None

    @classmethod
    def build(
        cls,
        trigger_label: str,
        authorized_actors: Iterable[str],
        own_login: str | None = None,
        repositories: Iterable[str] | None = None,
        session_per_pr: bool = False,
        has_session: Callable[[WorkItemRef], bool] | None = None,
        *,
        pr_links: Callable[[str, int], Mapping[str, WorkItemRef]] | None = None,
        ci_budget: Any = None,
    ) -> Rules:
        return cls(
            trigger_label=trigger_label,
            authorized_actors=frozenset(a.lower() for a in authorized_actors),
            own_login=own_login.lower() if own_login else None,
            repositories=frozenset(r.lower() for r in repositories) if repositories else None,
            session_per_pr=session_per_pr,
            has_session=has_session,
            pr_links=pr_links,
            ci_budget=ci_budget,
        )

    def stored_links(self, repository: str, number: int) -> Mapping[str, WorkItemRef]:
        return self.pr_links(repository, number) if self.pr_links is not None else {}

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


def comment_event(
    repository: str, comment: Any, rules: Rules, *, spawns: bool = True
) -> Event | Ignored:
    """An issue comment's Event, or why it is ignored. `spawns` false (the issue is
    closed): it reaches an agent still at work, and never starts one again after the
    close (which may be waiting for the agent's idle moment)."""
    from loop_dispatch.control import parse_control

    ignored = rules.comment_ignored(comment)
    control = parse_control(comment.body)
    refused = ""
    if ignored is not None:
        # A control word by someone not authorized is refused on the ticket (issue 24);
        # the-loop's own comments are never commands, nor anything else of theirs.
        if control is None or not ignored.reason.endswith("not an authorized actor"):
            return ignored
        refused = "not_authorized"
    return Event(
        delivery_id=comment_delivery(repository, comment.id),
        work_item=_ref(repository, comment.issue_number),
        kind=EventKind.CONTROL if control is not None else EventKind.COMMENT,
        refused=refused,
        actor=comment.author,
        body=comment.body,
        url=comment.url,
        created_at=comment.created_at,
        comment_id=str(comment.id),
        spawns=spawns,
    )


def opened_event(repository: str, issue: Any, labeled_at: datetime | None = None) -> Event:
    """An item taken on (labeled): its title and body open the session.

    A reopened issue labeled again is a new opening (issue 20): its delivery id carries
    the labeling's time (`labeled_at`: the webhook's `issue.updated_at`, the poller's
    label event), so it is not answered `duplicate` of the first opening, and the two
    ingresses still agree on it."""
    from .parse import opened_delivery_id

    body = issue.title if not issue.body else f"{issue.title}\n\n{issue.body}"
    again = labeled_at or issue.updated_at if issue.state_reason == "reopened" else None
    return Event(
        delivery_id=opened_delivery_id(repository, issue.number, again),
        work_item=_ref(repository, issue.number),
        kind=EventKind.OPENED,
        actor=issue.author,
        body=body,
        url=issue.url,
        created_at=issue.updated_at,
    )


def closed_event(repository: str, issue: Any, closed_by: str, rules: Rules) -> Event:
    """An item closed, by `closed_by` (the webhook's sender, the poller's `closed_by`
    of the issue; "" when GitHub did not say). A close by anyone who is not an
    authorized actor keeps the item's workspace for a reopen (issue 20); the agent is
    ended at its next idle moment either way (dispatcher)."""
    from .parse import closed_delivery_id

    return Event(
        delivery_id=closed_delivery_id(repository, issue.number, issue.closed_at),
        work_item=_ref(repository, issue.number),
        kind=EventKind.CLOSED,
        actor=closed_by,
        body="",
        url=issue.url,
        created_at=issue.closed_at or issue.updated_at,
        keep_workspace=closed_by.lower() not in rules.authorized_actors,
    )
