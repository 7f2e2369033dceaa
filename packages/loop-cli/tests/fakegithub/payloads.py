"""Webhook bodies shaped as GitHub sends them, for tests and benchmarks of the receiver."""

from __future__ import annotations

from typing import Any

STAMP = "2026-01-01T11:00:00Z"


def issue_json(
    repo: str,
    number: int = 5,
    *,
    labels: tuple[str, ...] = ("the-loop",),
    state: str = "open",
    title: str = "Fix it",
    body: str = "Details here.",
) -> dict[str, Any]:
    """The `issue` object of an `issues` or `issue_comment` delivery."""
    return {
        "number": number,
        "title": title,
        "body": body,
        "user": {"login": "alice"},
        "labels": [{"name": n} for n in labels],
        "state": state,
        "html_url": f"https://github.com/{repo}/issues/{number}",
        "created_at": "2026-01-01T10:00:00Z",
        "updated_at": STAMP,
        "closed_at": STAMP if state == "closed" else None,
    }


def issue_comment(
    repo: str,
    *,
    number: int = 5,
    comment_id: int = 77,
    body: str = "do the thing",
    login: str = "alice",
) -> dict[str, Any]:
    """An `issue_comment` delivery with action `created`."""
    return {
        "action": "created",
        "issue": issue_json(repo, number),
        "comment": {
            "id": comment_id,
            "user": {"login": login},
            "body": body,
            "html_url": f"https://github.com/{repo}/issues/{number}#issuecomment-{comment_id}",
            "created_at": STAMP,
            "updated_at": STAMP,
        },
        "repository": {"full_name": repo},
        "sender": {"login": login},
    }


def pull_json(
    repo: str,
    number: int = 12,
    *,
    body: str = "Fixes #3",
    head_ref: str = "feature",
    login: str = "alice",
    state: str = "open",
    merged: bool = False,
    title: str = "A change",
    fork: str | None = None,
) -> dict[str, Any]:
    """A `pull_request` object (webhook payloads, `GET /repos/R/pulls/N`); `fork`: the
    OWNER/REPO its head is in when not `repo` itself."""
    return {
        "number": number,
        "title": title,
        "body": body,
        "user": {"login": login},
        "state": state,
        "merged": merged,
        "head": {"ref": head_ref, "sha": "ab" * 20, "repo": repo_ref(fork or repo)},
        "base": {"ref": "main", "repo": repo_ref(repo)},
        "html_url": f"https://github.com/{repo}/pull/{number}",
        "created_at": "2026-01-01T10:00:00Z",
        "updated_at": STAMP,
        "closed_at": STAMP if state == "closed" else None,
        "merged_at": STAMP if merged else None,
    }


def repo_ref(full_name: str) -> dict[str, Any]:
    """A repository as a PR's head/base (and a check's PR entries) name it."""
    return {
        "id": sum(ord(c) * 31**i for i, c in enumerate(full_name.lower())) % 10**9,
        "url": f"https://api.github.com/repos/{full_name}",
        "name": full_name.split("/")[1],
        "full_name": full_name,
    }


def pull_request(
    repo: str, action: str = "opened", sender: str | None = None, **pull: Any
) -> dict[str, Any]:
    login = pull.get("login", "alice")
    return {
        "action": action,
        "pull_request": pull_json(repo, **pull),
        "repository": {"full_name": repo},
        "sender": {"login": sender or login},
    }


def review_comment_json(
    repo: str,
    number: int = 12,
    *,
    comment_id: int = 501,
    body: str = "rename this",
    login: str = "alice",
    path: str = "src/app.py",
    line: int | None = 40,
    api_url: str = "https://api.github.com",
    at: str = STAMP,
) -> dict[str, Any]:
    return {
        "id": comment_id,
        "user": {"login": login},
        "body": body,
        "path": path,
        "line": line,
        "original_line": line,
        "html_url": f"https://github.com/{repo}/pull/{number}#discussion_r{comment_id}",
        "pull_request_url": f"{api_url}/repos/{repo}/pulls/{number}",
        "created_at": at,
        "updated_at": at,
    }


def pull_request_review_comment(repo: str, pull: dict[str, Any] | None = None, **comment: Any):
    pr = pull or pull_json(repo)
    return {
        "action": "created",
        "pull_request": pr,
        "comment": review_comment_json(repo, pr["number"], **comment),
        "repository": {"full_name": repo},
        "sender": {"login": comment.get("login", "alice")},
    }


def pull_request_review(
    repo: str,
    pull: dict[str, Any] | None = None,
    *,
    review_id: int = 601,
    state: str = "changes_requested",
    body: str = "needs tests",
    login: str = "alice",
) -> dict[str, Any]:
    pr = pull or pull_json(repo)
    return {
        "action": "submitted",
        "pull_request": pr,
        "review": {
            "id": review_id,
            "user": {"login": login},
            "body": body,
            "state": state,
            "html_url": f"https://github.com/{repo}/pull/{pr['number']}#pullrequestreview-{review_id}",
            "submitted_at": STAMP,
        },
        "repository": {"full_name": repo},
        "sender": {"login": login},
    }


def check_run(
    repo: str,
    *,
    check_id: int = 701,
    conclusion: str = "failure",
    head_branch: str = "loop/gh_acme_widgets_3",
    pr_numbers: tuple[int, ...] = (12,),
    name: str = "tests",
    fork: str | None = None,
) -> dict[str, Any]:
    """A completed `check_run` delivery; its PR entries' head is `fork` when given
    (GitHub itself lists no fork PR there: `pr_numbers=()` models that)."""
    return {
        "action": "completed",
        "check_run": {
            "id": check_id,
            "name": name,
            "status": "completed",
            "conclusion": conclusion,
            "head_sha": "ab" * 20,
            "html_url": f"https://github.com/{repo}/runs/{check_id}",
            "completed_at": STAMP,
            "check_suite": {"id": 9000 + check_id, "head_branch": head_branch},
            "pull_requests": [
                {
                    "number": n,
                    "head": {"ref": head_branch, "sha": "ab" * 20, "repo": repo_ref(fork or repo)},
                    "base": {"ref": "main", "sha": "cd" * 20, "repo": repo_ref(repo)},
                }
                for n in pr_numbers
            ],
        },
        "repository": {"full_name": repo},
        "sender": {"login": "github-actions[bot]"},
    }
