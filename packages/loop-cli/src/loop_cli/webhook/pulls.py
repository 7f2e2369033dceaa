"""Webhook payloads of pull requests, reviews and checks to Events for the linked item.

The linking (which item a PR belongs to) and the events are `github.rules`', shared
with the poller so that one piece of activity is one delivery id by either road.
A check payload names its branch and PR numbers but not the PRs' bodies: a failed
check reaches the item of its `loop/<slug>` branch, or the PR's own item with
`github.sessionPerPr`; a PR linked only by its body hears of its checks via the poller.
Only checks of a PR whose head is in the repository itself are routed (a fork may name
its branch `loop/<slug>`), and neither a check nor a PR's closing ever starts an agent
(issue 20).
"""

from __future__ import annotations

from typing import Any

from loop_dispatch import Event, WorkItemRef

from ..github.cibudget import budget_key
from ..github.parse import (
    IssueInfo,
    parse_check,
    parse_comment,
    parse_review,
    parse_review_comment,
)
from ..github.rules import (
    FAILED_CONCLUSIONS,
    Ignored,
    PullRequest,
    Rules,
    check_event,
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

__all__ = ["pr_issue_comment", "to_event"]


def _ignored(reason: str) -> Ignored:
    return Ignored(reason)


def _target(pr: PullRequest, rules: Rules) -> WorkItemRef | Ignored:
    target = link_target(
        pr,
        session_per_pr=rules.session_per_pr,
        configured=rules.repositories or (),
        stored=rules.stored_links(pr.repository, pr.number),
    )
    if target is None and rules.has_session is not None:
        own = WorkItemRef("github", pr.repository, pr.number)
        if rules.has_session(own):
            target = own
    if target is None:
        _found, refused = keyword_item(pr, rules.repositories or ())
        if refused:  # issue 27: another repository's issue, not configured here
            return _ignored(
                f"pull request #{pr.number} closes {', '.join(refused)}, of a repository "
                "not in github.repositories (github.link_refused)"
            )
        return _ignored(
            f"pull request #{pr.number} links to no issue (github.sessionPerPr is false)"
        )
    return target


def _person(author: str, body: str, rules: Rules) -> Ignored | None:
    why = person_counts(author, body, rules.authorized_actors, rules.own_login)
    return _ignored(why) if why else None


def to_event(
    kind: str, action: str, payload: dict[str, Any], repository: str, rules: Rules
) -> Event | Ignored:
    if kind in ("check_run", "check_suite"):
        return _check(kind, action, payload, repository, rules)
    pr = parse_pull(payload.get("pull_request"), repository)
    target = _target(pr, rules)
    if not isinstance(target, WorkItemRef):
        return target
    if kind == "pull_request":
        if action == "opened":
            return _person(pr.author, pr.body, rules) or pr_opened_event(target, repository, pr)
        if action == "closed":
            why = pull_counts(pr, rules.authorized_actors, rules.own_login)
            if why:
                return _ignored(why)
            return pr_closed_event(target, repository, pr, pr.merged)
        return _ignored(f"pull_request action {action!r} is not handled")
    if kind == "pull_request_review":
        if action != "submitted":
            return _ignored(f"pull_request_review action {action!r} is not handled")
        review = parse_review(payload.get("review"), pr.number)
        if not review_worth_routing(review):
            return _ignored("a review without text only wraps its line comments")
        return _person(review.author, review.body, rules) or review_event(
            target, repository, review
        )
    if action != "created":
        return _ignored(f"pull_request_review_comment action {action!r} is not handled")
    comment = parse_review_comment(payload.get("comment"), pr_number=pr.number)
    return _person(comment.author, comment.body, rules) or review_comment_event(
        target, repository, comment
    )


def pr_issue_comment(
    action: str, payload: dict[str, Any], repository: str, issue: IssueInfo, rules: Rules
) -> Event | Ignored:
    """A conversation comment on a PR. The payload carries the PR's body but not its
    head branch: it links by closing keyword here (and by branch too via the poller,
    which reads the PR), or to the PR's own item with `sessionPerPr`."""
    if action != "created":
        return _ignored(f"issue_comment action {action!r} is not handled")
    pr = PullRequest(repository, issue.number, issue.body, head_ref="", url=issue.url)
    target = _target(pr, rules)
    if not isinstance(target, WorkItemRef):
        return target
    comment = parse_comment(payload.get("comment"), "comment", issue_number=issue.number)
    return _person(comment.author, comment.body, rules) or pr_comment_event(
        target, repository, comment
    )


def _check(
    kind: str, action: str, payload: dict[str, Any], repository: str, rules: Rules
) -> Event | Ignored:
    if action != "completed":
        return _ignored(f"{kind} action {action!r} is not handled")
    check = parse_check(payload.get(kind), kind)
    if check.conclusion == "success" and rules.ci_budget is not None:
        rules.ci_budget.passed(repository, budget_key(check), check.completed_at)
    if check.conclusion not in FAILED_CONCLUSIONS:
        return _ignored(f"{kind} concluded {check.conclusion or 'without a conclusion'}")
    if not check.own_pr_numbers:
        # A fork's PR (GitHub lists none, or one whose head is another repository), or
        # no PR at all: its branch name proves nothing.
        return _ignored(f"{kind} is not of a pull request from {repository} itself")
    number = check.own_pr_numbers[0]
    # The PR's head is in the repository itself: its branch counts, and the links the
    # poller stored for it (sidebar, keyword) or an operator's `link-pr` (issue 27).
    pr = PullRequest(repository, number, "", check.head_branch, head_repo=repository)
    target = link_target(pr, session_per_pr=False, stored=rules.stored_links(repository, number))
    if target is None:
        own = WorkItemRef("github", repository, number)
        if rules.session_per_pr or (rules.has_session is not None and rules.has_session(own)):
            target = own
    if target is None:
        return _ignored(f"{kind} on a branch that is not loop/<slug> and no PR item")
    event = check_event(target, repository, check)
    if rules.ci_budget is None:
        return event
    kept: Event | None = rules.ci_budget.apply(repository, check, event)
    if kept is None:
        return _ignored(f"{kind} failed again after its CI retry budget was spent")
    return kept
