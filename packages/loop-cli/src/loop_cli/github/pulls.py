"""The poller's view of pull requests: their linked items, reviews, line comments, checks.

The issues probe the source already sends lists pull requests too (GitHub's issues API
includes them), and a review, a line comment or a conversation comment bumps the PR's
`updated_at`: an idle repository still costs one conditional probe. Only a PR the probe
reports changed is read (`GET .../pulls/N` for its body and head branch, then its
reviews), and the repository's line comments are listed once per changed cycle.

A check result does not touch the PR. So every open PR linked to an item is remembered
in the cursor with its head commit, and its check runs are asked for conditionally
(`If-None-Match`: an unchanged answer is a 304, which GitHub does not count against the
rate limit): one extra conditional request per open linked PR per cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from loop_dispatch import Event, WorkItemRef

from .client import GitHubClient
from .parse import CommentInfo, IssueInfo, parse_check, parse_review, parse_review_comment
from .rules import (
    FAILED_CONCLUSIONS,
    check_event,
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

__all__ = ["PullTracker"]

PER_PAGE = "100"


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
    ) -> None:
        self.github = github
        self.repository = repository
        self.pulls = {k: dict(v) for k, v in pulls.items()}
        self.authorized = authorized
        self.own = own
        self.session_per_pr = session_per_pr
        self._parse_since = parse_since
        self._floor = parse_since(floor) if floor else None
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
        for issue in issues:
            if not issue.is_pr:
                continue
            obj = self.github.get_json(f"repos/{self.repository}/pulls/{issue.number}")
            pr = parse_pull(obj, self.repository)
            target = link_target(pr, session_per_pr=self.session_per_pr)
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
                entry = known or {"since": now_iso, "checks_etag": None}
                if entry.get("sha") != pr.head_sha:
                    entry["checks_etag"] = None
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
        """Failed check runs on the head of every open linked PR (conditional)."""
        out = []
        for _, entry in sorted(self.pulls.items()):
            if not entry.get("sha") or entry.get("trusted") is not True:
                continue  # a fork's PR by an outsider: its CI is not an agent's business
            listing = self.github.list_all(
                f"repos/{self.repository}/commits/{entry['sha']}/check-runs",
                {"status": "completed", "per_page": PER_PAGE},
                etag=entry.get("checks_etag"),
                items_key="check_runs",
            )
            if listing.not_modified:
                continue
            entry["checks_etag"] = listing.etag if listing.pages <= 1 else None
            since = self._parse_since(entry["since"])
            target = WorkItemRef.parse(entry["target"])
            for obj in listing.items:
                check = parse_check(obj, "check_run")
                if check.conclusion in FAILED_CONCLUSIONS and check.completed_at >= since:
                    out.append(check_event(target, self.repository, check))
        return out
