"""When to wait before talking to GitHub again, read from its response headers.

Pure functions over headers and a clock, so the policy is testable without a network.
GitHub says "stop" in two ways: the primary limit (`X-RateLimit-Remaining: 0` with the
reset epoch in `X-RateLimit-Reset`, answered 403 or 429) and secondary limits
(`Retry-After: seconds`). Both mean: send nothing until then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["RateLimitState", "backoff_delay", "blocked_until", "is_rate_limited"]

# Below this many remaining requests the client stops early instead of spending the last
# few: the webhook receiver and the operator's own `gh` share the same budget.
LOW_WATERMARK = 5


@dataclass(frozen=True)
class RateLimitState:
    """The limit as GitHub last reported it (None when it did not say)."""

    limit: int | None = None
    remaining: int | None = None
    reset: float | None = None  # epoch seconds


def _int(headers: Mapping[str, str], name: str) -> int | None:
    value = headers.get(name)
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


def read_state(headers: Mapping[str, str]) -> RateLimitState:
    """The `X-RateLimit-*` headers of one response."""
    reset = _int(headers, "x-ratelimit-reset")
    return RateLimitState(
        limit=_int(headers, "x-ratelimit-limit"),
        remaining=_int(headers, "x-ratelimit-remaining"),
        reset=float(reset) if reset is not None else None,
    )


def is_rate_limited(status: int, headers: Mapping[str, str]) -> bool:
    """A 403/429 that GitHub marks as a rate limit (not a permission refusal)."""
    if status not in (403, 429):
        return False
    if "retry-after" in headers:
        return True
    return _int(headers, "x-ratelimit-remaining") == 0 or status == 429


def blocked_until(status: int, headers: Mapping[str, str], now: float) -> float | None:
    """Epoch time before which no request should be sent, or None when free to go on.

    `Retry-After` wins when present; else an exhausted (or nearly exhausted) primary
    limit blocks until its reset; a 403/429 rate limit without either header waits a
    minute, as GitHub's documentation advises.
    """
    retry_after = _int(headers, "retry-after")
    if retry_after is not None and status in (403, 429, 503):
        return now + max(0, retry_after)
    state = read_state(headers)
    limited = is_rate_limited(status, headers)
    low = state.remaining is not None and state.remaining <= LOW_WATERMARK
    if limited or low:
        if state.reset is not None and state.reset > now:
            return state.reset
        if limited:
            return now + 60.0
    return None


def backoff_delay(attempt: int, *, base: float = 0.5, cap: float = 8.0) -> float:
    """Exponential delay before retry `attempt` (1-based) of a transient failure."""
    return min(cap, base * float(2 ** max(0, attempt - 1)))
