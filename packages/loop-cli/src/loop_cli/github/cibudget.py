"""The CI retry budget (issue 27, `github.ciRetries`): an unfixable check must not wake
the agent on every run forever.

Each failing check (by kind and name: a check run's name, a suite's app, a status's
context) is pasted at most `retries` times per head commit; the next failure is pasted
once more as an escalation saying the budget ran out, then nothing until the check
passes (only failures after its latest pass count, on every head) or the head moves (a
new commit has its own count). One row per pasted failure, keyed by its delivery id, in
the store: the webhook and the poller share the count, and a failure both of them saw
counts once.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any

from loop_dispatch import Event

from .links import MIGRATIONS, NAMESPACE

__all__ = ["DEFAULT_RETRIES", "CiBudget", "budget_key", "escalated"]

DEFAULT_RETRIES = 3


def budget_key(check: Any) -> str:
    """What counts as "the same check": its kind and name."""
    return f"{check.what}:{check.name}"


def escalated(event: Event, retries: int) -> Event:
    """The one message saying the budget ran out (same delivery id, so either ingress
    delivers it once)."""
    note = (
        f"\n\nThis check has now failed {retries + 1} times on this commit: the-loop will "
        "not paste it again until it passes or the pull request's head moves."
    )
    return dataclasses.replace(
        event, body=event.body + note, subject=event.subject + ", retry budget spent"
    )


class CiBudget:
    """`admit` answers "paste", "escalate" or "silent" for one failing check."""

    def __init__(self, store: Any, retries: int) -> None:
        self._store = store
        self.retries = retries
        store.ensure_schema(NAMESPACE, MIGRATIONS)

    def admit(
        self, repository: str, key: str, sha: str, delivery_id: str, failed_at: datetime
    ) -> str:
        repo = repository.lower()
        with self._store.transaction() as conn:
            row = conn.execute(
                "SELECT escalated FROM loop_cli_github_ci_pastes WHERE delivery_id = ?",
                (delivery_id,),
            ).fetchone()
            if row is not None:  # the other ingress saw it first: the same answer
                return "escalate" if int(row[0]) else "paste"
            rows = conn.execute(
                "SELECT escalated FROM loop_cli_github_ci_pastes "
                "WHERE repository = ? AND check_name = ? AND sha = ?",
                (repo, key, sha),
            ).fetchall()
            if any(int(r[0]) for r in rows):
                return "silent"
            spent = len(rows) >= self.retries
            conn.execute(
                "INSERT INTO loop_cli_github_ci_pastes"
                "(delivery_id, repository, check_name, sha, escalated, failed_at, pasted_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (delivery_id, repo, key, sha, 1 if spent else 0, _utc(failed_at), _now()),
            )
            return "escalate" if spent else "paste"

    def passed(self, repository: str, key: str, at: datetime) -> None:
        """The check passed at `at`: failures before it no longer count, on every head
        (the same pass seen again changes nothing; failures after it keep counting)."""
        with self._store.transaction() as conn:
            conn.execute(
                "DELETE FROM loop_cli_github_ci_pastes "
                "WHERE repository = ? AND check_name = ? AND failed_at < ?",
                (repository.lower(), key, _utc(at)),
            )

    def apply(self, repository: str, check: Any, event: Event) -> Event | None:
        """The event to paste for a failing check, or None (silent)."""
        key = budget_key(check)
        verdict = self.admit(repository, key, check.head_sha, event.delivery_id, check.completed_at)
        if verdict == "paste":
            return event
        if verdict == "escalate":
            return escalated(event, self.retries)
        return None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _utc(moment: datetime) -> str:
    """A sortable text time (UTC, microseconds): compared in SQL on both backends."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
