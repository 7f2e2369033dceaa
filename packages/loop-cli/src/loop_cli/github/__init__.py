"""GitHub as a tracker: a REST client with conditional requests, and the poll Source."""

from __future__ import annotations

from .client import GitHubClient, GitHubError, PermanentError, RateLimited, TransientError
from .parse import MARKER
from .source import GitHubSource

__all__ = [
    "MARKER",
    "GitHubClient",
    "GitHubError",
    "GitHubSource",
    "PermanentError",
    "RateLimited",
    "TransientError",
]
