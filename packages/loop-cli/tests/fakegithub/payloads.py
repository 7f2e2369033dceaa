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
