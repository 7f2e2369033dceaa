"""The poller's view of pull requests: their linked items, reviews, line comments, checks.

The issues probe the source already sends lists pull requests too (GitHub's issues API
includes them), and a review, a line comment or a conversation comment bumps the PR's
`updated_at`: an idle repository still costs one conditional probe. Only a PR the probe
reports changed is read (`GET .../pulls/N` for its body and head branch, then its
reviews), and the repository's line comments are listed once per changed cycle.

GitHub's Development sidebar links a PR to issues without a word in its body; only
GraphQL (`closingIssuesReferences`) shows it. The PRs the probe saw changed are asked
together: one GraphQL request per repository in a cycle that changed any PR, none in an
idle one. Each way a PR links (branch, sidebar, keyword; `manual` by hand) is stored
(github/links.py), so the webhook routes the PR's later events the same way.

A check result does not touch the PR. So every open PR linked to an item is remembered
in the cursor with its head commit, and its check runs, check suites and commit
statuses are asked for conditionally (`If-None-Match`: an unchanged answer is a 304,
which GitHub does not count against the rate limit): three conditional requests per
open linked PR per cycle. A failing one passes the CI retry budget (cibudget.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from loop_dispatch import Event, WorkItemRef

from .cibudget import CiBudget, budget_key
from .client import GitHubClient, GitHubError
from .links import PrLinks
from .parse import (
    CheckInfo,
    CommentInfo,
    IssueInfo,
    parse_check,
    parse_review,
    parse_review_comment,
    parse_status,
)
from .rules import (
    FAILED_CONCLUSIONS,
    STATUS_FAILED,
    PullRequest,
    branch_item,
    check_event,
    closing_refs,
    keyword_item,
    link_target,
    parse_pull,
    person_counts,
    pr_closed_event,
    pr_comment_event,
    pr_opened_event,
    pull_counts,
    review_comment_event,
    review_event,
    review_worth_routing,
)

__all__ = ["SIDEBAR_FIRST", "PullTracker", "sidebar_document"]

log = logging.getLogger(__name__)

PER_PAGE = "100"
SIDEBAR_FIRST = 25  # closing references read per PR (a PR closing more is rare)
Refused = Callable[[WorkItemRef, int, list[str]], None]


def sidebar_document(numbers: list[int]) -> str:
    """The GraphQL query for the closing references of several PRs of one repository
    (aliases `pr<N>`; numbers are integers, never text from a payload)."""
    fields = " ".join(
        f"pr{int(n)}: pullRequest(number: {int(n)}) {{ ...links }}" for n in sorted(set(numbers))
    )
    return (
        "query SidebarLinks($owner: String!, $name: String!) { "
        f"repository(owner: $owner, name: $name) {{ {fields} }} }} "
        "fragment links on PullRequest { number closingIssuesReferences"
        f"(first: {SIDEBAR_FIRST}) {{ nodes {{ number repository {{ nameWithOwner }} }} }} }}"
    )


class PullTracker:
    """One repository's PR activity for one cycle; `pulls` is the cursor's memory:
    `{"<number>": {"target": ref, "sha": head, "since": iso, "checks_etag": etag}}`."""

    def __init__(
        self,
        github: GitHubClient,
        repository: str,
        pulls: dict[str, dict[str, Any]],
        *,
        authorized: frozenset[str],
        own: str,
        session_per_pr: bool,
        parse_since: Callable[[str], datetime],
        floor: str | None = None,
        links: PrLinks | None = None,
        configured: frozenset[str] = frozenset(),
        budget: CiBudget | None = None,
        on_refused: Refused | None = None,
    ) -> None:
        self.github = github
        self.repository = repository
        self.pulls = {k: dict(v) for k, v in pulls.items()}
        self.authorized = authorized
        self.own = own
        self.session_per_pr = session_per_pr
        self._parse_since = parse_since
        self._floor = parse_since(floor) if floor else None
        self.links = links
        self.configured = configured
        self.budget = budget
        self._on_refused = on_refused
        self.targets: dict[int, WorkItemRef] = {
            int(n): WorkItemRef.parse(v["target"]) for n, v in self.pulls.items()
        }

    def _person_ok(self, author: str, body: str) -> bool:
        return not person_counts(author, body, self.authorized, self.own)

    def changed(self, issues: list[IssueInfo], window_start: str, now_iso: str) -> list[Event]:
        """Read the PRs the probe saw changed: link them, and their opening, closing and
        reviews in the window."""
        events: list[Event] = []
        start = self._parse_since(window_start)
        prs = [
            parse_pull(
                self.github.get_json(f"repos/{self.repository}/pulls/{issue.number}"),
                self.repository,
            )
            for issue in issues
            if issue.is_pr
        ]
        sidebar = self._sidebar([pr.number for pr in prs]) if prs else None
        for pr in prs:
            target = self._link(pr, sidebar)
            key = str(pr.number)
            if target is None:
                self.pulls.pop(key, None)
                self.targets.pop(pr.number, None)
                continue
            self.targets[pr.number] = target
            known = self.pulls.get(key)
            # Its own activity (closing, CI) counts only for a PR from the repository
            # itself or by an authorized author (issue 20); people's text is checked
            # person by person.
            trusted = not pull_counts(pr, self.authorized, self.own)
            if pr.state == "open":
                entry = known or {"since": now_iso}
                if entry.get("sha") != pr.head_sha:
                    for etag in ("checks_etag", "suites_etag", "statuses_etag"):
                        entry[etag] = None
                entry.update(target=str(target), sha=pr.head_sha, trusted=trusted)
                self.pulls[key] = entry
            else:
                self.pulls.pop(key, None)
            if pr.created_at and pr.created_at >= start and self._person_ok(pr.author, pr.body):
                events.append(pr_opened_event(target, self.repository, pr))
            if pr.closed_at and pr.closed_at >= start and trusted:
                events.append(pr_closed_event(target, self.repository, pr, pr.merged))
            events.extend(self._reviews(target, pr.number, start))
        return events

    def _sidebar(self, numbers: list[int]) -> dict[int, list[tuple[str, int]]] | None:
        """Each PR's closing references as GitHub holds them (body keywords and the
        sidebar alike), one GraphQL request; None when GitHub did not answer (the
        stored sidebar links stay as they were)."""
        owner, _, name = self.repository.partition("/")
        try:
            data = self.github.graphql(sidebar_document(numbers), {"owner": owner, "name": name})
        except GitHubError as exc:
            log.info("github: sidebar links of %s unavailable: %s", self.repository, exc)
            return None
        repo = data.get("repository")
        out: dict[int, list[tuple[str, int]]] = {}
        if not isinstance(repo, dict):
            return out
        for number in numbers:
            pr = repo.get(f"pr{int(number)}")
            refs = pr.get("closingIssuesReferences") if isinstance(pr, dict) else None
            nodes = refs.get("nodes") if isinstance(refs, dict) else None
            if not isinstance(nodes, list):
                continue  # this PR failed (null): its stored sidebar link stays
            out[number] = [ref for ref in map(_closing_ref, nodes) if ref is not None]
        return out

    def _link(
        self, pr: PullRequest, sidebar: dict[int, list[tuple[str, int]]] | None
    ) -> WorkItemRef | None:
        """The PR's links as read now, stored; the item it routes to."""
        by_branch = branch_item(pr.head_ref, pr.repository) if pr.from_repository else None
        by_keyword, refused = keyword_item(pr, self.configured)
        found: dict[str, WorkItemRef] = {}
        if by_branch is not None:
            found["branch"] = by_branch
        if by_keyword is not None:
            found["keyword"] = by_keyword
        known = sidebar.get(pr.number) if sidebar is not None else None
        if known is not None:
            by_sidebar, more = self._sidebar_item(pr, known)
            refused.extend(ref for ref in more if ref not in refused)
            if by_sidebar is not None:
                found["sidebar"] = by_sidebar
        stored: dict[str, WorkItemRef] = {}
        if self.links is not None:
            keep = frozenset() if known is not None else frozenset({"sidebar"})
            self.links.replace_automatic(pr.repository, pr.number, found, keep=keep)
            stored = {link.via: link.item for link in self.links.of_pr(pr.repository, pr.number)}
        else:
            stored = found
        if refused and self._on_refused is not None:
            own = WorkItemRef("github", pr.repository.lower(), pr.number)
            self._on_refused(own, pr.number, refused)
        return link_target(
            pr, session_per_pr=self.session_per_pr, configured=self.configured, stored=stored
        )

    def _sidebar_item(
        self, pr: PullRequest, refs: list[tuple[str, int]]
    ) -> tuple[WorkItemRef | None, list[str]]:
        """The first closing reference GitHub holds that the body does not say (a
        sidebar link) in a configured repository; the others it refused."""
        own = pr.repository.lower()
        allowed = {own} | self.configured
        in_body = set(closing_refs(pr.body, pr.repository))
        found: WorkItemRef | None = None
        refused: list[str] = []
        for repo, number in refs:
            if (repo, number) in in_body or (repo == own and number == pr.number):
                continue
            if repo not in allowed:
                refused.append(f"{repo}#{number}")
            elif found is None:
                found = WorkItemRef("github", repo, number)
        return found, refused

    def _reviews(self, target: WorkItemRef, number: int, start: datetime) -> list[Event]:
        listing = self.github.list_all(
            f"repos/{self.repository}/pulls/{number}/reviews", {"per_page": PER_PAGE}
        )
        out = []
        for obj in listing.items:
            if obj.get("submitted_at") is None:  # a pending review is not submitted yet
                continue
            review = parse_review(obj, number)
            if review.submitted_at < start or not review_worth_routing(review):
                continue
            if self._person_ok(review.author, review.body):
                out.append(review_event(target, self.repository, review))
        return out

    def review_comments(self, since: str) -> list[Event]:
        """Line comments of the repository's PRs since `since` (one listing)."""
        listing = self.github.list_all(
            f"repos/{self.repository}/pulls/comments",
            {"since": since, "sort": "updated", "direction": "asc", "per_page": PER_PAGE},
        )
        out = []
        for obj in listing.items:
            comment = parse_review_comment(obj, "review comment")
            target = self.targets.get(comment.pr_number)
            if target is None or not self._person_ok(comment.author, comment.body):
                continue
            if self._floor is not None and comment.created_at <= self._floor:
                continue
            out.append(review_comment_event(target, self.repository, comment))
        return out

    def conversation_comment(self, comment: CommentInfo) -> Event | None:
        """An issue comment on a linked PR, for its item (None: not a linked PR's)."""
        target = self.targets.get(comment.issue_number)
        if target is None:
            return None
        if self._floor is not None and comment.created_at <= self._floor:
            return None
        if not self._person_ok(comment.author, comment.body):
            return None
        return pr_comment_event(target, self.repository, comment)

    def checks(self) -> list[Event]:
        """Failed check runs, check suites and commit statuses on the head of every open
        linked PR (conditional), through the CI retry budget."""
        out: list[Event] = []
        for _, entry in sorted(self.pulls.items()):
            if not entry.get("sha") or entry.get("trusted") is not True:
                continue  # a fork's PR by an outsider: its CI is not an agent's business
            since = self._parse_since(entry["since"])
            target = WorkItemRef.parse(entry["target"])
            results = self._results(entry)
            # A pass makes the failures before it history: they are not pasted, and the
            # budget counts only failures after the latest pass (cibudget.py).
            passed: dict[str, datetime] = {}
            for check in results:
                if check.conclusion == "success":
                    key = budget_key(check)
                    passed[key] = max(passed.get(key, check.completed_at), check.completed_at)
            if self.budget is not None:
                for key, at in sorted(passed.items()):
                    self.budget.passed(self.repository, key, at)
            for check in results:
                if check.conclusion not in FAILED_CONCLUSIONS | STATUS_FAILED:
                    continue
                last_pass = passed.get(budget_key(check))
                if check.completed_at < since or (last_pass and check.completed_at <= last_pass):
                    continue
                event = self._budgeted(check_event(target, self.repository, check), check)
                if event is not None:
                    out.append(event)
        return out

    def _budgeted(self, event: Event, check: CheckInfo) -> Event | None:
        return event if self.budget is None else self.budget.apply(self.repository, check, event)

    def _results(self, entry: dict[str, Any]) -> list[CheckInfo]:
        """The completed checks of the entry's head that changed since the last look."""
        base = f"repos/{self.repository}/commits/{entry['sha']}"
        results: list[CheckInfo] = []
        for etag_key, path, params, key, what in (
            ("checks_etag", "check-runs", {"status": "completed"}, "check_runs", "check_run"),
            ("suites_etag", "check-suites", {}, "check_suites", "check_suite"),
            ("statuses_etag", "status", {}, "statuses", "status"),
        ):
            listing = self.github.list_all(
                f"{base}/{path}",
                {**params, "per_page": PER_PAGE},
                etag=entry.get(etag_key),
                items_key=key,
            )
            if listing.not_modified:
                continue
            entry[etag_key] = listing.etag if listing.pages <= 1 else None
            for obj in listing.items:
                if what == "status":
                    results.append(parse_status(obj, entry["sha"]))
                elif what == "check_suite" and obj.get("status") != "completed":
                    continue
                else:
                    results.append(parse_check(obj, what))
        return results


def _closing_ref(node: Any) -> tuple[str, int] | None:
    """(OWNER/REPO lower case, number) of a `closingIssuesReferences` node."""
    if not isinstance(node, dict):
        return None
    number = node.get("number")
    repo = node.get("repository")
    name = repo.get("nameWithOwner") if isinstance(repo, dict) else None
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        return None
    if not isinstance(name, str) or name.count("/") != 1:
        return None
    return name.lower(), number
