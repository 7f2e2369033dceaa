"""What a webhook payload comes to, and the rules that decide it.

A payload becomes an Event, is `Ignored` with a reason, or raises `PayloadError`; the
`Rules` say who and what counts. Kept apart from `payload` so that `pulls` (the pull
request events) and `payload` both use them without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from loop_dispatch import WorkItemRef

__all__ = ["Ignored", "PayloadError", "Rules"]


class PayloadError(ValueError):
    """A payload missing what its event type must carry; the message names the field."""


@dataclass(frozen=True)
class Ignored:
    reason: str


@dataclass(frozen=True)
class Rules:
    """Who and what counts. Logins compare case-insensitively, like GitHub's."""

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
