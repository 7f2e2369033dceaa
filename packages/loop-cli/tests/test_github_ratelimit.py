"""The rate-limit policy as pure functions of headers and a clock."""

from __future__ import annotations

import pytest

from loop_cli.github.ratelimit import (
    LOW_WATERMARK,
    backoff_delay,
    blocked_until,
    is_rate_limited,
    read_state,
)

NOW = 1_000_000.0


def test_retry_after_wins_over_reset() -> None:
    headers = {"retry-after": "30", "x-ratelimit-remaining": "0", "x-ratelimit-reset": "1000900"}
    assert blocked_until(403, headers, NOW) == NOW + 30


def test_exhausted_primary_limit_blocks_until_reset() -> None:
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 600)}
    assert is_rate_limited(403, headers)
    assert blocked_until(403, headers, NOW) == NOW + 600


def test_plain_403_is_a_permission_refusal_not_a_limit() -> None:
    headers = {"x-ratelimit-remaining": "4000", "x-ratelimit-reset": str(int(NOW) + 600)}
    assert not is_rate_limited(403, headers)
    assert blocked_until(403, headers, NOW) is None


def test_429_without_headers_waits_a_minute() -> None:
    assert is_rate_limited(429, {})
    assert blocked_until(429, {}, NOW) == NOW + 60


def test_nearly_spent_budget_stops_before_the_last_requests() -> None:
    reset = str(int(NOW) + 120)
    low = {"x-ratelimit-remaining": str(LOW_WATERMARK), "x-ratelimit-reset": reset}
    fine = {"x-ratelimit-remaining": str(LOW_WATERMARK + 1), "x-ratelimit-reset": reset}
    assert blocked_until(200, low, NOW) == NOW + 120
    assert blocked_until(200, fine, NOW) is None


def test_reset_in_the_past_does_not_block_a_success() -> None:
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) - 5)}
    assert blocked_until(200, headers, NOW) is None


@pytest.mark.parametrize("value", ["soon", "", "1.5e3"])
def test_garbage_headers_are_ignored(value: str) -> None:
    headers = {"retry-after": value, "x-ratelimit-remaining": value}
    assert read_state(headers).remaining is None
    assert blocked_until(200, headers, NOW) is None


def test_backoff_grows_and_is_capped() -> None:
    delays = [backoff_delay(n) for n in range(1, 8)]
    assert delays[:3] == [0.5, 1.0, 2.0]
    assert max(delays) == 8.0
    assert delays == sorted(delays)
